//! A batch decides exactly as lone calls in the same order (`--redis-batch-max`). Two stores on
//! one server and one clock, under two key prefixes: one makes each request a call of its own,
//! the other gets the same requests all at once and decides them in one call (Redis counts the
//! calls). The burst mixes an exhausted counter with fresh ones, names the same counters in
//! several of its requests (a request's descriptors spread over the batch: what one request
//! charges, the next must see), and mixes charges, checks, refunds, repeats within a request,
//! roles and global shadow mode. Every request's answer must equal the lone call's, one by one,
//! and the stores must end up holding the same counters.

use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::time::{Clock, ManualClock, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::RedisStore;
use floodgate::store::{Decided, Store};

use floodgate_testkit::redis::{
    counter, decide_together, identity, quota_admitting, scan_keys, script_calls, RedisServer,
};

const LIMIT: u32 = 4;
/// Requests per call of the batching store: the burst's 12 take three calls (5, 5, 2), so
/// requests also depend on what an earlier call charged.
const BATCH_MAX: usize = 5;
const LONE: &str = "floodgate-lone:";
const BATCHED: &str = "floodgate-batched:";

async fn store(
    server: &RedisServer,
    clock: &Arc<ManualClock>,
    prefix: &str,
    charging: Charging,
    batch_max: usize,
) -> RedisStore {
    let mut options = server.options(Some(clock.clone() as Arc<dyn Clock>));
    options.key_prefix = prefix.to_owned();
    options.charging = charging;
    options.batch_max = batch_max;
    RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect the store: {error}"))
}

/// The burst: (counters, global shadow) per request, over an exhausted counter `a` and fresh
/// `b` and `c`.
fn burst(quota: &Quota, [a, b, c]: [&[u8]; 3]) -> Vec<(Vec<Counter>, bool)> {
    let with = |descriptor, key: &[u8], hits, role| counter(descriptor, key, quota, hits, role);
    let charge =
        |descriptor, key: &[u8], hits| with(descriptor, key, Hits::Charge(hits), Role::Enforced);
    vec![
        // Exhausted beside fresh: over, and b uncharged (all or nothing) or charged.
        (vec![charge(0, a, 1), charge(1, b, 1)], false),
        // b as the first request left it.
        (vec![charge(0, b, 2)], false),
        (vec![charge(0, b, 1), charge(1, c, 1)], false),
        (vec![with(0, a, Hits::PEEK, Role::Enforced)], false),
        // b named twice in one request: the second mention sees the first one's charge.
        (vec![charge(0, b, 1), charge(1, b, 1)], false),
        (vec![with(0, c, Hits::Refund(1), Role::Enforced)], false),
        // Over on its own terms, but under global shadow: admitted, and charged as admitted.
        (vec![charge(0, c, 3), charge(1, a, 1)], true),
        (
            vec![charge(0, c, 2), with(1, a, Hits::Charge(1), Role::Shadow)],
            false,
        ),
        // Quota mode: over only when every quota descriptor is.
        (
            vec![
                with(0, a, Hits::Charge(1), Role::Quota),
                with(1, b, Hits::Charge(1), Role::Quota),
            ],
            false,
        ),
        (
            vec![
                with(0, b, Hits::PEEK, Role::Enforced),
                with(1, c, Hits::PEEK, Role::Enforced),
            ],
            false,
        ),
        (vec![charge(0, b, LIMIT.into())], false),
        (
            vec![with(0, b, Hits::Refund(2), Role::Enforced), charge(1, b, 2)],
            false,
        ),
    ]
}

fn decided(result: Result<Decided, floodgate::store::StoreError>, what: &str) -> Decided {
    result.unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// Every key under `prefix`, without it, with its serialized value (`DUMP`: type and content).
async fn contents(
    inspector: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut keys = scan_keys(inspector, &format!("{prefix}*")).await;
    keys.sort();
    let mut contents = Vec::with_capacity(keys.len());
    for key in keys {
        let value: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(inspector)
            .await
            .unwrap_or_else(|error| panic!("DUMP {key} failed: {error}"));
        contents.push((key.trim_start_matches(prefix).to_owned(), value));
    }
    contents
}

#[tokio::test]
async fn a_batch_decides_as_the_same_requests_made_alone_in_the_same_order() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    for algorithm in Algorithm::ALL {
        for charging in Charging::ALL {
            let what = format!("{algorithm} {charging}");
            let clock = Arc::new(ManualClock::new(1_764_000_000 * MICROS_PER_SECOND));
            let lone = store(&server, &clock, LONE, charging, 1).await;
            let batched = store(&server, &clock, BATCHED, charging, BATCH_MAX).await;
            let quota = quota_admitting(algorithm, LIMIT, Unit::Hour);
            let name = |slot: &str| identity("batch", slot, &what, 0, &quota);
            let (a, b, c) = (name("a"), name("b"), name("c"));

            // a exhausted in both, by lone calls.
            for _ in 0..LIMIT {
                let request = [counter(0, &a, &quota, Hits::Charge(1), Role::Enforced)];
                let alone = decided(lone.decide(&request, false).await, &what);
                let together = decided(batched.decide(&request, false).await, &what);
                assert_eq!(alone, together, "{what}: exhausting a");
            }
            clock.advance(1_000);

            let requests = burst(&quota, [&a, &b, &c]);
            let mut alone = Vec::with_capacity(requests.len());
            for (counters, global_shadow) in &requests {
                alone.push(decided(lone.decide(counters, *global_shadow).await, &what));
            }
            let calls_before = script_calls(&mut inspector).await;
            // Made at once, they join the lane in this order; the first finds it idle and starts its call on a task of its own, which runs once
            // this one waits: by then all of them wait with it.
            let together = decide_together(&batched, &requests).await;
            let calls = script_calls(&mut inspector).await - calls_before;
            let expected_calls = requests.len().div_ceil(BATCH_MAX) as u64;
            assert_eq!(
                calls, expected_calls,
                "{what}: the burst took {calls} script calls"
            );
            for (index, (together, alone)) in together.into_iter().zip(&alone).enumerate() {
                let together = decided(together, &what);
                assert_eq!(
                    &together, alone,
                    "{what}, request {index}: batched (left) and lone (right) disagree on {:#?}",
                    requests[index]
                );
            }
            // The burst reached both verdicts and charged something (the test means something).
            assert!(alone.iter().any(|decided| decided.over_limit), "{what}");
            assert!(alone.iter().any(|decided| !decided.over_limit), "{what}");

            assert_eq!(
                contents(&mut inspector, BATCHED).await,
                contents(&mut inspector, LONE).await,
                "{what}: the stores hold different counters"
            );
        }
    }
}
