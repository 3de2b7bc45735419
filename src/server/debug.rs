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
use crate::store::Store;

pub fn debug_routes<S: Store>(limiter: Arc<Limiter<S>>) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { "/rlconfig: the live rules\n/metrics: Prometheus metrics\n" }),
        )
        .route("/rlconfig", get(rlconfig::<S>))
        .route("/metrics", get(prometheus_metrics))
        .with_state(limiter)
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

/// One line per rule: path, algorithm, limit, flags and the file it came from.
async fn rlconfig<S: Store>(State(limiter): State<Arc<Limiter<S>>>) -> String {
    let rules = limiter.rules();
    let mut dump = String::new();
    for domain in rules.domains() {
        for rule in domain.rules() {
            let _ = writeln!(dump, "{} (from {})", rule_summary(rule), rule.source);
        }
    }
    dump
}
