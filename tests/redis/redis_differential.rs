//! The Redis store decides exactly as the memory store: for every algorithm and both charging
//! modes (all or nothing, every descriptor), seeded random request sequences run against
//! `MemoryStore` and `RedisStore` with one manual clock, and every decision (admitted,
//! remaining, reset_after, retry_after, charged, verdict) must be identical. The sequences mix
//! multi-descriptor requests, quota and shadow roles, global shadow mode, check-only hits,
//! refunds, oversized hits, rules that owe their overflow, counters repeated within a request, limits changed between requests
//! (a reload), a clock that sometimes goes backwards, and priority classes: descriptors of
//! different classes (shares) charging the same counters. MONTH limits in calendar months run
//! from month ends of every length (28, 29, 30, 31 days) and the turn of a year, so both stores
//! must place the same windows on the calendar.
//!
//! Each runs twice: with one script call per request, and with calls that carry up to
//! `BATCH_MAXES[1]` requests (`--redis-batch-max`). In the batching runs of the random
//! sequences each step is a burst of up to that many requests made at once, which the store
//! decides in one call; the memory store decides them one after the other in the same order,
//! and every request's answer must still be identical.

use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::{
    Algorithm, CheckRule, Hits, Overflow, Queue, Quota, Share, MAX_QUEUE_WAIT,
};
use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::calendar::month_index;
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::RedisStore;
use floodgate::store::{Decided, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floodgate_testkit::redis::{
    burst, counter, decide_in_turn, decide_together, identity, scan_keys, script_calls,
    RedisServer, BATCH_MAXES,
};

/// Requests per seed; with the default seed count a test takes well under a few seconds.
const STEPS: usize = 400;

/// Seeds per test: 4, or `FLOODGATE_REDIS_DIFF_SEEDS` for a longer search.
fn seeds() -> u64 {
    std::env::var("FLOODGATE_REDIS_DIFF_SEEDS")
        .ok()
        .and_then(|seeds| seeds.parse().ok())
        .unwrap_or(4)
}

/// Around 2025-11: realistic Redis TIME magnitudes.
const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;

/// One counter identity and the quota it normally has.
#[derive(Debug, Clone)]
struct Slot {
    key: Vec<u8>,
    quota: Quota,
}

fn random_quota(rng: &mut StdRng, algorithm: Algorithm) -> Quota {
    let limits = [0, 1, 1, 2, 3, 5, 7, 10, 10, 25];
    let limit = limits[rng.random_range(0..limits.len())];
    let unit = [Unit::Second, Unit::Second, Unit::Minute, Unit::Hour][rng.random_range(0..4)];
    let quota = Quota::new(limit, unit)
        .with_algorithm(algorithm)
        .with_multiplier(rng.random_range(1..=3));
    if algorithm.accepts_burst() && rng.random_bool(0.7) {
        quota.with_burst(rng.random_range(0..=12))
    } else if algorithm.counts_in_windows() && rng.random_bool(0.3) {
        // A rule that owes its overflow: usage charged after the response.
        quota.with_overflow(Overflow::Owe)
    } else {
        quota
    }
}

/// The same counter under another limit (same algorithm and window, so the same identity), as
/// after a reload or with an Envoy limit override.
fn changed_limit(rng: &mut StdRng, quota: &Quota) -> Quota {
    let mut changed = quota.clone();
    changed.requests_per_unit = rng.random_range(0..=30);
    if quota.algorithm.accepts_burst() {
        changed.burst = rng.random_bool(0.5).then(|| rng.random_range(0..=30));
    }
    changed
}

fn random_hits(rng: &mut StdRng) -> Hits {
    match rng.random_range(0..100) {
        0..50 => Hits::Charge(1),
        50..63 => Hits::Charge(rng.random_range(2..=4)),
        63..67 => Hits::Charge(rng.random_range(20..=40)),
        67..68 => Hits::Charge(u64::MAX),
        68..76 => Hits::PEEK,
        76..83 => Hits::CheckOnly(CheckRule::WithinLimit),
        83..97 => Hits::Refund(rng.random_range(1..=3)),
        97..99 => Hits::Refund(rng.random_range(10..=40)),
        _ => Hits::Refund(u64::MAX),
    }
}

/// The priority class of a descriptor: none (the whole capacity) for a good part, the usual
/// 80 % and 50 %, a third (reserves that do not divide evenly), or any share at all.
fn random_share(rng: &mut StdRng) -> Share {
    let millionths = match rng.random_range(0..100) {
        0..40 => 1_000_000,
        40..60 => 800_000,
        60..80 => 500_000,
        80..90 => 333_333,
        _ => rng.random_range(1..=1_000_000),
    };
    Share::from_millionths(millionths).unwrap_or(Share::FULL)
}

fn random_role(rng: &mut StdRng) -> Role {
    match rng.random_range(0..100) {
        0..70 => Role::Enforced,
        70..85 => Role::Quota,
        _ => Role::Shadow,
    }
}

/// A planner-shaped request: descriptors in order, each with one or two counters sharing its
/// hits, role and priority class; slots are sometimes repeated, within a descriptor or across
/// descriptors (so classes meet on one counter).
fn random_request(rng: &mut StdRng, slots: &[Slot]) -> Vec<Counter> {
    let mut counters: Vec<Counter> = Vec::new();
    for descriptor in 0..rng.random_range(1..=3) {
        let hits = random_hits(rng);
        let role = random_role(rng);
        let share = random_share(rng);
        for _ in 0..rng.random_range(1..=2) {
            let repeat = !counters.is_empty() && rng.random_bool(0.15);
            let slot = if repeat {
                let earlier = &counters[rng.random_range(0..counters.len())];
                Slot {
                    key: earlier.key.clone(),
                    quota: earlier.quota.clone(),
                }
            } else {
                slots[rng.random_range(0..slots.len())].clone()
            };
            let quota = if rng.random_bool(0.05) {
                changed_limit(rng, &slot.quota)
            } else {
                slot.quota.clone()
            };
            counters.push(Counter {
                share,
                ..counter(descriptor, &slot.key, &quota, hits, role)
            });
        }
    }
    counters
}

/// How far the clock moves before a request: mostly forward by a little or by a fraction of
/// the shortest window, sometimes by windows, sometimes backwards, and often to within a µs of
/// an instant the last answer named (`edges`: its retry_after and reset_after values), where
/// an admission test or a window boundary flips.
fn random_step(rng: &mut StdRng, shortest_window: Micros, edges: &[Micros]) -> Micros {
    if !edges.is_empty() && rng.random_bool(0.3) {
        let edge = edges[rng.random_range(0..edges.len())];
        return edge + rng.random_range(-1..=1);
    }
    match rng.random_range(0..100) {
        0..20 => 0,
        20..40 => rng.random_range(1..1_000),
        40..70 => rng.random_range(0..shortest_window / 4),
        70..90 => rng.random_range(0..2 * shortest_window),
        _ => -rng.random_range(0..shortest_window / 2),
    }
}

/// The instants (from now) an answer names.
fn edges_of(decided: &Decided) -> Vec<Micros> {
    decided
        .outcomes
        .iter()
        .flat_map(|outcome| {
            [
                outcome.retry_after,
                outcome.snapshot.reset_after,
                outcome.wait,
            ]
        })
        .filter(|&edge| edge > 0)
        .collect()
}

/// The two stores on `server`, charging as `charging` says, deciding with `clock`, the Redis
/// one deciding up to `batch_max` requests per script call.
async fn stores(
    server: &RedisServer,
    clock: &Arc<ManualClock>,
    charging: Charging,
    batch_max: usize,
) -> (MemoryStore, RedisStore) {
    let memory = MemoryStore::new(1_000_000, clock.clone()).charging(charging);
    let mut options = server.options(Some(clock.clone() as Arc<dyn Clock>));
    options.charging = charging;
    options.batch_max = batch_max;
    let redis = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect the store: {error}"));
    (memory, redis)
}

/// `counters` decided by both stores, which must agree: what they decided. `what` names the
/// step in a failure.
async fn decided_alike(
    (memory, redis): (&MemoryStore, &RedisStore),
    counters: &[Counter],
    global_shadow: bool,
    what: &str,
) -> Decided {
    let expected = memory
        .decide_now(counters, global_shadow)
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    let got = redis
        .decide(counters, global_shadow)
        .await
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(
        got, expected,
        "{what}: redis (left) and memory (right) disagree on {counters:#?}"
    );
    expected
}

/// `requests` (counters, global shadow) made at once to the Redis store, so that it may
/// decide them in one call, and one after the other to the memory store: each request's
/// answers must agree. What they decided, in order.
async fn decided_alike_together(
    (memory, redis): (&MemoryStore, &RedisStore),
    requests: &[(Vec<Counter>, bool)],
    what: &str,
) -> Vec<Decided> {
    let expected = decide_in_turn(memory, requests);
    let got = decide_together(redis, requests).await;
    for (index, ((got, expected), (counters, global_shadow))) in
        got.into_iter().zip(&expected).zip(requests).enumerate()
    {
        let got = got.unwrap_or_else(|error| panic!("{what}: {error}"));
        assert_eq!(
            &got,
            expected,
            "{what}, request {index} of {} (global_shadow {global_shadow}): redis (left) and \
             memory (right) disagree on {counters:#?}",
            requests.len()
        );
    }
    expected
}

/// Runs seeded sequences over `slots_of(seed)` through both stores, in both charging modes,
/// and compares every decision.
async fn run_differential(name: &str, slots_of: impl FnMut(&mut StdRng) -> Vec<Slot>) {
    let server = RedisServer::start();
    let sequence = Sequence {
        seeds: 1..=seeds(),
        start_of: &|rng: &mut StdRng| START + rng.random_range(0..MICROS_PER_SECOND),
        step_scale: None,
        steps: STEPS,
    };
    run_sequences(&server, name, &sequence, slots_of).await;
}

/// Where and how a run of seeded sequences goes.
struct Sequence<'a> {
    seeds: std::ops::RangeInclusive<u64>,
    /// The clock's first instant.
    start_of: &'a dyn Fn(&mut StdRng) -> Micros,
    /// What the clock's steps are scaled to (`random_step`'s shortest window); `None`: the
    /// shortest window of the slots.
    step_scale: Option<Micros>,
    steps: usize,
}

