//! `redis_lua`: the Redis store's Lua scripts against the memory store, on a real
//! `redis-server` (started by `scripts/fuzz.sh`, or by the corpus replay through testkit).
//! The input is a sequence of requests over up to four counters: random algorithms, limits
//! (to `u32::MAX`), windows, bursts, hits (to `u64::MAX`), refunds, checks, roles, priority
//! classes, limits changed between requests, and a test clock that jumps forward and back
//! within a century of today (Redis `TIME` lies there; the scripts compute in doubles).
//!
//! Must hold: the Redis store answers every request, and exactly as the memory store does
//! (`Decided`: each counter's verdict, remaining, reset, retry, charge, and the request's),
//! except a request with a quota the scripts cannot compute exactly (`check_quota`: buckets
//! with capacity × min(limit, window µs) ≥ 2^53, windows over 71 years), which it refuses with
//! the reason.
//! Redis starts empty for every input (FLUSHDB), as the memory store does.

use std::sync::Arc;
use std::time::Duration;

use floodgate::core::arithmetic::algorithm::{
    Algorithm, CheckRule, Hits, Queue, Quota, Share, MAX_QUEUE_WAIT,
};
use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::{check_quota, RedisOptions, RedisStore};
use floodgate::store::Store as _;

use crate::input::Input;
use crate::service::block_on;

const MAX_REQUESTS: usize = 32;
const SLOTS: usize = 4;

/// 2025-11-24.
const NOW: Micros = 1_764_000_000 * MICROS_PER_SECOND;
const YEAR: Micros = 365 * 86_400 * MICROS_PER_SECOND;

/// The Redis store of one charging mode and a connection to empty the database, deciding with
/// one test clock.
pub struct Harness {
    clock: Arc<ManualClock>,
    stores: Vec<(Charging, RedisStore)>,
    flush: redis::aio::MultiplexedConnection,
}

impl Harness {
    /// Connects to the server at `url` (`redis://127.0.0.1:<port>/0`).
    pub fn connect(url: &str) -> Self {
        let clock = Arc::new(ManualClock::new(NOW));
        block_on(async {
            let mut stores = Vec::new();
            for charging in [Charging::AllOrNothing, Charging::EveryDescriptor] {
                let mut options = RedisOptions::new(url);
                options.timeout = Duration::from_secs(5);
                options.test_clock = Some(clock.clone() as Arc<dyn Clock>);
                options.charging = charging;
                let store = RedisStore::connect(&options)
                    .await
                    .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
                stores.push((charging, store));
            }
            let client = redis::Client::open(url)
                .unwrap_or_else(|error| panic!("not a Redis URL {url}: {error}"));
            let flush = client
                .get_multiplexed_async_connection()
                .await
                .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
            Self {
                clock,
                stores,
                flush,
            }
        })
    }

    pub fn run(&self, data: &[u8]) {
        let mut input = Input::new(data);
        let (charging, redis) = &self.stores[usize::from(input.bool())];
        let memory = MemoryStore::new(100_000, self.clock.clone()).charging(*charging);
        let mut now = NOW + (i64::from(input.u32() as i32) % 50) * YEAR / 2;
        let slots: Vec<Quota> = (0..SLOTS).map(|_| quota(&mut input)).collect();
        block_on(async {
            let mut flush = self.flush.clone();
            let flushed: Result<(), redis::RedisError> =
                redis::cmd("FLUSHDB").query_async(&mut flush).await;
            if let Err(error) = flushed {
                panic!("FLUSHDB failed: {error}");
            }
            for step in 0..MAX_REQUESTS {
                if input.is_empty() {
                    break;
                }
                now = now.saturating_add(clock_step(&mut input, &slots));
                self.clock.set(now);
                let counters = request(&mut input, &slots);
                let global_shadow = input.u8().is_multiple_of(16);
                if let Some(unsupported) = counters.iter().find_map(|c| check_quota(&c.quota).err())
                {
                    // A quota the scripts cannot compute exactly in doubles (documented in
                    // `store::redis`): refused with the reason, nothing counted.
                    let refused = redis.decide(&counters, global_shadow).await;
                    match refused {
                        Err(error) => assert!(
                            error.to_string().contains(&unsupported.to_string()),
                            "request {step}: refused for another reason than {unsupported}: {error}"
                        ),
                        Ok(decided) => {
                            panic!("request {step}: decided although {unsupported}: {decided:?}")
                        }
                    }
                    continue;
                }
                let expected = memory
                    .decide_now(&counters, global_shadow)
                    .unwrap_or_else(|error| panic!("the memory store failed: {error}"));
                let got = redis.decide(&counters, global_shadow).await;
                let got = got.unwrap_or_else(|error| {
                    panic!("request {step}: the Redis store failed ({error}) on {counters:#?}")
                });
                assert_eq!(
                    got, expected,
                    "request {step} at {now} ({charging:?}, global_shadow {global_shadow}): \
                     redis (left) and memory (right) disagree on {counters:#?}"
                );
            }
        });
    }
}

