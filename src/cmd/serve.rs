//! `floodgate serve`: the wiring of configuration, store, limiter, background tasks and listeners.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::cmd::cli::{reference_address, GrpcTlsArgs, RedisCountersArg, ServeArgs, StoreKind};
use crate::cmd::config_location::LocationError;
use crate::cmd::front_door::{choose_store, FrontDoor};
use crate::cmd::hybrid_settings::CountingNotes;
use crate::cmd::semantics_settings;
use crate::cmd::serve_source::{FirstRules, FirstRulesError, RulesFollower};
use crate::cmd::setting_values::{env_bool, SettingError};
use crate::core::algorithm::Counting;
use crate::core::charging::Charging;
use crate::core::config::LoadOptions;
use crate::core::headers::HeaderMode;
use crate::core::overload::OverloadAnswer;
use crate::core::plan::PlanSettings;
use crate::core::request::RequestBounds;
use crate::core::rules::RuleSet;
use crate::core::time::SystemClock;
use crate::engine::limiter::{Limiter, LimiterSettings};
use crate::engine::observers::observed;
use crate::engine::overrides_sync::SharedOverrides;
use crate::engine::reload;
use crate::engine::self_shedding::SelfShedding;
use crate::engine::shutdown;
use crate::engine::tasks;
use crate::server::health::{self, Health};
use crate::server::tls::{self, ServerTls};
use crate::server::{self, Listeners};
use crate::store::hybrid::HybridStore;
use crate::store::memory::MemoryStore;
use crate::store::redis::{unsupported_limits, RedisOptions, RedisStore, StartupError};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    Usage(String),
    /// The thread that loads configurations is gone (it panicked): not the user's doing.
    #[error("{0}")]
    Loader(String),
    #[error("cannot read the configuration: {0}")]
    Source(#[from] crate::engine::config_source::SourceError),
    #[error("the configuration has errors:\n{0}")]
    Config(#[from] crate::core::config::ConfigErrors),
    #[error(
        "cannot listen on {addr} for the {listener} listener: {source}{hint} \
         (choose another address with {setting})"
    )]
    Bind {
        addr: SocketAddr,
        listener: &'static str,
        setting: &'static str,
        hint: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error(transparent)]
    Setting(#[from] SettingError),
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[error("gRPC TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    RedisStartup(StartupError),
    #[error("admin API: {0}")]
    AdminToken(#[from] crate::server::admin::AdminTokenError),
    #[error("TLS to the xDS management server: {0}")]
    XdsTls(#[from] crate::engine::config_source::xds::XdsTlsError),
}

impl From<FirstRulesError> for AppError {
    fn from(error: FirstRulesError) -> Self {
        match error {
            FirstRulesError::Usage(message) => Self::Usage(message),
            FirstRulesError::Location(error) => Self::Location(error),
            FirstRulesError::XdsTls(error) => Self::XdsTls(error),
            FirstRulesError::FirstLoad(error) => error.into(),
        }
    }
}

impl AppError {
    /// Whether the command line was wrong (exit code `cmd::EXIT_USAGE`).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            AppError::Usage(_) | AppError::Location(_) | AppError::Setting(_)
        )
    }
}

impl From<reload::FirstLoadError> for AppError {
    fn from(error: reload::FirstLoadError) -> Self {
        match error {
            reload::FirstLoadError::Source(error) => Self::Source(error),
            reload::FirstLoadError::Config(errors) => Self::Config(errors),
            reload::FirstLoadError::Loader(gone) => Self::Loader(gone.to_string()),
        }
    }
}

/// Things the reference accepts but that are probably mistakes: loaded, and said once.
/// `--rlqs-unmatched rule:NAME` where no loaded domain has a rule named NAME: every unmatched
/// bucket is allowed (a misspelt name would otherwise go unnoticed until buckets pass).
fn warn_of_a_missing_default_rule(
    unmatched: &crate::core::quota::UnmatchedBucket,
    rules: &RuleSet,
) {
    let crate::core::quota::UnmatchedBucket::Rule(name) = unmatched else {
        return;
    };
    if rules
        .domains()
        .all(|domain| unmatched.default_rule(domain).is_none())
    {
        tracing::warn!(
            "--rlqs-unmatched rule:{name}: no domain has a rule with `name: {name}`, so RLQS \
             buckets that meet no rule are allowed (allow-all) until a configuration has one"
        );
    }
}

fn log_warnings(rules: &RuleSet) {
    for warning in rules.warnings() {
        tracing::warn!("{warning}");
    }
}

fn listen_address(
    flag: Option<SocketAddr>,
    host_var: &str,
    port_var: &str,
    default_port: u16,
) -> Result<SocketAddr, AppError> {
    if let Some(addr) = flag {
        return Ok(addr);
    }
    let from_env = reference_address(host_var, port_var, default_port).map_err(AppError::Usage)?;
    Ok(from_env.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], default_port))))
}

