//! The listeners: gRPC (RLS v3, RLQS and ext_authz), HTTP and the debug port, all stopped by one shutdown signal.
//! Each takes an already-bound listener, so tests start the real server on port 0. Their
//! connections are driven by [`connections`], which bounds how many there are and how long
//! each may take.

pub(crate) mod admin;
pub(crate) mod admission;
pub(crate) mod authz;
pub(crate) mod client_san;
pub(crate) mod connections;
pub(crate) mod convert;
mod debug;
pub(crate) mod grpc;
pub(crate) mod grpc_deadline;
mod grpc_routes;
pub mod health;
mod http;
pub mod in_process;
pub(crate) mod kuadrant;
pub mod limitador_http;
pub mod proto;
pub(crate) mod reference_metrics;
pub(crate) mod rlqs;
mod rlqs_convert;
mod status_page;
pub(crate) mod tls;

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::core::ground::calendar::rfc3339;
use crate::engine::limiter::Limiter;
use crate::engine::reload::ReloadStatus;
use crate::engine::shutdown::Shutdown;
use crate::store::Store;
use connections::{ConnectionLimits, Listener, Protocol};
pub use http::{DenyStatus, HttpSettings};

/// The bound sockets floodgate serves on.
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
    pub debug: TcpListener,
    /// `--debug-pages-addr`: `/rlconfig` on a listener of its own, so the debug port's
    /// `/metrics` can be exposed without the rules. `None`: both on the debug port, as the
    /// reference has them.
    pub debug_pages: Option<TcpListener>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot describe the gRPC services for reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// The operations side of the listeners: readiness, which rules are live, TLS, bounds.
#[derive(Clone, Default)]
pub struct Operations {
    /// Answers grpc.health.v1 and `/healthcheck`.
    pub health: health::Health,
    /// Shown in headers of every debug-port answer (`floodgate-config-version`, …).
    pub reload: Option<Arc<ReloadStatus>>,
    /// TLS on the gRPC listener.
    pub grpc_tls: Option<tls::ServerTls>,
    /// The in-flight bound of ShouldRateLimit and the HTTP decision endpoints (one budget for
    /// both) and its overload answer.
    pub admission: admission::AdmissionSettings,
    /// How many connections each listener holds and how long each may take.
    pub connections: ConnectionLimits,
    /// Whether an unreachable store turns health NOT_SERVING (`health::StoreGate`).
    pub store_gate: health::StoreGate,
    /// RLQS's state, with its defaults and bounds (shared with the exchange between
    /// floodgates, when they share a store).
    pub rlqs: Arc<crate::engine::rlqs::QuotaBoard>,
    /// `--grpc-reflection=false`: the gRPC listener serves no reflection.
    pub without_grpc_reflection: bool,
    /// `--limitador-limits`: kuadrant.service.ratelimit.v1 on the gRPC listener, and Envoy's
    /// RLS for the domains that are its namespaces.
    pub limitador: Option<Arc<crate::engine::limitador::Limitador>>,
    /// Where the gRPC listener runs its calls (`--grpc-call-tasks`).
    pub grpc_calls: connections::CallTasks,
}

/// Serves until `shutdown` fires, then stops accepting and lets calls in flight finish.
pub async fn serve<S: Store>(
    limiter: Arc<Limiter<S>>,
    listeners: Listeners,
    http_settings: HttpSettings,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    serve_with(
        limiter,
        listeners,
        http_settings,
        shutdown,
        Operations::default(),
    )
    .await
}

/// `serve`, with health, reload status, TLS and bounds from `operations`.
pub async fn serve_with<S: Store>(
    limiter: Arc<Limiter<S>>,
    listeners: Listeners,
    http_settings: HttpSettings,
    shutdown: Shutdown,
    operations: Operations,
) -> Result<(), ServeError> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    follow_health(health_reporter, &limiter, &operations, &shutdown).await;
    let admission = admission::Admission::new(operations.admission);
    let rls = grpc::RateLimitGrpc::admitted_server(
        Arc::clone(&limiter),
        operations.limitador.clone(),
        &admission,
    );
    let grpc_routes = tonic::service::Routes::new(rls.clone())
        .add_service(rlqs::RateLimitQuotaGrpc::server(
            Arc::clone(&limiter),
            Arc::clone(&operations.rlqs),
            shutdown.clone(),
        ))
        .add_service(health_service)
        .add_service(authz::grpc::AuthorizationGrpc::admitted_server(
            Arc::clone(&limiter),
            &admission,
        ));
    let grpc_routes = match &operations.limitador {
        Some(limitador) => {
            grpc_routes.add_service(kuadrant::KuadrantGrpc::server(Arc::clone(limitador)))
        }
        None => grpc_routes,
    };
    let grpc_routes = with_reflection(grpc_routes, !operations.without_grpc_reflection)?;
    let limits = operations.connections;
    let grpc_routes = grpc_routes::GrpcRoutes::with_rls_first(rls, grpc_routes);
    let grpc = serve_grpc(grpc_routes, listeners.grpc, &operations, shutdown.clone());
    let http_routes = http::main_routes(Arc::clone(&limiter), http_settings, admission)
        .merge(health::healthcheck_routes(operations.health.clone()));
    let http = connections::serve(
        http1_listener("http", listeners.http),
        http_routes,
        limits,
        shutdown.clone(),
    );
    let debug = serve_debug(
        limiter,
        (listeners.debug, listeners.debug_pages),
        &operations,
        shutdown,
    );
    tokio::join!(grpc, http, debug);
    Ok(())
}

