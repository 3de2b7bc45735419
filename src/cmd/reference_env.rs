//! Every environment variable envoyproxy/ratelimit reads (its `settings.go`), and what floodgate
//! does with it: honoured (read as the reference does, or mapped onto a floodgate setting), or
//! not supported — then said at start, once per variable that is set, so that none is silently
//! ignored and none stops the process from starting. The migration guide's table is this one
//! (`tests/repository/docs_links.rs` holds them to each other).

use std::time::Duration;

use crate::cmd::setting_values::{env_bool, go_bool, SettingError};
use crate::core::decision::headers::{HeaderMode, PlainHeaderNames};
use crate::core::decision::semantics::LimitHeaders;
use crate::store::redis::StartupRetry;

/// What floodgate does with one of the reference's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Read as the reference reads it (possibly through a floodgate flag of its own).
    Honoured,
    /// Not read; the text says what to use instead.
    NotSupported(&'static str),
    /// A switch floodgate does not have, whose "off" is what floodgate does anyway: said at start
    /// only when it is on (set to anything but empty, `0` or a false boolean).
    NotSupportedWhenOn(&'static str),
}

use Treatment::{Honoured, NotSupported, NotSupportedWhenOn};

const MEMCACHE: &str = "no Memcached store: BACKEND_TYPE=redis or --store memory";
const POOL: &str = "floodgate multiplexes and pipelines on a few connections by itself, and can \
                    gather the decisions that meet into one script call (--redis-batch-max)";

/// The reference's variables, in the order of its `settings.go`.
pub const REFERENCE_VARIABLES: &[(&str, Treatment)] = &[
    ("HOST", Honoured),
    ("PORT", Honoured),
    ("DEBUG_HOST", Honoured),
    ("DEBUG_PORT", Honoured),
    ("GRPC_UDS", NotSupported("gRPC listens on TCP only (--grpc-addr)")),
    ("GRPC_HOST", Honoured),
    ("GRPC_PORT", Honoured),
    ("GRPC_MAX_CONNECTION_AGE", NotSupported("connections live until idle (--idle-timeout-ms); to spread calls over instances, point Envoy at a headless Service")),
    ("GRPC_MAX_CONNECTION_AGE_GRACE", NotSupported("see GRPC_MAX_CONNECTION_AGE; shutdown drains with --drain-seconds")),
    ("GRPC_SERVER_USE_TLS", Honoured),
    ("GRPC_SERVER_TLS_CERT", Honoured),
    ("GRPC_SERVER_TLS_KEY", Honoured),
    ("GRPC_CLIENT_TLS_CACERT", Honoured),
    ("GRPC_CLIENT_TLS_SAN", Honoured),
    ("LOG_LEVEL", Honoured),
    ("LOG_FORMAT", Honoured),
    ("CONFIG_TYPE", Honoured),
    ("FORCE_START_WITHOUT_INITIAL_CONFIG", Honoured),
    ("CONFIG_GRPC_XDS_NODE_ID", Honoured),
    ("CONFIG_GRPC_XDS_NODE_METADATA", Honoured),
    ("CONFIG_GRPC_XDS_SERVER_URL", Honoured),
    ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Honoured),
    ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Honoured),
    ("CONFIG_GRPC_XDS_SERVER_USE_TLS", Honoured),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Honoured),
    ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Honoured),
    ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Honoured),
    ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", Honoured),
    ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Honoured),
    ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", Honoured),
    ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Honoured),
    ("XDS_CLIENT_BACKOFF_JITTER", Honoured),
    ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Honoured),
    ("USE_DOG_STATSD", Honoured),
    ("USE_DOG_STATSD_MOGRIFIERS", Honoured),
    ("USE_STATSD", Honoured),
    ("STATSD_HOST", Honoured),
    ("STATSD_PORT", Honoured),
    ("EXTRA_TAGS", Honoured),
    ("STATS_FLUSH_INTERVAL", Honoured),
    ("DISABLE_STATS", NotSupported("metrics cost nothing until scraped; do not scrape /metrics")),
    ("USE_PROMETHEUS", Honoured),
    ("PROMETHEUS_ADDR", Honoured),
    ("PROMETHEUS_PATH", Honoured),
    ("PROMETHEUS_MAPPER_YAML", Honoured),
    ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Honoured),
    ("RUNTIME_ROOT", Honoured),
    ("RUNTIME_SUBDIRECTORY", Honoured),
    ("RUNTIME_APPDIRECTORY", Honoured),
    ("RUNTIME_IGNOREDOTFILES", Honoured),
    ("RUNTIME_WATCH_ROOT", Honoured),
    ("EXPIRATION_JITTER_MAX_SECONDS", Honoured),
    ("LOCAL_CACHE_SIZE_IN_BYTES", NotSupportedWhenOn("no cache of its own: --store hybrid decides refusals (and most admissions) locally; --store redis makes one call per decision")),
    ("NEAR_LIMIT_RATIO", Honoured),
    ("CACHE_KEY_PREFIX", Honoured),
    ("BACKEND_TYPE", Honoured),
    ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Honoured),
    ("LIMIT_RESPONSE_HEADERS_ENABLED", Honoured),
    ("LIMIT_LIMIT_HEADER", Honoured),
    ("LIMIT_REMAINING_HEADER", Honoured),
    ("LIMIT_RESET_HEADER", Honoured),
    ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Honoured),
    ("REDIS_SOCKET_TYPE", Honoured),
    ("REDIS_TYPE", Honoured),
    ("REDIS_URL", Honoured),
    ("REDIS_POOL_SIZE", Honoured),
    ("REDIS_AUTH", Honoured),
    ("REDIS_TLS", Honoured),
    ("REDIS_TLS_CLIENT_CERT", Honoured),
    ("REDIS_TLS_CLIENT_KEY", Honoured),
    ("REDIS_TLS_CACERT", Honoured),
    ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Honoured),
    ("REDIS_PIPELINE_WINDOW", NotSupported(POOL)),
    ("REDIS_PIPELINE_LIMIT", NotSupported(POOL)),
    ("REDIS_CLUSTER_PIPELINE_PARALLELISM", NotSupported(POOL)),
    ("REDIS_PERSECOND", Honoured),
    ("REDIS_PERSECOND_SOCKET_TYPE", Honoured),
    ("REDIS_PERSECOND_TYPE", Honoured),
    ("REDIS_PERSECOND_URL", Honoured),
    ("REDIS_PERSECOND_POOL_SIZE", Honoured),
    ("REDIS_PERSECOND_AUTH", Honoured),
    ("REDIS_PERSECOND_TLS", Honoured),
    ("REDIS_SENTINEL_AUTH", Honoured),
    ("REDIS_PERSECOND_SENTINEL_AUTH", Honoured),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", NotSupported(POOL)),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", NotSupported(POOL)),
    ("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", NotSupported(POOL)),
    ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Honoured),
    ("REDIS_TIMEOUT", Honoured),
    ("REDIS_PERSECOND_TIMEOUT", Honoured),
    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", NotSupported(POOL)),
    ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", NotSupported(POOL)),
    ("REDIS_STARTUP_INITIAL_INTERVAL", Honoured),
    ("REDIS_STARTUP_MAX_INTERVAL", Honoured),
    ("REDIS_STARTUP_MAX_ELAPSED_TIME", Honoured),
    ("MEMCACHE_HOST_PORT", NotSupported(MEMCACHE)),
    ("MEMCACHE_MAX_IDLE_CONNS", NotSupported(MEMCACHE)),
    ("MEMCACHE_SRV", NotSupported(MEMCACHE)),
    ("MEMCACHE_SRV_REFRESH", NotSupported(MEMCACHE)),
    ("MEMCACHE_TLS", NotSupported(MEMCACHE)),
    ("MEMCACHE_TLS_CLIENT_CERT", NotSupported(MEMCACHE)),
    ("MEMCACHE_TLS_CLIENT_KEY", NotSupported(MEMCACHE)),
    ("MEMCACHE_TLS_CACERT", NotSupported(MEMCACHE)),
    ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", NotSupported(MEMCACHE)),
    ("SHADOW_MODE", Honoured),
    ("QUOTA_MODE", Honoured),
    ("RESPONSE_DYNAMIC_METADATA", Honoured),
    ("MERGE_DOMAIN_CONFIG", Honoured),
    // Read started as `ratelimit` (or with `--traces reference`): `cmd::trace_settings`.
    ("TRACING_ENABLED", Honoured),
    ("TRACING_SERVICE_NAME", Honoured),
    ("TRACING_SERVICE_NAMESPACE", Honoured),
    ("TRACING_SERVICE_INSTANCE_ID", Honoured),
    ("TRACING_EXPORTER_PROTOCOL", Honoured),
    ("TRACING_SAMPLING_RATE", Honoured),
    ("USE_CALENDAR_MONTH_RATE_LIMIT", Honoured),
];