/// One listener: its name and the settings that move it, for the error a busy port gives.
struct ListenerSpec {
    name: &'static str,
    setting: &'static str,
}

const GRPC: ListenerSpec = ListenerSpec {
    name: "gRPC",
    setting: "--grpc-addr, FLOODGATE_GRPC_ADDR, or GRPC_HOST and GRPC_PORT",
};
const HTTP: ListenerSpec = ListenerSpec {
    name: "HTTP",
    setting: "--http-addr, FLOODGATE_HTTP_ADDR, or HOST and PORT",
};
const DEBUG: ListenerSpec = ListenerSpec {
    name: "metrics and debug",
    setting: "--metrics-addr, FLOODGATE_METRICS_ADDR, or DEBUG_HOST and DEBUG_PORT",
};
const DEBUG_PAGES: ListenerSpec = ListenerSpec {
    name: "debug pages",
    setting: "--debug-pages-addr or FLOODGATE_DEBUG_PAGES_ADDR",
};
const PROMETHEUS: ListenerSpec = ListenerSpec {
    name: "envoyproxy/ratelimit's Prometheus stats",
    setting: "--prometheus-addr or PROMETHEUS_ADDR",
};
const ADMIN: ListenerSpec = ListenerSpec {
    name: "admin",
    setting: "--admin-addr or FLOODGATE_ADMIN_ADDR",
};

async fn bind(addr: SocketAddr, spec: &ListenerSpec) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr).await.map_err(|source| {
        let hint = if source.kind() == std::io::ErrorKind::AddrInUse {
            "; another process (another floodgate or envoyproxy/ratelimit?) holds it"
        } else {
            ""
        };
        AppError::Bind {
            addr,
            listener: spec.name,
            setting: spec.setting,
            hint,
            source,
        }
    })
}