/// Runs `sequence` over `slots_of(seed)` through both stores on `server`, in both charging
/// modes, and compares every decision; returns how many steps moved the clock into another UTC
/// calendar month.
async fn run_sequences(
    server: &RedisServer,
    name: &str,
    sequence: &Sequence<'_>,
    mut slots_of: impl FnMut(&mut StdRng) -> Vec<Slot>,
) -> usize {
    let mut month_changes = 0;
    let runs = BATCH_MAXES.into_iter().flat_map(|batch_max| {
        sequence
            .seeds
            .clone()
            .flat_map(move |seed| Charging::ALL.map(|mode| (seed, mode, batch_max)))
    });
    for (seed, charging, batch_max) in runs {
        let mut rng = StdRng::seed_from_u64(seed);
        let clock = Arc::new(ManualClock::new((sequence.start_of)(&mut rng)));
        let (memory, redis) = stores(server, &clock, charging, batch_max).await;
        // Every seed starts from empty counters in both stores.
        let mut inspector = server.inspector().await;
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("FLUSHALL failed: {error}"));

        let slots = slots_of(&mut rng);
        let shortest_window = sequence
            .step_scale
            .unwrap_or_else(|| {
                slots
                    .iter()
                    .map(|slot| slot.quota.window_micros())
                    .min()
                    .unwrap_or(MICROS_PER_SECOND)
            })
            .max(4);
        let mut edges = Vec::new();
        let (calls_before, mut requests_made) = (script_calls(&mut inspector).await, 0);
        for step in 0..sequence.steps {
            let month_before = month_index(clock.now());
            clock.advance(random_step(&mut rng, shortest_window, &edges));
            month_changes += usize::from(month_index(clock.now()) != month_before);
            let requests = burst(&mut rng, batch_max, |rng| random_request(rng, &slots));
            let what = format!(
                "{name} {charging} batch max {batch_max} seed {seed} step {step} at {}",
                clock.now()
            );
            let expected = decided_alike_together((&memory, &redis), &requests, &what).await;
            edges = expected.iter().flat_map(edges_of).collect();
            requests_made += requests.len();
        }
        // The batching runs did share calls (and the others did not).
        let calls = usize::try_from(script_calls(&mut inspector).await - calls_before)
            .unwrap_or(usize::MAX);
        if batch_max == 1 {
            assert_eq!(calls, requests_made, "{name}: one call per request");
        } else {
            assert!(
                calls < requests_made,
                "{name}: {calls} calls for {requests_made} requests"
            );
        }
        assert_logs_hold_only_their_entries(&mut inspector).await;
    }
    month_changes
}

