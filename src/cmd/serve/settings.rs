//! What `serve` reads from its flags and the environment before it loads rules or opens a
//! port: every setting is checked here, so a mistake is reported before a wait for the first
//! xDS snapshot.

use crate::cmd::app_error::AppError;
use crate::cmd::cli::{GrpcTlsArgs, ServeArgs};
use crate::cmd::front_door::{choose_store, FrontDoor, StoreChoice};
use crate::cmd::semantics_settings;
use crate::cmd::setting_values::{env_bool, SettingError};
use crate::core::decision::charging::Charging;
use crate::core::decision::headers::HeaderMode;
use crate::core::decision::overload::OverloadAnswer;
use crate::core::decision::plan::PlanSettings;
use crate::core::decision::semantics::Semantics;
use crate::core::policy::config::LoadOptions;
use crate::core::policy::request::RequestBounds;
use crate::core::policy::rules::RuleSet;
use crate::engine::limiter::LimiterSettings;
use crate::engine::self_shedding::SelfShedding;
use crate::server::health::{self, Health};
use crate::server::tls::{self, ServerTls};
use crate::telemetry::statsd::options::StatsdOptions;

use super::listeners::ListenAddresses;

/// The process's environment, as the settings read it.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Every setting of `serve`, checked.
pub(super) struct ServeSettings {
    pub store: StoreChoice,
    /// Where envoyproxy/ratelimit's stats go over statsd, if anywhere.
    pub statsd: Option<StatsdOptions>,
    pub charging: Charging,
    pub limiter: LimiterSettings,
    pub addresses: ListenAddresses,
    pub grpc_tls: Option<ServerTls>,
    pub config_gate: ConfigGate,
    pub store_gate: health::StoreGate,
    pub load_options: LoadOptions,
}

impl ServeSettings {
    pub(super) fn read(args: &ServeArgs, door: FrontDoor) -> Result<Self, AppError> {
        let store = choose_store(args.store, door, env).map_err(AppError::Usage)?;
        crate::cmd::reference_env::warn_unsupported(env);
        let statsd = reference_stats(args, door)?;
        let semantics = semantics_settings::semantics(args, door, env).map_err(AppError::Usage)?;
        semantics_settings::log(&semantics, door);
        let limiter = limiter_settings(args, &semantics)?;
        let addresses = ListenAddresses::read(args)?;
        let grpc_tls = grpc_tls(&args.grpc_tls)?;
        let config_gate = ConfigGate::from_env(env)?;
        let store_gate = store_gate(env)?;
        // Last before the ports open: everything else on the command line was checked before a
        // wait for the first xDS snapshot.
        let load_options = LoadOptions {
            default_overflow: semantics.overflow,
            yaml_strings: semantics.yaml_strings,
            ..args.config.load_options()
        };
        Ok(Self {
            store,
            statsd,
            charging: semantics.charging,
            limiter,
            addresses,
            grpc_tls,
            config_gate,
            store_gate,
            load_options,
        })
    }
}

/// The statsd sink's options, and envoyproxy/ratelimit's stats switched on when they go
/// anywhere (`--use-prometheus` or statsd).
fn reference_stats(args: &ServeArgs, door: FrontDoor) -> Result<Option<StatsdOptions>, AppError> {
    let statsd = crate::cmd::statsd_settings::statsd_options(args, door)?;
    if args.use_prometheus || statsd.is_some() {
        // Before the first load, which the reference's config_load_* count.
        crate::telemetry::reference::stats::enable(
            crate::cmd::prometheus_settings::prometheus_mapper(args)?,
        );
    }
    Ok(statsd)
}

/// How the limiter decides and answers, from the flags and the door's semantics.
fn limiter_settings(args: &ServeArgs, semantics: &Semantics) -> Result<LimiterSettings, AppError> {
    let header_mode = crate::cmd::reference_env::header_mode(
        args.response_headers.map(HeaderMode::from),
        semantics.limit_headers,
        env,
    )
    .map_err(AppError::Usage)?;
    let shedding = self_shedding(args.shed_above, args.max_in_flight, args.overload_answer)
        .map_err(AppError::Usage)?;
    Ok(LimiterSettings {
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
            env,
        )?,
    })
}

/// Whether health needs rules with a domain: the reference's
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` (without it, any configuration that loaded will do).
#[derive(Debug, Clone, Copy)]
pub(super) struct ConfigGate {
    needs_a_domain: bool,
}

impl ConfigGate {
    fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, SettingError> {
        Ok(Self {
            needs_a_domain: env_bool("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", env)?
                .unwrap_or(false),
        })
    }

    pub(super) fn apply(self, health: &Health, rules: &RuleSet) {
        health.set_config_usable(!self.needs_a_domain || rules.domains().next().is_some());
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
    let reference_tls = env_bool("GRPC_SERVER_USE_TLS", env)?;
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
