//! The Redis store: counters shared by every floodgate instance, decided by one Lua script call
//! per request.
//!
//! # One round trip, all or nothing
//!
//! A request becomes one `EVALSHA` (`script.rs`, Lua in `lua/`): the script reads each counter
//! once, evaluates every counter with the same arithmetic as `core::algorithm` (a counter named
//! twice sees its earlier mention's pending state, as in `MemoryStore`), computes the verdict
//! of `core::verdict`, then writes every admitted counter or none. Redis runs a script
//! atomically, so concurrent requests from any number of instances never interleave. The
//! script is loaded with `SCRIPT LOAD` when the store connects and loaded again, transparently,
//! when Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
//!
//! # Time
//!
//! "Now" is Redis `TIME`, read inside the script, so instances whose clocks disagree still
//! agree on every decision. Only a store built with [`RedisOptions::test_clock`] passes its own
//! instant instead (the differential tests drive `MemoryStore` and this store with one clock).
//!
//! # Keys and expiry
//!
//! `<prefix>{<domain>}:<rule digest>:<counter digest>`; see [`keys`] for the layout, why
//! values are hashed and the Cluster hash tag. A key holds one short string,
//! `<tag> <expires_at> <state…>` (fixed and sliding window, GCRA), or, for a sliding log, a
//! hash used as a deque so a decision touches only the entries it needs (`lua/sliding_log.lua`):
//! its cost does not grow with the limit. Every write sets a TTL that ends when the state means
//! the same as no state (`Evaluation::expires_at`: the end of the window, when the bucket is full
//! again, when the newest logged hit leaves the window), so no key lives without one and idle
//! counters vanish on their own; a state that is dead on arrival (a refund emptied the counter)
//! is deleted instead. The script also ignores a state past its `expires_at`, so decisions never
//! depend on when Redis gets round to expiring a key.
//!
//! # Numbers
//!
//! Lua numbers are doubles. [`check_quota`] refuses the few quotas whose integers could pass
//! 2^53 — windows longer than 2^51 µs (about 71 years), buckets with capacity × window ≥ 2^53
//! (about 104 249 per day) or that drain for longer than 2^51 µs — so the script computes the
//! same integers as the core. GCRA's debt is kept as (µs, tick remainder) so a clock that went
//! back cannot overflow it; see `lua/gcra.lua` for the one approximate corner.
//!
//! # Permissions
//!
//! An ACL user needs only its keys and these commands (Redis 7 syntax):
//! `~floodgate:* nocommands +ping +select +script|load +evalsha +time +get +set +hget +hmget
//! +hset +hdel +pexpire +unlink` (use the configured prefix in place of `floodgate:`).
//!
//! # Failure
//!
//! Every call has a deadline (25 ms by default): a Redis that errs, is unreachable or stops
//! answering yields [`StoreError::Unavailable`], never a hang. Errors name the server as
//! `host:port/db`, never with credentials.
//!
//! A circuit breaker (`core::failure::Breaker`) stands before the calls: after
//! [`RedisOptions::breaker_threshold`] consecutive failures (5 by default) the store stops
//! calling Redis and answers `Unavailable` at once, so a dead Redis costs no request its
//! deadline; one real decision per [`RedisOptions::probe_interval`] (500 ms) goes through as a
//! probe, and the first that succeeds closes the breaker. Each change is logged once. Why
//! 500 ms and not 1 s: after a restart the first probe may only wake the connection's
//! reconnection (it fails while the socket is re-established), so two probes a second keep
//! "decisions resume within 1 s of Redis returning" (`tests/redis_failure.rs`). What a
//! failed request gets is the limiter's failure policy (`core::failure::FailurePolicy`).

mod connection;
pub mod keys;
mod script;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Script;

use self::connection::{unavailable, Connection, BACKEND};
pub use self::keys::{InvalidPrefix, KeyLayout, DEFAULT_PREFIX};
use self::script::{build_call, parse_reply, Now};
pub use self::script::{
    check_quota, UnsupportedQuota, MAX_BUCKET_DRAIN_MICROS, MAX_TEST_CLOCK_MICROS,
    MAX_WINDOW_MICROS,
};
pub use self::script::{Call, SOURCE as SCRIPT_SOURCE};
use super::{Decided, Store, StoreError};
use crate::core::failure::{Breaker, Gate, Transition};
use crate::core::plan::Counter;
use crate::core::rules::RuleSet;
use crate::core::time::Clock;

/// The default deadline of one decision.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(25);

/// The default deadline for connecting (at start-up, and for each reconnection attempt).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Consecutive failures that open the circuit breaker.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 5;

