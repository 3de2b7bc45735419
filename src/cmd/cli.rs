//! The command line. Every `serve` flag can also come from an environment variable, and
//! envoyproxy/ratelimit's variables are honoured so an existing deployment starts unchanged.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::cmd::semantics_args::YamlStringsArg;
use crate::cmd::setting_values::GoBool;
use crate::core::arithmetic::algorithm::Algorithm;
use crate::core::arithmetic::failure::FailurePolicy;
use crate::core::decision::charging::Charging;
use crate::core::decision::headers::{HeaderMode, PlainHeaderNames};
use crate::core::decision::overload::OverloadAnswer;
use crate::core::policy::config::{LoadOptions, DEFAULT_MAX_RULES};
use crate::server::DenyStatus;

#[derive(Debug, Parser)]
#[command(
    name = "floodgate",
    version,
    about = "A rate-limit service for Envoy and Nginx"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Envoy's RateLimitService over gRPC, plus HTTP and debug ports.
    Serve(Box<ServeArgs>),
    /// Check configuration files: print every problem (exit 1) or a summary (exit 0).
    Validate(Box<ValidateArgs>),
    /// Ask a running floodgate about one request and print each descriptor's status.
    Check(Box<CheckArgs>),
    /// Show or reset one descriptor's counters through a running floodgate's admin API.
    Counters(Box<CountersArgs>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// In this process (one instance; counts are not shared).
    Memory,
    /// In Redis, shared by every instance (one script call per decision).
    Redis,
    /// Counted in this process and synced to Redis in the background: no round trip per
    /// decision, a stated over-admission (docs/redis.md, "Hybrid").
    Hybrid,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedisType {
    /// One Redis server (or a proxy in front of several).
    Single,
    /// A master found through Sentinel.
    Sentinel,
    /// Redis Cluster, reached through seed nodes.
    Cluster,
}

impl From<RedisType> for crate::store::redis::Topology {
    fn from(redis_type: RedisType) -> Self {
        match redis_type {
            RedisType::Single => Self::Single,
            RedisType::Sentinel => Self::Sentinel,
            RedisType::Cluster => Self::Cluster,
        }
    }
}

/// What a Redis key's Cluster hash tag holds (`store::redis::keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HashTagArg {
    /// `{domain}`: a request's counters share one slot; one script call, all or nothing.
    Domain,
    /// `{domain:descriptor digest}`: counters spread over the shards; one call per slot group.
    Descriptor,
}

impl From<HashTagArg> for crate::store::redis::HashTag {
    fn from(arg: HashTagArg) -> Self {
        match arg {
            HashTagArg::Domain => Self::Domain,
            HashTagArg::Descriptor => Self::Descriptor,
        }
    }
}

/// `--redis-counters`: whose keys and arithmetic the Redis store's fixed windows use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RedisCountersArg {
    /// envoyproxy/ratelimit's keys and INCRBY/EXPIRE, shared with its pods on the same Redis.
    Reference,
    /// floodgate's own hashed keys (which cannot collide), decided by its scripts.
    Floodgate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlgorithmArg {
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    LeakyBucket,
}

impl From<AlgorithmArg> for Algorithm {
    fn from(arg: AlgorithmArg) -> Self {
        match arg {
            AlgorithmArg::FixedWindow => Algorithm::FixedWindow,
            AlgorithmArg::SlidingWindow => Algorithm::SlidingWindow,
            AlgorithmArg::SlidingLog => Algorithm::SlidingLog,
            AlgorithmArg::TokenBucket => Algorithm::TokenBucket,
            AlgorithmArg::LeakyBucket => Algorithm::LeakyBucket,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HeaderModeArg {
    None,
    Ratelimit,
    Draft03,
    Ietf,
}

impl From<HeaderModeArg> for HeaderMode {
    fn from(arg: HeaderModeArg) -> Self {
        match arg {
            HeaderModeArg::None => HeaderMode::None,
            HeaderModeArg::Ratelimit => HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
            HeaderModeArg::Draft03 => HeaderMode::Draft03,
            HeaderModeArg::Ietf => HeaderMode::Ietf,
        }
    }
}

/// `--charge`: which counters a request charges (`core::decision::charging`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChargeArg {
    /// A rejected request charges nothing; one that passes charges every descriptor.
    AllOrNothing,
    /// Every descriptor is charged by its own verdict (envoyproxy/ratelimit's default).
    EveryDescriptor,
    /// A rejected request charges only its refused hits (envoyproxy/ratelimit's
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true).
    AllOrRefused,
}

impl From<ChargeArg> for Charging {
    fn from(arg: ChargeArg) -> Self {
        match arg {
            ChargeArg::AllOrNothing => Charging::AllOrNothing,
            ChargeArg::EveryDescriptor => Charging::EveryDescriptor,
            ChargeArg::AllOrRefused => Charging::AllOrRefused,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DenyStatusArg {
    #[value(name = "403")]
    Forbidden,
    #[value(name = "401")]
    Unauthorized,
}

impl From<DenyStatusArg> for DenyStatus {
    fn from(arg: DenyStatusArg) -> Self {
        match arg {
            DenyStatusArg::Forbidden => DenyStatus::Forbidden,
            DenyStatusArg::Unauthorized => DenyStatus::Unauthorized,
        }
    }
}

/// `--config-type` (envoyproxy/ratelimit's `CONFIG_TYPE`): where the rules come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfigTypeArg {
    /// YAML files: --config, or RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
    #[value(name = "file", alias = "FILE")]
    File,
    /// RateLimitConfig resources pushed by an xDS management server over an ADS
    /// state-of-the-world stream, as Envoy Gateway runs envoyproxy/ratelimit (docs/xds.md).
    #[value(name = "grpc-xds-sotw", alias = "GRPC_XDS_SOTW")]
    GrpcXdsSotw,
}

/// The xDS config source (`--config-type grpc-xds-sotw`), under envoyproxy/ratelimit's
/// variables. Durations are Go durations (`10s`, `500ms`, `1m30s`); an empty one is the
/// default, as deployments often set them empty (booleans are Go's, `setting_values`). Read
/// only with `grpc-xds-sotw`.
#[derive(Debug, Args)]
pub struct XdsArgs {
    /// Where the rules come from: file or grpc-xds-sotw (envoyproxy/ratelimit's CONFIG_TYPE,
    /// whose FILE and GRPC_XDS_SOTW are taken too).
    #[arg(
        long,
        env = "CONFIG_TYPE",
        value_enum,
        ignore_case = true,
        default_value = "file"
    )]
    pub config_type: ConfigTypeArg,
    /// The xDS management server, host:port (a gRPC target, as envoyproxy/ratelimit dials it).
    #[arg(
        long,
        env = "CONFIG_GRPC_XDS_SERVER_URL",
        default_value = "localhost:18000"
    )]
    pub xds_server_url: String,
    /// The node id the management server keys its snapshots by.
    #[arg(long, env = "CONFIG_GRPC_XDS_NODE_ID", default_value = "default")]
    pub xds_node_id: String,
    /// node.metadata, key=value pairs separated by commas (each value a string).
    #[arg(long, env = "CONFIG_GRPC_XDS_NODE_METADATA", default_value = "")]
    pub xds_node_metadata: String,
    /// gRPC metadata sent on the stream, name:value pairs separated by commas (envconfig's
    /// map syntax, as envoyproxy/ratelimit reads it).
    #[arg(
        long,
        env = "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        default_value = "",
        hide_env_values = true
    )]
    pub xds_headers: String,
    /// Between attempts to connect while the management server cannot be reached (±50 %).
    #[arg(
        long,
        env = "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        default_value = "3s"
    )]
    pub xds_connect_retry_interval: String,
    /// TLS to the management server.
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_USE_TLS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub xds_tls: bool,
    /// A client certificate (PEM) for mutual TLS with the management server; needs
    /// --xds-tls-key.
    #[arg(long, env = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", value_name = "FILE")]
    pub xds_tls_cert: Option<String>,
    /// The private key of --xds-tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", value_name = "FILE")]
    pub xds_tls_key: Option<String>,
    /// The CA (PEM) the management server's certificate must chain to [default: the
    /// system's roots].
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", value_name = "FILE")]
    pub xds_tls_ca: Option<String>,
    /// The name the management server's certificate is verified against [default: the host
    /// of --xds-server-url].
    #[arg(long, env = "CONFIG_GRPC_XDS_SERVER_TLS_SAN")]
    pub xds_tls_server_name: Option<String>,
    /// The first pause before opening a stream again after one ended.
    #[arg(
        long,
        env = "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        default_value = "10s"
    )]
    pub xds_backoff_initial: String,
    /// The longest of those pauses (and of the pause before NACKing a snapshot sent again).
    #[arg(long, env = "XDS_CLIENT_BACKOFF_MAX_INTERVAL", default_value = "60s")]
    pub xds_backoff_max: String,
    /// What each pause is multiplied by (envoyproxy/ratelimit passes its
    /// XDS_CLIENT_BACKOFF_RANDOM_FACTOR to jpillora/backoff as the factor: at 1 or less every
    /// pause is the initial interval).
    #[arg(long, env = "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", default_value = "0.5")]
    pub xds_backoff_factor: String,
    /// Draw each pause at random between the initial interval and the grown one.
    #[arg(long, env = "XDS_CLIENT_BACKOFF_JITTER", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub xds_backoff_jitter: bool,
    /// The largest xDS response accepted, in bytes [default: gRPC's 4 MiB].
    #[arg(long, env = "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", default_value = "")]
    pub xds_max_message_bytes: String,
}

