//! The store `serve` decides with, built in one place from what the settings name: the
//! in-process store, Redis, or hybrid counting over Redis (`--store hybrid`, or `--store redis`
//! where the charging lets rules ask for `counting: hybrid`).

use std::sync::Arc;
use std::time::Duration;

use crate::cmd::app_error::AppError;
use crate::cmd::cli::{RedisCountersArg, ServeArgs, StoreKind};
use crate::cmd::front_door::FrontDoor;
use crate::cmd::hybrid_settings::{self, CountingNotes};
use crate::core::arithmetic::algorithm::Counting;
use crate::core::decision::charging::Charging;
use crate::core::ground::time::SystemClock;
use crate::core::policy::rules::RuleSet;
use crate::engine::observers::observed;
use crate::engine::shutdown::Shutdown;
use crate::store::held_windows::memory::MemoryHeldWindows;
use crate::store::held_windows::HeldWindows;
use crate::store::hybrid::{HybridOptions, HybridStore};
use crate::store::memory::MemoryStore;
use crate::store::redis::{
    unsupported_limits, RedisOptions, RedisStore, ReferenceCounters, StartupError,
};

/// The process's environment, as the Redis settings read it.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The store the settings name, checked against the first rules, not yet built.
pub(super) enum StorePlan {
    Memory,
    /// Every decision in Redis, exactly.
    Redis,
    /// Counted in each instance and synced through Redis; `name` is the store in errors and
    /// metrics (`redis` when the flag said so: its unmarked limits stay exact).
    Hybrid {
        options: HybridOptions,
        name: &'static str,
    },
}

impl StorePlan {
    pub(super) fn new(
        kind: StoreKind,
        args: &ServeArgs,
        charging: Charging,
        rules: &RuleSet,
    ) -> Result<Self, AppError> {
        match kind {
            StoreKind::Memory => Ok(Self::Memory),
            StoreKind::Redis => match hybrid_settings::redis_hybrid_options(args, charging) {
                Some(options) => Ok(Self::Hybrid {
                    options,
                    name: "redis",
                }),
                None => {
                    let refused = hybrid_settings::refused_hybrid_rules(rules);
                    if !refused.is_empty() {
                        return Err(AppError::Usage(refused.join("\n")));
                    }
                    Ok(Self::Redis)
                }
            },
            StoreKind::Hybrid => Ok(Self::Hybrid {
                options: hybrid_settings::hybrid_options(args, charging, Counting::Hybrid)
                    .map_err(AppError::Usage)?,
                name: "hybrid",
            }),
        }
    }

    /// What this store says about the rules' `counting:`, at start and at every reload.
    pub(super) fn counting_notes(&self) -> CountingNotes {
        match self {
            StorePlan::Memory => CountingNotes::Memory,
            StorePlan::Redis => CountingNotes::Silent,
            StorePlan::Hybrid { options, .. } => CountingNotes::Hybrid {
                default: options.default_counting,
            },
        }
    }
}

/// The store, built and reachable.
pub(super) enum BuiltStore {
    Memory(MemoryStore),
    Redis(RedisStore),
    /// Boxed: its local counters' state is large beside the others'.
    Hybrid(Box<HybridStore>),
}

/// Builds the store `plan` names; `None`: stopped before Redis answered.
pub(super) async fn build_store(
    plan: StorePlan,
    args: &ServeArgs,
    (door, charging): (FrontDoor, Charging),
    rules: &RuleSet,
    shutdown: &Shutdown,
) -> Result<Option<BuiltStore>, AppError> {
    let (name, hybrid) = match plan {
        StorePlan::Memory => {
            let store = memory_store(args.max_keys, charging);
            crate::telemetry::metrics::store_state("memory", true);
            return Ok(Some(BuiltStore::Memory(store)));
        }
        StorePlan::Redis => ("redis", None),
        StorePlan::Hybrid { options, name } => (name, Some(options)),
    };
    let Some(redis) = connect_redis(args, (door, charging), rules, name, shutdown).await? else {
        return Ok(None);
    };
    let Some(options) = hybrid else {
        crate::telemetry::metrics::store_state(name, true);
        return Ok(Some(BuiltStore::Redis(redis)));
    };
    // Under `--store hybrid` every unmarked limit counts locally: this instance registers
    // before its first decision, so the others divide by it. Under `--store redis` the sync
    // idles until a rule says `counting: hybrid`.
    let registers_first = options.default_counting == Counting::Hybrid;
    let store = HybridStore::new(redis, Arc::new(SystemClock), true, options)
        .map_err(|error| AppError::Usage(error.to_string()))?;
    if registers_first {
        store.sync_once().await;
    }
    crate::telemetry::metrics::store_state(name, true);
    Ok(Some(BuiltStore::Hybrid(Box::new(store))))
}

