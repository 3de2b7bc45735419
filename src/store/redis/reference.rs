//! envoyproxy/ratelimit's counters (`core::reference_cache`): a fixed window the reference could
//! count is counted under its key, with its commands, so its pods and floodgate's share one
//! count on one Redis (`--redis-counters reference`, the default of the `ratelimit` door).
//!
//! Per counter, as its `src/redis/fixed_cache_impl.go` `pipelineAppend` (lines 35-38):
//! `INCRBY key hits` (0 for a check) then `EXPIRE key seconds`, the seconds a whole window plus
//! a random `0 ≤ jitter < EXPIRATION_JITTER_MAX_SECONDS` (lines 168-171), every call. A
//! request's commands go in one pipeline (one write, one round trip); SECOND limits go to the
//! per-second Redis when there is one (`REDIS_PERSECOND`, lines 173-186). On a Redis Cluster
//! each key's two commands are a pipeline of their own, all sent at once, since a pipeline
//! may not cross slots. The core decides from the counts `INCRBY` answers.
//!
//! Nothing here is atomic across keys, as in the reference: each descriptor is charged by its
//! own count (every-descriptor charging), never rolled back because another is over.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use redis::Script;

use super::connection::{misconfigured, unavailable};
use super::{Link, RedisOptions};
use crate::core::charging::Charging;
use crate::core::plan::Counter;
use crate::core::reference_cache::{
    cache_key_of, counts_under_reference_key, outcome_of, ReferenceHits, ReferenceWindow,
};
use crate::core::response::CounterOutcome;
use crate::core::time::{Clock, Micros, SystemClock};
use crate::core::unit::Unit;
use crate::store::StoreError;

/// envoyproxy/ratelimit's default `EXPIRATION_JITTER_MAX_SECONDS`.
pub const DEFAULT_EXPIRATION_JITTER_MAX_SECONDS: u64 = 300;

/// Gives hits back under a reference key, never below 0, and renews its expiry.
const TAKE_BACK: &str = include_str!("lua/take_back.lua");

/// How to count under the reference's keys.
#[derive(Clone, Debug)]
pub struct ReferenceCounters {
    /// Put before every such key, verbatim: the reference's `CACHE_KEY_PREFIX` (empty by
    /// default there).
    pub key_prefix: String,
    /// Each `EXPIRE` gets a random 0 to this many seconds (excluded) more; 0: none
    /// (`EXPIRATION_JITTER_MAX_SECONDS`).
    pub expiration_jitter_max_seconds: u64,
    /// Where SECOND limits are counted, when not in the main Redis (`REDIS_PERSECOND`).
    pub per_second: Option<Box<RedisOptions>>,
}

impl ReferenceCounters {
    pub fn new(key_prefix: impl Into<String>) -> Self {
        Self {
            key_prefix: key_prefix.into(),
            expiration_jitter_max_seconds: DEFAULT_EXPIRATION_JITTER_MAX_SECONDS,
            per_second: None,
        }
    }
}

/// One counter's commands.
pub(super) struct ReferenceCall {
    /// The counter's position in the request.
    pub position: usize,
    key: String,
    hits: ReferenceHits,
    expiration_seconds: i64,
    per_second: bool,
    limit: u64,
    reset_after: Micros,
}

/// The reference's keys of a store, and the per-second Redis if any.
pub(super) struct ReferenceCache {
    key_prefix: String,
    jitter_max_seconds: i64,
    per_second: Option<Link>,
    clock: Arc<dyn Clock>,
}

impl ReferenceCache {
    /// The reference's keys for a store opened with `options`: they are charged descriptor by
    /// descriptor, never rolled back, so all-or-nothing charging cannot hold with them; SECOND
    /// limits go to the per-second Redis when `counters` name one.
    pub async fn open(
        options: &RedisOptions,
        counters: &ReferenceCounters,
        script: &Script,
    ) -> Result<Self, StoreError> {
        if options.charging != Charging::EveryDescriptor {
            return Err(misconfigured(format!(
                "invalid Redis options: envoyproxy/ratelimit's counters charge every descriptor \
                 by its own count, so --charge {} cannot hold with them; charge every \
                 descriptor (--charge every-descriptor, or \
                 STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false), or keep floodgate's own \
                 counters (--redis-counters floodgate)",
                options.charging
            )));
        }
        let per_second = match &counters.per_second {
            Some(per_second) => Some(Link::open(per_second, script).await?),
            None => None,
        };
        let clock: Arc<dyn Clock> = match &options.test_clock {
            Some(clock) => Arc::clone(clock),
            None => Arc::new(SystemClock),
        };
        Ok(Self {
            key_prefix: counters.key_prefix.clone(),
            jitter_max_seconds: i64::try_from(counters.expiration_jitter_max_seconds)
                .unwrap_or(i64::MAX),
            per_second,
            clock,
        })
    }

    pub fn per_second(&self) -> Option<&Link> {
        self.per_second.as_ref()
    }