#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A YAML file or a directory of them (one domain per file). Without it, the
    /// envoyproxy/ratelimit layout RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY is used.
    #[arg(long, env = "FLOODGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Algorithm of rules that name none and whose file has no `default_algorithm`.
    #[arg(
        long,
        env = "FLOODGATE_DEFAULT_ALGORITHM",
        value_enum,
        default_value = "fixed-window"
    )]
    pub default_algorithm: AlgorithmArg,
    /// Let several files share one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub merge_domain_config: bool,
    /// MONTH windows of fixed and sliding windows are UTC calendar months, reset at 00:00 UTC
    /// on the 1st, instead of 30 days (envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT).
    #[arg(long, env = "USE_CALENDAR_MONTH_RATE_LIMIT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub calendar_months: bool,
    #[command(flatten)]
    pub limits: ConfigLimitArgs,
}

impl ConfigArgs {
    /// The loader's settings from these flags.
    pub fn load_options(&self) -> LoadOptions {
        self.limits.load_options(
            self.default_algorithm,
            self.merge_domain_config,
            self.calendar_months,
        )
    }
}

/// How much configuration is read and loaded: beyond a cap it is refused, at start, at every
/// reload (the rules in force stay) and by `validate`. The defaults fit the 128 MiB memory
/// limit of the deployment in `deploy/` (see `DEFAULT_MAX_CONFIG_BYTES`, `DEFAULT_MAX_RULES`).
#[derive(Debug, Args)]
pub struct ConfigLimitArgs {
    /// Most bytes of configuration, all files together (a number, or with KiB, MiB or GiB);
    /// larger files are refused before they are read. A reload takes about 20 MiB of memory
    /// per MiB of YAML at its peak: raise the memory limit with it.
    #[arg(long, env = "FLOODGATE_MAX_CONFIG_BYTES", default_value = "3MiB", value_parser = parse_bytes)]
    pub max_config_bytes: u64,
    /// Most rules (descriptors with rate_limit or rate_limits) in all files together; each
    /// takes about 800 bytes, twice during a reload.
    #[arg(long, env = "FLOODGATE_MAX_RULES", default_value_t = DEFAULT_MAX_RULES)]
    pub max_rules: usize,
}

impl ConfigLimitArgs {
    /// The loader's settings: these caps with `--default-algorithm`, `--merge-domain-config`
    /// and `--calendar-months`.
    pub fn load_options(
        &self,
        default_algorithm: AlgorithmArg,
        merge_domains: bool,
        calendar_months: bool,
    ) -> LoadOptions {
        LoadOptions {
            default_algorithm: default_algorithm.into(),
            merge_domains,
            max_rules: self.max_rules,
            calendar_months,
            ..LoadOptions::default()
        }
    }
}