fn quota(input: &mut Input) -> Quota {
    let algorithm = input.pick(&Algorithm::ALL);
    let unit = input.pick(&[
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Month,
    ]);
    let mut quota = Quota::new(limit(input), unit)
        .with_algorithm(algorithm)
        .with_multiplier(u32::from(input.u8() % 4).max(1))
        .with_calendar_months(input.bool());
    if algorithm == Algorithm::SlidingLog {
        quota.requests_per_unit %= 32;
    }
    if algorithm.accepts_burst() && input.bool() {
        quota.burst = Some(limit(input));
    }
    // A leaky bucket that queues: a delay within a small burst or past it, a longest wait from
    // none to a minute.
    if algorithm == Algorithm::LeakyBucket && input.bool() {
        let delay = u32::from(input.u8() % 16);
        let max_wait = i64::from(input.u32()) % (MAX_QUEUE_WAIT + 1);
        quota = quota.with_queue(Queue::new(delay, max_wait));
    }
    quota
}

fn limit(input: &mut Input) -> u32 {
    match input.u8() % 8 {
        0 => input.u32(),
        1 => 0,
        _ => u32::from(input.u8() % 12),
    }
}

/// Forward by a little, by fractions of the first counter's window, or back.
fn clock_step(input: &mut Input, slots: &[Quota]) -> Micros {
    let window = slots[0].window_micros();
    match input.u8() % 8 {
        0 | 1 => 0,
        2 => i64::from(input.u16()),
        3 | 4 => (window / 16).saturating_mul(i64::from(input.u8() % 40)),
        5 => -(window / 16).saturating_mul(i64::from(input.u8() % 8)),
        6 => i64::from(input.u8() % 3) - 1,
        _ => i64::from(input.u32() as i32),
    }
}

/// One to three descriptors, each charging one or two of the counters.
fn request(input: &mut Input, slots: &[Quota]) -> Vec<Counter> {
    let mut counters = Vec::new();
    for descriptor in 0..=usize::from(input.u8() % 3) {
        let hits = hits(input);
        let role = input.pick(&[Role::Enforced, Role::Enforced, Role::Quota, Role::Shadow]);
        let share = match input.u8() % 4 {
            0 => Share::from_millionths(input.u32() % 1_000_001).unwrap_or(Share::FULL),
            1 => Share::from_millionths(800_000).unwrap_or(Share::FULL),
            _ => Share::FULL,
        };
        for _ in 0..=usize::from(input.bool()) {
            let slot = usize::from(input.u8()) % slots.len();
            let mut quota = slots[slot].clone();
            if input.u8().is_multiple_of(16) {
                // The same counter under another limit, as after a reload.
                quota.requests_per_unit = limit(input);
                if quota.algorithm == Algorithm::SlidingLog {
                    quota.requests_per_unit %= 32;
                }
            }
            counters.push(Counter {
                descriptor,
                key: format!("fuzz:{slot}").into_bytes(),
                quota,
                hits,
                role,
                share,
            });
        }
    }
    counters
}

fn hits(input: &mut Input) -> Hits {
    match input.u8() % 16 {
        0..=6 => Hits::Charge(1),
        7..=8 => Hits::Charge(u64::from(input.u8() % 8)),
        9 => Hits::Charge(input.u64()),
        10 => Hits::Charge(u64::from(input.u32())),
        11 => Hits::PEEK,
        12 => Hits::CheckOnly(CheckRule::WithinLimit),
        13 | 14 => Hits::Refund(u64::from(input.u8() % 8)),
        _ => Hits::Refund(input.u64()),
    }
}
