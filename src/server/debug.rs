//! The debug listener (:6070): `/metrics`, and `/rlconfig` unless `--debug-pages-addr` moves it
//! to a listener of its own.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::core::policy::adjustment::{
    adjusted_quota, Adjustment, AdjustmentSource, Adjustments, AdjustmentsAt,
};
use crate::core::policy::describe::{rule_summary, window_text};
use crate::core::policy::rules::Rule;
use crate::engine::limiter::Limiter;
use crate::engine::reload::ReloadStatus;
use crate::server::health::Health;
use crate::store::Store;

/// What `/rlconfig` reads: the live rules, and which version they are when reloads are on.
struct LiveConfig<S> {
    limiter: Arc<Limiter<S>>,
    reload: Option<Arc<ReloadStatus>>,
    health: Health,
}

/// `/metrics`, and with `index` a `/` that lists it and `/rlconfig` (served beside it).
pub fn metrics_routes(with_pages: bool) -> Router {
    let index = if with_pages {
        "/rlconfig: the live rules\n/metrics: Prometheus metrics\n"
    } else {
        "/metrics: Prometheus metrics\n"
    };
    Router::new()
        .route("/", get(move || async move { index }))
        .route("/metrics", get(prometheus_metrics))
}

/// `/rlconfig`, which lists every rule and its values: on the debug port, or on
/// `--debug-pages-addr` (with a `/` of its own) so whoever may scrape need not read the rules.
pub fn page_routes<S: Store>(
    limiter: Arc<Limiter<S>>,
    reload: Option<Arc<ReloadStatus>>,
    health: Health,
) -> Router {
    let status = super::status_page::routes(Arc::clone(&limiter), reload.clone(), health.clone());
    Router::new()
        .route("/rlconfig", get(rlconfig::<S>))
        .with_state(Arc::new(LiveConfig {
            limiter,
            reload,
            health,
        }))
        .merge(status)
}

/// The `/` of a `--debug-pages-addr` listener.
pub fn pages_index() -> Router {
    Router::new().route("/", get(|| async { "/rlconfig: the live rules\n" }))
}

/// Every metric in the Prometheus text format (version 0.0.4).
async fn prometheus_metrics() -> impl IntoResponse {
    exposition(crate::telemetry::metrics::render().map_err(|error| error.to_string()))
}

/// A rendered registry as the Prometheus text format's answer, or the error that stopped it.
pub(super) fn exposition(rendered: Result<String, String>) -> impl IntoResponse {
    match rendered {
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
/// and the file it came from, and, for a rule whose limit is adjusted at run time, the limit in
/// force and why. Overrides whose rule is not in the configuration end it as `#` lines.
async fn rlconfig<S: Store>(State(live): State<Arc<LiveConfig<S>>>) -> String {
    let rules = live.limiter.rules();
    let adjustments = live.limiter.adjustments();
    let now = adjustments.now_unix_ms();
    let snapshot = adjustments.snapshot();
    let mut dump = String::new();
    if let Some(reload) = &live.reload {
        let _ = writeln!(dump, "# {}", reload.snapshot());
    }
    if !live.health.store_reachable() {
        let _ = writeln!(
            dump,
            "# store {} unreachable since the last check: calls are answered by the failure \
             policy, or fail",
            live.limiter.store().backend()
        );
    }
    for domain in rules.domains() {
        for rule in domain.rules() {
            let _ = write!(dump, "{} (from {})", rule_summary(rule), rule.source);
            if let Some(adjustment) = adjust_now(&snapshot, &domain.name, rule, now) {
                let _ = write!(dump, " {}", effective_summary(rule, adjustment, now));
            }
            dump.push('\n');
        }
    }
    for record in adjustments.overrides() {
        let in_force = rules
            .domain(&record.domain)
            .and_then(|domain| domain.rule_by_path(&record.rule))
            .is_some_and(|rule| rule.limits.len() > record.limit_index);
        if !in_force {
            let _ = writeln!(
                dump,
                "# override {} of {}: inactive: rule not in the current config ({}s left)",
                record.id,
                record.rule,
                record
                    .expires_at_unix_ms
                    .saturating_sub(now)
                    .div_ceil(1_000)
            );
        }
    }
    dump
}

fn adjust_now<'a>(
    adjustments: &'a Adjustments,
    domain: &str,
    rule: &Rule,
    now_unix_ms: u64,
) -> Option<&'a Adjustment> {
    AdjustmentsAt {
        adjustments,
        now_unix_ms,
    }
    .for_rule(domain, rule)
}

/// `effective 5/1s by override ovr-… (540s left: "incident 42")` or
/// `effective 80/1s by adaptive (signal p95)`.
fn effective_summary(rule: &Rule, adjustment: &Adjustment, now_unix_ms: u64) -> String {
    let Some(configured) = rule.limits.get(adjustment.limit_index) else {
        return String::new();
    };
    let effective = adjusted_quota(configured, adjustment.requests_per_unit);
    let mut line = format!(
        "effective {}/{}",
        effective.requests_per_unit,
        window_text(&effective)
    );
    if let Some(burst) = effective.burst {
        let _ = write!(line, " burst {burst}");
    }
    match &adjustment.source {
        AdjustmentSource::Override {
            id,
            reason,
            expires_at_unix_ms,
        } => {
            let left = expires_at_unix_ms
                .saturating_sub(now_unix_ms)
                .div_ceil(1_000);
            let _ = write!(line, " by override {id} ({left}s left: {reason:?})");
        }
        AdjustmentSource::Adaptive { signal } => {
            let _ = write!(line, " by adaptive (signal {signal})");
        }
    }
    line
}