/// Variables Envoy Gateway sets on the reference's container (its `ratelimit/resource.go`)
/// that the reference itself does not read: ignored by floodgate too, and said at start so the
/// setting is not taken for one that works.
pub const NOT_READ_BY_THE_REFERENCE: &[(&str, &str)] = &[(
    "GRPC_SERVER_TLS_CA_CERT",
    "envoyproxy/ratelimit reads no such variable (Envoy Gateway sets it); client certificates \
     are required only with GRPC_CLIENT_TLS_CACERT (or --grpc-tls-client-ca)",
)];

/// The response headers: `--response-headers` (`flag`), else the reference's
/// `LIMIT_RESPONSE_HEADERS_ENABLED` with the names its `LIMIT_*_HEADER` variables give, written
/// as `limit_headers` says, else none.
pub fn header_mode(
    flag: Option<HeaderMode>,
    limit_headers: LimitHeaders,
    env: impl Fn(&str) -> Option<String>,
) -> Result<HeaderMode, String> {
    if let Some(mode) = flag {
        return Ok(mode);
    }
    let enabled =
        env_bool("LIMIT_RESPONSE_HEADERS_ENABLED", &env).map_err(|error| error.to_string())?;
    if enabled != Some(true) {
        return Ok(HeaderMode::None);
    }
    let reference = PlainHeaderNames::REFERENCE;
    Ok(limit_headers.mode(PlainHeaderNames {
        limit: header_name(&env, "LIMIT_LIMIT_HEADER", reference.limit)?,
        remaining: header_name(&env, "LIMIT_REMAINING_HEADER", reference.remaining)?,
        reset: header_name(&env, "LIMIT_RESET_HEADER", reference.reset)?,
    }))
}

