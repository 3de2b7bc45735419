//! Which source `serve` takes its rules from — files (`--config`, `RUNTIME_*`) or an xDS
//! management server (`--config-type grpc-xds-sotw`, `CONFIG_TYPE=GRPC_XDS_SOTW`) — the first
//! rules of each, and the task that follows it afterwards. Both install new rules the same way
//! (the `install` that `serve` builds), so counters of unchanged rules keep counting whichever
//! source brings the change.
//!
//! Before the first rules, as envoyproxy/ratelimit: started as `ratelimit` or with
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`, floodgate listens at once and every call fails with
//! "no rate limit configuration loaded" until rules arrive (health stays SERVING unless
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`); otherwise files must load at start, and over xDS
//! floodgate waits for the first snapshot that loads before it listens.

use std::sync::Arc;

use crate::cmd::cli::{ConfigTypeArg, ServeArgs};
use crate::cmd::config_location::{location, LocationError};
use crate::cmd::front_door::FrontDoor;
use crate::cmd::setting_values::env_bool;
use crate::core::policy::config::LoadOptions;
use crate::core::policy::rules::RuleSet;
use crate::engine::config_source::xds::{XdsClient, XdsTlsError};
use crate::engine::reload::{self, ConfigReloader, ReloadStatus, Retired, XdsReloader};
use crate::engine::shutdown::Shutdown;