/// How often an open breaker lets one call through to see whether Redis is back.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// How long keys outlive their state under a test clock: Redis expires keys on its own clock,
/// which moves far slower than a test's.
const TEST_CLOCK_EXTRA_TTL_MS: u64 = 10 * 60 * 1000;

/// How to reach Redis and how to lay out keys there.
#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://[[user]:password@]host[:port][/db]`, `unix:///path/to/socket[?db=N]`, or a bare
    /// `host:port` or socket path as envoyproxy/ratelimit's `REDIS_URL` gives it. (`rediss://`
    /// needs the `redis` crate's TLS feature, which is not enabled.)
    pub url: String,
    /// `password` or `user:password` (envoyproxy/ratelimit's `REDIS_AUTH`); used when the
    /// URL carries no credentials.
    pub auth: Option<String>,
    /// Put before every key (see [`keys`]).
    pub key_prefix: String,
    /// Deadline of one decision, script reload included.
    pub timeout: Duration,
    /// Deadline for connecting at start-up and for each reconnection attempt.
    pub connect_timeout: Duration,
    /// Consecutive failed calls that open the circuit breaker (0: never open).
    pub breaker_threshold: u32,
    /// While the breaker is open, one call per this interval goes to Redis.
    pub probe_interval: Duration,
    /// Tests only: take "now" from this clock instead of Redis `TIME`.
    pub test_clock: Option<Arc<dyn Clock>>,
}

impl RedisOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth: None,
            key_prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            test_clock: None,
        }
    }

    /// Tests only: decide with `clock`'s time, so another store can be driven in step.
    pub fn with_test_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.test_clock = Some(clock);
        self
    }

    /// The URL with a scheme: a bare `host:port` gets `redis://`, a bare path `unix://`.
    fn normalized_url(&self) -> String {
        if self.url.contains("://") {
            self.url.clone()
        } else if self.url.starts_with('/') {
            // envoyproxy/ratelimit's REDIS_SOCKET_TYPE=unix gives a bare socket path.
            format!("unix://{}", self.url)
        } else {
            format!("redis://{}", self.url)
        }
    }
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self::new("redis://127.0.0.1:6379/0")
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &connection::redact_url(&self.normalized_url()))
            .field("auth", &self.auth.as_ref().map(|_| "***"))
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("breaker_threshold", &self.breaker_threshold)
            .field("probe_interval", &self.probe_interval)
            .field("test_clock", &self.test_clock.is_some())
            .finish()
    }
}

/// A configured limit the Redis store cannot decide exactly (see [`check_quota`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule_path}: {problem}")]
pub struct UnsupportedLimit {
    pub rule_path: String,
    pub problem: UnsupportedQuota,
}

/// Every limit of `rules` that the Redis store cannot decide exactly. Check a rule set with
/// this before serving it from Redis (at start-up and on every reload): such a limit would
/// otherwise fail each request that reaches it with `StoreError::Unavailable`.
pub fn unsupported_limits(rules: &RuleSet) -> Vec<UnsupportedLimit> {
    rules
        .domains()
        .flat_map(|domain| domain.rules())
        .flat_map(|rule| {
            rule.limits.iter().filter_map(|quota| {
                check_quota(quota).err().map(|problem| UnsupportedLimit {
                    rule_path: rule.path.clone(),
                    problem,
                })
            })
        })
        .collect()
}

/// The `EVALSHA` keys and arguments this store sends for `counters` with `layout`'s keys, on
/// Redis time: what `examples/redis_script.rs` prints for `scripts/bench-redis.sh`.
pub fn script_call(counters: &[Counter], global_shadow: bool, layout: &KeyLayout) -> Call {
    build_call(counters, global_shadow, Now::RedisTime, |identity| {
        layout.key_for(identity)
    })
}

/// Counters in Redis, decided by one script call per request.
pub struct RedisStore {
    connection: Connection,
    script: Script,
    keys: KeyLayout,
    timeout: Duration,
    test_clock: Option<Arc<dyn Clock>>,
    /// Held only to read or update the state, never across a call.
    breaker: Mutex<Breaker>,
    /// The origin of the breaker's milliseconds.
    started: Instant,
}