/// A size in bytes: digits, optionally followed by KiB, MiB or GiB.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let (digits, unit) = match trimmed.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => trimmed.split_at(at),
        None => (trimmed, ""),
    };
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown unit '{other}': write bytes as a number, or with KiB, MiB or GiB \
                 (2MiB)"
            ))
        }
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size: write a number of bytes, or 2MiB"))?;
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("'{text}' is too large"))
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub limitador: crate::cmd::limitador_args::LimitadorArgs,
    #[command(flatten)]
    pub xds: XdsArgs,
    /// gRPC listen address [default: 0.0.0.0:8081, or GRPC_HOST:GRPC_PORT].
    #[arg(long, env = "FLOODGATE_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// Serve gRPC server reflection (v1 and v1alpha, what `grpcurl list` reads) on the gRPC
    /// listener; `--grpc-reflection=false` leaves it out, so the port describes nothing.
    #[arg(long, env = "FLOODGATE_GRPC_REFLECTION", default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub grpc_reflection: bool,
    /// HTTP listen address [default: 0.0.0.0:8080, or HOST:PORT].
    #[arg(long, env = "FLOODGATE_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// Metrics and debug listen address [default: 0.0.0.0:6070, or DEBUG_HOST:DEBUG_PORT].
    #[arg(long, env = "FLOODGATE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Serve envoyproxy/ratelimit's stats under the names of its default statsd → Prometheus
    /// mapping (`ratelimit_service_rate_limit_total_hits{domain,key1,key2}` and the others) on
    /// a listener of their own (envoyproxy/ratelimit's USE_PROMETHEUS).
    #[arg(long, env = "USE_PROMETHEUS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub use_prometheus: bool,
    /// Where --use-prometheus listens, as Go's net.Listen takes it (envoyproxy/ratelimit's
    /// PROMETHEUS_ADDR).
    #[arg(long, env = "PROMETHEUS_ADDR", default_value = ":9090", value_parser = parse_go_listen_address)]
    pub prometheus_addr: SocketAddr,
    /// The path --use-prometheus serves (envoyproxy/ratelimit's PROMETHEUS_PATH).
    #[arg(long, env = "PROMETHEUS_PATH", default_value = "/metrics", value_parser = parse_http_path)]
    pub prometheus_path: String,
    /// A statsd_exporter mapping file giving the names and labels --use-prometheus serves
    /// the reference's stats under (envoyproxy/ratelimit's PROMETHEUS_MAPPER_YAML) [default:
    /// the reference's default mapping].
    #[arg(long, env = "PROMETHEUS_MAPPER_YAML")]
    pub prometheus_mapper_yaml: Option<std::path::PathBuf>,
    /// --use-prometheus's response_time histogram observes milliseconds, its name unchanged,
    /// under the default mapping (envoyproxy/ratelimit's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
    #[arg(long, env = "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub prometheus_response_time_as_milliseconds: bool,
    /// Send envoyproxy/ratelimit's stats to statsd under its names
    /// (`ratelimit.service.rate_limit.<key>.total_hits` and the others) every
    /// --stats-flush-interval (envoyproxy/ratelimit's USE_STATSD) [default: on when started as
    /// `ratelimit`, as in the reference; off for `floodgate serve`].
    #[arg(long, env = "USE_STATSD", action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub use_statsd: Option<bool>,
    /// Send the stats as DogStatsD, EXTRA_TAGS as `|#key:value` tags (envoyproxy/ratelimit's
    /// USE_DOG_STATSD); turns the statsd sink on.
    #[arg(long, env = "USE_DOG_STATSD", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub use_dog_statsd: bool,
    /// DogStatsD mogrifiers, comma-separated names, each defined by
    /// DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS (envoyproxy/ratelimit's
    /// USE_DOG_STATSD_MOGRIFIERS).
    #[arg(long, env = "USE_DOG_STATSD_MOGRIFIERS", default_value = "")]
    pub use_dog_statsd_mogrifiers: String,
    /// The statsd host (envoyproxy/ratelimit's STATSD_HOST).
    #[arg(long, env = "STATSD_HOST", default_value = "localhost")]
    pub statsd_host: String,
    /// The statsd port (envoyproxy/ratelimit's STATSD_PORT).
    #[arg(long, env = "STATSD_PORT", default_value_t = 8125)]
    pub statsd_port: u16,
    /// tcp or udp (lyft/gostats' STATSD_PROTOCOL, which the reference's sink reads).
    #[arg(long, env = "STATSD_PROTOCOL", default_value = "tcp", value_parser = parse_statsd_protocol)]
    pub statsd_protocol: crate::telemetry::statsd::options::Protocol,
    /// Tags on every stat, `key:value,key:value` (envoyproxy/ratelimit's EXTRA_TAGS): in the name
    /// (`.__key=value`) for statsd, as `|#key:value` for DogStatsD.
    #[arg(long, env = "EXTRA_TAGS", default_value = "")]
    pub extra_tags: String,
    /// How often the stats are sent, as a Go duration (envoyproxy/ratelimit's
    /// STATS_FLUSH_INTERVAL).
    #[arg(long, env = "STATS_FLUSH_INTERVAL", default_value = "10s")]
    pub stats_flush_interval: String,
    /// Serve the debug pages (`/rlconfig`, which lists every rule and its values) on this
    /// address instead of the metrics port, so `/metrics` can be exposed to scrapers without
    /// them [default: on the metrics port, as envoyproxy/ratelimit has them].
    #[arg(long, env = "FLOODGATE_DEBUG_PAGES_ADDR")]
    pub debug_pages_addr: Option<SocketAddr>,
    /// Where counters live [default: envoyproxy/ratelimit's BACKEND_TYPE, else redis when
    /// REDIS_URL is set, else memory (redis when started as `ratelimit`)].
    #[arg(long, env = "FLOODGATE_STORE", value_enum)]
    pub store: Option<StoreKind>,
    /// Redis for --store redis: redis://[[user]:password@]host[:port][/db], rediss://… (TLS),
    /// unix:///path?db=N, or envoyproxy/ratelimit's host:port / socket path.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/0",
        hide_env_values = true
    )]
    pub redis_url: String,
    /// How Redis is deployed (envoyproxy/ratelimit's REDIS_TYPE). With `sentinel`, --redis-url
    /// is MASTER_NAME,HOST:PORT[,HOST:PORT…] (the sentinels), as for envoyproxy/ratelimit;
    /// with `cluster`, HOST:PORT[,HOST:PORT…] (seed nodes; each may be a redis:// URL).
    #[arg(
        long,
        env = "REDIS_TYPE",
        value_enum,
        ignore_case = true,
        default_value = "single"
    )]
    pub redis_type: RedisType,
    /// Password, or user:password, when the URL carries none (envoyproxy/ratelimit's REDIS_AUTH).
    #[arg(long, env = "REDIS_AUTH", hide_env_values = true)]
    pub redis_auth: Option<String>,
    /// Prefix of every Redis key floodgate writes [default: envoyproxy/ratelimit's
    /// CACHE_KEY_PREFIX when set, else `floodgate:`].
    #[arg(long, env = "FLOODGATE_REDIS_PREFIX")]
    pub redis_prefix: Option<String>,
    /// Whose counters fixed windows keep in Redis: `reference` (envoyproxy/ratelimit's keys,
    /// CACHE_KEY_PREFIX + domain_key_value…_window, counted with its INCRBY and EXPIRE, so its
    /// pods and floodgate's share one count; needs every-descriptor or all-or-refused
    /// charging) or `floodgate` (floodgate's own keys, which cannot collide) [default:
    /// reference when started as `ratelimit` with either, else floodgate]. docs/redis.md.
    #[arg(long, env = "FLOODGATE_REDIS_COUNTERS", value_enum)]
    pub redis_counters: Option<RedisCountersArg>,
    /// What a key's Redis Cluster hash tag holds: `domain` (a request is one script call, all or
    /// nothing; a domain lives on one shard) or `descriptor` (a domain spreads over the shards;
    /// one call per slot group, all or nothing within each; README: Redis Cluster).
    #[arg(
        long,
        env = "FLOODGATE_REDIS_HASH_TAG",
        value_enum,
        default_value = "domain"
    )]
    pub redis_hash_tag: HashTagArg,
    /// Deadline of one Redis decision, in milliseconds [default: envoyproxy/ratelimit's
    /// REDIS_TIMEOUT when set (a Go duration such as `10s`), else 25].
    #[arg(long, env = "FLOODGATE_REDIS_TIMEOUT_MS")]
    pub redis_timeout_ms: Option<u64>,
    /// Deadline of connecting to Redis, in milliseconds.
    #[arg(
        long,
        env = "FLOODGATE_REDIS_CONNECT_TIMEOUT_MS",
        default_value_t = 2000
    )]
    pub redis_connect_timeout_ms: u64,
    /// What a request gets when the store fails: error (gRPC UNAVAILABLE, HTTP 503: Envoy's
    /// failure_mode_deny decides, as with envoyproxy/ratelimit), fail_open (OK), fail_closed
    /// (OVER_LIMIT, header x-floodgate-unavailable) or local (counters in this process until
    /// Redis is back). A domain's `failure_policy:` overrides it.
    #[arg(
        long,
        env = "FLOODGATE_FAILURE_POLICY",
        default_value = "error",
        value_parser = parse_failure_policy
    )]
    pub redis_failure_policy: FailurePolicy,
    /// Consecutive failed Redis calls that open the circuit breaker (0: never): while open,
    /// requests fail at once without calling Redis, and one call every 500 ms probes it.
    #[arg(long, env = "FLOODGATE_REDIS_BREAKER_FAILURES", default_value_t = 5)]
    pub redis_breaker_failures: u32,
    /// Most counters the memory store keeps. Beyond it the least used (then nearest to expiry)
    /// are forgotten, never an exhausted one: when only those are left, a request that needs a
    /// new counter is answered by the failure policy.
    #[arg(long, env = "FLOODGATE_MAX_KEYS", default_value_t = 1_000_000)]
    pub max_keys: usize,
    /// Answer OK to everything while still counting and reporting (SHADOW_MODE).
    #[arg(long, env = "SHADOW_MODE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub shadow_mode: bool,
    /// Treat every limited descriptor as a quota (QUOTA_MODE).
    #[arg(long, env = "QUOTA_MODE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub quota_mode: bool,
    /// Which counters a request charges: all-or-nothing (a rejected request charges none),
    /// every-descriptor (each descriptor by its own verdict, refused hits counted by the
    /// windows, as envoyproxy/ratelimit does) or all-or-refused (a rejected request charges
    /// only its refused hits) [default: by --semantics: all-or-nothing for floodgate,
    /// every-descriptor started as `ratelimit`; STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false
    /// is every-descriptor, =true all-or-refused].
    #[arg(long, env = "FLOODGATE_CHARGE", value_enum)]
    pub charge: Option<ChargeArg>,
    /// Rate-limit headers for the proxy to return, each mode with Retry-After [default: none;
    /// LIMIT_RESPONSE_HEADERS_ENABLED=true gives ratelimit's three headers, with Retry-After
    /// for floodgate, as envoyproxy/ratelimit writes them started as `ratelimit`].
    #[arg(long, env = "FLOODGATE_RESPONSE_HEADERS", value_enum)]
    pub response_headers: Option<HeaderModeArg>,
    #[command(flatten)]
    pub semantics: crate::cmd::semantics_args::SemanticsArgs,
    /// Return dynamic metadata on every answer, for Envoy to log: the domain, the descriptors
    /// and the `metadata:` of the rules whose descriptors passed [default: off, or
    /// RESPONSE_DYNAMIC_METADATA].
    #[arg(long, env = "FLOODGATE_RESPONSE_DYNAMIC_METADATA", action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub response_dynamic_metadata: Option<bool>,
    /// Most descriptors one request may carry.
    #[arg(long, env = "FLOODGATE_MAX_DESCRIPTORS", default_value_t = 64)]
    pub max_descriptors: usize,
    /// Most entries one descriptor may carry.
    #[arg(long, env = "FLOODGATE_MAX_ENTRIES", default_value_t = 32)]
    pub max_entries: usize,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    /// Status of the HTTP check endpoint (/check) for a request over its limits: 403 or 401,
    /// the only ones nginx's auth_request passes on (it turns 429 into 500).
    #[arg(
        long,
        env = "FLOODGATE_HTTP_DENY_STATUS",
        value_enum,
        default_value = "403"
    )]
    pub http_deny_status: DenyStatusArg,
    /// After SIGTERM, keep serving this many seconds while health says NOT_SERVING, so load
    /// balancers (Kubernetes endpoints, Envoy health checks) stop sending first; then stop
    /// accepting and let calls in flight finish.
    #[arg(long, env = "FLOODGATE_DRAIN_SECONDS", default_value_t = 0)]
    pub drain_seconds: u64,
    /// Threads that serve calls [default: TOKIO_WORKER_THREADS if set, else 1 with --store
    /// redis and one per CPU with the memory store]. With 1 a single-threaded scheduler runs
    /// everything, which batches writes and Redis calls and costs the least CPU per decision
    /// (one core at most). See docs/benchmarks-redis.md.
    #[arg(long, env = "FLOODGATE_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub worker_threads: Option<u16>,
    /// Most ShouldRateLimit calls (gRPC) arrived and not yet answered; beyond it a call gets
    /// --overload-answer at once instead of waiting in a queue. 0 refuses every call (a drill).
    #[arg(long, env = "FLOODGATE_MAX_IN_FLIGHT", default_value_t = crate::server::admission::DEFAULT_MAX_IN_FLIGHT)]
    pub max_in_flight: usize,
    /// Most answers held at once until their request's turn (leaky buckets with `queue:
    /// true`); a request that would wait beyond it is refused at once. Held gRPC calls count
    /// in --max-in-flight too.
    #[arg(long, env = "FLOODGATE_MAX_WAITING", default_value_t = crate::engine::waiting::DEFAULT_MAX_WAITING)]
    pub max_waiting: usize,
    /// What a call beyond --max-in-flight gets: unavailable (gRPC UNAVAILABLE: Envoy's
    /// failure_mode_deny decides), ok (admit, without limits) or over_limit (OVER_LIMIT with
    /// Retry-After: 1 and x-floodgate-overloaded: true).
    #[arg(
        long,
        env = "FLOODGATE_OVERLOAD_ANSWER",
        default_value = "unavailable",
        value_parser = parse_overload_answer
    )]
    pub overload_answer: OverloadAnswer,
    /// Shed calls probabilistically past this many in flight, below --max-in-flight: a new
    /// call is decided with probability N / depth, else gets --overload-answer at once, lower
    /// priority classes first (a class of share s past max(1, N × s)). Off without it.
    #[arg(long, env = "FLOODGATE_SHED_ABOVE", value_parser = clap::value_parser!(u32).range(1..))]
    pub shed_above: Option<u32>,
    /// Turn on the admin API (runtime limit overrides) with the bearer token(s) in this file,
    /// one per line; re-read when the file changes. Off without it.
    #[arg(long, env = "FLOODGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Admin API listen address (with --admin-token-file). Loopback by default; any other
    /// address is logged as a warning.
    #[arg(long, env = "FLOODGATE_ADMIN_ADDR", default_value = "127.0.0.1:6071")]
    pub admin_addr: SocketAddr,
    #[command(flatten)]
    pub grpc_tls: GrpcTlsArgs,
    #[command(flatten)]
    pub redis_connection: Box<RedisConnectionArgs>,
    #[command(flatten)]
    pub connections: ConnectionArgs,
    #[command(flatten)]
    pub rlqs: RlqsArgs,
}

