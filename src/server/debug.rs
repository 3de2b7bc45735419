//! The debug listener (:6070): `/rlconfig`.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::Router;

use crate::describe::rule_summary;
use crate::limiter::Limiter;
use crate::store::Store;

pub fn debug_routes<S: Store>(limiter: Arc<Limiter<S>>) -> Router {
    Router::new()
        .route("/", get(|| async { "/rlconfig: the live rules\n" }))
        .route("/rlconfig", get(rlconfig::<S>))
        .with_state(limiter)
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
