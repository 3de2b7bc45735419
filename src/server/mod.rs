//! The listeners: gRPC (RLS v3), HTTP and the debug port, all stopped by one shutdown signal.
//! Each takes an already-bound listener, so tests start the real server on port 0.

pub mod admin;
pub mod admission;
pub mod convert;
mod debug;
pub mod grpc;
pub mod health;
mod http;
pub mod shutdown;
pub mod tls;

use std::sync::Arc;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;

use crate::limiter::Limiter;
use crate::reload::{rfc3339, ReloadStatus};
use crate::store::Store;
pub use http::{DenyStatus, HttpSettings};
use shutdown::Shutdown;

/// The bound sockets floodgate serves on.
pub struct Listeners {
    pub grpc: TcpListener,
    pub http: TcpListener,
    pub debug: TcpListener,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("gRPC server failed: {0}")]
    Grpc(#[from] tonic::transport::Error),
    #[error("HTTP server failed: {0}")]
    Http(#[from] std::io::Error),
    #[error("cannot describe the gRPC services for reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// The operations side of the listeners: readiness, which rules are live, TLS.
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

/// `serve`, with health, reload status and TLS from `operations`.
pub async fn serve_with<S: Store>(
    limiter: Arc<Limiter<S>>,
    listeners: Listeners,
    http_settings: HttpSettings,
    shutdown: Shutdown,
    operations: Operations,
) -> Result<(), ServeError> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    tokio::spawn(health::mirror_to_grpc(
        operations.health.clone(),
        health_reporter,
        shutdown.clone(),
    ));
    tokio::spawn(health::poll_store(
        Arc::clone(&limiter),
        operations.health.clone(),
        shutdown.clone(),
    ));
    let (reflection_v1, reflection_v1alpha) = reflection_services()?;
    let admission = admission::Admission::new(operations.admission);
    let router = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(operations.admission.streams_per_connection())
        .add_service(grpc::RateLimitGrpc::admitted_server(
            Arc::clone(&limiter),
            &admission,
        ))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    let grpc_listener = listeners.grpc;
    let grpc_stop = shutdown.clone().fired();
    let grpc = async move {
        match operations.grpc_tls {
            Some(grpc_tls) => {
                router
                    .serve_with_incoming_shutdown(tls::incoming(grpc_listener, grpc_tls), grpc_stop)
                    .await
            }
            None => {
                // The builder's tcp_nodelay applies only to listeners tonic binds itself; without
                // it, delayed ACKs add milliseconds to answers that take microseconds.
                let incoming = TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
                router
                    .serve_with_incoming_shutdown(incoming, grpc_stop)
                    .await
            }
        }
    };
    let http_routes = http::main_routes(Arc::clone(&limiter), http_settings, admission)
        .merge(health::healthcheck_routes(operations.health.clone()));
    let http =
        axum::serve(listeners.http, http_routes).with_graceful_shutdown(shutdown.clone().fired());
    let mut debug_routes = debug::debug_routes(limiter, operations.reload.clone());
    if let Some(status) = operations.reload {
        debug_routes = with_reload_headers(debug_routes, status);
    }
    let debug = axum::serve(listeners.debug, debug_routes).with_graceful_shutdown(shutdown.fired());
    let (grpc, http, debug) = tokio::join!(grpc, http, debug);
    grpc?;
    http?;
    debug?;
    Ok(())
}

/// grpc.reflection v1 and v1alpha (grpcurl asks for either), describing the rate-limit and
/// health services.
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
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// Adds the live configuration version to every answer of the debug port:
/// `floodgate-config-version`, `floodgate-config-loaded-at` and
/// `floodgate-config-reload-failures` (`curl -i …/rlconfig`).
fn with_reload_headers(routes: axum::Router, status: Arc<ReloadStatus>) -> axum::Router {
    routes.layer(axum::middleware::map_response(
        move |mut response: axum::response::Response| {
            let snapshot = status.snapshot();
            async move {
                let headers = response.headers_mut();
                for (name, value) in [
                    ("floodgate-config-version", snapshot.version.to_string()),
                    ("floodgate-config-loaded-at", rfc3339(snapshot.loaded_at)),
                    (
                        "floodgate-config-reload-failures",
                        snapshot.failures.to_string(),
                    ),
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
