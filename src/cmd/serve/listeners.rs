//! The ports `serve` listens on: their addresses from the flags or envoyproxy/ratelimit's
//! variables, and every listener bound before the store is chosen, with an error that names
//! the setting to change when a port is taken.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::cmd::app_error::AppError;
use crate::cmd::cli::{reference_address, ServeArgs};
use crate::server::admin::AdminToken;
use crate::server::connections::ConnectionLimits;
use crate::server::Listeners;

/// The addresses of the three listeners every `serve` opens.
pub(super) struct ListenAddresses {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub debug: SocketAddr,
}

impl ListenAddresses {
    pub(super) fn read(args: &ServeArgs) -> Result<Self, AppError> {
        Ok(Self {
            grpc: listen_address(args.grpc_addr, "GRPC_HOST", "GRPC_PORT", 8081)?,
            http: listen_address(args.http_addr, "HOST", "PORT", 8080)?,
            debug: listen_address(args.metrics_addr, "DEBUG_HOST", "DEBUG_PORT", 6070)?,
        })
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
const LIMITADOR_HTTP: ListenerSpec = ListenerSpec {
    name: "Limitador HTTP API",
    setting: "--limitador-http-addr or FLOODGATE_LIMITADOR_HTTP_ADDR",
};

/// The listener of Limitador's HTTP API.
pub(super) async fn bind_limitador_http(addr: SocketAddr) -> Result<TcpListener, AppError> {
    bind(addr, &LIMITADOR_HTTP).await
}

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

/// The admin listener and its token, ready before the store is chosen.
pub(super) struct AdminSetup {
    pub listener: TcpListener,
    pub token: Arc<AdminToken>,
    pub addr: SocketAddr,
}

/// Every listener of this process, bound.
pub(super) struct BoundListeners {
    pub addresses: ListenAddresses,
    pub listeners: Listeners,
    /// The reference's stats listener and path, with --use-prometheus.
    pub reference_metrics: Option<(TcpListener, String)>,
    /// The admin API, with --admin-token-file.
    pub admin: Option<AdminSetup>,
}

impl BoundListeners {
    pub(super) async fn bind(
        args: &ServeArgs,
        addresses: ListenAddresses,
    ) -> Result<Self, AppError> {
        let debug_pages = match args.debug_pages_addr {
            Some(addr) => Some(bind(addr, &DEBUG_PAGES).await?),
            None => None,
        };
        let listeners = Listeners {
            grpc: bind(addresses.grpc, &GRPC).await?,
            http: bind(addresses.http, &HTTP).await?,
            debug: bind(addresses.debug, &DEBUG).await?,
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
                token: Arc::new(AdminToken::load(path)?),
                listener: bind(args.admin_addr, &ADMIN).await?,
                addr: args.admin_addr,
            }),
            None => None,
        };
        Ok(Self {
            addresses,
            listeners,
            reference_metrics,
            admin,
        })
    }
}

/// The connection bounds of every listener, `--max-connections` fitted to RLIMIT_NOFILE for
/// the listeners this process opens.
pub(super) fn connection_limits(args: &ServeArgs, admin: bool) -> ConnectionLimits {
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