/// Serves until a stop signal; `door` is how the process was started (its default store).
pub async fn serve(args: ServeArgs, door: FrontDoor) -> Result<(), AppError> {
    // First of all: a SIGHUP or SIGTERM that comes while the config loads or the ports open is
    // then a reload or a drain, not the default action (the end of the process).
    let stop_signals = shutdown::StopSignals::install();
    let hangup = reload::hangup_signal();
    // Fired from now on, so a SIGTERM while the first xDS snapshot is awaited stops the wait.
    let (signal_trigger, signalled) = shutdown::channel();
    tokio::spawn(stop_signals.fire_on_signal(signal_trigger));
    let store =
        choose_store(args.store, door, |name| std::env::var(name).ok()).map_err(AppError::Usage)?;
    crate::cmd::reference_env::warn_unsupported(|name| std::env::var(name).ok());
    let statsd = crate::cmd::statsd_settings::statsd_options(&args, door)?;
    if args.use_prometheus || statsd.is_some() {
        // Before the first load, which the reference's config_load_* count.
        crate::telemetry::reference_stats::enable(super::prometheus_settings::prometheus_mapper(
            &args,
        )?);
    }
    let semantics = semantics_settings::semantics(&args, door, |name| std::env::var(name).ok())
        .map_err(AppError::Usage)?;
    semantics_settings::log(&semantics, door);
    let header_mode = crate::cmd::reference_env::header_mode(
        args.response_headers.map(HeaderMode::from),
        semantics.limit_headers,
        |name| std::env::var(name).ok(),
    )
    .map_err(AppError::Usage)?;
    let charging = semantics.charging;
    let shedding = self_shedding(args.shed_above, args.max_in_flight, args.overload_answer)
        .map_err(AppError::Usage)?;
    let settings = LimiterSettings {
        bounds: RequestBounds {
            max_descriptors: args.max_descriptors,
            max_entries: args.max_entries,
        },
        plan: PlanSettings {
            global_quota_mode: args.quota_mode,
            check_only: semantics.check_only,
        },
        global_shadow: args.shadow_mode,
        header_mode,
        failure_policy: args.redis_failure_policy,
        shedding,
        error_codes: semantics.error_codes,
        rule_metadata: semantics.rule_metadata,
        traces: semantics.traces,
        response_dynamic_metadata: crate::cmd::reference_env::response_dynamic_metadata(
            args.response_dynamic_metadata,
            |name| std::env::var(name).ok(),
        )?,
    };
    let grpc_addr = listen_address(args.grpc_addr, "GRPC_HOST", "GRPC_PORT", 8081)?;
    let http_addr = listen_address(args.http_addr, "HOST", "PORT", 8080)?;
    let debug_addr = listen_address(args.metrics_addr, "DEBUG_HOST", "DEBUG_PORT", 6070)?;
    let grpc_tls = grpc_tls(&args.grpc_tls)?;
    let config_gate = ConfigGate::from_env(|name| std::env::var(name).ok())?;
    let store_gate = store_gate(|name| std::env::var(name).ok())?;
    // Last before the ports open: everything else on the command line was checked before a
    // wait for the first xDS snapshot.
    let load_options = LoadOptions {
        default_overflow: semantics.overflow,
        yaml_strings: semantics.yaml_strings,
        ..args.config.load_options()
    };
    let Some(first) =
        crate::cmd::serve_source::first_rules(&args, door, load_options, signalled.clone()).await?
    else {
        tracing::info!("stopped before the first configuration arrived");
        return Ok(());
    };
    let FirstRules {
        rules,
        follower: reloader,
        loaded,
    } = first;
    log_warnings(&rules);
    let reload_status = Arc::clone(reloader.status());
    let debug_pages = match args.debug_pages_addr {
        Some(addr) => Some(bind(addr, &DEBUG_PAGES).await?),
        None => None,
    };
    let listeners = Listeners {
        grpc: bind(grpc_addr, &GRPC).await?,
        http: bind(http_addr, &HTTP).await?,
        debug: bind(debug_addr, &DEBUG).await?,
        debug_pages,
    };
    let reference_metrics = if args.use_prometheus {
        let listener = bind(args.prometheus_addr, &PROMETHEUS).await?;
        Some((listener, args.prometheus_path.clone()))
    } else {
        None
    };
    let admin = match &args.admin_token_file {
        Some(path) => Some(AdminSetup {
            token: Arc::new(crate::server::admin::AdminToken::load(path)?),
            listener: bind(args.admin_addr, &ADMIN).await?,
            addr: args.admin_addr,
        }),
        None => None,
    };

    // SIGTERM first turns health NOT_SERVING; the listeners close --drain-seconds later.
    let (trigger, shutdown) = shutdown::channel();
    let health = Health::not_ready();
    config_gate.apply(&health, &rules);
    tokio::spawn(health::drain_then_stop(
        signalled,
        health.clone(),
        Duration::from_secs(args.drain_seconds),
        trigger,
    ));
    if let Some(grpc_tls) = &grpc_tls {
        tokio::spawn(tls::watch_certificates(grpc_tls.clone(), shutdown.clone()));
    }
    if let (Some(options), Some(stats)) = (statsd, crate::telemetry::reference_stats::global()) {
        crate::telemetry::statsd_sink::register_metrics();
        let sink = crate::telemetry::statsd_sink::StatsdSink::new(options);
        tokio::spawn(sink.run(stats, shutdown.clone().fired()));
    }
    warn_of_a_missing_default_rule(&args.rlqs.rlqs_unmatched, &rules);
    let operations = server::Operations {
        health,
        reload: Some(reload_status),
        grpc_tls,
        admission: server::admission::AdmissionSettings {
            max_in_flight: args.max_in_flight,
            overload_answer: args.overload_answer,
            default_deadline: args.connections.grpc_default_deadline(),
        },
        connections: connection_limits(&args, admin.is_some()),
        store_gate,
        quota: crate::engine::rlqs::QuotaBoard::new(args.rlqs.quota_settings()),
        without_grpc_reflection: !args.grpc_reflection,
    };

    let serving = Serving {
        addresses: [grpc_addr, http_addr, debug_addr],
        listeners,
        http_settings: server::HttpSettings {
            deny_status: args.http_deny_status.into(),
        },
        shutdown,
        operations,
        admin,
        reference_metrics,
        shared_overrides: None,
        hangup,
        config_gate,
        counting_notes: CountingNotes::Silent,
    };
    tracing::info!(store = ?store.kind, "store chosen by {}", store.reason);
    match store.kind {
        StoreKind::Memory => {
            let serving = Serving {
                counting_notes: CountingNotes::Memory,
                ..serving
            };
            serving.counting_notes.log(&rules);
            let store =
                observed(MemoryStore::new(args.max_keys, Arc::new(SystemClock)).charging(charging));
            crate::telemetry::metrics::store_state("memory", true);
            let limiter = Arc::new(awaiting(
                Limiter::new(rules, store, settings)
                    .with_telemetry(args.telemetry.decision_telemetry()),
                loaded,
            ));
            tokio::spawn(tasks::sweep_memory(
                Arc::clone(&limiter),
                serving.shutdown.clone(),
            ));
            run_limiter(limiter, reloader, serving).await?;
        }
        StoreKind::Redis => {
            let hybrid = crate::cmd::hybrid_settings::redis_hybrid_options(&args, charging);
            let check: fn(&RuleSet) -> Vec<String> = match hybrid {
                Some(_) => redis_problems,
                None => redis_problems_without_hybrid,
            };
            let refused = crate::cmd::hybrid_settings::refused_hybrid_rules(&rules);
            if hybrid.is_none() && !refused.is_empty() {
                return Err(AppError::Usage(refused.join("\n")));
            }
            let Some(redis) =
                connect_redis(&args, (door, charging), &rules, "redis", &serving).await?
            else {
                return Ok(());
            };
            crate::telemetry::metrics::store_state("redis", true);
            let Some(options) = hybrid else {
                let limiter =
                    shared_limiter(redis, rules, settings, &args, charging, loaded, &serving);
                exchange_quota_demands(&limiter, &serving);
                // Overrides set on any instance: read once before serving, then polled.
                let serving = share_overrides(&limiter, serving).await;
                run_limiter(limiter, reloader.with_store_check(check), serving).await?;
                return Ok(());
            };
            // Exact unless a rule says `counting: hybrid`; the sync idles until one is used.
            let store = HybridStore::new(redis, Arc::new(SystemClock), true, options)
                .map_err(|error| AppError::Usage(error.to_string()))?;
            let serving = Serving {
                counting_notes: CountingNotes::Hybrid {
                    default: Counting::Exact,
                },
                ..serving
            };
            serving.counting_notes.log(&rules);
            let limiter = shared_limiter(store, rules, settings, &args, charging, loaded, &serving);
            tokio::spawn(tasks::sync_hybrid(
                Arc::clone(&limiter),
                serving.shutdown.clone(),
            ));
            exchange_quota_demands(&limiter, &serving);
            let serving = share_overrides(&limiter, serving).await;
            run_limiter(limiter, reloader.with_store_check(check), serving).await?;
        }
        StoreKind::Hybrid => {
            let options =
                crate::cmd::hybrid_settings::hybrid_options(&args, charging, Counting::Hybrid)
                    .map_err(AppError::Usage)?;
            let serving = Serving {
                counting_notes: CountingNotes::Hybrid {
                    default: Counting::Hybrid,
                },
                ..serving
            };
            serving.counting_notes.log(&rules);
            let Some(redis) =
                connect_redis(&args, (door, charging), &rules, "hybrid", &serving).await?
            else {
                return Ok(());
            };
            let store = HybridStore::new(redis, Arc::new(SystemClock), true, options)
                .map_err(|error| AppError::Usage(error.to_string()))?;
            // Registers this instance before the first decision, so the others divide by it.
            store.sync_once().await;
            crate::telemetry::metrics::store_state("hybrid", true);
            let limiter = shared_limiter(store, rules, settings, &args, charging, loaded, &serving);
            tokio::spawn(tasks::sync_hybrid(
                Arc::clone(&limiter),
                serving.shutdown.clone(),
            ));
            exchange_quota_demands(&limiter, &serving);
            let serving = share_overrides(&limiter, serving).await;
            run_limiter(limiter, reloader.with_store_check(redis_problems), serving).await?;
        }
    }
    tracing::info!("floodgate stopped");
    Ok(())
}

