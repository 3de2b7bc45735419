//! The listeners: gRPC (RLS v3), HTTP and the debug port, all stopped by one shutdown signal.
//! Each takes an already-bound listener, so tests start the real server on port 0.

pub mod convert;
pub mod grpc;
mod debug;
mod http;
pub mod shutdown;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

use crate::limiter::Limiter;
use crate::store::Store;
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
}

/// Serves until `shutdown` fires, then stops accepting and lets calls in flight finish.
pub async fn serve<S: Store>(
    limiter: Arc<Limiter<S>>,
    listeners: Listeners,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let grpc = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(grpc::RateLimitGrpc::server(Arc::clone(&limiter)))
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listeners.grpc),
            shutdown.clone().fired(),
        );
    let http = axum::serve(listeners.http, http::main_routes(Arc::clone(&limiter)))
        .with_graceful_shutdown(shutdown.clone().fired());
    let debug = axum::serve(listeners.debug, debug::debug_routes(limiter))
        .with_graceful_shutdown(shutdown.fired());
    let (grpc, http, debug) = tokio::join!(grpc, http, debug);
    grpc?;
    http?;
    debug?;
    Ok(())
}
