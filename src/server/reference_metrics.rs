//! The reference's Prometheus listener (`USE_PROMETHEUS`, at `PROMETHEUS_ADDR` and
//! `PROMETHEUS_PATH`): envoyproxy/ratelimit's stats under the names of its default mapping
//! (`telemetry::reference::stats`), apart from floodgate's own metrics on the debug listener.

use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use super::connections::ConnectionLimits;
use crate::engine::shutdown::Shutdown;
use crate::telemetry::reference::stats as reference_stats;

/// Serves the reference's stats at `path` until shutdown.
pub async fn serve(
    listener: TcpListener,
    path: &str,
    limits: ConnectionLimits,
    shutdown: Shutdown,
) {
    let routes = Router::new().route(path, get(render));
    super::connections::serve(
        super::http1_listener("prometheus", listener),
        routes,
        limits,
        shutdown,
    )
    .await;
}

async fn render() -> impl IntoResponse {
    let rendered = match reference_stats::global() {
        Some(stats) => stats.render().map_err(|error| error.to_string()),
        None => Err("envoyproxy/ratelimit's stats are off".to_owned()),
    };
    super::debug::exposition(rendered)
}