/// Every sliding log hash holds its four header fields and exactly its entries h..t: no
/// field is left behind by expiry, refunds or a log that started over.
async fn assert_logs_hold_only_their_entries(inspector: &mut redis::aio::MultiplexedConnection) {
    for key in scan_keys(inspector, "*").await {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(inspector)
            .await
            .unwrap_or_else(|error| panic!("TYPE failed: {error}"));
        if kind != "hash" {
            continue;
        }
        let fields: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(inspector)
            .await
            .unwrap_or_else(|error| panic!("HGETALL failed: {error}"));
        let number = |name: &str| -> i64 {
            fields
                .get(name)
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{key} lacks {name}: {fields:?}"))
        };
        let (head, tail) = (number("h"), number("t"));
        let entries = usize::try_from(tail - head + 1).unwrap_or(0);
        assert_eq!(fields.len(), 4 + entries, "{key}: {fields:?}");
        for index in head..=tail {
            assert!(
                fields.contains_key(&index.to_string()),
                "{key} lacks entry {index}"
            );
        }
    }
}

fn random_slots(rng: &mut StdRng, algorithms: &[Algorithm]) -> Vec<Slot> {
    (0..4)
        .map(|index| {
            let algorithm = algorithms[index % algorithms.len()];
            let quota = random_quota(rng, algorithm);
            Slot {
                key: identity("diff", "client", &format!("c{index}"), 0, &quota),
                quota,
            }
        })
        .collect()
}