/// Whether answers carry dynamic metadata: `--response-dynamic-metadata` (`flag`), else the
/// reference's `RESPONSE_DYNAMIC_METADATA`, read as Go's `strconv.ParseBool` reads it.
pub fn response_dynamic_metadata(
    flag: Option<bool>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<bool, SettingError> {
    match flag {
        Some(on) => Ok(on),
        None => Ok(env_bool("RESPONSE_DYNAMIC_METADATA", env)?.unwrap_or(false)),
    }
}

/// The header name `variable` gives, or `default`. A name given is kept for the life of the
/// process (leaked once at start: the headers of every answer use it).
fn header_name(
    env: &impl Fn(&str) -> Option<String>,
    variable: &str,
    default: &'static str,
) -> Result<&'static str, String> {
    let Some(name) = env(variable).map(|name| name.trim().to_owned()) else {
        return Ok(default);
    };
    if name.is_empty() {
        return Ok(default);
    }
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !name.chars().all(token) {
        return Err(format!(
            "{variable}={name:?} is not an HTTP header name: use letters, digits and - \
             (e.g. RateLimit-Limit)"
        ));
    }
    Ok(Box::leak(name.into_boxed_str()))
}

/// floodgate's own prefix of Redis keys when neither `--redis-prefix` nor `CACHE_KEY_PREFIX` says.
const DEFAULT_REDIS_PREFIX: &str = "floodgate:";

