//! All or nothing in Redis: a request that is over its limits charges none of its counters,
//! one that passes charges every counter that admitted it, for every algorithm; with one script
//! call per request and with calls that may carry several (`--redis-batch-max`).

use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits};
use floodgate::core::ground::time::{Clock, ManualClock, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::RedisStore;
use floodgate::store::{Decided, Store};

use floodgate_testkit::redis::{counter, identity, quota_admitting, RedisServer, BATCH_MAXES};

const LIMIT: u32 = 3;

async fn decide(
    store: &RedisStore,
    counters: &[floodgate::core::decision::plan::Counter],
) -> Decided {
    store
        .decide(counters, false)
        .await
        .unwrap_or_else(|error| panic!("decide failed: {error}"))
}

/// Each algorithm: exhaust one descriptor, then ask for it together with a fresh one.
#[tokio::test]
async fn an_exhausted_descriptor_charges_neither() {
    for batch_max in BATCH_MAXES {
        an_exhausted_descriptor_charges_neither_with(batch_max).await;
    }
}

async fn an_exhausted_descriptor_charges_neither_with(batch_max: usize) {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_764_000_000 * MICROS_PER_SECOND));
    let store = server
        .batching_store(Some(clock.clone() as Arc<dyn Clock>), batch_max)
        .await;
    let mut inspector = server.inspector().await;

    for algorithm in Algorithm::ALL {
        let quota = quota_admitting(algorithm, LIMIT, Unit::Hour);
        let exhausted = identity(
            "atomic",
            "user",
            &format!("{algorithm}-exhausted"),
            0,
            &quota,
        );
        let fresh = identity("atomic", "user", &format!("{algorithm}-fresh"), 0, &quota);
        let charge = |key: &[u8], descriptor| {
            counter(descriptor, key, &quota, Hits::Charge(1), Role::Enforced)
        };

        for _ in 0..LIMIT {
            assert!(!decide(&store, &[charge(&exhausted, 0)]).await.over_limit);
        }
        let both = decide(&store, &[charge(&exhausted, 0), charge(&fresh, 1)]).await;
        assert!(
            both.over_limit,
            "batch max {batch_max}, {algorithm}: {both:?}"
        );
        assert!(
            !both.outcomes[0].admitted,
            "batch max {batch_max}, {algorithm}"
        );
        assert!(
            both.outcomes[1].admitted,
            "batch max {batch_max}, {algorithm}"
        );
        // The fresh counter reports its budget as it stands, uncharged.
        assert_eq!(
            both.outcomes[1].snapshot.remaining,
            u64::from(LIMIT),
            "batch max {batch_max}, {algorithm}"
        );

        // Nothing was written for the fresh counter, and it still has its whole budget.
        let exists: bool = redis::cmd("EXISTS")
            .arg(store.key_for(&fresh))
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("EXISTS failed: {error}"));
        assert!(
            !exists,
            "batch max {batch_max}, {algorithm}: the fresh counter was written"
        );
        let check = counter(0, &fresh, &quota, Hits::PEEK, Role::Enforced);
        let checked = decide(&store, &[check]).await;
        assert_eq!(
            checked.outcomes[0].snapshot.remaining,
            u64::from(LIMIT),
            "batch max {batch_max}, {algorithm}"
        );
    }
}

/// A counter named twice within one request: the second mention sees the first one's charge,
/// and when that makes the request over, neither is charged.
#[tokio::test]
async fn a_repeated_counter_sees_its_own_pending_charge() {
    for batch_max in BATCH_MAXES {
        a_repeated_counter_sees_its_own_pending_charge_with(batch_max).await;
    }
}

