//! envoyproxy/ratelimit's keys with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` (floodgate's
//! all-or-refused charging) on a real redis-server: the reference's two round trips of its
//! `src/redis/fixed_cache_impl.go` (f2fb157) — `GET` every key (lines 115-141), then, when any
//! descriptor's count plus its hits passes its limit, `INCRBY` only those and `INCRBY … 0` the
//! others (`getHitsAddend`, lines 44-72), `EXPIRE` on each (lines 160-187) — and the answers
//! from the counts `INCRBY` returned (lines 209-218). The keys and helpers are those of
//! `redis_reference_keys.rs`.

use std::sync::Arc;

use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::response::Response;
use floodgate::core::decision::status::Code;
use floodgate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
use floodgate::engine::limiter::Limiter;
use floodgate::store::redis::ReferenceCounters;
use floodgate_testkit::redis::{command_calls, scan_keys, RedisCluster, RedisServer};

use super::redis_reference_keys::{
    charging_on, codes, connect, count_at, decide, decide_alike, descriptor, door_settings,
    reference_pod_hits, rules, ttl_of, HOUR, PLAIN, WEEK,
};

const STOP: Charging = Charging::AllOrRefused;
const KEY4: &[(&str, &str)] = &[("key4", "value4")];
const KEY5: &[(&str, &str)] = &[("key5", "value5")];

/// `TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig` (`fixed_cache_impl_test.go`
/// lines 639-757) on a real Redis at its instant, 1 000 000: key4 (15 an hour) and key5 (14)
/// start at 10 (the `GET`s of lines 657-658), take 1 hit each (`INCRBY … 1`, lines 660-666:
/// 4 and 3 left, lines 678-679), then 2 each (lines 698-705: 2 and 1 left, lines 712-713),
/// then 2 each again: key5 would go over (13 + 2 > 14), so key4 gets `INCRBY … 0` (line 734)
/// and key5 `INCRBY … 2` (line 737): key4 OK with 2 left, key5 OVER_LIMIT (lines 744-745).
/// Every step is one pipeline of `GET`s, then one of `INCRBY`/`EXPIRE`, and key4's `EXPIRE`
/// is renewed though it was held back (line 736).
#[tokio::test]
async fn the_references_own_sequence_on_its_keys() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = charging_on(&server, &PLAIN, 1_000_000, STOP).await;
    let (key4, key5) = ("domain_key4_value4_997200", "domain_key5_value5_997200");
    for key in [key4, key5] {
        reference_pod_hits(&mut inspector, key, 10, HOUR).await;
    }
    let gets_before = command_calls(&mut inspector, "get").await;
    let remaining = |response: &Response| -> Vec<(Code, u32)> {
        response
            .statuses
            .iter()
            .map(|status| (status.code, status.limit_remaining))
            .collect()
    };
    let step = |hits| vec![descriptor(KEY4, hits), descriptor(KEY5, hits)];
    let first = decide(&limiter, step(1)).await;
    assert_eq!(remaining(&first), [(Code::Ok, 4), (Code::Ok, 3)]);
    let second = decide(&limiter, step(2)).await;
    assert_eq!(remaining(&second), [(Code::Ok, 2), (Code::Ok, 1)]);
    let _: () = redis::cmd("EXPIRE")
        .arg(key4)
        .arg(20)
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("EXPIRE: {error}"));
    let third = decide(&limiter, step(2)).await;
    assert_eq!(
        command_calls(&mut inspector, "get").await - gets_before,
        6,
        "a GET per key and step, before the INCRBYs"
    );
    assert_eq!(remaining(&third), [(Code::Ok, 2), (Code::OverLimit, 0)]);
    assert_eq!(third.overall_code, Code::OverLimit);
    assert_eq!(count_at(&mut inspector, key4).await, Some(13), "held back");
    assert_eq!(
        count_at(&mut inspector, key5).await,
        Some(15),
        "over: counted"
    );
    let ttl = ttl_of(&mut inspector, key4).await;
    assert!(
        (HOUR - 1..=HOUR).contains(&ttl),
        "key4's EXPIRE renewed: {ttl}"
    );
    // Without the setting (every descriptor), the same step counts key4 too.
    let (counting, _) = charging_on(&server, &PLAIN, 1_000_000, Charging::EveryDescriptor).await;
    decide(&counting, step(2)).await;
    assert_eq!(count_at(&mut inspector, key4).await, Some(15));
}

/// A key held back is incremented by 0, which writes it when it was not there (an empty count
/// with the window's expiry), exactly as the reference's `INCRBY key 0` does; a shadow-mode
/// rule that goes over stops the others' increments too, since `getHitsAddend` looks at no
/// role, while the request is answered OK.
#[tokio::test]
async fn held_back_keys_are_incremented_by_zero_whatever_stopped_them() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = charging_on(&server, &PLAIN, 1_000_000, STOP).await;
    let start = 1_000_000 - 1_000_000 % 60;
    let shadowed = format!("domain_shadowed_s_{start}");
    reference_pod_hits(&mut inspector, &shadowed, 2, 60).await;
    let fresh: &[(&str, &str)] = &[("key4", "value4")];
    let shadow: &[(&str, &str)] = &[("shadowed", "s")];
    assert_eq!(
        codes(&limiter, &[(fresh, 1), (shadow, 1)]).await,
        [Code::Ok, Code::Ok],
        "shadow mode answers OK"
    );
    let fresh_key = "domain_key4_value4_997200";
    assert_eq!(count_at(&mut inspector, fresh_key).await, Some(0));
    let ttl = ttl_of(&mut inspector, fresh_key).await;
    assert!((HOUR - 1..=HOUR).contains(&ttl), "TTL {ttl}");
    assert_eq!(count_at(&mut inspector, &shadowed).await, Some(3));
}