/// The prefix of floodgate's own Redis keys: `--redis-prefix` (`flag`), else the reference's
/// `CACHE_KEY_PREFIX` (deployments that share one Redis keep their keys apart as before), else
/// `floodgate:`. The reference's keys (`cmd::reference_counters`) take `CACHE_KEY_PREFIX` as it
/// is, whatever `--redis-prefix` says.
pub fn redis_prefix(flag: Option<&str>, env: impl Fn(&str) -> Option<String>) -> String {
    match flag {
        Some(prefix) => prefix.to_owned(),
        None => env("CACHE_KEY_PREFIX")
            .filter(|prefix| !prefix.is_empty())
            .unwrap_or_else(|| DEFAULT_REDIS_PREFIX.to_owned()),
    }
}

/// floodgate's deadline of one Redis decision when neither `--redis-timeout-ms` nor
/// `REDIS_TIMEOUT` says: a decision waits milliseconds, not the reference's 10 s.
const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(25);

/// The deadline of one Redis decision: `--redis-timeout-ms` (`flag_ms`), else the reference's
/// `REDIS_TIMEOUT` (a Go duration), else 25 ms.
pub fn redis_timeout(
    flag_ms: Option<u64>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Duration, String> {
    if let Some(ms) = flag_ms {
        return Ok(Duration::from_millis(ms));
    }
    match env("REDIS_TIMEOUT").filter(|text| !text.trim().is_empty()) {
        Some(text) => go_duration(text.trim()).ok_or_else(|| {
            format!(
                "REDIS_TIMEOUT={text:?} is not a duration: write it as envoyproxy/ratelimit \
                 does (10s, 500ms, 1m30s), or use --redis-timeout-ms"
            )
        }),
        None => Ok(DEFAULT_REDIS_TIMEOUT),
    }
}

/// How the first Redis connection is retried: the reference's `REDIS_STARTUP_INITIAL_INTERVAL`
/// (1 s), `REDIS_STARTUP_MAX_INTERVAL` (30 s) and `REDIS_STARTUP_MAX_ELAPSED_TIME` (0: for
/// ever), each a Go duration.
pub fn redis_startup_retry(env: impl Fn(&str) -> Option<String>) -> Result<StartupRetry, String> {
    let defaults = StartupRetry::default();
    let duration = |name: &str, default: Duration| -> Result<Duration, String> {
        match env(name).filter(|text| !text.trim().is_empty()) {
            None => Ok(default),
            Some(text) => go_duration(text.trim()).ok_or_else(|| {
                format!(
                    "{name}={text:?} is not a duration: write it as envoyproxy/ratelimit does \
                     (1s, 500ms, 2m)"
                )
            }),
        }
    };
    let initial = duration("REDIS_STARTUP_INITIAL_INTERVAL", defaults.initial)?;
    if initial.is_zero() {
        return Err(
            "REDIS_STARTUP_INITIAL_INTERVAL=0 would retry Redis without a pause: give a \
             positive duration (the default is 1s)"
                .to_owned(),
        );
    }
    let give_up = duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO)?;
    Ok(StartupRetry {
        initial,
        max: duration("REDIS_STARTUP_MAX_INTERVAL", defaults.max)?,
        give_up_after: (!give_up.is_zero()).then_some(give_up),
    })
}

/// Go's `time.ParseDuration` for non-negative durations: numbers (with an optional fraction),
/// each followed by one of `ns`, `us`, `µs`, `ms`, `s`, `m`, `h` (`1m30s`, `1.5s`, `300ms`).
pub fn go_duration(text: &str) -> Option<Duration> {
    const UNITS: [(&str, f64); 7] = [
        ("ns", 1e-9),
        ("us", 1e-6),
        ("µs", 1e-6),
        ("ms", 1e-3),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ];
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut seconds = 0.0_f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|end| *end > 0)?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        // The longest unit that matches (`ms` before `m`).
        let (unit, scale) = UNITS
            .iter()
            .filter(|(unit, _)| rest.starts_with(unit))
            .max_by_key(|(unit, _)| unit.len())?;
        seconds += number * scale;
        rest = &rest[unit.len()..];
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// Whether a switch's value turns it on: anything but empty, `0` or a false boolean (Go's
/// `strconv.ParseBool` spellings, which the reference uses).
fn switched_on(value: &str) -> bool {
    let value = value.trim();
    !value.is_empty() && go_bool(value) != Some(false)
}