async fn a_repeated_counter_sees_its_own_pending_charge_with(batch_max: usize) {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_764_000_000 * MICROS_PER_SECOND));
    let store = server
        .batching_store(Some(clock.clone() as Arc<dyn Clock>), batch_max)
        .await;

    for algorithm in Algorithm::ALL {
        let quota = quota_admitting(algorithm, 2, Unit::Hour);
        let key = identity("atomic", "repeat", algorithm.name(), 0, &quota);
        let charge =
            |descriptor| counter(descriptor, &key, &quota, Hits::Charge(1), Role::Enforced);

        let twice = decide(&store, &[charge(0), charge(1)]).await;
        assert!(
            !twice.over_limit,
            "batch max {batch_max}, {algorithm}: {twice:?}"
        );
        assert_eq!(
            twice.outcomes[0].snapshot.remaining, 1,
            "batch max {batch_max}, {algorithm}"
        );
        assert_eq!(
            twice.outcomes[1].snapshot.remaining, 0,
            "batch max {batch_max}, {algorithm}"
        );

        // Budget gone: a request naming it twice more is over and charges nothing...
        let refund = counter(0, &key, &quota, Hits::Refund(1), Role::Enforced);
        let over = decide(&store, &[refund.clone(), charge(1), charge(2)]).await;
        assert!(
            over.over_limit,
            "batch max {batch_max}, {algorithm}: {over:?}"
        );
        assert!(
            over.outcomes[0].admitted && over.outcomes[1].admitted,
            "batch max {batch_max}, {algorithm}"
        );
        assert!(
            !over.outcomes[2].admitted,
            "batch max {batch_max}, {algorithm}"
        );
        // ...not even the refund that came first.
        let check = counter(0, &key, &quota, Hits::PEEK, Role::Enforced);
        let checked = decide(&store, &[check]).await;
        assert_eq!(
            checked.outcomes[0].snapshot.remaining, 0,
            "batch max {batch_max}, {algorithm}"
        );
    }
}

/// Quota mode rejects only when every quota descriptor is over; shadow never rejects; in
/// both cases the admitted counters of a passing request are charged.
#[tokio::test]
async fn quota_and_shadow_roles_follow_the_verdict() {
    for batch_max in BATCH_MAXES {
        quota_and_shadow_roles_follow_the_verdict_with(batch_max).await;
    }
}

async fn quota_and_shadow_roles_follow_the_verdict_with(batch_max: usize) {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_764_000_000 * MICROS_PER_SECOND));
    let store = server
        .batching_store(Some(clock.clone() as Arc<dyn Clock>), batch_max)
        .await;

    for algorithm in Algorithm::ALL {
        let quota = quota_admitting(algorithm, 1, Unit::Hour);
        let spent = identity(
            "roles",
            "q",
            &format!("batch max {batch_max}, {algorithm}-spent"),
            0,
            &quota,
        );
        let open = identity(
            "roles",
            "q",
            &format!("batch max {batch_max}, {algorithm}-open"),
            0,
            &quota,
        );
        let with_role =
            |key: &[u8], descriptor, role| counter(descriptor, key, &quota, Hits::Charge(1), role);
        assert!(
            !decide(&store, &[with_role(&spent, 0, Role::Enforced)])
                .await
                .over_limit
        );

        // One quota descriptor over, one not: the request passes and the open one is charged.
        let mixed = decide(
            &store,
            &[
                with_role(&spent, 0, Role::Quota),
                with_role(&open, 1, Role::Quota),
            ],
        )
        .await;
        assert!(
            !mixed.over_limit,
            "batch max {batch_max}, {algorithm}: {mixed:?}"
        );
        assert_eq!(
            mixed.outcomes[1].snapshot.remaining, 0,
            "batch max {batch_max}, {algorithm}: charged"
        );

        // Both over now: rejected.
        let both = decide(
            &store,
            &[
                with_role(&spent, 0, Role::Quota),
                with_role(&open, 1, Role::Quota),
            ],
        )
        .await;
        assert!(
            both.over_limit,
            "batch max {batch_max}, {algorithm}: {both:?}"
        );

        // A shadow descriptor over its limit never rejects.
        let shadow = decide(&store, &[with_role(&spent, 0, Role::Shadow)]).await;
        assert!(
            !shadow.over_limit && !shadow.outcomes[0].admitted,
            "batch max {batch_max}, {algorithm}: {shadow:?}"
        );
    }
}
