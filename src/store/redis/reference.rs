//! envoyproxy/ratelimit's counters (`core::decision::reference_cache`): a fixed window the reference could
//! count is counted under its key, with its commands, so its pods and floodgate's share one
//! count on one Redis (`--redis-counters reference`, the default of the `ratelimit` door).
//!
//! Per counter, as its `src/redis/fixed_cache_impl.go` `pipelineAppend` (lines 35-38):
//! `INCRBY key hits` (0 for a check) then `EXPIRE key seconds`, the seconds a whole window plus
//! a random `0 ≤ jitter < EXPIRATION_JITTER_MAX_SECONDS` (lines 168-171), every call. A
//! request's commands go in one pipeline (one write, one round trip); SECOND limits go to the
//! per-second Redis when there is one (`REDIS_PERSECOND`, lines 173-186). On a Redis Cluster
//! each key's commands are a pipeline of their own, all sent at once, since a pipeline may not
//! cross slots. The core decides from the counts `INCRBY` answers.
//!
//! Charging every descriptor (the reference's default) that is the whole count: each
//! descriptor by its own count, never rolled back because another is over. With all-or-refused
//! (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`) it is the reference's two round trips
//! (lines 115-187): a pipeline of `GET`s first (per-second keys to the per-second Redis, on a
//! Cluster one per key, as above), from whose counts the core decides which keys to increment
//! (`core::decision::reference_cache::stop_increments`), then the `INCRBY`/`EXPIRE` pipeline, the keys
//! held back incremented by 0. Neither is atomic across keys, nor across the two round trips:
//! a call between them, from any instance, is not seen by the decision, exactly as in the
//! reference.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;

use redis::Script;

use super::errors::{misconfigured, unavailable};
use super::options::{RedisOptions, ReferenceCounters};
use super::Link;
use crate::core::decision::charging::{Charging, Recording};
use crate::core::decision::plan::Counter;
use crate::core::decision::reference_cache::{
    cache_key_of, counts_under_reference_key, outcome_of, stop_increments, Read, ReferenceHits,
    ReferenceWindow,
};
use crate::core::decision::response::CounterOutcome;
use crate::core::ground::time::{Clock, Micros, SystemClock};
use crate::core::ground::unit::Unit;
use crate::store::StoreError;

/// Gives hits back under a reference key, never below 0, and renews its expiry.
const TAKE_BACK: &str = include_str!("lua/take_back.lua");

/// One counter's commands.
pub(super) struct ReferenceCall {
    /// The counter's position in the request.
    pub position: usize,
    key: String,
    hits: ReferenceHits,
    /// Counted whatever the verdicts (`overflow: owe`): never held back.
    recorded_always: bool,
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
    /// Every descriptor by its own count, or all-or-refused's two round trips.
    charging: Charging,
}