/// The limiter of a store shared through Redis, with the in-process store that
/// `failure_policy: local` decides with while Redis fails, swept in the background.
fn shared_limiter<S: Store>(
    store: S,
    rules: RuleSet,
    settings: LimiterSettings,
    args: &ServeArgs,
    charging: Charging,
    loaded: bool,
    serving: &Serving,
) -> Arc<Limiter<S>> {
    // Always there (it costs nothing until used): a reload may give a domain
    // `failure_policy: local`. Bounded by --max-keys like the memory store.
    let local_fallback =
        observed(MemoryStore::new(args.max_keys, Arc::new(SystemClock)).charging(charging));
    let limiter = Arc::new(awaiting(
        Limiter::new(rules, store, settings)
            .with_telemetry(args.telemetry.decision_telemetry())
            .with_local_fallback(local_fallback),
        loaded,
    ));
    tokio::spawn(tasks::sweep_local_fallback(
        Arc::clone(&limiter),
        serving.shutdown.clone(),
    ));
    limiter
}

/// RLQS across the floodgates that share the limiter's Redis (`engine::rlqs::exchange`).
fn exchange_quota_demands<S: Store + crate::store::QuotaPeers>(
    limiter: &Arc<Limiter<S>>,
    serving: &Serving,
) {
    tokio::spawn(crate::engine::rlqs::exchange::run(
        Arc::clone(&serving.operations.quota),
        Arc::clone(limiter),
        serving.shutdown.clone(),
    ));
}