#[tokio::test]
async fn fixed_window_matches_memory() {
    run_differential("fixed_window", |rng| {
        random_slots(rng, &[Algorithm::FixedWindow])
    })
    .await;
}

#[tokio::test]
async fn sliding_window_matches_memory() {
    run_differential("sliding_window", |rng| {
        random_slots(rng, &[Algorithm::SlidingWindow])
    })
    .await;
}

#[tokio::test]
async fn sliding_log_matches_memory() {
    run_differential("sliding_log", |rng| {
        random_slots(rng, &[Algorithm::SlidingLog])
    })
    .await;
}

#[tokio::test]
async fn token_bucket_matches_memory() {
    run_differential("token_bucket", |rng| {
        random_slots(rng, &[Algorithm::TokenBucket])
    })
    .await;
}

#[tokio::test]
async fn leaky_bucket_matches_memory() {
    run_differential("leaky_bucket", |rng| {
        random_slots(rng, &[Algorithm::LeakyBucket])
    })
    .await;
}

/// Leaky buckets that queue (nginx `limit_req` without `nodelay`, with `delay=`): every
/// answer's wait, and the refusals past the longest wait, must agree.
#[tokio::test]
async fn queueing_leaky_bucket_matches_memory() {
    run_differential("queueing_leaky_bucket", |rng| {
        let mut slots = random_slots(rng, &[Algorithm::LeakyBucket]);
        for slot in &mut slots {
            let burst = slot.quota.burst.unwrap_or(0);
            let window = slot.quota.window_micros();
            let max_wait = match rng.random_range(0..4) {
                0 => 0,
                1 => MAX_QUEUE_WAIT,
                _ => rng.random_range(0..window.min(MAX_QUEUE_WAIT)),
            };
            let delay = rng.random_range(0..=burst);
            slot.quota = slot.quota.clone().with_queue(Queue::new(delay, max_wait));
        }
        slots
    })
    .await;
}

/// Classes crowding one counter per algorithm, with capacities large enough that every class's
/// reserve is a real part of it: the hits that pass, where each class is cut off and when it
/// may retry must agree.
#[tokio::test]
async fn priority_classes_sharing_a_counter_match_memory() {
    run_differential("priority", |rng| {
        Algorithm::ALL
            .iter()
            .map(|&algorithm| {
                let limit = rng.random_range(20..=60);
                let quota = Quota::new(limit, Unit::Minute).with_algorithm(algorithm);
                let quota = if algorithm.accepts_burst() {
                    quota.with_burst(rng.random_range(limit / 2..=limit))
                } else {
                    quota
                };
                Slot {
                    key: identity("classes", "pool", algorithm.name(), 0, &quota),
                    quota,
                }
            })
            .collect()
    })
    .await;
}

#[tokio::test]
async fn mixed_algorithms_in_one_request_match_memory() {
    run_differential("mixed", |rng| random_slots(rng, &Algorithm::ALL)).await;
}