impl ReferenceCache {
    /// The reference's keys for a store opened with `options`: they are charged descriptor by
    /// descriptor, or all-or-refused as the reference does with
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`, never rolled back, so all-or-nothing
    /// charging cannot hold with them; SECOND limits go to the per-second Redis when
    /// `counters` name one.
    pub async fn open(
        options: &RedisOptions,
        counters: &ReferenceCounters,
        script: &Script,
    ) -> Result<Self, StoreError> {
        if options.charging == Charging::AllOrNothing {
            return Err(misconfigured(format!(
                "invalid Redis options: envoyproxy/ratelimit's counters are never rolled back, \
                 so --charge {} cannot hold with them; charge as the reference does \
                 (--charge every-descriptor or all-or-refused, or \
                 STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false or true), or keep floodgate's \
                 own counters (--redis-counters floodgate)",
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
            charging: options.charging,
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
                    recorded_always: self.charging.recording(counter) == Recording::Always,
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

    /// Counts `calls` within `deadline`, in one round trip or, all-or-refused, in the
    /// reference's two: one outcome per call, in order.
    pub async fn count(
        &self,
        main: &Link,
        calls: &[ReferenceCall],
        deadline: Duration,
    ) -> Result<Vec<CounterOutcome>, StoreError> {
        let started = Instant::now();
        let hits: Vec<ReferenceHits> = match self.charging {
            Charging::AllOrRefused => self.decide_increments(main, calls, deadline).await?,
            Charging::EveryDescriptor | Charging::AllOrNothing => {
                calls.iter().map(|call| call.hits).collect()
            }
        };
        let left = deadline
            .checked_sub(started.elapsed())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| unavailable(format!("no answer within {deadline:?}")))?;
        let commands: Vec<Command<'_>> = calls
            .iter()
            .zip(&hits)
            .map(|(call, &hits)| Command::Count { call, hits })
            .collect();
        let counts = self.send_where_they_live(main, &commands, left).await?;
        Ok(calls
            .iter()
            .zip(hits)
            .zip(counts)
            .map(|((call, hits), after)| outcome_of(call.limit, hits, after, call.reset_after))
            .collect())
    }

    /// All-or-refused's first round trip (`fixed_cache_impl.go` lines 115-141): every key's
    /// count, then the core's decision of what each `INCRBY` adds.
    async fn decide_increments(
        &self,
        main: &Link,
        calls: &[ReferenceCall],
        deadline: Duration,
    ) -> Result<Vec<ReferenceHits>, StoreError> {
        let gets: Vec<Command<'_>> = calls.iter().map(Command::Get).collect();
        let counts = self.send_where_they_live(main, &gets, deadline).await?;
        let reads: Vec<Read> = calls
            .iter()
            .zip(counts)
            .map(|(call, count)| Read {
                limit: call.limit,
                hits: call.hits,
                count,
                recorded_always: call.recorded_always,
            })
            .collect();
        Ok(stop_increments(&reads))
    }

    /// Sends `commands` (those of per-second calls to the per-second Redis, the others to
    /// `main`), both at once, within `deadline`: one count per command, in order.
    async fn send_where_they_live(
        &self,
        main: &Link,
        commands: &[Command<'_>],
        deadline: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        let (per_second, elsewhere): (Numbered<'_, '_>, Numbered<'_, '_>) = commands
            .iter()
            .enumerate()
            .partition(|(_, command)| command.call().per_second);
        let per_second_link = self.per_second.as_ref().unwrap_or(main);
        let (counts, per_second_counts) = futures_util::future::try_join(
            send(main, &elsewhere, deadline),
            send(per_second_link, &per_second, deadline),
        )
        .await?;
        // Each list kept the commands' order, so the answers merge back by position.
        let mut answered: Vec<(usize, i64)> = elsewhere
            .into_iter()
            .map(|(index, _)| index)
            .zip(counts)
            .chain(
                per_second
                    .into_iter()
                    .map(|(index, _)| index)
                    .zip(per_second_counts),
            )
            .collect();
        answered.sort_by_key(|(index, _)| *index);
        Ok(answered.into_iter().map(|(_, count)| count).collect())
    }
}

/// Commands with their positions in a round trip.
type Numbered<'a, 'c> = Vec<(usize, &'a Command<'c>)>;

/// One key's commands in one round trip.
enum Command<'c> {
    /// All-or-refused's read: `GET key`.
    Get(&'c ReferenceCall),
    /// `INCRBY` then `EXPIRE` (`hits` as decided), or the take-back script.
    Count {
        call: &'c ReferenceCall,
        hits: ReferenceHits,
    },
}

impl Command<'_> {
    fn call(&self) -> &ReferenceCall {
        match self {
            Command::Get(call) | Command::Count { call, .. } => call,
        }
    }

    /// Appends the command, whose one answer is the key's count (`GET` of no key: none).
    fn append(&self, pipeline: &mut redis::Pipeline) {
        match *self {
            Command::Get(call) => {
                pipeline.cmd("GET").arg(&call.key);
            }
            Command::Count {
                call,
                hits: ReferenceHits::TakeBack(hits),
            } => {
                pipeline
                    .cmd("EVAL")
                    .arg(TAKE_BACK)
                    .arg(1)
                    .arg(&call.key)
                    .arg(hits)
                    .arg(call.expiration_seconds);
            }
            // The reference's `pipelineAppend` (lines 35-38), whose `EXPIRE` answer is not
            // needed: a check and held-back hits add 0 and renew the expiry all the same.
            Command::Count { call, hits } => {
                pipeline.cmd("INCRBY").arg(&call.key).arg(hits.added());
                pipeline
                    .cmd("EXPIRE")
                    .arg(&call.key)
                    .arg(call.expiration_seconds)
                    .ignore();
            }
        }
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

/// The counts `commands` answer on `link`, in order (a key `GET` finds absent counts 0).
async fn send(
    link: &Link,
    commands: &[(usize, &Command<'_>)],
    deadline: Duration,
) -> Result<Vec<i64>, StoreError> {
    if commands.is_empty() {
        return Ok(Vec::new());
    }
    let counts: Vec<Option<i64>> = match link {
        Link::Server(connection) => {
            let mut pipeline = redis::pipe();
            for (_, command) in commands {
                command.append(&mut pipeline);
            }
            connection.pipeline(&pipeline, deadline).await?
        }
        Link::Cluster(cluster) => {
            let each = commands.iter().map(|(_, command)| async move {
                let mut pipeline = redis::pipe();
                command.append(&mut pipeline);
                let count: Vec<Option<i64>> = cluster.pipeline(&pipeline, deadline).await?;
                Ok::<_, StoreError>(count)
            });
            futures_util::future::try_join_all(each)
                .await?
                .into_iter()
                .flatten()
                .collect()
        }
    };
    if counts.len() != commands.len() {
        return Err(unavailable(format!(
            "Redis answered {} counts for {} keys",
            counts.len(),
            commands.len()
        )));
    }
    Ok(counts.into_iter().map(|count| count.unwrap_or(0)).collect())
}