/// Keeps grpc.health.v1 and the readiness of the store in step with `operations.health`.
/// The readiness service is registered before the listener answers: an early check must
/// hear a status, not "service not registered" (NotFound), which the mirror task would
/// otherwise race.
async fn follow_health<S: Store>(
    reporter: tonic_health::server::HealthReporter,
    limiter: &Arc<Limiter<S>>,
    operations: &Operations,
    shutdown: &Shutdown,
) {
    reporter
        .set_service_status(
            health::READINESS_SERVICE,
            operations.health.serving_status(),
        )
        .await;
    tokio::spawn(health::mirror_to_grpc(
        operations.health.clone(),
        reporter,
        shutdown.clone(),
    ));
    tokio::spawn(health::poll_store(
        Arc::clone(limiter),
        operations.health.clone(),
        operations.store_gate,
        shutdown.clone(),
    ));
}

/// `routes` with grpc.reflection v1 and v1alpha added when `reflect` (not
/// `--grpc-reflection=false`).
fn with_reflection(
    routes: tonic::service::Routes,
    reflect: bool,
) -> Result<tonic::service::Routes, ServeError> {
    if !reflect {
        return Ok(routes);
    }
    let (reflection_v1, reflection_v1alpha) = reflection_services()?;
    Ok(routes
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha))
}

/// The gRPC listener: HTTP/2, TLS as `operations` say, each call under its deadline.
async fn serve_grpc<S: Store>(
    routes: grpc_routes::GrpcRoutes<
        proto::rate_limit_service_server::RateLimitServiceServer<grpc::RateLimitGrpc<S>>,
        tonic::service::Routes,
    >,
    socket: TcpListener,
    operations: &Operations,
    shutdown: Shutdown,
) {
    let service = grpc_deadline::GrpcDeadline::new(routes, operations.admission.default_deadline);
    let listener = Listener {
        name: "grpc",
        socket,
        protocol: Protocol::Http2 {
            max_streams: operations.admission.streams_per_connection(),
            calls: operations.grpc_calls,
        },
        tls: operations.grpc_tls.clone(),
        connect_info: false,
    };
    connections::serve(listener, service, operations.connections, shutdown).await;
}

/// The debug port (`/metrics`, and `/rlconfig` unless `--debug-pages-addr` gives the pages a
/// listener of their own), every answer with the reload headers.
async fn serve_debug<S: Store>(
    limiter: Arc<Limiter<S>>,
    (debug, debug_pages): (TcpListener, Option<TcpListener>),
    operations: &Operations,
    shutdown: Shutdown,
) {
    let limits = operations.connections;
    let with_headers = |routes: axum::Router| match &operations.reload {
        Some(status) => with_reload_headers(routes, Arc::clone(status)),
        None => routes,
    };
    let pages = debug::page_routes(
        limiter,
        operations.reload.clone(),
        operations.health.clone(),
    );
    let (debug_routes, pages) = match debug_pages {
        Some(socket) => (
            debug::metrics_routes(false),
            Some((socket, pages.merge(debug::pages_index()))),
        ),
        None => (debug::metrics_routes(true).merge(pages), None),
    };
    let debug = connections::serve(
        http1_listener("debug", debug),
        with_headers(debug_routes),
        limits,
        shutdown.clone(),
    );
    let pages = async {
        if let Some((socket, routes)) = pages {
            connections::serve(
                http1_listener("debug_pages", socket),
                with_headers(routes),
                limits,
                shutdown,
            )
            .await;
        }
    };
    tokio::join!(debug, pages);
}

/// An HTTP/1 listener without TLS.
pub fn http1_listener(name: &'static str, socket: TcpListener) -> Listener {
    Listener {
        name,
        socket,
        protocol: Protocol::Http1,
        tls: None,
        connect_info: false,
    }
}

/// grpc.reflection v1 and v1alpha (grpcurl asks for either), describing every service of the
/// gRPC port: RLS, RLQS, ext_authz and health.
#[allow(clippy::type_complexity)]
fn reflection_services() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    ServeError,
> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::ENVOY_API_FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// Adds the live configuration version to every answer of the debug port:
/// `floodgate-config-version`, `floodgate-config-loaded-at`,
/// `floodgate-config-reload-failures`, `floodgate-config-source` (`file` or `xds`) and
/// `floodgate-config-source-version` (the xDS `version_info`; for files the version again)
/// (`curl -i …/rlconfig`).
fn with_reload_headers(routes: axum::Router, status: Arc<ReloadStatus>) -> axum::Router {
    routes.layer(axum::middleware::map_response(
        move |mut response: axum::response::Response| {
            let snapshot = status.snapshot();
            async move {
                let headers = response.headers_mut();
                let source_version = snapshot
                    .origin
                    .version_of(snapshot.version)
                    .unwrap_or_default();
                for (name, value) in [
                    ("floodgate-config-version", snapshot.version.to_string()),
                    ("floodgate-config-loaded-at", rfc3339(snapshot.loaded_at)),
                    (
                        "floodgate-config-reload-failures",
                        snapshot.failures.to_string(),
                    ),
                    (
                        "floodgate-config-source",
                        snapshot.origin.label().to_owned(),
                    ),
                    ("floodgate-config-source-version", source_version),
                ] {
                    if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
                        headers.insert(name, value);
                    }
                }
                response
            }
        },
    ))
}