impl RedisStore {
    /// Connects, checks the options and loads the script.
    pub async fn connect(options: &RedisOptions) -> Result<Self, StoreError> {
        let keys = KeyLayout::new(&options.key_prefix)
            .map_err(|error| unavailable(format!("invalid Redis options: {error}")))?;
        if options.timeout.is_zero() {
            return Err(unavailable(
                "invalid Redis options: the call timeout must be positive".to_owned(),
            ));
        }
        let connection = Connection::open(
            &options.normalized_url(),
            options.auth.as_deref(),
            options.connect_timeout,
        )
        .await?;
        let script = Script::new(script::SOURCE);
        let mut manager = connection.manager.clone();
        connection
            .within(
                options.connect_timeout,
                script.prepare_invoke().load_async(&mut manager),
            )
            .await?;
        Ok(Self {
            connection,
            script,
            keys,
            timeout: options.timeout,
            test_clock: options.test_clock.clone(),
            breaker: Mutex::new(Breaker::new(
                options.breaker_threshold,
                u64::try_from(options.probe_interval.as_millis()).unwrap_or(u64::MAX),
            )),
            started: Instant::now(),
        })
    }

    /// The server, as `host:port/db` (safe for logs).
    pub fn server(&self) -> &str {
        &self.connection.server
    }

    /// The SHA-1 of the decision script (what `EVALSHA` names).
    pub fn script_sha(&self) -> &str {
        self.script.get_hash()
    }

    /// The Redis key of the counter whose identity is `identity` (`Counter::key`).
    pub fn key_for(&self, identity: &[u8]) -> String {
        self.keys.key_for(identity)
    }

    /// Whether the circuit breaker is open (Redis is not being called).
    pub fn breaker_open(&self) -> bool {
        self.with_breaker(|breaker| breaker.is_open())
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
        let gate = self.with_breaker(|breaker| breaker.gate(self.breaker_millis()));
        if gate == Gate::Refuse {
            return Err(unavailable(format!(
                "Redis at {} failed repeatedly: not called until a probe succeeds (circuit open)",
                self.connection.server
            )));
        }
        let result = self.decide_in_redis(counters, global_shadow).await;
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
                redis = %self.connection.server,
                consecutive_failures,
                "Redis circuit open: calls fail at once, one probe per interval: {error}"
            ),
            (Some(Transition::Closed), _) => tracing::info!(
                redis = %self.connection.server,
                "Redis circuit closed: Redis answers again"
            ),
            _ => {}
        }
        result
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
        for counter in counters {
            // Configuration for this store should have refused it already (`check_quota`).
            check_quota(&counter.quota).map_err(|error| unavailable(error.to_string()))?;
        }
        let call = build_call(counters, global_shadow, self.now()?, |identity| {
            self.keys.key_for(identity)
        });
        let mut invocation = self.script.prepare_invoke();
        for key in &call.keys {
            invocation.key(key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let mut manager = self.connection.manager.clone();
        let reply: Vec<i64> = self
            .connection
            .within(self.timeout, invocation.invoke_async(&mut manager))
            .await?;
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

    fn backend(&self) -> &'static str {
        BACKEND
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_and_paths_become_urls() {
        assert_eq!(
            RedisOptions::new("cache:6380").normalized_url(),
            "redis://cache:6380"
        );
        assert_eq!(
            RedisOptions::new("/run/redis.sock").normalized_url(),
            "unix:///run/redis.sock"
        );
        assert_eq!(
            RedisOptions::new("redis://bob:pw@cache/1").normalized_url(),
            "redis://bob:pw@cache/1"
        );
    }

    #[test]
    fn debug_output_hides_credentials() {
        let mut options = RedisOptions::new("redis://alice:hunter22@cache:6380/1");
        options.auth = Some("other-secret".to_owned());
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("hunter22") && !shown.contains("other-secret"),
            "{shown}"
        );
        assert!(shown.contains("cache:6380/1"), "{shown}");
        let options = RedisOptions::new("unix:///run/redis.sock?db=2&pass=hunter22");
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("hunter22") && shown.contains("db=2"),
            "{shown}"
        );
    }

    #[test]
    fn limits_beyond_the_bounds_are_listed_by_rule() {
        use crate::core::config::{load, LoadOptions, SourceFile};
        let yaml = "domain: d\n\
                    descriptors:\n\
                    \x20 - key: ok\n\
                    \x20   rate_limit: {unit: day, requests_per_unit: 10, algorithm: token_bucket, burst: 104249}\n\
                    \x20 - key: big\n\
                    \x20   rate_limit: {unit: day, requests_per_unit: 10, algorithm: token_bucket, burst: 200000}\n";
        let files = [SourceFile {
            name: "d.yaml".to_owned(),
            text: yaml.to_owned(),
        }];
        let rules = load(&files, &LoadOptions::default()).expect("a valid configuration");
        let unsupported = unsupported_limits(&rules);
        assert_eq!(unsupported.len(), 1, "{unsupported:?}");
        assert_eq!(unsupported[0].rule_path, "d.big");
        assert!(unsupported[0]
            .to_string()
            .starts_with("d.big: token_bucket with capacity 200000"));
    }
}
