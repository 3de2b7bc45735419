//! The HTTP listener (:8080): `/healthcheck`.

use std::sync::Arc;

use axum::routing::get;
use axum::Router;

use crate::limiter::Limiter;
use crate::store::Store;

pub fn main_routes<S: Store>(limiter: Arc<Limiter<S>>) -> Router {
    Router::new()
        .route("/healthcheck", get(|| async { "OK\n" }))
        .with_state(limiter)
}