/// Overrides set on any instance, through the Redis beneath the limiter's store: read once
/// before serving, then polled.
async fn share_overrides<S: crate::engine::adaptive::shared::SharesLimits>(
    limiter: &Arc<Limiter<S>>,
    serving: Serving,
) -> Serving {
    let host: Arc<dyn crate::engine::overrides_sync::OverrideHost> = limiter.clone();
    let Some(shared) = SharedOverrides::new(host).map(Arc::new) else {
        return serving;
    };
    shared.poll().await;
    tokio::spawn(Arc::clone(&shared).run(serving.shutdown.clone()));
    Serving {
        shared_overrides: Some(shared),
        ..serving
    }
}

/// Connects the Redis store of `--store redis` (or beneath `--store hybrid`, `store` naming
/// which in errors and metrics), with the counters `--redis-counters` or the door chooses;
/// `None`: stopped before Redis answered.
async fn connect_redis(
    args: &ServeArgs,
    (door, charging): (FrontDoor, Charging),
    rules: &RuleSet,
    store: &'static str,
    serving: &Serving,
) -> Result<Option<RedisStore>, AppError> {
    let problems = redis_problems(rules);
    if !problems.is_empty() {
        return Err(AppError::Usage(format!(
            "--store {store} cannot decide these limits exactly:\n  {}",
            problems.join("\n  ")
        )));
    }
    let mut options = RedisOptions {
        auth: args.redis_auth.clone(),
        key_prefix: crate::cmd::reference_env::redis_prefix(args.redis_prefix.as_deref(), |name| {
            std::env::var(name).ok()
        }),
        timeout: crate::cmd::reference_env::redis_timeout(args.redis_timeout_ms, |name| {
            std::env::var(name).ok()
        })
        .map_err(AppError::Usage)?,
        connect_timeout: Duration::from_millis(args.redis_connect_timeout_ms),
        breaker_threshold: args.redis_breaker_failures,
        topology: args.redis_type.into(),
        hash_tag: args.redis_hash_tag.into(),
        sentinel_auth: args.redis_connection.redis_sentinel_auth.clone(),
        pool_size: args.redis_connection.redis_pool_size,
        batch_max: args.redis_connection.redis_batch_max,
        tls: args.redis_connection.tls_options(),
        charging,
        ..RedisOptions::new(args.redis_url.clone())
    };
    options.reference_counters = reference_counters(args, (door, charging), &options, store)?;
    let retry = crate::cmd::reference_env::redis_startup_retry(|name| std::env::var(name).ok())
        .map_err(AppError::Usage)?;
    crate::telemetry::metrics::store_state(store, false);
    let store =
        match RedisStore::connect_at_start(&options, retry, serving.shutdown.clone().fired()).await
        {
            Ok(store) => store,
            Err(StartupError::Stopped) => {
                tracing::info!("stopped before Redis answered");
                return Ok(None);
            }
            Err(StartupError::Store(error)) => return Err(error.into()),
            Err(error) => return Err(AppError::RedisStartup(error)),
        };
    tracing::info!(redis = %store.server(), "connected to Redis");
    Ok(Some(store))
}

