//! The command line. Every `serve` flag can also come from an environment variable, and
//! envoyproxy/ratelimit's variables are honoured so an existing deployment starts unchanged.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::core::algorithm::Algorithm;
use crate::core::headers::HeaderMode;

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
    Serve(ServeArgs),
    /// Check configuration files: print every problem (exit 1) or a summary (exit 0).
    Validate(ValidateArgs),
    /// Ask a running floodgate about one request and print each descriptor's status.
    Check(CheckArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreKind {
    /// In this process (one instance; counts are not shared).
    Memory,
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
            HeaderModeArg::Ratelimit => HeaderMode::RateLimit,
            HeaderModeArg::Draft03 => HeaderMode::Draft03,
            HeaderModeArg::Ietf => HeaderMode::Ietf,
        }
    }
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
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub merge_domain_config: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// gRPC listen address [default: 0.0.0.0:8081, or GRPC_HOST:GRPC_PORT].
    #[arg(long, env = "FLOODGATE_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// HTTP listen address [default: 0.0.0.0:8080, or HOST:PORT].
    #[arg(long, env = "FLOODGATE_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,
    /// Metrics and debug listen address [default: 0.0.0.0:6070, or DEBUG_HOST:DEBUG_PORT].
    #[arg(long, env = "FLOODGATE_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Where counters live.
    #[arg(long, env = "FLOODGATE_STORE", value_enum, default_value = "memory")]
    pub store: StoreKind,
    /// Most counters the memory store keeps; beyond it the closest to expiry are evicted.
    #[arg(long, env = "FLOODGATE_MAX_KEYS", default_value_t = 1_000_000)]
    pub max_keys: usize,
    /// Answer OK to everything while still counting and reporting (SHADOW_MODE).
    #[arg(long, env = "SHADOW_MODE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub shadow_mode: bool,
    /// Treat every limited descriptor as a quota (QUOTA_MODE).
    #[arg(long, env = "QUOTA_MODE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub quota_mode: bool,
    /// Rate-limit headers for the proxy to return [default: none, or ratelimit when
    /// LIMIT_RESPONSE_HEADERS_ENABLED=true].
    #[arg(long, env = "FLOODGATE_RESPONSE_HEADERS", value_enum)]
    pub response_headers: Option<HeaderModeArg>,
    /// Most descriptors one request may carry.
    #[arg(long, env = "FLOODGATE_MAX_DESCRIPTORS", default_value_t = 64)]
    pub max_descriptors: usize,
    /// Most entries one descriptor may carry.
    #[arg(long, env = "FLOODGATE_MAX_ENTRIES", default_value_t = 32)]
    pub max_entries: usize,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A YAML file or a directory of them.
    pub path: PathBuf,
    #[arg(long, value_enum, default_value = "fixed-window")]
    pub default_algorithm: AlgorithmArg,
    /// Let several files share one domain (MERGE_DOMAIN_CONFIG).
    #[arg(long, env = "MERGE_DOMAIN_CONFIG", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub merge_domain_config: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The floodgate gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    pub addr: String,
    #[arg(long)]
    pub domain: String,
    /// Hits to charge (0: check only).
    #[arg(long)]
    pub hits: Option<u64>,
    /// Descriptors, each `key=value[,key=value…]` (a bare `key` has an empty value).
    #[arg(required = true)]
    pub descriptors: Vec<String>,
}

/// An address from envoyproxy/ratelimit's HOST/PORT style variables, if either is set.
pub fn reference_address(
    host_var: &str,
    port_var: &str,
    default_port: u16,
) -> Result<Option<SocketAddr>, String> {
    let host = std::env::var(host_var).ok();
    let port = std::env::var(port_var).ok();
    if host.is_none() && port.is_none() {
        return Ok(None);
    }
    let host = host.unwrap_or_else(|| "0.0.0.0".to_owned());
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| format!("{port_var}={port:?} is not a port number (0-65535)"))?,
        None => default_port,
    };
    format!("{host}:{port}")
        .parse()
        .map(Some)
        .map_err(|_| format!("{host_var}={host:?} is not an IP address"))
}