/// The reference's variables floodgate does not read that are set here (non-empty; switches
/// only when on), each with what to use instead.
pub fn unsupported_in(env: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, &'static str)> {
    REFERENCE_VARIABLES
        .iter()
        .filter_map(|(name, treatment)| match treatment {
            NotSupported(instead) => env(name)
                .filter(|value| !value.trim().is_empty())
                .map(|_| (*name, *instead)),
            NotSupportedWhenOn(instead) => env(name)
                .filter(|value| switched_on(value))
                .map(|_| (*name, *instead)),
            Honoured => None,
        })
        .collect()
}

/// `REDIS_SOCKET_TYPE` against the form of `REDIS_URL` (floodgate reads the socket type from the
/// address itself: a path is a Unix socket, host:port is TCP): what to say when they disagree.
pub fn redis_socket_type_mismatch(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    socket_type_mismatch("REDIS_SOCKET_TYPE", "REDIS_URL", env)
}

/// The socket type variable `type_variable` against the form of the address in `url_variable`
/// (`REDIS_SOCKET_TYPE` and `REDIS_URL`, or their `REDIS_PERSECOND_` twins).
pub fn socket_type_mismatch(
    type_variable: &str,
    url_variable: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let socket_type = env(type_variable)?.trim().to_ascii_lowercase();
    let url = env(url_variable).unwrap_or_default();
    let url = url.trim();
    let is_path = url.starts_with('/') || url.starts_with("unix:");
    match socket_type.as_str() {
        "" => None,
        "tcp" if is_path => Some(format!(
            "{type_variable}=tcp, but {url_variable}={url:?} is a Unix socket path: floodgate \
             connects to the socket; give {url_variable} as host:port for TCP"
        )),
        "unix" if !is_path && !url.is_empty() => Some(format!(
            "{type_variable}=unix, but {url_variable}={url:?} is not a path: floodgate connects \
             over TCP; give {url_variable} as the socket's path (/run/redis.sock) for a Unix \
             socket"
        )),
        "tcp" | "unix" => None,
        other => Some(format!(
            "{type_variable}={other:?} is neither tcp nor unix; floodgate goes by the form of \
             {url_variable} (a path is a Unix socket, host:port is TCP)"
        )),
    }
}