/// envoyproxy/ratelimit's counters for fixed windows, or `None` for floodgate's own
/// (`cmd::reference_counters`), said at start either way. `--store hybrid` counts in each
/// instance and syncs floodgate's keys, so it keeps them.
fn reference_counters(
    args: &ServeArgs,
    (door, charging): (FrontDoor, Charging),
    options: &RedisOptions,
    store: &'static str,
) -> Result<Option<crate::store::redis::ReferenceCounters>, AppError> {
    let flag = match (store, args.redis_counters) {
        ("hybrid", Some(RedisCountersArg::Reference)) => {
            return Err(AppError::Usage(
                "--redis-counters reference counts in Redis on every call, as \
                 envoyproxy/ratelimit does; --store hybrid counts in each instance: use \
                 --store redis"
                    .to_owned(),
            ))
        }
        ("hybrid", _) => Some(RedisCountersArg::Floodgate),
        (_, flag) => flag,
    };
    let choice =
        crate::cmd::reference_counters::counter_choice(flag, door, charging, options, |name| {
            std::env::var(name).ok()
        })
        .map_err(AppError::Usage)?;
    for note in &choice.notes {
        tracing::warn!("{note}");
    }
    match &choice.reference {
        Some(counters) => tracing::info!(
            prefix = %counters.key_prefix,
            per_second_redis = counters.per_second.is_some(),
            "fixed windows are counted under envoyproxy/ratelimit's Redis keys, with its \
             INCRBY and EXPIRE: its pods on this Redis share the counts"
        ),
        None => tracing::info!("counters are kept under floodgate's own Redis keys"),
    }
    Ok(choice.reference)
}

