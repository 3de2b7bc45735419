//! Helpers for the adaptive-limit tests: the effective limit as a check-only call sees it,
//! pushes to the admin API, metrics, and polling with a bound.

use std::future::Future;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitRequest;

use crate::http::{self, HttpResponse};
use crate::prom::{scrape, Scrape};
use crate::rls::{self, Client};

/// The token the admin tests write into their token file.
pub const ADMIN_TOKEN: &str = "adaptive-test-token";

/// The tests' adaptive rule, `pool=checkout` then a `client`, in domain DOMAIN.
pub const DOMAIN: &str = "shop";
pub const RULE: &str = "shop.pool_checkout.client";

/// The labels of RULE's adaptive series.
pub const LABELS: [(&str, &str); 2] = [("domain", DOMAIN), ("rule", RULE)];

/// The entries of client `id` of the checkout pool.
pub fn client(id: &str) -> [(&str, &str); 2] {
    [("pool", "checkout"), ("client", id)]
}

/// A request of one descriptor `entries` charging `hits` (0: check only).
pub fn hits_request(domain: &str, entries: &[(&str, &str)], hits: u64) -> RateLimitRequest {
    let mut request = rls::request(domain, &[entries]);
    if let Some(descriptor) = request.descriptors.first_mut() {
        descriptor.hits_addend = Some(hits);
    }
    request
}

/// The limit in force for `entries`, from `current_limit` of a check-only call (nothing is
/// charged).
pub async fn effective_limit(client: &mut Client, domain: &str, entries: &[(&str, &str)]) -> u32 {
    let response = rls::call(client, hits_request(domain, entries, 0))
        .await
        .unwrap_or_else(|status| panic!("check-only call failed: {status}"));
    response
        .statuses
        .first()
        .and_then(|status| status.current_limit.as_ref())
        .map(|limit| limit.requests_per_unit)
        .unwrap_or_else(|| panic!("no current_limit in {response:?}"))
}

/// The overall code of a call charging `hits` to `entries`.
pub async fn charge(
    client: &mut Client,
    domain: &str,
    entries: &[(&str, &str)],
    hits: u64,
) -> Code {
    let response = rls::call(client, hits_request(domain, entries, hits))
        .await
        .unwrap_or_else(|status| panic!("call failed: {status}"));
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

/// Polls `probe` every 200 ms until `done` holds for its value; returns the value, or panics
/// after `timeout` with the values seen.
pub async fn wait_until<T, P, F>(
    timeout: Duration,
    what: &str,
    mut probe: P,
    mut done: impl FnMut(&T) -> bool,
) -> T
where
    T: std::fmt::Debug,
    P: FnMut() -> F,
    F: Future<Output = T>,
{
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let value = probe().await;
        if done(&value) {
            return value;
        }
        seen.push(value);
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}; saw {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls RULE's limit in force (for client "watch"), calling `before_each` first every time,
/// until `done` holds for it; see `wait_until`.
pub async fn wait_for_limit(
    grpc: &Client,
    timeout: Duration,
    what: &str,
    mut before_each: impl FnMut(),
    done: impl FnMut(&u32) -> bool,
) -> u32 {
    wait_until(
        timeout,
        what,
        || {
            before_each();
            let mut grpc = grpc.clone();
            async move { effective_limit(&mut grpc, DOMAIN, &client("watch")).await }
        },
        done,
    )
    .await
}

/// Waits until RULE's controller has held its limit `more` times beyond now
/// (`floodgate_adaptive_steps_total{change="hold"}`).
pub async fn wait_for_holds(debug_port: u16, timeout: Duration, what: &str, more: f64) {
    let holds = |metrics: &Scrape| {
        metrics
            .get(
                "floodgate_adaptive_steps_total",
                &[("domain", DOMAIN), ("rule", RULE), ("change", "hold")],
            )
            .unwrap_or(0.0)
    };
    let before = holds(&scrape(debug_port));
    wait_until(
        timeout,
        what,
        || async { scrape(debug_port) },
        |metrics| holds(metrics) >= before + more,
    )
    .await;
}

/// POSTs `body` to `/v1/signals/{name}` on the admin port with `token` (none: no header).
pub fn push(admin_port: u16, token: Option<&str>, name: &str, body: &str) -> HttpResponse {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = bearer
        .as_deref()
        .map(|value| vec![("Authorization", value)])
        .unwrap_or_default();
    http::request(
        admin_port,
        "POST",
        &format!("/v1/signals/{name}"),
        &headers,
        body,
    )
    .unwrap_or_else(|error| panic!("POST /v1/signals/{name}: {error}"))
}

/// The debug port's `/rlconfig`.
pub fn rlconfig(debug_port: u16) -> String {
    http::get(debug_port, "/rlconfig", &[])
        .unwrap_or_else(|error| panic!("GET /rlconfig: {error}"))
        .body
}