/// 00:00:00 UTC on the 1st after the last day of: February 2027 (28 days), February 2028
/// (29, a leap year), April 2027 (30), January 2027 (31) and December 2026 (the turn of a year),
/// in seconds (`date -u -d 2027-03-01 +%s`, …).
const MONTH_ENDS: [(&str, i64); 5] = [
    ("2027-02 (28 days)", 1_803_859_200),
    ("2028-02 (29 days)", 1_835_481_600),
    ("2027-04 (30 days)", 1_809_129_600),
    ("2027-01 (31 days)", 1_801_440_000),
    ("2026-12 (a year's end)", 1_798_761_600),
];

/// MONTH limits in calendar months (fixed and sliding windows, one to three months, limits
/// changed now and then), beside a token bucket and a sliding log with MONTH (30 days even
/// under calendar months) in the same requests.
fn calendar_slots(rng: &mut StdRng) -> Vec<Slot> {
    let limits = [0, 1, 2, 3, 5, 10, 25];
    let mut quota = |algorithm: Algorithm, months: u32| {
        let limit = limits[rng.random_range(0..limits.len())];
        let quota = Quota::new(limit, Unit::Month)
            .with_algorithm(algorithm)
            .with_multiplier(months)
            .with_calendar_months(true);
        if algorithm.accepts_burst() {
            quota.with_burst(rng.random_range(1..=12))
        } else {
            quota
        }
    };
    let quotas = [
        quota(Algorithm::FixedWindow, 1),
        quota(Algorithm::SlidingWindow, 1),
        quota(Algorithm::FixedWindow, 2),
        quota(Algorithm::SlidingWindow, 3),
        quota(Algorithm::TokenBucket, 1),
        quota(Algorithm::SlidingLog, 1),
    ];
    quotas
        .into_iter()
        .enumerate()
        .map(|(index, quota)| Slot {
            key: identity("calendar", "tenant", &format!("t{index}"), 0, &quota),
            quota,
        })
        .collect()
}

/// Calendar months from the last hours of months of every length: both stores place windows,
/// keys' states, resets and retries on the same 1st, across 28-, 29-, 30- and 31-day months
/// and from December into January. Steps are scaled to a day (with jumps to within a µs of
/// the resets and retries just answered, which are month ends), so every run crosses several.
#[tokio::test]
async fn calendar_months_match_memory_across_every_kind_of_month_end() {
    const DAY: Micros = 86_400 * MICROS_PER_SECOND;
    let server = RedisServer::start();
    for (index, &(month, next_first)) in MONTH_ENDS.iter().enumerate() {
        let first_seed = 1_000 * (index as u64 + 1);
        let start_of = move |rng: &mut StdRng| {
            next_first * MICROS_PER_SECOND - rng.random_range(0..6 * 3_600 * MICROS_PER_SECOND)
        };
        let sequence = Sequence {
            seeds: first_seed..=first_seed + seeds() - 1,
            start_of: &start_of,
            step_scale: Some(DAY),
            steps: STEPS / 2,
        };
        let month_changes = run_sequences(
            &server,
            &format!("calendar {month}"),
            &sequence,
            calendar_slots,
        )
        .await;
        // Every seed starts within six hours of the month's end: each crosses it, and more.
        assert!(
            month_changes >= 2 * sequence.seeds.clone().count(),
            "calendar {month}: only {month_changes} steps changed month"
        );
    }
}