/// RLQS (Envoy's rate_limit_quota filter, docs/rlqs.md): defaults and bounds.
#[derive(Debug, Args)]
pub struct RlqsArgs {
    /// What an RLQS bucket that meets no rule is assigned: allow-all, deny-all, or rule:NAME
    /// (the limit of the rule with `name: NAME` in its domain; allow-all where none has it).
    #[arg(long, env = "FLOODGATE_RLQS_UNMATCHED", default_value = "allow-all", value_parser = parse_unmatched_bucket)]
    pub rlqs_unmatched: crate::core::policy::rlqs::UnmatchedBucket,
    /// assignment_time_to_live of every RLQS assignment, in whole seconds: an Envoy that
    /// hears nothing from floodgate for this long falls back to its
    /// expired_assignment_behavior. Give it at least two of Envoy's reporting intervals (Envoy
    /// 1.40 reports every 5 s, whatever its reporting_interval says).
    #[arg(long, env = "FLOODGATE_RLQS_ASSIGNMENT_TTL_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub rlqs_assignment_ttl_seconds: u64,
    /// An RLQS bucket on which an Envoy reports no request for this many seconds is abandoned
    /// on that Envoy (AbandonAction), which forgets it until its next request.
    #[arg(long, env = "FLOODGATE_RLQS_ABANDON_AFTER_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub rlqs_abandon_after_seconds: u64,
    /// Most buckets one RLQS stream (one Envoy) may report; beyond it the stream is closed with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "FLOODGATE_RLQS_MAX_BUCKETS_PER_STREAM", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub rlqs_max_buckets_per_stream: u64,
    /// Most buckets of one domain, all streams together; a stream that would add more is
    /// closed with RESOURCE_EXHAUSTED.
    #[arg(long, env = "FLOODGATE_RLQS_MAX_BUCKETS_PER_DOMAIN", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub rlqs_max_buckets_per_domain: u64,
    /// Most RLQS streams open at once, all connections together.
    #[arg(long, env = "FLOODGATE_RLQS_MAX_STREAMS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rlqs_max_streams: u64,
    /// Most RLQS streams open at once on one connection (an Envoy opens one per RLQS filter
    /// configuration); beyond it a new stream is refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "FLOODGATE_RLQS_MAX_STREAMS_PER_CONNECTION", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rlqs_max_streams_per_connection: u64,
    /// With --store redis or hybrid: how often this floodgate publishes its Envoys' demand on
    /// each RLQS bucket to Redis and reads the other floodgates', so Envoys connected to
    /// different floodgates share each bucket's limit.
    #[arg(long, env = "FLOODGATE_RLQS_EXCHANGE_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub rlqs_exchange_ms: u64,
    /// Seconds after this floodgate hears its first RLQS report during which reports on
    /// buckets an Envoy already held are not answered: each Envoy keeps the assignment it had
    /// (from this floodgate before a restart) until every Envoy has reported and the limit is
    /// divided among them all. At least one report interval (Envoy 1.40: 5 s); 0: answer at once.
    #[arg(long, env = "FLOODGATE_RLQS_STARTUP_GRACE_SECONDS", default_value_t = 6, value_parser = clap::value_parser!(u64).range(0..=3_600))]
    pub rlqs_startup_grace_seconds: u64,
}

