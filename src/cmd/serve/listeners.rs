//! The ports `serve` listens on: their addresses from the flags or envoyproxy/ratelimit's
//! variables, and every port bound before the store is chosen, with an error that names the
//! setting to change when a port is taken. A port bound is listened on only once the store is
//! ready ([`BoundPort::listen`]): while floodgate waits for Redis at start, a client is refused
//! at once, as by envoyproxy/ratelimit (whose ports open after Redis answered), instead of
//! waiting on a connection nothing would answer.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};

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

/// Connections a listener holds for accepting: tokio's own `TcpListener::bind` backlog.
const BACKLOG: u32 = 1024;

/// A port held by this process and not yet listened on: connections to it are refused.
pub(super) struct BoundPort {
    socket: TcpSocket,
    addr: SocketAddr,
    spec: &'static ListenerSpec,
}

impl BoundPort {
    /// Starts accepting connections.
    pub(super) fn listen(self) -> Result<TcpListener, AppError> {
        let Self { socket, addr, spec } = self;
        socket
            .listen(BACKLOG)
            .map_err(|source| bind_error(addr, spec, source))
    }
}

/// Binds `addr` as listeners do (`SO_REUSEADDR`, so a restart is not refused for the last
/// run's closing connections); a port another process listens on is refused here.
fn bind(addr: SocketAddr, spec: &'static ListenerSpec) -> Result<BoundPort, AppError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    };
    socket
        .and_then(|socket| {
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            Ok(BoundPort { socket, addr, spec })
        })
        .map_err(|source| bind_error(addr, spec, source))
}

fn bind_error(addr: SocketAddr, spec: &ListenerSpec, source: std::io::Error) -> AppError {
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
}

/// The admin port and its token, ready before the store is chosen.
pub(super) struct AdminSetup {
    pub port: BoundPort,
    pub token: Arc<AdminToken>,
    pub addr: SocketAddr,
}

/// The ports of the three listeners every `serve` opens, and of `--debug-pages-addr`'s.
pub(super) struct ServicePorts {
    grpc: BoundPort,
    http: BoundPort,
    debug: BoundPort,
    debug_pages: Option<BoundPort>,
}

impl ServicePorts {
    /// Listens on every one of them.
    pub(super) fn listen(self) -> Result<Listeners, AppError> {
        Ok(Listeners {
            grpc: self.grpc.listen()?,
            http: self.http.listen()?,
            debug: self.debug.listen()?,
            debug_pages: self.debug_pages.map(BoundPort::listen).transpose()?,
        })
    }
}

/// The admin API's listener, its token and its address.
pub(super) type AdminListener = (TcpListener, Arc<AdminToken>, SocketAddr);

/// Every port of this process, listening: what [`BoundPorts`] become once the limiter is
/// ready.
pub(super) struct OpenListeners {
    pub service: Listeners,
    pub reference_metrics: Option<(TcpListener, String)>,
    pub admin: Option<AdminListener>,
    pub limitador_http: Option<TcpListener>,
}

/// Every port of this process, bound at start.
pub(super) struct BoundPorts {
    pub service: ServicePorts,
    /// The reference's stats port and path, with --use-prometheus.
    pub reference_metrics: Option<(BoundPort, String)>,
    /// The admin API, with --admin-token-file.
    pub admin: Option<AdminSetup>,
    /// Limitador's HTTP API, with --limitador-http-addr.
    pub limitador_http: Option<BoundPort>,
}

impl BoundPorts {
    /// Listens on every one of them.
    pub(super) fn listen(self) -> Result<OpenListeners, AppError> {
        Ok(OpenListeners {
            service: self.service.listen()?,
            reference_metrics: match self.reference_metrics {
                Some((port, path)) => Some((port.listen()?, path)),
                None => None,
            },
            admin: match self.admin {
                Some(AdminSetup { port, token, addr }) => Some((port.listen()?, token, addr)),
                None => None,
            },
            limitador_http: self.limitador_http.map(BoundPort::listen).transpose()?,
        })
    }
}

/// Every port of this process, bound, and the addresses of the three every `serve` opens.
pub(super) struct BoundListeners {
    pub addresses: ListenAddresses,
    pub ports: BoundPorts,
}

impl BoundListeners {
    pub(super) fn bind(args: &ServeArgs, addresses: ListenAddresses) -> Result<Self, AppError> {
        let debug_pages = args
            .debug_pages_addr
            .map(|addr| bind(addr, &DEBUG_PAGES))
            .transpose()?;
        let service = ServicePorts {
            grpc: bind(addresses.grpc, &GRPC)?,
            http: bind(addresses.http, &HTTP)?,
            debug: bind(addresses.debug, &DEBUG)?,
            debug_pages,
        };
        let reference_metrics = if args.use_prometheus {
            let port = bind(args.prometheus_addr, &PROMETHEUS)?;
            Some((port, args.prometheus_path.clone()))
        } else {
            None
        };
        let admin = match &args.admin_token_file {
            Some(path) => Some(AdminSetup {
                token: Arc::new(AdminToken::load(path)?),
                port: bind(args.admin_addr, &ADMIN)?,
                addr: args.admin_addr,
            }),
            None => None,
        };
        let limitador_http = args
            .limitador
            .limitador_http_addr
            .map(|addr| bind(addr, &LIMITADOR_HTTP))
            .transpose()?;
        Ok(Self {
            addresses,
            ports: BoundPorts {
                service,
                reference_metrics,
                admin,
                limitador_http,
            },
        })
    }
}

/// The connection bounds of every listener, `--max-connections` fitted to RLIMIT_NOFILE for
/// the listeners this process opens.
pub(super) fn connection_limits(args: &ServeArgs, admin: bool) -> ConnectionLimits {
    let listeners = 3
        + u32::from(admin)
        + u32::from(args.debug_pages_addr.is_some())
        + u32::from(args.use_prometheus)
        + u32::from(args.limitador.limitador_http_addr.is_some());
    let mut limits = args.connections.limits();
    limits.max_connections = crate::server::connections::descriptors::fit_max_connections(
        limits.max_connections,
        listeners,
    );
    limits
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    #[tokio::test]
    async fn a_bound_port_refuses_connections_until_it_listens() {
        let port = bind(loopback(), &GRPC).unwrap();
        let addr = port.socket.local_addr().unwrap();
        let refused = tokio::net::TcpStream::connect(addr).await.unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
        let listener = port.listen().unwrap();
        let (connected, accepted) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        connected.unwrap();
        accepted.unwrap();
    }

    #[tokio::test]
    async fn a_port_another_listener_holds_is_refused_when_bound_naming_the_setting() {
        let holder = TcpListener::bind(loopback()).await.unwrap();
        let addr = holder.local_addr().unwrap();
        let Err(error) = bind(addr, &HTTP) else {
            panic!("{addr} is held: binding it should fail");
        };
        let said = error.to_string();
        assert!(
            said.contains(&addr.to_string())
                && said.contains("HTTP")
                && said.contains("--http-addr")
                && said.contains("another process"),
            "{said}"
        );
    }
}
