//! The HTTP listener (:8080):
//!
//! * `/healthcheck` (added by `server::health`: it follows readiness);
//! * `/json`: envoyproxy/ratelimit's JSON endpoint, a `RateLimitRequest` in proto3 JSON in and the
//!   `RateLimitResponse` out (200 OK, 429 OVER_LIMIT);
//! * `/check` and `/check/<profile>`: for nginx's `auth_request`. The descriptors come from
//!   request headers (`core::policy::http_check::headers`) or from a check profile of the configuration
//!   (`core::policy::http_check::profile`); the answer is 200 (allowed) or the deny status (403, or 401 with
//!   `--http-deny-status 401`), with the rate-limit headers for nginx to copy;
//! * `/authz`, `/authz/<profile>` and `/authz/<profile>/<path>`: the ext_authz check for Envoy's
//!   HTTP ext_authz, Caddy's `forward_auth` and Traefik's `forwardAuth`: 200, or 429 with the
//!   rate-limit headers (`forward_auth`);
//! * `/lease/acquire` and `/lease/release`: concurrency rules' leases for applications (`lease`).
//!
//! Every decision is the limiter's; this module only converts. All share gRPC's in-flight
//! bound (`admission`).

mod admission;
mod auth_request;
mod forward_auth;
mod json;
mod lease;
mod protojson;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::BytesRejection;

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use axum::Router;

use crate::core::decision::error_codes::{ErrorCodes, HttpErrorBody};
use crate::engine::limiter::{LimitError, Limiter};
use crate::server::admission::Admission;
use crate::server::connections::is_body_timeout;
use crate::store::Store;
use crate::telemetry::paced_log::PacedLog;
use crate::telemetry::traces::RemoteParent;

/// The status `/check` answers when a request is over its limits. nginx's `auth_request` passes
/// only 2xx (allow), 401 and 403 on; anything else, 429 included, becomes a 500. So never 429.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DenyStatus {
    #[default]
    Forbidden,
    Unauthorized,
}

impl DenyStatus {
    pub fn status_code(self) -> StatusCode {
        match self {
            DenyStatus::Forbidden => StatusCode::FORBIDDEN,
            DenyStatus::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }
}

/// Settings of the HTTP listener.
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpSettings {
    /// `--http-deny-status`.
    pub deny_status: DenyStatus,
}

struct HttpState<S> {
    limiter: Arc<Limiter<S>>,
    settings: HttpSettings,
    admission: Admission,
}

// By hand: a derived Clone would require `S: Clone`.
impl<S> Clone for HttpState<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
            settings: self.settings,
            admission: self.admission.clone(),
        }
    }
}

pub fn main_routes<S: Store>(
    limiter: Arc<Limiter<S>>,
    settings: HttpSettings,
    admission: Admission,
) -> Router {
    Router::new()
        // `/healthcheck` is added by `server::health` (it follows readiness).
        // Any method, as the reference; nginx's auth_request subrequests are always GET.
        .route("/json", any(json::json_endpoint::<S>))
        .route("/check", any(auth_request::check_by_headers::<S>))
        .route("/check/{profile}", any(auth_request::check_by_profile::<S>))
        .route(
            forward_auth::PREFIX,
            any(forward_auth::check_any_profile::<S>),
        )
        .route(
            "/authz/{profile}",
            any(forward_auth::check_named_profile::<S>),
        )
        .route(
            "/authz/{profile}/",
            any(forward_auth::check_named_profile::<S>),
        )
        .route(
            "/authz/{profile}/{*original}",
            any(forward_auth::check_named_profile::<S>),
        )
        .route("/lease/acquire", post(lease::acquire::<S>))
        .route("/lease/release", post(lease::release::<S>))
        .with_state(HttpState {
            limiter,
            settings,
            admission,
        })
}

/// The caller's trace context (`traceparent`, B3), so the decision's span continues its trace,
/// as on the gRPC path. nginx forwards it only when the subrequest passes it on.
fn trace_parent(headers: &HeaderMap) -> RemoteParent {
    RemoteParent::from_headers(|name| headers.get(name)?.to_str().ok())
}

/// A plain-text answer: `message` and a newline.
fn text_response(status: StatusCode, message: impl std::fmt::Display) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

/// What a request the limiter could not decide gets, as `codes` says
/// (`core::decision::error_codes`): with floodgate's codes 400 with the reason for a request that cannot
/// be decided, 503 when the store is unavailable (nginx turns both into a 500, which its
/// `error_page` then serves fail-open or fail-closed); with the reference's, `400 Bad Request`.
fn limit_error_response(error: &LimitError, codes: ErrorCodes) -> Response {
    let Some(why) = error.undecided() else {
        return admission::overloaded_response();
    };
    if let LimitError::Store(store) = error {
        static STORE_FAILED: PacedLog = PacedLog::every(Duration::from_secs(10));
        if let Some(suppressed) = STORE_FAILED.allow() {
            tracing::warn!(%store, suppressed, "HTTP request not decided: store unavailable");
        }
    }
    let answer = codes.answer(why);
    let status =
        StatusCode::from_u16(answer.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match (answer.http_body, error) {
        (HttpErrorBody::StatusText, _) => {
            text_response(status, status.canonical_reason().unwrap_or_default())
        }
        (HttpErrorBody::Reason, LimitError::Store(store)) => {
            text_response(status, format_args!("rate limit not decided: {store}"))
        }
        (HttpErrorBody::Reason, _) => text_response(status, error),
    }
}

/// A body that could not be read: 408 when it did not arrive within `--body-timeout-ms`,
/// else axum's own answer (400, or 413 beyond the size bound).
fn body_rejection_response(rejection: BytesRejection) -> Response {
    if is_body_timeout(&rejection) {
        let mut response = text_response(StatusCode::REQUEST_TIMEOUT, rejection.body_text());
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return response;
    }
    rejection.into_response()
}