impl RlqsArgs {
    pub fn quota_settings(&self) -> crate::engine::rlqs::QuotaSettings {
        use std::time::Duration;
        let count = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
        crate::engine::rlqs::QuotaSettings {
            unmatched: self.rlqs_unmatched.clone(),
            assignment_ttl: Duration::from_secs(self.rlqs_assignment_ttl_seconds),
            abandon_after: Duration::from_secs(self.rlqs_abandon_after_seconds),
            max_buckets_per_stream: count(self.rlqs_max_buckets_per_stream),
            max_buckets_per_domain: count(self.rlqs_max_buckets_per_domain),
            max_streams: count(self.rlqs_max_streams),
            max_streams_per_connection: count(self.rlqs_max_streams_per_connection),
            exchange_interval: Duration::from_millis(self.rlqs_exchange_ms),
            startup_grace: Duration::from_secs(self.rlqs_startup_grace_seconds),
            ..crate::engine::rlqs::QuotaSettings::default()
        }
    }
}

fn parse_unmatched_bucket(
    text: &str,
) -> Result<crate::core::policy::rlqs::UnmatchedBucket, String> {
    crate::core::policy::rlqs::UnmatchedBucket::parse(text).ok_or_else(|| {
        format!(
            "'{text}' is not a default for unmatched RLQS buckets: write allow-all, deny-all, \
             or rule:NAME (the rule with `name: NAME` in the bucket's domain)"
        )
    })
}

