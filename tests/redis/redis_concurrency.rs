//! Many concurrent requests through one RedisStore (one multiplexed connection) on one
//! descriptor with limit N: exactly N are admitted, for every algorithm — the script is atomic;
//! with one script call per request and with calls that carry several (`--redis-batch-max`).

use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::ground::time::{Clock, ManualClock, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::RedisStore;
use floodgate::store::Store;

use floodgate_testkit::redis::{counter, identity, quota_admitting, RedisServer, BATCH_MAXES};

const LIMIT: u32 = 50;
const TASKS: usize = 300;

/// Fires TASKS concurrent single-hit requests at one counter; returns how many were admitted.
async fn admitted_among_concurrent(store: Arc<RedisStore>, quota: &Quota, value: &str) -> usize {
    let key = identity("concurrent", "user", value, 0, quota);
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let store = Arc::clone(&store);
            let counters = [counter(0, &key, quota, Hits::Charge(1), Role::Enforced)];
            tokio::spawn(async move { store.decide(&counters, false).await })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        let decided = task
            .await
            .unwrap_or_else(|error| panic!("task failed: {error}"))
            .unwrap_or_else(|error| panic!("decide failed: {error}"));
        if !decided.over_limit {
            admitted += 1;
        }
    }
    admitted
}

/// With a fixed test clock, nothing refills during the burst: exactly LIMIT pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_limit_is_admitted_for_every_algorithm() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_764_000_000 * MICROS_PER_SECOND));
    for batch_max in BATCH_MAXES {
        let clock = Some(clock.clone() as Arc<dyn Clock>);
        let store = Arc::new(server.batching_store(clock, batch_max).await);
        for algorithm in Algorithm::ALL {
            let quota = quota_admitting(algorithm, LIMIT, Unit::Minute);
            let value = format!("{algorithm}-{batch_max}");
            let admitted = admitted_among_concurrent(Arc::clone(&store), &quota, &value).await;
            assert_eq!(
                admitted, LIMIT as usize,
                "{algorithm}, batch max {batch_max}"
            );
        }
    }
}

/// With Redis time: buckets refill one hit per 72 s and a log is not aligned to the epoch, so
/// nothing frees up during a burst that lasts well under a second. (Windows are left to the
/// fixed clock above: a burst across an hour boundary would rightly see two windows.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_limit_is_admitted_on_redis_time() {
    let server = RedisServer::start();
    for batch_max in BATCH_MAXES {
        let store = Arc::new(server.batching_store(None, batch_max).await);
        for algorithm in [
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
            Algorithm::SlidingLog,
        ] {
            let quota = quota_admitting(algorithm, LIMIT, Unit::Hour);
            let value = format!("{algorithm}-{batch_max}");
            let admitted = admitted_among_concurrent(Arc::clone(&store), &quota, &value).await;
            assert_eq!(
                admitted, LIMIT as usize,
                "{algorithm}, batch max {batch_max}"
            );
        }
    }
}

/// Two stores (two instances, two connections) share the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_share_one_budget() {
    let server = RedisServer::start();
    for batch_max in BATCH_MAXES {
        let first = Arc::new(server.batching_store(None, batch_max).await);
        let second = Arc::new(server.batching_store(None, batch_max).await);
        let quota = quota_admitting(Algorithm::TokenBucket, LIMIT, Unit::Hour);
        let value = format!("shared-{batch_max}");
        let (a, b) = tokio::join!(
            admitted_among_concurrent(Arc::clone(&first), &quota, &value),
            admitted_among_concurrent(Arc::clone(&second), &quota, &value),
        );
        assert_eq!(a + b, LIMIT as usize, "{a} + {b}, batch max {batch_max}");
    }
}