/// What every store's server needs, made before the store is chosen.
struct Serving {
    addresses: [SocketAddr; 3],
    listeners: Listeners,
    http_settings: server::HttpSettings,
    shutdown: shutdown::Shutdown,
    operations: server::Operations,
    /// The admin API, with --admin-token-file.
    admin: Option<AdminSetup>,
    /// The reference's stats listener and path, with --use-prometheus.
    reference_metrics: Option<(TcpListener, String)>,
    /// Overrides shared through Redis (`--store redis` or `hybrid`).
    shared_overrides: Option<Arc<SharedOverrides>>,
    /// SIGHUP, listened for since the start.
    hangup: reload::Hangup,
    /// What a reloaded rule set does to health.
    config_gate: ConfigGate,
    /// What the store says about the rules' `counting:`, at start and at every reload.
    counting_notes: CountingNotes,
}

/// Whether health needs rules with a domain: the reference's
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` (without it, any configuration that loaded will do).
#[derive(Debug, Clone, Copy)]
struct ConfigGate {
    needs_a_domain: bool,
}

impl ConfigGate {
    fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, SettingError> {
        Ok(Self {
            needs_a_domain: env_bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", env)?
                .unwrap_or(false),
        })
    }

    fn apply(self, health: &Health, rules: &RuleSet) {
        health.set_config_usable(!self.needs_a_domain || rules.domains().next().is_some());
    }
}

/// The admin listener and its token, ready before the store is chosen.
struct AdminSetup {
    listener: TcpListener,
    token: Arc<crate::server::admin::AdminToken>,
    addr: SocketAddr,
}

/// Reloads rules into `limiter` and serves it until shutdown.
async fn run_limiter<S: crate::engine::adaptive::shared::SharesLimits>(
    limiter: Arc<Limiter<S>>,
    reloader: RulesFollower,
    serving: Serving,
) -> Result<(), AppError> {
    start_reloading(
        &limiter,
        reloader,
        serving.hangup,
        &serving.shutdown,
        serving.operations.health.clone(),
        serving.config_gate,
        serving.counting_notes,
    );
    let [grpc_addr, http_addr, debug_addr] = serving.addresses;
    tracing::info!(
        grpc = %grpc_addr, http = %http_addr, debug = %debug_addr,
        domains = limiter.rules().domains().count(),
        rules = limiter.rules().rule_count(),
        store = limiter.store().backend(),
        "floodgate serving"
    );
    tokio::spawn(crate::engine::tasks::maintain_adjustments(
        Arc::clone(&limiter),
        serving.shutdown.clone(),
    ));
    let signals = Arc::new(crate::engine::adaptive::signals::PushedSignals::default());
    tokio::spawn(crate::engine::adaptive::run(
        Arc::clone(&limiter),
        Arc::clone(&signals),
        serving.admin.is_some(),
        serving.shutdown.clone(),
    ));
    if let Some((listener, path)) = serving.reference_metrics {
        let limits = serving.operations.connections;
        let shutdown = serving.shutdown.clone();
        tracing::info!(path = %path, "serving envoyproxy/ratelimit's stats (USE_PROMETHEUS)");
        tokio::spawn(async move {
            crate::server::reference_metrics::serve(listener, &path, limits, shutdown).await;
        });
    }
    let admin = serving.admin.map(|admin| {
        crate::server::admin::announce(admin.addr);
        let routes =
            crate::server::admin::override_routes(Arc::clone(&limiter), serving.shared_overrides)
                .merge(crate::server::admin::signals::routes(
                    signals,
                    Arc::clone(&limiter),
                ));
        crate::server::admin::serve(
            admin.listener,
            admin.token,
            routes,
            serving.operations.connections,
            serving.shutdown.clone(),
        )
    });
    let served = server::serve_with(
        limiter,
        serving.listeners,
        serving.http_settings,
        serving.shutdown,
        serving.operations,
    );
    match admin {
        Some(admin) => {
            let (served, ()) = tokio::join!(served, admin);
            served?;
        }
        None => served.await?,
    }
    Ok(())
}

/// Limits the Redis scripts cannot decide exactly (see `store::redis::check_quota`).
fn redis_problems(rules: &RuleSet) -> Vec<String> {
    unsupported_limits(rules)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// [`redis_problems`], and `counting: hybrid`, which a Redis store without hybrid counting
/// cannot honour.
fn redis_problems_without_hybrid(rules: &RuleSet) -> Vec<String> {
    let mut problems = redis_problems(rules);
    problems.extend(crate::cmd::hybrid_settings::refused_hybrid_rules(rules));
    problems
}

/// Swaps the rule sets the source brings into `limiter` until shutdown.
fn start_reloading<S: Store>(
    limiter: &Arc<Limiter<S>>,
    reloader: RulesFollower,
    hangup: reload::Hangup,
    shutdown: &shutdown::Shutdown,
    health: Health,
    config_gate: ConfigGate,
    counting_notes: CountingNotes,
) {
    let live = Arc::clone(limiter);
    reloader.spawn(
        move |rules| {
            config_gate.apply(&health, &rules);
            counting_notes.log(&rules);
            Box::new(live.replace_rules(rules)) as Box<dyn reload::Retired>
        },
        hangup,
        shutdown.clone(),
    );
}

/// The connection bounds of every listener, `--max-connections` fitted to RLIMIT_NOFILE for
/// the listeners this process opens.
fn connection_limits(
    args: &ServeArgs,
    admin: bool,
) -> crate::server::connections::ConnectionLimits {
    let listeners = 3
        + u32::from(admin)
        + u32::from(args.debug_pages_addr.is_some())
        + u32::from(args.use_prometheus);
    let mut limits = args.connections.limits();
    limits.max_connections = crate::server::connections::descriptors::fit_max_connections(
        limits.max_connections,
        listeners,
    );
    limits
}

/// `limiter`, failing every call until the first configuration loads unless one did.
fn awaiting<S: Store>(limiter: Limiter<S>, loaded: bool) -> Limiter<S> {
    if loaded {
        limiter
    } else {
        limiter.awaiting_configuration()
    }
}

/// Whether an unreachable store takes the instance out of rotation: as in envoyproxy/ratelimit,
/// only when its `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` asks, whatever the failure policy. A
/// store that every instance shares fails them all at once, so leaving rotation saves no call,
/// and where one endpoint serves liveness too (Envoy Gateway probes `/healthcheck`) it would get
/// every pod restarted until Redis is back.
fn store_gate(env: impl Fn(&str) -> Option<String>) -> Result<health::StoreGate, SettingError> {
    let asked = env_bool("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", env)?;
    Ok(if asked == Some(true) {
        health::StoreGate::NotServing
    } else {
        health::StoreGate::KeepServing
    })
}

/// TLS for the gRPC listener from the flags or envoyproxy/ratelimit's variables, if any.
fn grpc_tls(args: &GrpcTlsArgs) -> Result<Option<ServerTls>, AppError> {
    let reference_tls = env_bool("GRPC_SERVER_USE_TLS", |name| std::env::var(name).ok())?;
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let files = tls::files_from_settings(
        args.grpc_tls_cert.as_deref(),
        args.grpc_tls_key.as_deref(),
        args.grpc_tls_client_ca.as_deref(),
        args.grpc_tls_client_san.as_deref(),
        reference_tls == Some(true),
        env,
    )?;
    if let Some(san) = files.as_ref().and_then(|files| files.client_san.as_ref()) {
        tracing::info!(name = %san, "gRPC client certificates must carry this name");
    }
    Ok(files.map(ServerTls::load).transpose()?)
}

/// `--shed-above`, which must leave room below the hard bound it sheds ahead of.
fn self_shedding(
    shed_above: Option<u32>,
    max_in_flight: usize,
    answer: OverloadAnswer,
) -> Result<Option<SelfShedding>, String> {
    let Some(above) = shed_above else {
        return Ok(None);
    };
    if usize::try_from(above).map_or(true, |above| above >= max_in_flight) {
        return Err(format!(
            "--shed-above {above} must be below --max-in-flight {max_in_flight}: shedding \
             refuses calls before the hard bound does; lower --shed-above or raise \
             --max-in-flight"
        ));
    }
    Ok(Some(SelfShedding { above, answer }))
}