/// How floodgate reaches Redis beyond its URL: TLS, Sentinel credentials, sockets. Named after
/// envoyproxy/ratelimit's variables, which are honoured as they are.
#[derive(Debug, Args)]
pub struct RedisConnectionArgs {
    /// TLS to a Redis given as a bare host:port (envoyproxy/ratelimit's REDIS_TLS); a
    /// rediss:// URL needs no flag. With --redis-type sentinel: TLS to the sentinels and master.
    #[arg(long, env = "REDIS_TLS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub redis_tls: bool,
    // The files are strings, not paths: envoyproxy/ratelimit deployments often set these
    // variables empty, which means "none" (a path may not be empty).
    /// CA certificates (PEM) that signed the Redis server's certificate [default: the system's].
    #[arg(long, env = "REDIS_TLS_CACERT", value_name = "FILE")]
    pub redis_tls_ca: Option<String>,
    /// Client certificate chain (PEM) for a Redis with `tls-auth-clients yes`; needs
    /// --redis-tls-key.
    #[arg(long, env = "REDIS_TLS_CLIENT_CERT", value_name = "FILE")]
    pub redis_tls_cert: Option<String>,
    /// The private key of --redis-tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "REDIS_TLS_CLIENT_KEY", value_name = "FILE")]
    pub redis_tls_key: Option<String>,
    /// Accept a Redis certificate issued for another host name (the chain is still verified).
    #[arg(long, env = "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub redis_tls_skip_hostname_verification: bool,
    /// Password, or user:password, for the sentinels (--redis-type sentinel) when their
    /// addresses carry none (envoyproxy/ratelimit's REDIS_SENTINEL_AUTH).
    #[arg(long, env = "REDIS_SENTINEL_AUTH", hide_env_values = true)]
    pub redis_sentinel_auth: Option<String>,
    /// Sockets to Redis, used in turn (envoyproxy/ratelimit's REDIS_POOL_SIZE). Each carries
    /// any number of concurrent calls; more help only when one socket is the bottleneck.
    #[arg(long, env = "REDIS_POOL_SIZE", default_value_t = 1, value_parser = parse_pool_size)]
    pub redis_pool_size: usize,
    /// Requests one Redis script call may decide: those that arrive while a call is in flight
    /// on their socket (on a cluster: for their hash slot) wait for it and then share the next
    /// call, up to this many, decided in arrival order as lone calls would be; a request that
    /// finds no call in flight goes at once. 1: one call per request. See docs/redis.md.
    #[arg(long, env = "FLOODGATE_REDIS_BATCH_MAX", default_value_t = crate::store::redis::DEFAULT_BATCH_MAX, value_parser = parse_batch_max)]
    pub redis_batch_max: usize,
    /// --store hybrid: milliseconds between two syncs of the local counts with Redis (1 to
    /// 60000). The over-admission a sync interval allows is bounded by --hybrid-local-share.
    #[arg(long, env = "FLOODGATE_HYBRID_SYNC_MS", default_value_t = 100, value_parser = parse_sync_ms)]
    pub hybrid_sync_ms: u64,
    /// --store hybrid: the share of what is left of a limit that all instances together may
    /// admit between two syncs without asking Redis (above 0, at most 1), split evenly among
    /// the instances seen recently. Also the worst-case over-admission, as a share of the
    /// limit. A counter whose share falls below one hit is decided in Redis until its window
    /// ends.
    #[arg(long, env = "FLOODGATE_HYBRID_LOCAL_SHARE", default_value_t = crate::store::hybrid::DEFAULT_LOCAL_SHARE, value_parser = parse_local_share)]
    pub hybrid_local_share: f64,
}

impl RedisConnectionArgs {
    pub fn tls_options(&self) -> crate::store::redis::TlsOptions {
        let file = |value: &Option<String>| {
            value
                .as_deref()
                .filter(|path| !path.is_empty())
                .map(PathBuf::from)
        };
        crate::store::redis::TlsOptions {
            enabled: self.redis_tls,
            ca_file: file(&self.redis_tls_ca),
            cert_file: file(&self.redis_tls_cert),
            key_file: file(&self.redis_tls_key),
            skip_hostname_verification: self.redis_tls_skip_hostname_verification,
        }
    }
}

fn parse_statsd_protocol(
    text: &str,
) -> Result<crate::telemetry::statsd::options::Protocol, String> {
    crate::telemetry::statsd::options::Protocol::parse(text).map_err(|error| error.to_string())
}

fn parse_pool_size(text: &str) -> Result<usize, String> {
    parse_count(text, crate::store::redis::MAX_POOL_SIZE, "sockets")
}

fn parse_sync_ms(text: &str) -> Result<u64, String> {
    let max = crate::store::hybrid::MAX_SYNC_INTERVAL.as_millis();
    match text.trim().parse::<u64>() {
        Ok(ms) if ms >= 1 && u128::from(ms) <= max => Ok(ms),
        _ => Err(format!("expected milliseconds from 1 to {max}")),
    }
}

fn parse_local_share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err("expected a share above 0 and at most 1 (0.01 is 1 %)".to_owned()),
    }
}

fn parse_batch_max(text: &str) -> Result<usize, String> {
    parse_count(text, crate::store::redis::MAX_BATCH, "requests")
}

/// A count of `what` from 1 to `max`.
fn parse_count(text: &str, max: usize, what: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(count) if (1..=max).contains(&count) => Ok(count),
        _ => Err(format!("expected a number of {what} from 1 to {max}")),
    }
}

/// TLS on the gRPC listener. envoyproxy/ratelimit's GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT,
/// GRPC_SERVER_TLS_KEY and GRPC_CLIENT_TLS_CACERT are honoured when these flags are not given,
/// its GRPC_CLIENT_TLS_SAN when --grpc-tls-client-san is not.
#[derive(Debug, Args)]
pub struct GrpcTlsArgs {
    /// Serve gRPC over TLS with this certificate chain (PEM). Reloaded when the file changes:
    /// new connections get the new certificate.
    #[arg(long, env = "FLOODGATE_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub grpc_tls_cert: Option<PathBuf>,
    /// The private key of --grpc-tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "FLOODGATE_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub grpc_tls_key: Option<PathBuf>,
    /// Mutual TLS: require a client certificate signed by a CA in this file (PEM).
    #[arg(long, env = "FLOODGATE_GRPC_TLS_CLIENT_CA", requires = "grpc_tls_cert")]
    pub grpc_tls_client_ca: Option<PathBuf>,
    /// Mutual TLS: client certificates must also carry this name, as a DNS SAN (one whose
    /// leftmost label is `*` covers one label) or, for an IP address, as an IP SAN; URI SANs and
    /// the CN do not count. Needs a client CA: without one, floodgate does not start.
    #[arg(long, env = "FLOODGATE_GRPC_TLS_CLIENT_SAN", value_name = "NAME")]
    pub grpc_tls_client_san: Option<String>,
}