/// Quotas right at the bounds `check_quota` allows, where Lua's doubles would first lose
/// integers: the longest window, the largest buckets (capacity × min(limit, window µs) just
/// below 2^53, so capacity × window far past it), the slowest drain, and a fast bucket whose
/// debt passes 2^53 ticks when the clock goes back.
#[tokio::test]
async fn quotas_at_the_exactness_bounds_match_memory() {
    use floodgate::store::redis::check_quota;
    let longest_window = 2_251_799_813; // seconds: 2^51 µs
    let quotas = [
        Quota::new(10, Unit::Day)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(104_249),
        Quota::new(7, Unit::Day)
            .with_algorithm(Algorithm::LeakyBucket)
            .with_burst(104_248),
        Quota::new(1, Unit::Day)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(26_062),
        Quota::new(u32::MAX, Unit::Second)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(1_000),
        // LLM tokens: a million a day (C·W ≈ 8.6e16 ticks).
        Quota::new(1_000_000, Unit::Day).with_algorithm(Algorithm::TokenBucket),
        // 94 906 265² < 2^53: the largest square bucket, a day's window.
        Quota::new(94_906_265, Unit::Day)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(94_906_265),
        Quota::new(94_906_265, Unit::Day)
            .with_algorithm(Algorithm::LeakyBucket)
            .with_burst(94_906_265),
        // A limit that does not divide its window (W mod L ≠ 0), C·W ≈ 3.2e16.
        Quota::new(999_983, Unit::Hour)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(9_000_000),
        Quota::new(1_000, Unit::Second)
            .with_algorithm(Algorithm::FixedWindow)
            .with_multiplier(longest_window),
        Quota::new(1_000, Unit::Second)
            .with_algorithm(Algorithm::SlidingWindow)
            .with_multiplier(longest_window),
        Quota::new(100, Unit::Second)
            .with_algorithm(Algorithm::SlidingLog)
            .with_multiplier(longest_window),
    ];
    for quota in &quotas {
        assert_eq!(
            check_quota(quota),
            Ok(()),
            "{quota:?} must be at, not past, the bound"
        );
    }
    let server = RedisServer::start();
    let runs = BATCH_MAXES.into_iter().flat_map(|batch_max| {
        (1..=seeds()).flat_map(move |seed| Charging::ALL.map(|mode| (seed, mode, batch_max)))
    });
    for (seed, charging, batch_max) in runs {
        let mut rng = StdRng::seed_from_u64(100 + seed);
        let clock = Arc::new(ManualClock::new(START));
        let (memory, redis) = stores(&server, &clock, charging, batch_max).await;
        let slots: Vec<(Vec<u8>, Quota)> = quotas
            .iter()
            .enumerate()
            .map(|(index, quota)| {
                (
                    identity(
                        "bounds",
                        "k",
                        &format!("{charging}-{seed}-{index}-{batch_max}"),
                        0,
                        quota,
                    ),
                    quota.clone(),
                )
            })
            .collect();
        let mut edges = Vec::new();
        for step in 0..STEPS {
            let hour = 3_600 * MICROS_PER_SECOND;
            clock.advance(match rng.random_range(0..100) {
                // Edges of the longest windows lie decades ahead: stay within the script's
                // clock range (the bound this test is about is the quota's, not the clock's).
                0..25 if !edges.is_empty() => {
                    let edge = edges[rng.random_range(0..edges.len())];
                    if edge < 365 * 24 * hour {
                        edge + rng.random_range(-1..=1)
                    } else {
                        0
                    }
                }
                0..30 => rng.random_range(0..1_000),
                30..60 => rng.random_range(0..hour),
                60..85 => rng.random_range(0..30 * 24 * hour),
                _ => -rng.random_range(0..48 * hour),
            });
            let (key, quota) = &slots[rng.random_range(0..slots.len())];
            let capacity = quota.capacity();
            let hits = match rng.random_range(0..100) {
                0..40 => Hits::Charge(rng.random_range(1..=capacity)),
                40..55 => Hits::Charge(capacity),
                55..60 => Hits::PEEK,
                60..65 => Hits::CheckOnly(CheckRule::WithinLimit),
                65..90 => Hits::Refund(rng.random_range(1..=capacity)),
                _ => Hits::Refund(u64::MAX),
            };
            let counters = [counter(0, key, quota, hits, Role::Enforced)];
            let what = format!(
                "bounds {charging} batch max {batch_max} seed {seed} step {step} at {}",
                clock.now()
            );
            let expected = decided_alike((&memory, &redis), &counters, false, &what).await;
            edges = edges_of(&expected);
        }
    }
}

/// A sliding log longer than its entry cap (only a limit above the config's maximum gets
/// there): the oldest entries fold into the next, in both stores alike.
#[tokio::test]
async fn sliding_log_beyond_its_entry_cap_matches_memory() {
    let server = RedisServer::start();
    for batch_max in BATCH_MAXES {
        sliding_log_beyond_its_entry_cap(&server, batch_max).await;
    }
}

