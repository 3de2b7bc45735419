//! The Redis store: counters shared by every floodgate instance, decided by one Lua script call
//! per request (on Redis Cluster with `--redis-hash-tag descriptor`: one per hash-slot group),
//! or, with `--redis-batch-max N`, by one call for up to N requests that came together.
//!
//! # One round trip, all or nothing
//!
//! A request becomes one `EVALSHA` (`script.rs`, Lua in `lua/`): the script reads each counter
//! once, evaluates every counter with the same arithmetic as `core::arithmetic::algorithm` (a counter named
//! twice sees its earlier mention's pending state, as in `MemoryStore`), computes the verdict
//! of `core::ground::verdict`, then writes every admitted counter or none. Redis runs a script
//! atomically, so concurrent requests from any number of instances never interleave. The
//! script is loaded with `SCRIPT LOAD` when the store connects and loaded again, transparently,
//! when Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
//!
//! # Batching
//!
//! With `--redis-batch-max N` above 1, requests that arrive while a call is in flight on their
//! socket (on a cluster: for their hash slot) wait for it and then share the next call, up to
//! N (`batch/`, `lanes.rs`). The script decides them one after the other in arrival order,
//! each as its own call would have at that point, writes included, so decisions are the same;
//! what a batch shares is the cost of the call. Deadlines, the circuit breaker and the failure
//! policy stay per request. The default is 64 ([`DEFAULT_BATCH_MAX`] says why); with N = 1
//! every request is its own call, sent at once and pipelined with the others on the socket.
//!
//! # Time
//!
//! "Now" is Redis `TIME`, read inside the script, so instances whose clocks disagree still
//! agree on every decision. Only a store built with [`RedisOptions::test_clock`] passes its own
//! instant instead (the differential tests drive `MemoryStore` and this store with one clock).
//!
//! # Keys and expiry
//!
//! `<prefix>{<domain>}:<rule digest>:<counter digest>` (`{<domain>:<descriptor digest>}` with
//! the descriptor hash tag); see [`keys`] for the layout, why values are hashed and the Cluster
//! hash tag. A key holds one short string,
//! `<tag> <expires_at> <state…>` (fixed and sliding window, GCRA), or, for a sliding log, a
//! hash used as a deque so a decision touches only the entries it needs (`lua/sliding_log.lua`):
//! its cost does not grow with the limit. Every write sets a TTL that ends when the state means
//! the same as no state (`Evaluation::expires_at`: the end of the window, when the bucket is full
//! again, when the newest logged hit leaves the window), so no key lives without one and idle
//! counters vanish on their own; a state that is dead on arrival (a refund emptied the counter)
//! is deleted instead. The script also ignores a state past its `expires_at`, so decisions never
//! depend on when Redis gets round to expiring a key.
//!
//! # envoyproxy/ratelimit's keys
//!
//! With [`RedisOptions::reference_counters`] a fixed window the reference could count (one
//! whole unit, the only limit of its descriptor, no priority class:
//! `core::decision::reference_cache::counts_under_reference_key`) is counted under the reference's own
//! key, `CACHE_KEY_PREFIX` + `domain_key_value…_<window start>`, with its `INCRBY` and
//! `EXPIRE` pipelined (`reference.rs`), so its pods and floodgate's share one count. The core
//! decides from the counts; "now" is then the instance's clock, as the reference's. Such keys
//! are charged descriptor by descriptor, or, all-or-refused, in the reference's two round trips
//! (`GET`, then `INCRBY` of the keys the core picks); never rolled back, so the store refuses
//! them under all-or-nothing charging. The other counters of a request are decided by the
//! script at the same time; the verdict joins both (`core::decision::response::Decided::from_outcomes`).
//!
//! # Redis Cluster
//!
//! `--redis-type cluster` (`cluster.rs`): seed nodes in, the redis crate's cluster client out
//! (it follows `MOVED`/`ASK` and topology changes); the script is loaded on every node, and a
//! node that answers `NOSCRIPT` gets it again within the call's deadline. A script may touch
//! keys of one hash slot only, so [`keys::HashTag`] decides what all-or-nothing covers: with
//! the `domain` tag (the default) a request's keys share one slot and one call decides it
//! exactly as on a single server; with `descriptor` its counters are grouped by slot
//! (`slot.rs`), one call per group, all concurrent, and the answers merged (outcomes in request
//! order, over if any group is). Each group is all or nothing; across groups a rejected request
//! may have charged the groups that admitted it (over-count, never under-count), and a group
//! that fails fails the request after the others may have charged. The verdict itself is the
//! one a single call would reach: quota-mode counters always share the domain's slot. On a
//! single server (or Sentinel) every request is one call whatever the tag.
//!
//! # Numbers
//!
//! Lua numbers are doubles. [`check_quota`] refuses the few quotas whose integers could pass
//! 2^53 — windows longer than 2^51 µs (about 71 years), buckets with capacity ×
//! min(limit, window µs) ≥ 2^53 (a day's bucket of about 94.9 million, square) or that drain
//! for longer than 2^51 µs — so the script computes the same integers as the core. GCRA keeps
//! its debt and every charge as (µs, tick remainder) pairs, so neither capacity × window nor a
//! clock that went back can overflow it; see `lua/gcra.lua` for the one approximate corner.
//!
//! # Permissions
//!
//! An ACL user needs only its keys and these commands (Redis 7 syntax):
//! `~floodgate:* nocommands +ping +select +script|load +evalsha +time +get +set +hget +hmget
//! +hset +hdel +pexpire +unlink` (use the configured prefix in place of `floodgate:`), and
//! `+hgetall` for the runtime overrides every instance shares (`crate::engine::overrides::sync`)
//! and the heavy hitters (`heavy_hitters.rs`), `+scan` for Limitador's
//! `GET /counters/{namespace}` (`held_window_listing.rs`).
//! Under the reference's keys also `+incrby +expire +eval +decrby +set` on them (and `+get`,
//! already above, for all-or-refused's reads).
//! On Redis Cluster also `+cluster|slots` (the client reads the slot map from it). With
//! Sentinel also `+role` on the master, and `+sentinel|get-master-addr-by-name` on the
//! sentinels.
//!
//! # Connections
//!
//! `connection.rs`: a pool of `--redis-pool-size` multiplexed sockets (one by default) to one
//! server, over TLS for `rediss://` (`tls.rs`), or to the master the sentinels name, followed
//! across failovers (`sentinel.rs`).
//!
//! # Failure
//!
//! Every call has a deadline (25 ms by default): a Redis that errs, is unreachable or stops
//! answering yields [`StoreError::Unavailable`], never a hang. Errors name the server as
//! `host:port/db`, never with credentials.
//!
//! Two deadlines, one per kind of wait. Connecting (TCP, TLS, the handshake, the `PING` and
//! `ROLE` checks, asking the sentinels, each reconnection) is bounded by the connect timeout
//! (`--redis-connect-timeout-ms`). Every command on an open connection waits the call timeout
//! (`--redis-timeout-ms`), whatever its value, or longer: decisions exactly that; the store's
//! first `SCRIPT LOAD` and the commands beside the decisions (shared overrides, adaptive
//! values) have a longer floor of their own. The redis crate's own response timeout never ends
//! a call first (its 500 ms default used to cut every longer call timeout short).
//!
//! A circuit breaker (`core::arithmetic::failure::Breaker`) stands before the calls: after
//! [`RedisOptions::breaker_threshold`] consecutive failures (5 by default) the store stops
//! calling Redis and answers `Unavailable` at once, so a dead Redis costs no request its
//! deadline; one real decision per [`RedisOptions::probe_interval`] (500 ms) goes through as a
//! probe, and the first that succeeds closes the breaker. Each change is logged once. Why
//! 500 ms and not 1 s: after a restart the first probe may only wake the connection's
//! reconnection (it fails while the socket is re-established), so two probes a second keep
//! "decisions resume within 1 s of Redis returning" (`tests/redis_failure/redis_failure.rs`). What a
//! failed request gets is the limiter's failure policy (`core::arithmetic::failure::FailurePolicy`).