/// How long and how many connections every listener holds (`server::connections`): a client
/// that opens connections and sends nothing, or sends a request slowly, holds a file
/// descriptor and a task until one of these bounds closes it.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// Most connections each listener (gRPC, HTTP, debug, admin) holds open at once; beyond it
    /// a new connection is closed at once and logged. Lowered at start to what the process's
    /// file-descriptor limit (RLIMIT_NOFILE, raised to its hard limit first) leaves room for.
    #[arg(long, env = "FLOODGATE_MAX_CONNECTIONS", default_value_t = crate::server::connections::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Time a client has to send a request's headers once it has started them (HTTP), or to
    /// finish its TLS and HTTP/2 handshake (gRPC), in milliseconds.
    #[arg(long, env = "FLOODGATE_HEADER_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// Time a client has to send an HTTP request's body once its headers are in, in
    /// milliseconds; a body still arriving then gets 408.
    #[arg(long, env = "FLOODGATE_BODY_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_timeout_ms: u64,
    /// A connection with no request for this long is closed (HTTP/2: GOAWAY), in
    /// milliseconds; so is an HTTP/1 connection on which nothing moves for this long while a
    /// request is open (a client that stopped reading its answer).
    #[arg(long, env = "FLOODGATE_IDLE_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Deadline of a unary gRPC call (ShouldRateLimit, health Check) whose caller sends no
    /// grpc-timeout, in milliseconds, from its headers to its answer. Envoy always sends one
    /// (the filter's `timeout`, 20 ms by default). Streams have none: they live on HTTP/2
    /// keepalive pings.
    #[arg(long, env = "FLOODGATE_GRPC_DEFAULT_DEADLINE_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_default_deadline_ms: u64,
    /// Run each gRPC call on a task of its own, which any worker thread may take (true), or on
    /// its connection's task (false), which costs less per call and hands nothing between
    /// threads. Unset: on the connection's task with several worker threads, a task of its own
    /// with one. Set it when a few connections carry more calls than one thread answers (Envoy
    /// opens one per worker).
    #[arg(long, env = "FLOODGATE_GRPC_CALL_TASKS", action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub grpc_call_tasks: Option<bool>,
}

impl ConnectionArgs {
    pub fn limits(&self) -> crate::server::connections::ConnectionLimits {
        use std::time::Duration;
        crate::server::connections::ConnectionLimits {
            max_connections: self.max_connections,
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
        }
    }

    pub fn grpc_default_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.grpc_default_deadline_ms)
    }

    /// Where gRPC calls run, on a runtime of `worker_threads`: on one thread nothing is handed
    /// between threads, so a call's own task costs no more than a place on its connection's.
    pub fn grpc_calls(&self, worker_threads: usize) -> crate::server::connections::CallTasks {
        use crate::server::connections::CallTasks;
        match self.grpc_call_tasks {
            Some(true) => CallTasks::Own,
            Some(false) => CallTasks::OnConnection,
            None if worker_threads > 1 => CallTasks::OnConnection,
            None => CallTasks::Own,
        }
    }
}

/// Metrics and traces (`serve`).
#[derive(Debug, Args)]
pub struct TelemetryArgs {
    /// A hit counts toward floodgate_near_limit_total once its counter is past this share of
    /// its limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO).
    #[arg(long, env = "NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = parse_near_limit_ratio)]
    pub near_limit_ratio: f32,
    /// Export traces over OTLP/gRPC to this collector, e.g. http://jaeger:4317. Tracing is off
    /// (and costs nothing) without it; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT also turns it on.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The share of new traces recorded, 0 to 1 (a caller's own sampling decision is followed).
    #[arg(long, env = "OTEL_TRACES_SAMPLER_ARG", default_value_t = 1.0, value_parser = parse_ratio)]
    pub trace_sample_ratio: f64,
    /// Put descriptor values into spans as they are; by default they are hashed, since they
    /// often identify people (client ids, addresses).
    #[arg(long, env = "FLOODGATE_TRACE_DESCRIPTOR_VALUES", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub trace_descriptor_values: bool,
    /// Count each rule's heavy hitters (a bounded top 20 of descriptor values per rule, by
    /// admitted and refused hits, over 1 and 10 minutes) for the debug port's /status and
    /// /status.json.
    #[arg(long, env = "FLOODGATE_HEAVY_HITTERS", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub heavy_hitters: bool,
}

impl TelemetryArgs {
    /// floodgate's own trace settings (`--traces floodgate`).
    pub fn trace_options(&self) -> crate::telemetry::TraceOptions {
        crate::telemetry::TraceOptions::floodgate(
            self.otlp_endpoint.clone(),
            self.trace_sample_ratio,
        )
    }

    pub fn decision_telemetry(&self) -> crate::telemetry::DecisionTelemetry {
        crate::telemetry::DecisionTelemetry {
            near_limit_ratio: self.near_limit_ratio,
            trace_descriptor_values: self.trace_descriptor_values,
            heavy_hitters: self.heavy_hitters,
        }
    }
}

fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!(
            "{text:?} is not a ratio between 0 and 1 (e.g. 0.8)"
        )),
    }
}

fn parse_near_limit_ratio(text: &str) -> Result<f32, String> {
    // The reference computes the threshold in float32.
    parse_ratio(text).map(|ratio| ratio as f32)
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A YAML file or a directory of them. Without it, with --config-type grpc-xds-sotw
    /// (CONFIG_TYPE=GRPC_XDS_SOTW): the first snapshot the xDS management server sends,
    /// checked and not acknowledged.
    pub path: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "fixed-window")]
    pub default_algorithm: AlgorithmArg,
    /// Let several files share one domain (MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub merge_domain_config: bool,
    /// MONTH windows are UTC calendar months (USE_CALENDAR_MONTH_RATE_LIMIT), as `serve`.
    #[arg(long, env = "USE_CALENDAR_MONTH_RATE_LIMIT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = GoBool)]
    pub calendar_months: bool,
    /// How the reference's string fields read an unquoted number or boolean, as `serve` will:
    /// resolved (floodgate's), or as-written (the `ratelimit` door's and `--semantics
    /// reference`'s, which refuses `09` or `1.5` as the reference does).
    #[arg(
        long,
        env = "FLOODGATE_YAML_STRINGS",
        value_enum,
        default_value = "resolved"
    )]
    pub yaml_strings: YamlStringsArg,
    #[command(flatten)]
    pub limits: ConfigLimitArgs,
    #[command(flatten)]
    pub xds: XdsArgs,
    /// Also check Limitador's limits file (each CEL condition and variable compiled); with it
    /// alone, PATH may be left out.
    #[arg(long, env = "FLOODGATE_LIMITADOR_LIMITS")]
    pub limitador_limits: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The floodgate gRPC address (`https://…` for TLS; see --tls-ca).
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub addr: String,
    #[arg(long, required_unless_present = "health")]
    pub domain: Option<String>,
    /// Hits to charge (0: check only).
    #[arg(long)]
    pub hits: Option<u64>,
    /// Descriptors, each `key=value[,key=value…]` (a bare `key` has an empty value).
    #[arg(required_unless_present = "health")]
    pub descriptors: Vec<String>,
    /// Instead of asking a server, explain which rule each descriptor matches and why (level by
    /// level), from the rules in --config (or RUNTIME_*), read locally.
    #[arg(long, conflicts_with = "health")]
    pub explain: bool,
    /// Instead, call grpc.health.v1 Check at --addr: exit 0 when SERVING, 1 otherwise (for
    /// container health checks).
    #[arg(long)]
    pub health: bool,
    /// The grpc.health.v1 service --health asks about: `ratelimit` is readiness (rules loaded,
    /// store reachable, not draining); `""` is SERVING while the process runs (liveness).
    #[arg(long, default_value = "ratelimit", requires = "health")]
    pub health_service: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// `floodgate counters get|reset` (`cmd::counters`).
