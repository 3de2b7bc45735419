//! The debug listener (:6070): `/rlconfig` and `/metrics`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::describe::rule_summary;
use crate::limiter::Limiter;
use crate::reload::ReloadStatus;
use crate::store::Store;

/// What `/rlconfig` reads: the live rules, and which version they are when reloads are on.
struct LiveConfig<S> {
    limiter: Arc<Limiter<S>>,
    reload: Option<Arc<ReloadStatus>>,
}

pub fn debug_routes<S: Store>(
    limiter: Arc<Limiter<S>>,
    reload: Option<Arc<ReloadStatus>>,
) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { "/rlconfig: the live rules\n/metrics: Prometheus metrics\n" }),
        )
        .route("/rlconfig", get(rlconfig::<S>))
        .route("/metrics", get(prometheus_metrics))
        .with_state(Arc::new(LiveConfig { limiter, reload }))
}

/// Every metric in the Prometheus text format (version 0.0.4).
async fn prometheus_metrics() -> impl IntoResponse {
    match crate::telemetry::metrics::render() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        ),
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{error}\n"),
        ),
    }
}

/// Which version is live (a `#` line), then one line per rule: path, algorithm, limit, flags
/// and the file it came from.
async fn rlconfig<S: Store>(State(live): State<Arc<LiveConfig<S>>>) -> String {
    let rules = live.limiter.rules();
    let mut dump = String::new();
    if let Some(reload) = &live.reload {
        let _ = writeln!(dump, "# {}", reload.snapshot());
    }
    for domain in rules.domains() {
        for rule in domain.rules() {
            let _ = writeln!(dump, "{} (from {})", rule_summary(rule), rule.source);
        }
    }
    dump
}
