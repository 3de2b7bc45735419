//! What each subcommand does: wiring of config, store, limiter and listeners.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::cli::{reference_address, CheckArgs, ConfigArgs, ServeArgs, StoreKind, ValidateArgs};
use crate::config_source::{read_sources, ConfigLocation};
use crate::core::config::{load, LoadOptions};
use crate::core::headers::HeaderMode;
use crate::core::plan::PlanSettings;
use crate::core::request::RequestBounds;
use crate::core::rules::RuleSet;
use crate::core::time::SystemClock;
use crate::limiter::{Limiter, LimiterSettings};
use crate::server::{self, shutdown, Listeners};
use crate::store::memory::MemoryStore;

/// How often expired counters are dropped from memory.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot read the configuration: {0}")]
    Source(#[from] crate::config_source::SourceError),
    #[error("the configuration has errors:\n{0}")]
    Config(#[from] crate::core::config::ConfigErrors),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Serve(#[from] server::ServeError),
}

fn location(config: &ConfigArgs) -> Result<ConfigLocation, AppError> {
    if let Some(path) = &config.config {
        return Ok(ConfigLocation::Path(path.clone()));
    }
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (env("RUNTIME_ROOT"), env("RUNTIME_SUBDIRECTORY")) {
        (Some(root), Some(subdirectory)) => Ok(ConfigLocation::Runtime {
            root: root.into(),
            subdirectory: subdirectory.into(),
            app_directory: env("RUNTIME_APPDIRECTORY")
                .unwrap_or_else(|| "config".to_owned())
                .into(),
            watch_root: env("RUNTIME_WATCH_ROOT").is_none_or(|v| parse_bool(&v)),
            ignore_dotfiles: env("RUNTIME_IGNOREDOTFILES").is_some_and(|v| parse_bool(&v)),
        }),
        _ => Err(AppError::Usage(
            "no configuration given: pass --config PATH (a YAML file or a directory), \
             or set RUNTIME_ROOT and RUNTIME_SUBDIRECTORY as for envoyproxy/ratelimit"
                .to_owned(),
        )),
    }
}

/// Go's `strconv.ParseBool`, which envoyproxy/ratelimit's settings use.
fn parse_bool(text: &str) -> bool {
    matches!(text, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

fn load_rules(location: &ConfigLocation, options: &LoadOptions) -> Result<RuleSet, AppError> {
    let sources = read_sources(location)?;
    Ok(load(&sources, options)?)
}

/// Things the reference accepts but that are probably mistakes: loaded, and said once.
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

async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

pub async fn serve(args: ServeArgs) -> Result<(), AppError> {
    let location = location(&args.config)?;
    let options = LoadOptions {
        default_algorithm: args.config.default_algorithm.into(),
        merge_domains: args.config.merge_domain_config,
    };
    let rules = load_rules(&location, &options)?;
    log_warnings(&rules);
    let header_mode = match args.response_headers {
        Some(mode) => mode.into(),
        None if std::env::var("LIMIT_RESPONSE_HEADERS_ENABLED").is_ok_and(|v| parse_bool(&v)) => {
            HeaderMode::RateLimit
        }
        None => HeaderMode::None,
    };
    let settings = LimiterSettings {
        bounds: RequestBounds {
            max_descriptors: args.max_descriptors,
            max_entries: args.max_entries,
        },
        plan: PlanSettings {
            global_quota_mode: args.quota_mode,
        },
        global_shadow: args.shadow_mode,
        header_mode,
    };
    let grpc_addr = listen_address(args.grpc_addr, "GRPC_HOST", "GRPC_PORT", 8081)?;
    let http_addr = listen_address(args.http_addr, "HOST", "PORT", 8080)?;
    let debug_addr = listen_address(args.metrics_addr, "DEBUG_HOST", "DEBUG_PORT", 6070)?;
    let listeners = Listeners {
        grpc: bind(grpc_addr).await?,
        http: bind(http_addr).await?,
        debug: bind(debug_addr).await?,
    };

    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(shutdown::on_signal(trigger));

    match args.store {
        StoreKind::Memory => {
            let store = MemoryStore::new(args.max_keys, Arc::new(SystemClock));
            let limiter = Arc::new(Limiter::new(rules, store, settings));
            tokio::spawn(sweep_memory(Arc::clone(&limiter), shutdown.clone()));
            tracing::info!(
                grpc = %grpc_addr, http = %http_addr, debug = %debug_addr,
                domains = limiter.rules().domains().count(),
                rules = limiter.rules().rule_count(),
                store = "memory",
                "floodgate serving"
            );
            server::serve(limiter, listeners, shutdown).await?;
        }
    }
    tracing::info!("floodgate stopped");
    Ok(())
}

async fn sweep_memory(limiter: Arc<Limiter<MemoryStore>>, shutdown: shutdown::Shutdown) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => {
                let dropped = limiter.store().sweep_expired();
                if dropped > 0 {
                    tracing::debug!(dropped, "expired counters dropped");
                }
            }
        }
    }
}

pub fn validate(args: ValidateArgs) -> ExitCode {
    let options = LoadOptions {
        default_algorithm: args.default_algorithm.into(),
        merge_domains: args.merge_domain_config,
    };
    match load_rules(&ConfigLocation::Path(args.path.clone()), &options) {
        Ok(rules) => {
            println!("{}: configuration ok", args.path.display());
            for warning in rules.warnings() {
                println!("warning: {warning}");
            }
            for domain in rules.domains() {
                println!("domain {} ({}):", domain.name, domain.sources.join(", "));
                for rule in domain.rules() {
                    println!("  {}", crate::describe::rule_summary(rule));
                }
            }
            ExitCode::SUCCESS
        }
        Err(AppError::Config(errors)) => {
            eprintln!("{} error(s) in {}:", errors.0.len(), args.path.display());
            for error in &errors.0 {
                eprintln!("  {error}");
            }
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

pub async fn check(args: CheckArgs) -> ExitCode {
    match crate::check::run(args).await {
        Ok(over_limit) => {
            if over_limit {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
