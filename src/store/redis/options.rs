//! How to reach Redis and lay out keys there ([`RedisOptions`]), with the defaults: one
//! server, the master the sentinels name, or a cluster's seeds; TLS; deadlines; the circuit
//! breaker; batching; and envoyproxy/ratelimit's keys ([`ReferenceCounters`]). What the
//! options mean for the store is told in the module's notes (`mod.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::credentials::redact_url;
use super::keys::{HashTag, DEFAULT_PREFIX};
use super::tls::TlsOptions;
use crate::core::decision::charging::Charging;
use crate::core::ground::time::Clock;

/// The default deadline of one decision.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(25);

/// The default deadline for connecting (at start-up, and for each reconnection attempt).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Sockets to the Redis server (`--redis-pool-size`); see `connection.rs` for when more help.
pub const DEFAULT_POOL_SIZE: usize = 1;

/// Requests per script call at most (`--redis-batch-max`; 1 is one call per request). Batching
/// is the default since, on a quiet host, batches kept p50 and p99 within 5 % of one call per
/// request at a tenth of the peak (0.93× and 0.89×, ABBA, 2026-12-02), the condition,
/// while at peak they cost Redis 0.63× the CPU per decision (docs/benchmarks-redis.md). Three
/// earlier sessions on a loaded host had missed it, with runs of one mode alone 34–68 % apart
/// at p99. A lone request never waits for company: there is no timer.
pub const DEFAULT_BATCH_MAX: usize = 64;

/// Consecutive failures that open the circuit breaker.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 5;

/// How often an open breaker lets one call through to see whether Redis is back.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// How to reach Redis and how to lay out keys there.
#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://[[user]:password@]host[:port][/db]`, `rediss://…` (TLS, see `tls`),
    /// `unix:///path/to/socket[?db=N]`, or a bare `host:port` or socket path as
    /// envoyproxy/ratelimit's `REDIS_URL` gives it (Sentinel and Cluster: see `sentinel`, `cluster`).
    pub url: String,
    /// `password` or `user:password` (envoyproxy/ratelimit's `REDIS_AUTH`); used when the
    /// URL carries no credentials.
    pub auth: Option<String>,
    /// Put before every key (see [`keys`](super::keys)).
    pub key_prefix: String,
    /// Deadline of one decision, script reload included; no command waits less.
    pub timeout: Duration,
    /// Deadline for connecting at start-up and for each reconnection attempt.
    pub connect_timeout: Duration,
    /// Consecutive failed calls that open the circuit breaker (0: never open).
    pub breaker_threshold: u32,
    /// While the breaker is open, one call per this interval goes to Redis.
    pub probe_interval: Duration,
    /// Tests only: take "now" from this clock instead of Redis `TIME`.
    pub test_clock: Option<Arc<dyn Clock>>,
    /// How `url` reaches Redis: one server, a master found through sentinels, or a cluster.
    pub topology: Topology,
    /// What the keys' Cluster hash tag holds (see [`keys`](super::keys)).
    pub hash_tag: HashTag,
    /// `password` or `user:password` for the sentinels (envoyproxy/ratelimit's
    /// `REDIS_SENTINEL_AUTH`), when their addresses carry none.
    pub sentinel_auth: Option<String>,
    /// Sockets to the server, used in turn (envoyproxy/ratelimit's `REDIS_POOL_SIZE`).
    pub pool_size: usize,
    /// TLS (`rediss://`, or `tls.enabled` for a bare `host:port`) and its files.
    pub tls: TlsOptions,
    /// Which counters a request charges (`core::decision::charging`; `--charge`).
    pub charging: Charging,
    /// Requests one script call may decide (1 to [`MAX_BATCH`](super::MAX_BATCH); see
    /// "Batching" in the module's notes).
    pub batch_max: usize,
    /// Fixed windows counted under envoyproxy/ratelimit's keys and with its commands (see
    /// "envoyproxy/ratelimit's keys" in the module's notes); `None`: every counter under
    /// floodgate's keys.
    pub reference_counters: Option<ReferenceCounters>,
}