/// The in-process store: `--store memory`, and the fallback of `failure_policy: local` under
/// the others. Bounded by `--max-keys`.
pub(super) fn memory_store(max_keys: usize, charging: Charging) -> MemoryStore {
    observed(MemoryStore::new(max_keys, Arc::new(SystemClock)).charging(charging))
}

/// Connects the Redis store of `--store redis` (or beneath `--store hybrid`, `store` naming
/// which in errors and metrics), with the counters `--redis-counters` or the door chooses;
/// `None`: stopped before Redis answered.
async fn connect_redis(
    args: &ServeArgs,
    (door, charging): (FrontDoor, Charging),
    rules: &RuleSet,
    store: &'static str,
    shutdown: &Shutdown,
) -> Result<Option<RedisStore>, AppError> {
    let problems = redis_problems(rules);
    if !problems.is_empty() {
        return Err(AppError::Usage(format!(
            "--store {store} cannot decide these limits exactly:\n  {}",
            problems.join("\n  ")
        )));
    }
    let mut options = redis_options(args, charging)?;
    options.reference_counters = reference_counters(args, (door, charging), &options, store)?;
    let retry = crate::cmd::reference_env::redis_startup_retry(env).map_err(AppError::Usage)?;
    crate::telemetry::metrics::store_state(store, false);
    let store = match RedisStore::connect_at_start(&options, retry, shutdown.clone().fired()).await
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

/// Where Limitador's limits count, as the store counts: in Redis directly under `--store redis`
/// and `hybrid` (never hybrid: their holds must be seen by every instance at once), else in
/// this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LimitadorCounting {
    InProcess,
    InRedis,
}

impl StorePlan {
    pub(super) fn limitador_counting(&self) -> LimitadorCounting {
        match self {
            StorePlan::Memory => LimitadorCounting::InProcess,
            StorePlan::Redis | StorePlan::Hybrid { .. } => LimitadorCounting::InRedis,
        }
    }
}

/// Limitador's counters where `counting` says. Made once the store is ready, so Redis has
/// answered the store's wait at start (`connect_redis`) already.
pub(super) async fn limitador_counters(
    counting: LimitadorCounting,
    args: &ServeArgs,
    charging: Charging,
) -> Result<Arc<dyn HeldWindows>, AppError> {
    if counting == LimitadorCounting::InProcess {
        return Ok(Arc::new(MemoryHeldWindows::default()));
    }
    let store = RedisStore::connect(&redis_options(args, charging)?).await?;
    tracing::info!(redis = %store.server(), "Limitador's limits count in Redis");
    Ok(Arc::new(store))
}

/// How to reach Redis, from the flags and envoyproxy/ratelimit's variables.
fn redis_options(args: &ServeArgs, charging: Charging) -> Result<RedisOptions, AppError> {
    Ok(RedisOptions {
        auth: args.redis_auth.clone(),
        key_prefix: crate::cmd::reference_env::redis_prefix(args.redis_prefix.as_deref(), env),
        timeout: crate::cmd::reference_env::redis_timeout(args.redis_timeout_ms, env)
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
    })
}

/// envoyproxy/ratelimit's counters for fixed windows, or `None` for floodgate's own
/// (`cmd::reference_counters`), said at start either way. `--store hybrid` counts in each
/// instance and syncs floodgate's keys, so it keeps them.
fn reference_counters(
    args: &ServeArgs,
    (door, charging): (FrontDoor, Charging),
    options: &RedisOptions,
    store: &'static str,
) -> Result<Option<ReferenceCounters>, AppError> {
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
    let choice = crate::cmd::reference_counters::counter_choice(flag, door, charging, options, env)
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

/// Limits the Redis scripts cannot decide exactly (see `store::redis::check_quota`).
pub(super) fn redis_problems(rules: &RuleSet) -> Vec<String> {
    unsupported_limits(rules)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// [`redis_problems`], and `counting: hybrid`, which a Redis store without hybrid counting
/// cannot honour.
pub(super) fn redis_problems_without_hybrid(rules: &RuleSet) -> Vec<String> {
    let mut problems = redis_problems(rules);
    problems.extend(hybrid_settings::refused_hybrid_rules(rules));
    problems
}