#[derive(Debug, Args)]
pub struct CountersArgs {
    #[command(subcommand)]
    pub action: CountersAction,
}

#[derive(Debug, Subcommand)]
pub enum CountersAction {
    /// Show what the store holds for a descriptor's counters, and what a request of one hit
    /// would find (remaining, reset, retry).
    Get(CounterTarget),
    /// Forget a descriptor's counters: its next request finds them fresh (logged in the
    /// server's audit log).
    Reset(CounterTarget),
}

#[derive(Debug, Args)]
pub struct CounterTarget {
    /// The admin API's address (the server's --admin-addr).
    #[arg(long, env = "FLOODGATE_ADMIN_ADDR", default_value = "127.0.0.1:6071")]
    pub admin_addr: SocketAddr,
    /// A file holding the admin bearer token (a line of the server's --admin-token-file).
    #[arg(long, env = "FLOODGATE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: PathBuf,
    #[arg(long)]
    pub domain: String,
    /// The descriptor, `key=value[,key=value…]` (a bare `key` has an empty value).
    pub descriptor: String,
}

/// TLS towards a floodgate whose gRPC listener uses TLS (`--addr https://…`).
#[derive(Debug, Args)]
pub struct ClientTlsArgs {
    /// The CA (PEM) that signed the server's certificate.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for mutual TLS.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry [default: the host of --addr].
    #[arg(long)]
    pub tls_server_name: Option<String>,
}

/// An address from envoyproxy/ratelimit's HOST/PORT style variables, if either is set.
pub fn reference_address(
    host_var: &str,
    port_var: &str,
    default_port: u16,
) -> Result<Option<SocketAddr>, String> {
    listen_address_from(host_var, port_var, default_port, |name| {
        std::env::var(name).ok()
    })
}

/// [`reference_address`] with the environment read through `env`.
fn listen_address_from(
    host_var: &str,
    port_var: &str,
    default_port: u16,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<SocketAddr>, String> {
    let host = env(host_var);
    let port = env(port_var);
    if host.is_none() && port.is_none() {
        return Ok(None);
    }
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| format!("{port_var}={port:?} is not a port number (0-65535)"))?,
        None => default_port,
    };
    let host = host.unwrap_or_default();
    let ip = go_host(&host).ok_or_else(|| format!("{host_var}={host:?} is not an IP address"))?;
    Ok(Some(SocketAddr::new(ip, port)))
}

/// A host as Go's net.Listen takes it: empty is every interface, an IPv6 address may come bare
/// (`::`, Istio's sample) or bracketed, and `localhost` is loopback.
fn go_host(host: &str) -> Option<IpAddr> {
    match host.trim() {
        "" => Some(IpAddr::from([0, 0, 0, 0])),
        "localhost" => Some(IpAddr::from([127, 0, 0, 1])),
        text => text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok(),
    }
}

/// `host:port` as Go's net.Listen takes it (`:9090` is every interface).
fn parse_go_listen_address(text: &str) -> Result<SocketAddr, String> {
    let Some((host, port)) = text.trim().rsplit_once(':') else {
        return Err("expected host:port, as :9090 or 127.0.0.1:9090".to_owned());
    };
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("{port:?} is not a port number (0-65535)"))?;
    let ip = go_host(host).ok_or_else(|| format!("{host:?} is not an IP address"))?;
    Ok(SocketAddr::new(ip, port))
}

/// An HTTP path to serve: it starts with `/`.
fn parse_http_path(text: &str) -> Result<String, String> {
    if text.starts_with('/') {
        Ok(text.to_owned())
    } else {
        Err("expected a path starting with /".to_owned())
    }
}

fn parse_failure_policy(text: &str) -> Result<FailurePolicy, String> {
    text.parse::<FailurePolicy>()
        .map_err(|error| error.to_string())
}

fn parse_overload_answer(text: &str) -> Result<OverloadAnswer, String> {
    text.parse::<OverloadAnswer>()
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(host: Option<&str>, port: Option<&str>) -> Result<Option<SocketAddr>, String> {
        listen_address_from("HOST", "PORT", 8080, |name| match name {
            "HOST" => host.map(str::to_owned),
            "PORT" => port.map(str::to_owned),
            _ => None,
        })
    }

    #[test]
    fn prometheus_addr_is_read_as_go_listens() {
        let parsed = |text: &str| text.parse::<SocketAddr>().ok();
        assert_eq!(
            parse_go_listen_address(":9090").ok(),
            parsed("0.0.0.0:9090")
        );
        assert_eq!(
            parse_go_listen_address("localhost:1").ok(),
            parsed("127.0.0.1:1")
        );
        assert_eq!(parse_go_listen_address("[::1]:2").ok(), parsed("[::1]:2"));
        assert_eq!(parse_go_listen_address(":::3").ok(), parsed("[::]:3"));
        assert!(parse_go_listen_address("9090").is_err());
        assert!(parse_go_listen_address("host:9090").is_err());
        assert!(parse_http_path("metrics").is_err());
    }

    #[test]
    fn the_reference_listen_variables_are_read_as_go_listens() {
        let parsed = |text: &str| text.parse::<SocketAddr>().ok();
        assert_eq!(address(None, None), Ok(None));
        assert_eq!(address(Some("::"), Some("9090")), Ok(parsed("[::]:9090")));
        assert_eq!(address(Some("[::1]"), None), Ok(parsed("[::1]:8080")));
        assert_eq!(
            address(Some("127.0.0.1"), Some("81")),
            Ok(parsed("127.0.0.1:81"))
        );
        assert_eq!(address(Some(""), Some("81")), Ok(parsed("0.0.0.0:81")));
        assert_eq!(
            address(Some("localhost"), None),
            Ok(parsed("127.0.0.1:8080"))
        );
        assert_eq!(address(None, Some("81")), Ok(parsed("0.0.0.0:81")));
        assert!(address(Some("example.org"), None).is_err());
        assert!(address(None, Some("http")).is_err());
    }
}