    /// The calls of those of `counters` that count under the reference's keys, in order.
    pub fn calls(&self, counters: &[Counter]) -> Vec<ReferenceCall> {
        let now = self.clock.now();
        (0..counters.len())
            .filter(|&position| counts_under_reference_key(counters, position))
            .filter_map(|position| {
                let counter = counters.get(position)?;
                let window = ReferenceWindow::at(&counter.quota, now);
                Some(ReferenceCall {
                    position,
                    key: cache_key_of(&self.key_prefix, &counter.key, window.start)?,
                    hits: ReferenceHits::of(counter.hits),
                    expiration_seconds: window.expiration_seconds().saturating_add(self.jitter()),
                    per_second: counter.quota.unit == Unit::Second && self.per_second.is_some(),
                    limit: u64::from(counter.quota.requests_per_unit),
                    reset_after: window.reset_after(now),
                })
            })
            .collect()
    }

    /// The reference's `JitterRand.Int63n(ExpirationJitterMaxSeconds)`: 0 to max, excluded.
    fn jitter(&self) -> i64 {
        if self.jitter_max_seconds > 0 {
            rand::rng().random_range(0..self.jitter_max_seconds)
        } else {
            0
        }
    }

    /// Sends `calls` (per-second ones to the per-second Redis, the others to `main`) within
    /// `deadline`: one outcome per call, in order.
    pub async fn count(
        &self,
        main: &Link,
        calls: &[ReferenceCall],
        deadline: Duration,
    ) -> Result<Vec<CounterOutcome>, StoreError> {
        let (per_second, elsewhere): (Vec<&ReferenceCall>, Vec<&ReferenceCall>) =
            calls.iter().partition(|call| call.per_second);
        let per_second_link = self.per_second.as_ref().unwrap_or(main);
        let (counts, per_second_counts) = futures_util::future::try_join(
            send(main, &elsewhere, deadline),
            send(per_second_link, &per_second, deadline),
        )
        .await?;
        // Each list kept the calls' order, so the answers merge back by position.
        let mut answered = elsewhere
            .into_iter()
            .zip(counts)
            .chain(per_second.into_iter().zip(per_second_counts))
            .collect::<Vec<_>>();
        answered.sort_by_key(|(call, _)| call.position);
        Ok(answered
            .into_iter()
            .map(|(call, after)| outcome_of(call.limit, call.hits, after, call.reset_after))
            .collect())
    }
}

/// The positions in a request of `count` counters that `calls` leave to floodgate's keys.
pub(super) fn other_positions(count: usize, calls: &[ReferenceCall]) -> Vec<usize> {
    (0..count)
        .filter(|position| !calls.iter().any(|call| call.position == *position))
        .collect()
}

/// The outcomes of `count` counters in request order, from the (position, outcome) pairs of
/// the reference's keys and of floodgate's.
pub(super) fn in_request_order(
    count: usize,
    reference: impl Iterator<Item = (usize, CounterOutcome)>,
    own: impl Iterator<Item = (usize, CounterOutcome)>,
) -> Result<Vec<CounterOutcome>, StoreError> {
    let mut outcomes = vec![None; count];
    for (position, outcome) in reference.chain(own) {
        if let Some(slot) = outcomes.get_mut(position) {
            *slot = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| unavailable("a counter went unanswered".to_owned()))
}

/// The counts `INCRBY` (or the take-back script) answers for `calls`, in order.
async fn send(
    link: &Link,
    calls: &[&ReferenceCall],
    deadline: Duration,
) -> Result<Vec<i64>, StoreError> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let counts: Vec<i64> = match link {
        Link::Server(connection) => {
            let mut pipeline = redis::pipe();
            for call in calls {
                append(&mut pipeline, call);
            }
            connection.pipeline(&pipeline, deadline).await?
        }
        Link::Cluster(cluster) => {
            let each = calls.iter().map(|call| async move {
                let mut pipeline = redis::pipe();
                append(&mut pipeline, call);
                let count: Vec<i64> = cluster.pipeline(&pipeline, deadline).await?;
                Ok::<_, StoreError>(count)
            });
            futures_util::future::try_join_all(each)
                .await?
                .into_iter()
                .flatten()
                .collect()
        }
    };
    if counts.len() != calls.len() {
        return Err(unavailable(format!(
            "Redis answered {} counts for {} keys",
            counts.len(),
            calls.len()
        )));
    }
    Ok(counts)
}

/// `call`'s commands: the reference's `INCRBY` and `EXPIRE` (whose answer is not needed), or
/// the take-back script.
fn append(pipeline: &mut redis::Pipeline, call: &ReferenceCall) {
    match call.hits {
        ReferenceHits::Add(_) | ReferenceHits::Check(_) => {
            pipeline.cmd("INCRBY").arg(&call.key).arg(call.hits.added());
            pipeline
                .cmd("EXPIRE")
                .arg(&call.key)
                .arg(call.expiration_seconds)
                .ignore();
        }
        ReferenceHits::TakeBack(hits) => {
            pipeline
                .cmd("EVAL")
                .arg(TAKE_BACK)
                .arg(1)
                .arg(&call.key)
                .arg(hits)
                .arg(call.expiration_seconds);
        }
    }
}
