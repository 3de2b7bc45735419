//! `/lease/acquire` and `/lease/release`: concurrency rules for applications (the tier behind
//! the proxy: a worker taking a job, a client library around a call). The body names the
//! rule by its descriptor entries and gives a lease id:
//!
//! ```json
//! {"domain": "backend", "entries": [{"key": "backend", "value": "slow"}], "lease": "job-42"}
//! ```
//!
//! The call is decided as Envoy's start or stream-end call would be (`core::arithmetic::lease::
//! application` builds that request), in the same counter. The answer is JSON: 200
//! `{"code":"OK","rule":…,"remaining":N}` (what the caller's class may still take), or 429
//! `{"code":"OVER_LIMIT","rule":…,"retryAfterMs":…}` with `Retry-After` (seconds, rounded up:
//! when the earliest lease expires, at the latest) and the `--response-headers` fields, the
//! headers the same refusal gets over gRPC (`core::decision::headers`). A release is always 200; an unknown id
//! releases nothing. Errors are as `/json`'s: 400 with the reason (a body that is not such a
//! request, no concurrency rule matching), 503 when the store cannot decide.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::admission::{admit, overloaded_response, Admit};
use super::{
    body_rejection_response, limit_error_response, text_response, trace_parent, HttpState,
};
use crate::core::arithmetic::lease::LeaseAction;
use crate::core::decision::error_codes::ErrorCodes;
use crate::core::decision::response::Response as Decision;
use crate::core::decision::status::Code;
use crate::core::policy::lease_request::{as_request, LeaseRequest};
use crate::core::policy::request::Entry;
use crate::store::Store;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseBody {
    domain: String,
    #[serde(default)]
    entries: Vec<EntryBody>,
    lease: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryBody {
    key: String,
    value: String,
}

const EXAMPLE: &str =
    r#"{"domain": "backend", "entries": [{"key": "backend", "value": "slow"}], "lease": "job-42"}"#;

pub(super) async fn acquire<S: Store>(
    state: State<HttpState<S>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    lease_endpoint(state, headers, body, LeaseAction::Acquire).await
}

pub(super) async fn release<S: Store>(
    state: State<HttpState<S>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    lease_endpoint(state, headers, body, LeaseAction::Release).await
}

async fn lease_endpoint<S: Store>(
    State(state): State<HttpState<S>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    action: LeaseAction,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return body_rejection_response(rejection),
    };
    let asked: LeaseBody = match serde_json::from_slice(&body) {
        Ok(asked) => asked,
        Err(error) => {
            return text_response(
                StatusCode::BAD_REQUEST,
                format_args!("not a lease request ({error}): send {EXAMPLE}"),
            )
        }
    };
    let lease = LeaseRequest {
        domain: asked.domain,
        entries: asked
            .entries
            .into_iter()
            .map(|entry| Entry {
                key: entry.key,
                value: entry.value,
            })
            .collect(),
        lease_id: asked.lease,
    };
    let request = match as_request(&state.limiter.rules(), &lease, action) {
        Ok(request) => request,
        Err(error) => return text_response(StatusCode::BAD_REQUEST, error),
    };
    let _permit = match admit(&state) {
        Admit::Decide { _permit } => _permit,
        // A lease is never answered without being decided: it would be counted nowhere.
        Admit::Shed(_) => return overloaded_response(),
    };
    match state
        .limiter
        .decide_traced(&request, trace_parent(&headers))
        .await
    {
        Ok(decision) => lease_answer(decision),
        Err(error) => limit_error_response(&error, ErrorCodes::Distinct),
    }
}

/// 200 or 429, the descriptor's status as JSON, the answer's headers: the core gives every
/// concurrency refusal `Retry-After` and the header mode's fields, as over gRPC.
fn lease_answer(decision: Decision) -> Response {
    let status = decision.statuses.first();
    let rule = status.and_then(|status| status.rule_path.clone());
    let (code, body) = match decision.overall_code {
        Code::Ok => (
            StatusCode::OK,
            serde_json::json!({
                "code": "OK",
                "rule": rule,
                "remaining": status.map_or(0, |status| status.limit_remaining),
            }),
        ),
        Code::OverLimit => (
            StatusCode::TOO_MANY_REQUESTS,
            serde_json::json!({
                "code": "OVER_LIMIT",
                "rule": rule,
                "retryAfterMs": status
                    .and_then(|status| status.duration_until_reset)
                    .map_or(0, |micros| (micros + 999) / 1000),
            }),
        ),
    };
    let mut response = (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    let headers = response.headers_mut();
    for (name, value) in &decision.response_headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            headers.insert(name, value);
        }
    }
    response
}