/// How a [`RedisOptions::url`] reaches Redis (envoyproxy/ratelimit's `REDIS_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// `url` is one server (or a proxy in front of several).
    Single,
    /// `url` is `mastername,host:port[,host:port…]`: the master is found through these
    /// sentinels and followed across failovers.
    Sentinel,
    /// `url` lists the seed nodes of a Redis Cluster (`host:port,host:port` or one URL each).
    Cluster,
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
            topology: Topology::Single,
            hash_tag: HashTag::Domain,
            sentinel_auth: None,
            pool_size: DEFAULT_POOL_SIZE,
            tls: TlsOptions::default(),
            charging: Charging::AllOrNothing,
            batch_max: DEFAULT_BATCH_MAX,
            reference_counters: None,
        }
    }

    /// Tests only: decide with `clock`'s time, so another store can be driven in step.
    pub fn with_test_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.test_clock = Some(clock);
        self
    }

    /// The deadline of the `SCRIPT LOAD` that opens the store: part of connecting, but a
    /// command, so never shorter than a decision's.
    pub(super) fn script_load_deadline(&self) -> Duration {
        self.connect_timeout.max(self.timeout)
    }

    /// The response timeout given to the redis crate where it needs one (a cluster's slot-map
    /// refresh would otherwise wait forever on a node that stopped answering): as long as the
    /// longest deadline of our own that its calls get from the options, so that ours decide.
    pub(super) fn response_backstop(&self) -> Duration {
        self.timeout.max(self.script_load_deadline())
    }

    /// The URL with a scheme: a bare `host:port` gets `redis://` (`rediss://` with
    /// `tls.enabled`), a bare path `unix://`.
    pub(super) fn normalized_url(&self) -> String {
        if self.url.contains("://") {
            self.url.clone()
        } else if self.url.starts_with('/') {
            // envoyproxy/ratelimit's REDIS_SOCKET_TYPE=unix gives a bare socket path.
            format!("unix://{}", self.url)
        } else if self.tls.enabled {
            format!("rediss://{}", self.url)
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
        let url = if self.topology == Topology::Cluster {
            describe_seeds(&self.url, self.tls.enabled)
        } else {
            redact_url(&self.normalized_url())
        };
        f.debug_struct("RedisOptions")
            .field("url", &url)
            .field("auth", &self.auth.as_ref().map(|_| "***"))
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("breaker_threshold", &self.breaker_threshold)
            .field("probe_interval", &self.probe_interval)
            .field("test_clock", &self.test_clock.is_some())
            .field("topology", &self.topology)
            .field("hash_tag", &self.hash_tag)
            .field("sentinel_auth", &self.sentinel_auth.as_ref().map(|_| "***"))
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .field("charging", &self.charging)
            .field("batch_max", &self.batch_max)
            .field("reference_counters", &self.reference_counters)
            .finish()
    }
}

/// envoyproxy/ratelimit's default `EXPIRATION_JITTER_MAX_SECONDS`.
pub const DEFAULT_EXPIRATION_JITTER_MAX_SECONDS: u64 = 300;

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

/// The seed URLs of `seeds`: envoyproxy/ratelimit's `host1:port1,host2:port2` (`rediss://` with
/// `tls`), or one URL per seed (`redis://[[user]:password@]host:port`), comma-separated.
pub(super) fn seed_urls(seeds: &str, tls: bool) -> Result<Vec<String>, String> {
    let urls: Vec<String> = seeds
        .split(',')
        .map(str::trim)
        .filter(|seed| !seed.is_empty())
        .map(|seed| {
            if seed.contains("://") {
                seed.to_owned()
            } else if tls {
                format!("rediss://{seed}")
            } else {
                format!("redis://{seed}")
            }
        })
        .collect();
    if urls.is_empty() {
        return Err(
            "no Redis Cluster seed node: give --redis-url (REDIS_URL) as host:port[,host:port…]"
                .to_owned(),
        );
    }
    Ok(urls)
}

/// `seeds` with each seed's credentials replaced by `***` (safe for logs).
pub(super) fn describe_seeds(seeds: &str, tls: bool) -> String {
    match seed_urls(seeds, tls) {
        Ok(urls) => urls
            .iter()
            .map(|url| redact_url(url))
            .collect::<Vec<_>>()
            .join(","),
        Err(_) => "(no seed)".to_owned(),
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
    fn debug_output_hides_every_cluster_seeds_credentials() {
        let mut options = RedisOptions::new("redis://:first-pw@a:7000,redis://u:second-pw@b:7001");
        options.topology = Topology::Cluster;
        let shown = format!("{options:?}");
        assert!(
            !shown.contains("first-pw") && !shown.contains("second-pw"),
            "{shown}"
        );
        assert!(
            shown.contains("a:7000") && shown.contains("b:7001"),
            "{shown}"
        );
    }
}