/// `REDIS_PERSECOND` with the setting: SECOND keys are read and incremented in the per-second
/// Redis, the others in the main one (lines 123-141 and 173-186). A reference pod counted 9 of
/// 10 in the per-second Redis: 2 more go over, read there, so the MINUTE key in the main Redis
/// is held back (`INCRBY … 0`), and the answer, OVER_LIMIT, comes from the per-second count.
#[tokio::test]
async fn second_limits_are_read_and_counted_in_the_per_second_redis() {
    let main = RedisServer::start();
    let per_second = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_234 * MICROS_PER_SECOND));
    let mut options = main.options(Some(clock.clone()));
    options.charging = STOP;
    options.reference_counters = Some(ReferenceCounters {
        key_prefix: String::new(),
        expiration_jitter_max_seconds: 0,
        per_second: Some(Box::new(per_second.options(None))),
    });
    let limiter = Limiter::new(rules(false), connect(&options).await, door_settings());
    let mut main_inspector = main.inspector().await;
    let mut per_second_inspector = per_second.inspector().await;
    reference_pod_hits(&mut per_second_inspector, "domain_key_value_1234", 9, 60).await;
    let key_value: &[(&str, &str)] = &[("key", "value")];
    let nested: &[(&str, &str)] = &[("key2", "value2"), ("subkey2", "subvalue2")];
    assert_eq!(
        codes(&limiter, &[(key_value, 2), (nested, 1)]).await,
        [Code::OverLimit, Code::Ok]
    );
    assert_eq!(
        scan_keys(&mut main_inspector, "*").await,
        ["domain_key2_value2_subkey2_subvalue2_1200"]
    );
    assert_eq!(
        count_at(
            &mut main_inspector,
            "domain_key2_value2_subkey2_subvalue2_1200"
        )
        .await,
        Some(0),
        "held back: the per-second count was read"
    );
    assert_eq!(command_calls(&mut per_second_inspector, "get").await, 1);
    assert_eq!(command_calls(&mut per_second_inspector, "incrby").await, 2);
}

/// On a Redis Cluster each key's `GET`, and then its `INCRBY` and `EXPIRE`, go to the node that
/// owns it: twelve weekly keys spread over three nodes, one of which goes over, hold back the
/// eleven others on whichever node they live.
#[tokio::test]
async fn on_a_cluster_each_key_is_read_and_counted_on_its_own_node() {
    let cluster = RedisCluster::start(3);
    let clock = Arc::new(ManualClock::new(1_000_000 * MICROS_PER_SECOND));
    let mut options = cluster.options(Some(clock.clone()));
    options.charging = STOP;
    options.reference_counters = Some(ReferenceCounters {
        expiration_jitter_max_seconds: 0,
        ..ReferenceCounters::new("")
    });
    let limiter = Limiter::new(rules(false), connect(&options).await, door_settings());
    let values: Vec<String> = (0..12).map(|n| format!("tenant-{n}")).collect();
    let request = |over: usize| {
        values
            .iter()
            .enumerate()
            .map(|(index, value)| {
                let hits = if index == over { 10 } else { 1 };
                descriptor(&[("weekly", value.as_str())], hits)
            })
            .collect()
    };
    let first = decide(&limiter, request(usize::MAX)).await;
    assert_eq!(first.overall_code, Code::Ok);
    let second = decide(&limiter, request(7)).await;
    assert_eq!(second.overall_code, Code::OverLimit);
    let start = 1_000_000 - 1_000_000 % WEEK;
    let per_node = cluster.keys_per_node("*").await;
    assert!(
        per_node.iter().filter(|keys| !keys.is_empty()).count() > 1,
        "the keys spread over the nodes: {per_node:?}"
    );
    for (index, value) in values.iter().enumerate() {
        let key = format!("domain_weekly_{value}_{start}");
        let owner = cluster.owner_of(cluster.slot_of(&key));
        let mut inspector = cluster.nodes[owner].inspector().await;
        let expected = if index == 7 { 11 } else { 1 };
        assert_eq!(
            count_at(&mut inspector, &key).await,
            Some(expected),
            "{key}"
        );
    }
}

/// The reference's two round trips decide as the memory store charging all or refused: the
/// same random requests (charges, checks, a shadow-mode rule), on one clock, get the same
/// codes, remaining counts and resets from both, and leave the same counts. A request names
/// each descriptor once: the reference reads a key named twice once for both mentions, where
/// the memory store judges the second after the first.
#[tokio::test]
async fn the_references_two_steps_decide_as_the_memory_store_charging_all_or_refused() {
    let choices: [&[(&str, &str)]; 5] = [
        &[("key3", "value3")],
        &[("key3", "value3"), ("subkey3", "subvalue3")],
        &[("a", "x")],
        &[("shadowed", "x")],
        &[("key2", "value2"), ("subkey2", "subvalue2")],
    ];
    let draw = |next: &mut dyn FnMut(u64) -> u64| {
        let mut left: Vec<usize> = (0..choices.len()).collect();
        let count = 1 + next(3);
        (0..count)
            .map(|_| {
                let chosen = left.remove(next(left.len() as u64) as usize);
                descriptor(choices[chosen], next(5))
            })
            .collect()
    };
    let answers = decide_alike(STOP, 0x2545_f491_4f6c_dd1d, draw).await;
    let stopped = answers
        .iter()
        .filter(|answer| {
            answer.statuses.len() > 1
                && answer
                    .statuses
                    .iter()
                    .any(|status| status.code == Code::OverLimit)
        })
        .count();
    assert!(stopped > 10, "requests that stopped: {stopped}");
}