async fn sliding_log_beyond_its_entry_cap(server: &RedisServer, batch_max: usize) {
    let clock = Arc::new(ManualClock::new(START));
    let memory = MemoryStore::new(1_000, clock.clone());
    let redis = server
        .batching_store(Some(clock.clone() as Arc<dyn Clock>), batch_max)
        .await;
    let quota = Quota::new(10_050, Unit::Hour).with_algorithm(Algorithm::SlidingLog);
    let key = identity("cap", "k", &format!("v{batch_max}"), 0, &quota);
    let mut rng = StdRng::seed_from_u64(7);
    let mut longest = 0;
    for step in 0..10_300 {
        clock.advance(rng.random_range(1..=3));
        let hits = match rng.random_range(0..1_000) {
            0..990 => Hits::Charge(1),
            990..995 => Hits::Refund(1),
            _ => Hits::PEEK,
        };
        let counters = [counter(0, &key, &quota, hits, Role::Enforced)];
        let what = format!("cap batch max {batch_max} step {step} at {}", clock.now());
        let expected = decided_alike((&memory, &redis), &counters, false, &what).await;
        longest = longest.max(10_050 - expected.outcomes[0].snapshot.remaining);
    }
    // Every entry holds one hit here, so more hits than the cap means more entries than it.
    assert!(
        longest > 10_000,
        "the log never outgrew its cap: {longest} hits"
    );
}

/// Requests that name an exhausted descriptor beside a fresh one, asking more hits than are
/// left, for every algorithm and charging mode: both stores agree at every step, and the modes
/// differ as they should — all or nothing charges neither descriptor of a rejected request;
/// every descriptor charges the fresh one, and counts the refused hits in a window; all or
/// refused counts only the refused hits, in a window.
#[tokio::test]
async fn an_exhausted_and_a_fresh_descriptor_match_memory_in_both_modes() {
    let server = RedisServer::start();
    let runs = BATCH_MAXES.into_iter().flat_map(|batch_max| {
        Algorithm::ALL
            .into_iter()
            .flat_map(move |algorithm| Charging::ALL.map(|mode| (algorithm, mode, batch_max)))
    });
    for (algorithm, charging, batch_max) in runs {
        let clock = Arc::new(ManualClock::new(START));
        let (memory, redis) = stores(&server, &clock, charging, batch_max).await;
        let quota = Quota::new(4, Unit::Minute).with_algorithm(algorithm);
        let quota = if algorithm.accepts_burst() {
            quota.with_burst(4)
        } else {
            quota
        };
        let name = |slot: &str| {
            let value = format!("{algorithm}-{charging}-{batch_max}");
            identity("mix", slot, &value, 0, &quota)
        };
        let (exhausted, fresh) = (name("exhausted"), name("fresh"));
        let decide = |counters: Vec<Counter>| {
            let (stores, clock) = ((&memory, &redis), &clock);
            async move {
                let what = format!(
                    "{algorithm} {charging} batch max {batch_max} at {}",
                    clock.now()
                );
                decided_alike(stores, &counters, false, &what).await
            }
        };
        let alone = decide(vec![counter(
            0,
            &exhausted,
            &quota,
            Hits::Charge(4),
            Role::Enforced,
        )])
        .await;
        assert!(!alone.over_limit, "{algorithm}: 4 fit a fresh counter of 4");
        for step in 0..6 {
            // Hits beyond what is left: 3 on the fresh one (4 left, then 1 or none), 2 on
            // the exhausted one.
            let mixed = decide(vec![
                counter(0, &fresh, &quota, Hits::Charge(3), Role::Enforced),
                counter(1, &exhausted, &quota, Hits::Charge(2), Role::Enforced),
            ])
            .await;
            assert!(mixed.over_limit, "{algorithm} {charging} step {step}");
            let charged: Vec<bool> = mixed.outcomes.iter().map(|o| o.charged).collect();
            let expected = match charging {
                Charging::AllOrNothing => [false, false],
                Charging::EveryDescriptor => [
                    mixed.outcomes[0].admitted || algorithm.counts_in_windows(),
                    algorithm.counts_in_windows(),
                ],
                // Only refused hits, and only where a window counts them.
                Charging::AllOrRefused => [
                    !mixed.outcomes[0].admitted && algorithm.counts_in_windows(),
                    algorithm.counts_in_windows(),
                ],
            };
            assert_eq!(charged, expected, "{algorithm} {charging} step {step}");
            clock.advance(pause_after(step));
        }
    }
}

/// A few ms between the steps of the mixed test: buckets refill a little, windows do not turn.
fn pause_after(step: usize) -> Micros {
    Micros::try_from(step).unwrap_or(0) * 1_000 + 7
}