mod bans;
mod batch;
mod cluster;
mod connection;
mod credentials;
mod errors;
mod heavy_hitters;
mod held;
mod held_window_listing;
mod held_windows;
mod hybrid_sync;
pub mod keys;
mod lanes;
mod leases;
mod options;
mod own_socket;
mod reference;
mod rlqs_exchange;
mod script;
mod sentinel;
mod shared;
mod silence;
mod slot;
mod startup;
mod tls;
mod wire;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

pub use self::batch::MAX_BATCH;
use self::cluster::ClusterLink;
use self::connection::Connection;
pub use self::connection::MAX_POOL_SIZE;
use self::errors::{misconfigured, unavailable, BACKEND};
pub use self::heavy_hitters::{HitterRules, PeerSummary, PublishedSummary};
pub use self::hybrid_sync::{instances_key, SyncItem, SyncReply, SYNC_SOURCE};
pub use self::keys::{HashTag, InvalidPrefix, KeyLayout, DEFAULT_PREFIX};
use self::lanes::Lanes;
pub use self::options::{
    RedisOptions, ReferenceCounters, Topology, DEFAULT_BATCH_MAX, DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRATION_JITTER_MAX_SECONDS, DEFAULT_POOL_SIZE,
    DEFAULT_PROBE_INTERVAL, DEFAULT_TIMEOUT,
};
use self::reference::ReferenceCache;
use self::script::{build_call, build_request, parse_reply, Now, Settling};
pub use self::script::{
    check_quota, UnsupportedQuota, MAX_BUCKET_DRAIN_MICROS, MAX_TEST_CLOCK_MICROS,
    MAX_WINDOW_MICROS,
};
pub use self::script::{Arg, Call, SOURCE as SCRIPT_SOURCE};
pub use self::slot::slot_groups;
pub use self::startup::{StartupError, StartupRetry};
pub use self::tls::TlsOptions;
use super::{Decided, HeldCounter, Store, StoreError};
use crate::core::arithmetic::algorithm::Quota;
use crate::core::arithmetic::ban::BanOutcome;
use crate::core::arithmetic::failure::{Breaker, Gate, Transition};
use crate::core::arithmetic::lease::{LeaseCall, LeaseOutcome};
use crate::core::decision::bans::BanCall;
use crate::core::decision::charging::Charging;
use crate::core::decision::plan::Counter;
use crate::core::ground::time::Clock;
use crate::core::policy::adjustment::adjusted_quota;
use crate::core::policy::rules::RuleSet;