/// Why there are no first rules (`serve` turns it into its own error and exit code).
#[derive(Debug, thiserror::Error)]
pub enum FirstRulesError {
    /// A setting that cannot be used.
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error("TLS to the xDS management server: {0}")]
    XdsTls(#[from] XdsTlsError),
    #[error(transparent)]
    FirstLoad(#[from] reload::FirstLoadError),
}

/// What brings the rules after the first.
pub enum RulesFollower {
    Files(ConfigReloader),
    /// Boxed: a subscription's state is large beside a file reloader's.
    Xds(Box<XdsReloader>),
    /// No YAML rules to follow: Limitador's limits alone (`--limitador-limits` without
    /// `--config`), which follow their own file.
    Nothing(Arc<ReloadStatus>),
}

/// The rules to start with and what follows them; `loaded` is false while none have loaded
/// (every call then fails until some do).
pub struct FirstRules {
    pub rules: RuleSet,
    pub follower: RulesFollower,
    pub loaded: bool,
}

impl RulesFollower {
    pub fn status(&self) -> &Arc<ReloadStatus> {
        match self {
            RulesFollower::Files(reloader) => reloader.status(),
            RulesFollower::Xds(reloader) => reloader.status(),
            RulesFollower::Nothing(status) => status,
        }
    }

    /// Refuses new rules `check` finds problems in.
    pub fn with_store_check(self, check: fn(&RuleSet) -> Vec<String>) -> Self {
        match self {
            RulesFollower::Files(reloader) => {
                RulesFollower::Files(reloader.with_store_check(check))
            }
            RulesFollower::Xds(reloader) => {
                RulesFollower::Xds(Box::new(reloader.with_store_check(check)))
            }
            RulesFollower::Nothing(status) => RulesFollower::Nothing(status),
        }
    }

    /// Follows the source until `shutdown`, each new rule set through `install`.
    pub fn spawn(
        self,
        install: impl Fn(RuleSet) -> Box<dyn Retired> + Send + 'static,
        hangup: reload::Hangup,
        shutdown: Shutdown,
    ) {
        match self {
            RulesFollower::Files(reloader) => {
                tokio::spawn(reload::run(reloader, install, hangup, shutdown));
            }
            RulesFollower::Xds(reloader) => {
                // SIGHUP stays caught (its default action would end the process) and means
                // nothing: the management server says when the rules change.
                drop(hangup);
                tokio::spawn(reloader.run(install, shutdown));
            }
            RulesFollower::Nothing(_) => drop(hangup),
        }
    }
}

/// The first rules; `None` when `stopped` fired while waiting for them.
pub async fn first_rules(
    args: &ServeArgs,
    door: FrontDoor,
    options: LoadOptions,
    stopped: Shutdown,
) -> Result<Option<FirstRules>, FirstRulesError> {
    let asked = env_bool("FORCE_START_WITHOUT_INITIAL_CONFIG", |name| {
        std::env::var(name).ok()
    })
    .map_err(|error| FirstRulesError::Usage(error.to_string()))?;
    let force_start = door == FrontDoor::Reference || asked == Some(true);
    match args.xds.config_type {
        ConfigTypeArg::File => first_from_files(args, options, force_start).await.map(Some),
        ConfigTypeArg::GrpcXdsSotw => first_from_xds(args, options, force_start, stopped).await,
    }
}

async fn first_from_xds(
    args: &ServeArgs,
    options: LoadOptions,
    force_start: bool,
    stopped: Shutdown,
) -> Result<Option<FirstRules>, FirstRulesError> {
    let settings =
        crate::cmd::xds_settings::xds_settings(&args.xds).map_err(FirstRulesError::Usage)?;
    settings.check_tls_files()?;
    if args.config.config.is_some() {
        tracing::warn!(
            "--config (FLOODGATE_CONFIG) is not read: the rules come from the xDS management \
             server (CONFIG_TYPE=GRPC_XDS_SOTW)"
        );
    }
    tracing::info!(
        server = %settings.server,
        node = %settings.node_id,
        tls = settings.tls.is_some(),
        headers = ?settings.headers.names(),
        "rules come from the xDS management server (RUNTIME_* and --config are not read)"
    );
    let mut reloader = XdsReloader::new(
        XdsClient::new(settings),
        options,
        args.config.limits.max_config_bytes,
    );
    if force_start {
        return Ok(Some(FirstRules {
            rules: RuleSet::default(),
            follower: RulesFollower::Xds(Box::new(reloader)),
            loaded: false,
        }));
    }
    let Some(rules) = reloader.first(stopped).await else {
        return Ok(None);
    };
    Ok(Some(FirstRules {
        rules,
        follower: RulesFollower::Xds(Box::new(reloader)),
        loaded: true,
    }))
}

async fn first_from_files(
    args: &ServeArgs,
    options: LoadOptions,
    force_start: bool,
) -> Result<FirstRules, FirstRulesError> {
    let location = match location(&args.config) {
        Ok(location) => location,
        Err(LocationError::NoConfiguration(_)) if args.limitador.limitador_limits.is_some() => {
            return Ok(limitador_limits_alone());
        }
        Err(error) => return Err(error.into()),
    };
    let location_for_log = location.clone();
    let max_config_bytes = args.config.limits.max_config_bytes;
    let first = if force_start {
        let (first, reloader) =
            reload::load_first_or_wait(&reload::Loader, location, options, max_config_bytes)
                .await
                .map_err(reload::FirstLoadError::from)?;
        match first {
            Ok(rules) => FirstRules {
                rules,
                follower: RulesFollower::Files(reloader),
                loaded: true,
            },
            Err(error) => {
                tracing::error!(
                    "cannot load the configuration: {error}\nserving anyway, as \
                     envoyproxy/ratelimit does: every call fails with \"no rate limit \
                     configuration loaded\" until a reload loads one"
                );
                crate::telemetry::config_loads::reload_failed();
                FirstRules {
                    rules: RuleSet::default(),
                    follower: RulesFollower::Files(reloader),
                    loaded: false,
                }
            }
        }
    } else {
        let (rules, reloader) =
            reload::load_first(&reload::Loader, location, options, max_config_bytes).await?;
        FirstRules {
            rules,
            follower: RulesFollower::Files(reloader),
            loaded: true,
        }
    };
    if first.loaded {
        crate::telemetry::config_loads::reload_succeeded(first.rules.rule_count());
    }
    // Limitador's limits alone (`--limitador-limits`) are a limiter too: no YAML rules is then
    // the plan, not a mistake.
    let limits_elsewhere = args.limitador.limitador_limits.is_some();
    if first.loaded && first.rules.rule_count() == 0 && !limits_elsewhere {
        // Not an error (the reference starts so too, and rules may arrive by reload), but a
        // limiter that limits nothing must not go unnoticed.
        tracing::warn!(
            config = %crate::engine::config_source::location_path(&location_for_log).display(),
            "NO RULES LOADED: the configuration holds no rate limit (no *.yaml or *.yml file, \
             or files without descriptors); every request is answered OK until a reload brings \
             rules. `floodgate validate` on the same path says what it found"
        );
    }
    Ok(first)
}

/// No YAML rules and none to follow: `--limitador-limits` without `--config` (as Limitador
/// itself starts, on its limits file alone). Every domain that is none of the file's
/// namespaces is answered OK with no limit.
fn limitador_limits_alone() -> FirstRules {
    tracing::info!(
        "no --config: the limits are Limitador's file alone (--limitador-limits); domains \
         outside its namespaces are answered OK with no limit"
    );
    let rules = RuleSet::default();
    crate::telemetry::config_loads::reload_succeeded(0);
    FirstRules {
        follower: RulesFollower::Nothing(Arc::new(ReloadStatus::new(&rules))),
        rules,
        loaded: true,
    }
}