/// Says at start, once each, which of the reference's variables set here floodgate ignores, the
/// variables Envoy Gateway sets that the reference does not read, and a `REDIS_SOCKET_TYPE`
/// that disagrees with `REDIS_URL`.
pub fn warn_unsupported(env: impl Fn(&str) -> Option<String>) {
    for (name, instead) in unsupported_in(&env) {
        tracing::warn!(
            variable = name,
            "{name} is set, but floodgate does not support it (envoyproxy/ratelimit's setting; \
             ignored): {instead}"
        );
    }
    for (name, why) in NOT_READ_BY_THE_REFERENCE {
        if env(name).is_some_and(|value| !value.trim().is_empty()) {
            tracing::info!(variable = *name, "{name} is set and ignored: {why}");
        }
    }
    if let Some(mismatch) = redis_socket_type_mismatch(&env) {
        tracing::warn!(variable = "REDIS_SOCKET_TYPE", "{mismatch}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_only_envoy_gateway_sets_is_not_a_reference_variable() {
        for (name, _) in NOT_READ_BY_THE_REFERENCE {
            assert!(
                REFERENCE_VARIABLES.iter().all(|(known, _)| known != name),
                "{name}"
            );
        }
    }

    #[test]
    fn each_variable_is_listed_once() {
        let mut names: Vec<&str> = REFERENCE_VARIABLES.iter().map(|(name, _)| *name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a variable is listed twice");
    }

    #[test]
    fn the_reference_header_names_are_its_variables_or_its_defaults() {
        let env = |name: &str| match name {
            "LIMIT_RESPONSE_HEADERS_ENABLED" => Some("true".to_owned()),
            "LIMIT_REMAINING_HEADER" => Some("X-Left".to_owned()),
            _ => None,
        };
        let floodgates = LimitHeaders::WithRetryAfter;
        let expected = PlainHeaderNames {
            remaining: "X-Left",
            ..PlainHeaderNames::REFERENCE
        };
        assert_eq!(
            header_mode(None, floodgates, env),
            Ok(HeaderMode::RateLimit(expected))
        );
        assert_eq!(
            header_mode(None, LimitHeaders::AsTheReference, env),
            Ok(HeaderMode::ReferenceRateLimit(expected))
        );
        assert_eq!(
            header_mode(Some(HeaderMode::Ietf), floodgates, env),
            Ok(HeaderMode::Ietf)
        );
        assert_eq!(
            header_mode(None, floodgates, |_| None),
            Ok(HeaderMode::None)
        );
        let bad = |name: &str| match name {
            "LIMIT_RESPONSE_HEADERS_ENABLED" => Some("1".to_owned()),
            "LIMIT_RESET_HEADER" => Some("Reset: now".to_owned()),
            _ => None,
        };
        assert!(
            matches!(header_mode(None, floodgates, bad), Err(error) if error.contains("LIMIT_RESET_HEADER"))
        );
        let not_a_boolean =
            |name: &str| (name == "LIMIT_RESPONSE_HEADERS_ENABLED").then(|| "yes".to_owned());
        assert!(matches!(header_mode(None, floodgates, not_a_boolean),
            Err(error) if error.starts_with("LIMIT_RESPONSE_HEADERS_ENABLED=")));
    }

    #[test]
    fn dynamic_metadata_is_the_flag_else_the_reference_variable_read_as_go_reads_it() {
        let set_to = |value: &'static str| {
            move |name: &str| (name == "RESPONSE_DYNAMIC_METADATA").then(|| value.to_owned())
        };
        for on in ["true", "1", "t", "True", "TRUE"] {
            assert_eq!(
                response_dynamic_metadata(None, set_to(on)),
                Ok(true),
                "{on}"
            );
        }
        for off in ["false", "0", "F"] {
            assert_eq!(
                response_dynamic_metadata(None, set_to(off)),
                Ok(false),
                "{off}"
            );
        }
        for refused in ["yes", "on", ""] {
            let error =
                response_dynamic_metadata(None, set_to(refused)).map_err(|error| error.to_string());
            assert!(
                error
                    .as_ref()
                    .is_err_and(|error| error.starts_with("RESPONSE_DYNAMIC_METADATA=")),
                "{refused:?}: {error:?}"
            );
        }
        assert_eq!(response_dynamic_metadata(None, |_| None), Ok(false));
        assert_eq!(
            response_dynamic_metadata(Some(false), set_to("true")),
            Ok(false)
        );
        assert_eq!(response_dynamic_metadata(Some(true), |_| None), Ok(true));
    }

    #[test]
    fn the_key_prefix_is_the_flag_then_the_reference_prefix_then_floodgates() {
        let reference = |name: &str| (name == "CACHE_KEY_PREFIX").then(|| "team-a_".to_owned());
        assert_eq!(redis_prefix(Some("x:"), reference), "x:");
        assert_eq!(redis_prefix(None, reference), "team-a_");
        assert_eq!(redis_prefix(None, |_| None), "floodgate:");
        assert_eq!(redis_prefix(None, |_| Some(String::new())), "floodgate:");
    }

    #[test]
    fn the_redis_timeout_is_the_flag_then_the_reference_duration_then_25_ms() {
        let reference = |text: &'static str| {
            move |name: &str| (name == "REDIS_TIMEOUT").then(|| text.to_owned())
        };
        assert_eq!(
            redis_timeout(Some(40), reference("10s")),
            Ok(Duration::from_millis(40))
        );
        assert_eq!(
            redis_timeout(None, reference("10s")),
            Ok(Duration::from_secs(10))
        );
        assert_eq!(
            redis_timeout(None, reference("1m30s")),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(
            redis_timeout(None, reference("1.5s")),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            redis_timeout(None, reference("300ms")),
            Ok(Duration::from_millis(300))
        );
        assert_eq!(redis_timeout(None, |_| None), Ok(Duration::from_millis(25)));
        for bad in ["10", "s", "ten seconds", "-1s", "1d"] {
            assert!(redis_timeout(None, reference(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_startup_retry_reads_the_reference_durations_with_its_defaults() {
        assert_eq!(redis_startup_retry(|_| None), Ok(StartupRetry::default()));
        let env = |name: &str| match name {
            "REDIS_STARTUP_INITIAL_INTERVAL" => Some("250ms".to_owned()),
            "REDIS_STARTUP_MAX_INTERVAL" => Some("2s".to_owned()),
            "REDIS_STARTUP_MAX_ELAPSED_TIME" => Some("1m".to_owned()),
            _ => None,
        };
        assert_eq!(
            redis_startup_retry(env),
            Ok(StartupRetry {
                initial: Duration::from_millis(250),
                max: Duration::from_secs(2),
                give_up_after: Some(Duration::from_secs(60)),
            })
        );
        let zero = |name: &str| (name == "REDIS_STARTUP_INITIAL_INTERVAL").then(|| "0".to_owned());
        assert!(redis_startup_retry(zero).is_err_and(|error| error.contains("positive")));
        let bad = |name: &str| (name == "REDIS_STARTUP_MAX_INTERVAL").then(|| "soon".to_owned());
        assert!(redis_startup_retry(bad)
            .is_err_and(|error| error.contains("REDIS_STARTUP_MAX_INTERVAL")));
    }

    #[test]
    fn only_set_unsupported_variables_are_reported() {
        let env = |name: &str| match name {
            "DISABLE_STATS" => Some("true".to_owned()),
            "REDIS_URL" => Some("redis:6379".to_owned()),
            "LOCAL_CACHE_SIZE_IN_BYTES" => Some(String::new()),
            _ => None,
        };
        let reported: Vec<&str> = unsupported_in(env).iter().map(|(name, _)| *name).collect();
        assert_eq!(reported, ["DISABLE_STATS"]);
    }

    #[test]
    fn a_switch_is_reported_only_when_on() {
        let set = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        let off = set(&[("LOCAL_CACHE_SIZE_IN_BYTES", "0")]);
        assert_eq!(unsupported_in(off), []);
        let on = set(&[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")]);
        assert_eq!(
            unsupported_in(on)
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>(),
            ["LOCAL_CACHE_SIZE_IN_BYTES"]
        );
        assert_eq!(unsupported_in(|_| None), []);
    }

    #[test]
    fn a_socket_type_that_disagrees_with_the_address_is_said() {
        let env = |socket: &'static str, url: &'static str| {
            move |name: &str| match name {
                "REDIS_SOCKET_TYPE" => Some(socket.to_owned()),
                "REDIS_URL" => Some(url.to_owned()),
                _ => None,
            }
        };
        assert_eq!(redis_socket_type_mismatch(env("tcp", "redis:6379")), None);
        assert_eq!(
            redis_socket_type_mismatch(env("unix", "/run/redis.sock")),
            None
        );
        assert_eq!(redis_socket_type_mismatch(|_| None), None);
        let tcp_to_path = redis_socket_type_mismatch(env("tcp", "/run/redis.sock"));
        assert!(tcp_to_path.is_some_and(|text| text.contains("host:port")));
        let unix_to_host = redis_socket_type_mismatch(env("unix", "redis:6379"));
        assert!(unix_to_host.is_some_and(|text| text.contains("path")));
        let unknown = redis_socket_type_mismatch(env("udp", "redis:6379"));
        assert!(unknown.is_some_and(|text| text.contains("neither tcp nor unix")));
    }
}