/// How long keys outlive their state under a test clock: Redis expires keys on its own clock,
/// which moves far slower than a test's.
const TEST_CLOCK_EXTRA_TTL_MS: u64 = 10 * 60 * 1000;

/// A configured limit the Redis store cannot decide exactly (see [`check_quota`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule_path}: {problem}")]
pub struct UnsupportedLimit {
    pub rule_path: String,
    pub problem: UnsupportedQuota,
}

/// Every limit of `rules` that the Redis store cannot decide exactly. Check a rule set with
/// this before serving it from Redis (at start-up and on every reload): such a limit would
/// otherwise fail each request that reaches it with `StoreError::Unavailable`. An adaptive
/// rule is checked at its `max` too, the largest limit its controller can set.
pub fn unsupported_limits(rules: &RuleSet) -> Vec<UnsupportedLimit> {
    rules
        .all_rules()
        .flat_map(|rule| {
            let adaptive_ceiling = rule.adaptive.as_ref().and_then(|adaptive| {
                let first = rule.limits.first()?;
                Some(adjusted_quota(first, u64::from(adaptive.max)))
            });
            rule.limits
                .iter()
                .cloned()
                .chain(adaptive_ceiling)
                .filter_map(|quota| {
                    check_quota(&quota).err().map(|problem| UnsupportedLimit {
                        rule_path: rule.path.clone(),
                        problem,
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `EVALSHA` keys and arguments this store sends for `counters` with `layout`'s keys, on
/// Redis time: what `examples/redis_script.rs` prints for `scripts/bench-redis.sh`.
pub fn script_call(counters: &[Counter], global_shadow: bool, layout: &KeyLayout) -> Call {
    let settling = Settling {
        charging: Charging::AllOrNothing,
        global_shadow,
    };
    build_call(counters, settling, Now::RedisTime, |counter| {
        layout.key_of(counter)
    })
}

/// Where the calls go.
enum Link {
    /// One server: a request is one call, whatever the hash tag (one node needs no common slot).
    Server(Connection),
    /// A cluster: a request is one call per slot group (`slot.rs`).
    Cluster(Arc<ClusterLink>),
}

impl Link {
    /// Connects as `options` say and loads `script`.
    async fn open(options: &RedisOptions, script: &Script) -> Result<Self, StoreError> {
        if options.topology == Topology::Cluster {
            return Ok(Link::Cluster(Arc::new(
                ClusterLink::open(options, script).await?,
            )));
        }
        let connection = Connection::open(options).await?;
        connection
            .load_script(script, options.script_load_deadline())
            .await?;
        Ok(Link::Server(connection))
    }

    async fn command<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        match self {
            Link::Server(connection) => connection.command(command, deadline).await,
            Link::Cluster(cluster) => cluster.command(command, deadline).await,
        }
    }

    /// One `SCAN` page within `deadline`; on a cluster, of the master of `key`'s hash slot,
    /// which holds every key the scan's pattern matches (they share that hash tag).
    async fn scan_page(
        &self,
        scan: &redis::Cmd,
        key: &str,
        deadline: Duration,
    ) -> Result<held_window_listing::ScanPage, StoreError> {
        match self {
            Link::Server(connection) => connection.command(scan, deadline).await,
            Link::Cluster(cluster) => cluster.scan_page_at(scan, key, deadline).await,
        }
    }
}

/// Counters in Redis, decided by one script call per request (per slot group on a cluster),
/// or per batch of requests.
pub struct RedisStore {
    link: Link,
    script: Arc<Script>,
    /// With `batch_max` above 1: where requests gather.
    lanes: Option<Lanes>,
    /// Fixed windows under envoyproxy/ratelimit's keys (`RedisOptions::reference_counters`).
    reference: Option<ReferenceCache>,
    keys: KeyLayout,
    timeout: Duration,
    test_clock: Option<Arc<dyn Clock>>,
    charging: Charging,
    /// Held only to read or update the state, never across a call.
    breaker: Mutex<Breaker>,
    /// The origin of the breaker's milliseconds.
    started: Instant,
}

impl RedisStore {
    /// Connects, checks the options and loads the script.
    pub async fn connect(options: &RedisOptions) -> Result<Self, StoreError> {
        let keys = KeyLayout::new(&options.key_prefix)
            .map_err(|error| misconfigured(format!("invalid Redis options: {error}")))?;
        if options.timeout.is_zero() {
            return Err(misconfigured(
                "invalid Redis options: the call timeout must be positive".to_owned(),
            ));
        }
        if options.batch_max == 0 || options.batch_max > MAX_BATCH {
            return Err(misconfigured(format!(
                "invalid Redis options: a script call decides 1 to {MAX_BATCH} requests \
                 (--redis-batch-max, FLOODGATE_REDIS_BATCH_MAX), not {}",
                options.batch_max
            )));
        }
        let keys = keys.with_hash_tag(options.hash_tag);
        let script = Arc::new(Script::new(script::SOURCE));
        let link = Link::open(options, &script).await?;
        let reference = match &options.reference_counters {
            Some(counters) => Some(ReferenceCache::open(options, counters, &script).await?),
            None => None,
        };
        let lanes = (options.batch_max > 1).then(|| match &link {
            Link::Server(connection) => {
                Lanes::sockets(connection, options.pool_size, &script, options.batch_max)
            }
            Link::Cluster(cluster) => Lanes::slots(cluster, &script, options.batch_max),
        });
        Ok(Self {
            link,
            script,
            lanes,
            reference,
            keys,
            timeout: options.timeout,
            test_clock: options.test_clock.clone(),
            charging: options.charging,
            breaker: Mutex::new(Breaker::new(
                options.breaker_threshold,
                u64::try_from(options.probe_interval.as_millis()).unwrap_or(u64::MAX),
            )),
            started: Instant::now(),
        })
    }

    /// The server, as `host:port/db` (the master now in use with Sentinel), or a cluster's
    /// seeds (safe for logs).
    pub fn server(&self) -> String {
        match &self.link {
            Link::Server(connection) => connection.server(),
            Link::Cluster(cluster) => cluster.server().to_owned(),
        }
    }

    /// The SHA-1 of the decision script (what `EVALSHA` names).
    pub fn script_sha(&self) -> &str {
        self.script.get_hash()
    }

    /// The Redis key of the counter whose identity is `identity` (`Counter::key`), not in
    /// quota mode.
    pub fn key_for(&self, identity: &[u8]) -> String {
        self.keys.key_for(identity)
    }

    /// The Redis key of `counter`.
    pub fn key_of(&self, counter: &Counter) -> String {
        self.keys.key_of(counter)
    }

    /// Whether the circuit breaker is open (Redis is not being called).
    pub fn breaker_open(&self) -> bool {
        self.with_breaker(|breaker| breaker.is_open())
    }

    /// The key prefix: state shared beside the counters (adaptive limits) lives under it too.
    pub fn key_prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// One plain command within `deadline`, or the call timeout if that is longer (a Redis
    /// the operator says may take that long gets it on every call), beside the decisions and
    /// outside their breaker: shared overrides and adaptive values.
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let deadline = deadline.max(self.timeout);
        self.link.command(command, deadline).await
    }

    /// One call of a script other than the decision script, prepared as `invocation`
    /// (`EVALSHA`, and `SCRIPT LOAD` again on `NOSCRIPT`, so its text crosses the wire and
    /// Redis hashes it only once per server), within `deadline` or the call timeout if that
    /// is longer, as [`Self::command`].
    async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let deadline = deadline.max(self.timeout);
        match &self.link {
            Link::Server(connection) => connection.run(invocation, deadline).await,
            Link::Cluster(cluster) => cluster.run(invocation, deadline).await,
        }
    }

    fn with_breaker<T>(&self, change: impl FnOnce(&mut Breaker) -> T) -> T {
        // A panic elsewhere cannot leave the few integers inconsistent: use them anyway.
        let mut breaker = match self.breaker.lock() {
            Ok(breaker) => breaker,
            Err(poisoned) => poisoned.into_inner(),
        };
        change(&mut breaker)
    }

    fn breaker_millis(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// One decision behind the circuit breaker.
    async fn decide_guarded(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        for counter in counters {
            // Configuration for this store refuses such quotas (`check_quota`), but an Envoy
            // limit override is only seen here. Refused before the breaker: the request cannot
            // be decided, yet Redis did not fail, so it must not open the circuit for others.
            check_quota(&counter.quota).map_err(|error| StoreError::Unsupported {
                backend: BACKEND,
                reason: error.to_string(),
            })?;
        }
        self.guarded(self.decide_in_redis(counters, global_shadow))
            .await
    }

    /// `call` behind the circuit breaker: not made while the circuit is open, its result
    /// counted towards opening or closing it. (A future does nothing until awaited, so a
    /// refused call never reaches Redis.)
    async fn guarded<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let gate = self.with_breaker(|breaker| breaker.gate(self.breaker_millis()));
        if gate == Gate::Refuse {
            return Err(unavailable(format!(
                "Redis at {} failed repeatedly: not called until a probe succeeds (circuit open)",
                self.server()
            )));
        }
        let result = call.await;
        let transition = match &result {
            Ok(_) => self.with_breaker(Breaker::succeeded),
            Err(_) => {
                let now = self.breaker_millis();
                self.with_breaker(|breaker| breaker.failed(now))
            }
        };
        match (transition, &result) {
            (
                Some(Transition::Opened {
                    consecutive_failures,
                }),
                Err(error),
            ) => tracing::warn!(
                redis = %self.server(),
                consecutive_failures,
                "Redis circuit open: calls fail at once, one probe per interval: {error}"
            ),
            (Some(Transition::Closed), _) => tracing::info!(
                redis = %self.server(),
                "Redis circuit closed: Redis answers again"
            ),
            _ => {}
        }
        result
    }

    /// One call of the lease script (`leases.rs`), within `--redis-timeout-ms`.
    async fn bans_in_redis(&self, calls: &[BanCall]) -> Result<Vec<BanOutcome>, StoreError> {
        let invocation = bans::ban_invocation(calls, self.now()?, &self.keys);
        let reply: Vec<i64> = self.run(&invocation, self.timeout).await?;
        bans::parse_ban_reply(&reply, calls.len()).map_err(unavailable)
    }

    async fn leases_in_redis(&self, calls: &[LeaseCall]) -> Result<Vec<LeaseOutcome>, StoreError> {
        let invocation = leases::lease_invocation(calls, self.now()?, &self.keys);
        let reply: Vec<i64> = self.run(&invocation, self.timeout).await?;
        leases::parse_lease_reply(&reply, calls.len()).map_err(unavailable)
    }

    fn now(&self) -> Result<Now, StoreError> {
        let Some(clock) = &self.test_clock else {
            return Ok(Now::RedisTime);
        };
        let now = clock.now();
        if now.unsigned_abs() > MAX_TEST_CLOCK_MICROS.unsigned_abs() {
            return Err(unavailable(format!(
                "the test clock reads {now} µs, beyond the ±2^52 µs the script computes exactly"
            )));
        }
        Ok(Now::Given {
            now,
            extra_ttl_ms: TEST_CLOCK_EXTRA_TTL_MS,
        })
    }

    async fn decide_in_redis(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        if counters.is_empty() {
            return Ok(Decided {
                outcomes: Vec::new(),
                over_limit: false,
            });
        }
        if let Some(reference) = &self.reference {
            let calls = reference.calls(counters);
            if !calls.is_empty() {
                // Boxed, as every path but the usual one (floodgate's keys through the lanes):
                // an async fn's state is as large as its largest path, and every layer above
                // moves that state whole, so a rare path's Redis futures inline would be
                // copied on every decision.
                return Box::pin(self.decide_with_reference_keys(
                    reference,
                    counters,
                    &calls,
                    global_shadow,
                ))
                .await;
            }
        }
        self.decide_with_own_keys(counters, global_shadow).await
    }

    /// The counters the reference could count under its keys (`calls`), the others under
    /// floodgate's, both at once; the verdict over all of them. Nothing is rolled back
    /// (`ReferenceCache::open` requires a charging that never is), so the two parts need not
    /// wait for each other; under all-or-refused each part stops on its own counters' refusals
    /// (the reference, which cannot have the rules of floodgate's keys, has no such request).
    async fn decide_with_reference_keys(
        &self,
        reference: &ReferenceCache,
        counters: &[Counter],
        calls: &[reference::ReferenceCall],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        let own = reference::other_positions(counters.len(), calls);
        let own_counters: Vec<Counter> = own
            .iter()
            .filter_map(|&position| counters.get(position).cloned())
            .collect();
        let (counted, decided_own) = futures_util::future::try_join(
            reference.count(&self.link, calls, self.timeout),
            async {
                if own_counters.is_empty() {
                    return Ok(Decided::default());
                }
                self.decide_with_own_keys(&own_counters, global_shadow)
                    .await
            },
        )
        .await?;
        let outcomes = reference::in_request_order(
            counters.len(),
            calls.iter().map(|call| call.position).zip(counted),
            own.into_iter().zip(decided_own.outcomes),
        )?;
        Ok(Decided::from_outcomes(counters, outcomes, global_shadow))
    }

    /// Every counter under floodgate's keys, decided by the script; its withheld charges
    /// marked as the core says (`Charging::mark_withheld`).
    async fn decide_with_own_keys(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        let mut decided = self.decide_by_script(counters, global_shadow).await?;
        self.charging.mark_withheld(counters, &mut decided.outcomes);
        Ok(decided)
    }

    /// One script call, or one per slot group on a cluster.
    async fn decide_by_script(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        let now = self.now()?;
        if let Link::Cluster(_) = &self.link {
            let groups = slot_groups(counters, &self.keys);
            if groups.len() > 1 {
                // Boxed: see `decide_in_redis`.
                return Box::pin(self.decide_in_groups(counters, &groups, global_shadow, now))
                    .await;
            }
        }
        self.decide_in_one_call(counters, global_shadow, now).await
    }

    /// One call per slot group, all at once; `slot.rs` says what holds across groups. A group
    /// that fails fails the request, though groups that answered may have charged.
    async fn decide_in_groups(
        &self,
        counters: &[Counter],
        groups: &[Vec<usize>],
        global_shadow: bool,
        now: Now,
    ) -> Result<Decided, StoreError> {
        let calls = groups.iter().map(|positions| async move {
            let group = slot::group_counters(counters, positions);
            self.decide_in_one_call(&group, global_shadow, now).await
        });
        let answers = futures_util::future::try_join_all(calls).await?;
        slot::merge(counters.len(), groups, answers).map_err(|error| unavailable(error.to_string()))
    }

    /// One script call for all of `counters`: on the server, or on the cluster node that
    /// serves their one slot.
    async fn decide_in_one_call(
        &self,
        counters: &[Counter],
        global_shadow: bool,
        now: Now,
    ) -> Result<Decided, StoreError> {
        let settling = Settling {
            charging: self.charging,
            global_shadow,
        };
        let request = build_request(counters, settling, now, |counter| self.keys.key_of(counter));
        if let Some(lanes) = &self.lanes {
            return lanes.decide(request, self.timeout).await;
        }
        let call = Call::single(request);
        // Boxed (`--redis-batch-max 1`, no lanes): see `decide_in_redis`.
        let reply = match &self.link {
            Link::Server(connection) => {
                Box::pin(connection.invoke(&self.script, &call, self.timeout)).await?
            }
            Link::Cluster(cluster) => {
                Box::pin(cluster.invoke(&self.script, &call, self.timeout)).await?
            }
        };
        parse_reply(&reply, counters.len()).map_err(|error| unavailable(error.to_string()))
    }
}

impl Store for RedisStore {
    async fn decide(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        self.decide_guarded(counters, global_shadow).await
    }

    /// The lease script behind the same circuit breaker as decisions.
    async fn leases(&self, calls: &[LeaseCall]) -> Result<Vec<LeaseOutcome>, StoreError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        // Boxed: only concurrency rules take leases (see `decide_in_redis`).
        Box::pin(self.guarded(self.leases_in_redis(calls))).await
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn check_quota(&self, quota: &Quota) -> Result<(), UnsupportedQuota> {
        check_quota(quota)
    }

    async fn held(&self, counters: &[Counter]) -> Result<Vec<Option<HeldCounter>>, StoreError> {
        self.held_in_redis(counters).await
    }

    async fn reset(&self, counters: &[Counter]) -> Result<usize, StoreError> {
        self.reset_in_redis(counters).await
    }

    /// The ban script behind the same circuit breaker as decisions.
    async fn bans(&self, calls: &[BanCall]) -> Result<Vec<BanOutcome>, StoreError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        self.guarded(self.bans_in_redis(calls)).await
    }

    /// Whether Redis answers a `PING` now (within the call timeout, or the readiness poll's
    /// own bound, whichever comes first).
    async fn ready(&self) -> bool {
        let ping = redis::cmd("PING");
        let deadline = READY_DEADLINE.max(self.timeout);
        let per_second_ready = match self.reference.as_ref().and_then(ReferenceCache::per_second) {
            Some(per_second) => per_second.command::<String>(&ping, deadline).await.is_ok(),
            None => true,
        };
        per_second_ready && self.command::<String>(&ping, READY_DEADLINE).await.is_ok()
    }
}

/// The deadline of the readiness `PING` (raised to `--redis-timeout-ms` if that is longer).
const READY_DEADLINE: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::config::load_valid;

    #[test]
    fn limits_beyond_the_bounds_are_listed_by_rule() {
        let yaml = "domain: d\n\
                    descriptors:\n\
                    \x20 - key: ok\n\
                    \x20   rate_limit: {unit: day, requests_per_unit: 1000000, algorithm: token_bucket}\n\
                    \x20 - key: big\n\
                    \x20   rate_limit: {unit: day, requests_per_unit: 100000000, algorithm: token_bucket}\n";
        let unsupported = unsupported_limits(&load_valid("d.yaml", yaml));
        assert_eq!(unsupported.len(), 1, "{unsupported:?}");
        assert_eq!(unsupported[0].rule_path, "d.big");
        assert!(unsupported[0]
            .to_string()
            .starts_with("d.big: token_bucket with capacity 100000000"));
    }

    #[test]
    fn an_adaptive_rule_is_checked_at_its_max() {
        let rule = |max: u32| {
            format!(
                "domain: d\n\
                 descriptors:\n\
                 \x20 - key: grows\n\
                 \x20   rate_limit: {{unit: day, requests_per_unit: 1000, algorithm: token_bucket}}\n\
                 \x20   adaptive: {{min: 10, max: {max}, slo: 250ms, signal_unit: ms, signal: {{pushed: p95}}}}\n"
            )
        };
        let unsupported_at = |max: u32| unsupported_limits(&load_valid("d.yaml", &rule(max)));
        assert!(unsupported_at(90_000_000).is_empty());
        let unsupported = unsupported_at(100_000_000);
        assert_eq!(unsupported.len(), 1, "{unsupported:?}");
        assert!(unsupported[0]
            .to_string()
            .starts_with("d.grows: token_bucket with capacity 100000000"));
    }
}
