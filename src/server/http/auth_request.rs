//! `/check` and `/check/<profile>`: the endpoint nginx's `auth_request` calls (see
//! `deploy/nginx/nginx.conf`). nginx passes a subrequest's status on only when it is 2xx (allow),
//! 401 or 403; everything else, 429 included, becomes a 500. So the answer is 200 to allow and
//! the deny status (403, or 401 with `--http-deny-status 401`) to reject, never 429; nginx's
//! `error_page 403 = @ratelimited` turns the rejection into the client's 429.
//!
//! The rate-limit headers are always sent, whatever `--response-headers` says, because the
//! check endpoint is useless to nginx without them: the IETF draft's `RateLimit-Policy` and
//! `RateLimit`, the draft-03 `X-RateLimit-Limit/-Remaining/-Reset` and, when rejected,
//! `Retry-After`; plus what `--response-headers` adds (`RateLimit-Limit/-Remaining/-Reset` in
//! `ratelimit` mode). nginx copies them with `auth_request_set $x $upstream_http_<name>`.
//!
//! Header values are read as UTF-8 with invalid bytes replaced, never refused: a value a client
//! controls must not be able to make the check fail (a fail-open nginx would let it through).
//!
//! Beyond the in-flight bound (`admission`), nothing is decided and the answer follows
//! `--overload-answer` in nginx's terms: `ok` is 200 (allow), `over_limit` the deny status with
//! `Retry-After: 1` and `x-floodgate-overloaded: true` (nginx's `@ratelimited` serves the 429),
//! `unavailable` a 503, on which the location's own failure policy decides (fail open or closed),
//! as when the store is down.

use std::borrow::Cow;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;

use super::admission::{admit, overloaded_response, Admit};
use super::{limit_error_response, text_response, trace_parent, DenyStatus, HttpState};
use crate::core::decision::error_codes::ErrorCodes;
use crate::core::decision::overload::{overload_reply, OverloadReply};
use crate::core::decision::response::Response as Decision;
use crate::core::decision::status::Code;
use crate::core::policy::http_check::headers::{
    request_from_headers, CheckInputError, DESCRIPTOR_HEADER, DOMAIN_HEADER, HITS_HEADER,
};
use crate::core::policy::request::Request;
use crate::server::authz::answer::check_headers;
use crate::server::authz::plan::unknown_profile_message;
use crate::store::Store;
use crate::telemetry::paced_log::{ClientText, PacedLog};

/// Lines about what clients sent: each kind at most once per interval (`telemetry::paced_log`).
const CLIENT_LOG_INTERVAL: Duration = Duration::from_secs(10);
static REFUSED: PacedLog = PacedLog::every(CLIENT_LOG_INTERVAL);
static NOT_DECIDED: PacedLog = PacedLog::every(CLIENT_LOG_INTERVAL);
static UNKNOWN_PROFILE: PacedLog = PacedLog::every(CLIENT_LOG_INTERVAL);

/// `GET /check`: domain and descriptors from `X-RateLimit-Domain` and `X-RateLimit-Descriptor`.
pub(super) async fn check_by_headers<S: Store>(
    State(state): State<HttpState<S>>,
    headers: HeaderMap,
) -> Response {
    let domain = first_value(&headers, DOMAIN_HEADER);
    let descriptors: Vec<String> = headers
        .get_all(DESCRIPTOR_HEADER)
        .iter()
        .map(|value| lossy(value).into_owned())
        .collect();
    let hits = first_value(&headers, HITS_HEADER);
    match request_from_headers(domain.as_deref(), &descriptors, hits.as_deref()) {
        Ok(request) => decide(&state, &request, &headers).await,
        Err(error) => refuse(&error),
    }
}

/// `GET /check/<profile>`: descriptors built by the named check profile from the headers.
pub(super) async fn check_by_profile<S: Store>(
    State(state): State<HttpState<S>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let rules = state.limiter.rules();
    let Some(profile) = rules.check_profile(&name) else {
        return unknown_profile(
            &name,
            rules.check_profiles().iter().map(|p| p.name.as_str()),
        );
    };
    let decoded: Vec<(&str, Cow<'_, str>)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), lossy(value)))
        .collect();
    let request = profile.request(|wanted| {
        decoded
            .iter()
            .find(|(name, _)| *name == wanted)
            .map(|(_, value)| value.as_ref())
    });
    match request {
        // Every descriptor needed a header that was not sent: nothing to limit.
        Ok(request) if request.descriptors.is_empty() => {
            tracing::debug!(profile = %name, "check profile produced no descriptors: allowed");
            text_response(StatusCode::OK, "OK")
        }
        Ok(request) => decide(&state, &request, &headers).await,
        Err(error) => refuse(&error),
    }
}

/// The limiter's answer, or the overload answer beyond the in-flight bound. The permit is held
/// until the answer is built.
async fn decide<S: Store>(
    state: &HttpState<S>,
    request: &Request,
    headers: &HeaderMap,
) -> Response {
    let admitted = admit(state);
    if let Admit::Shed(overload) = admitted {
        return match overload_reply(overload, request.descriptors.len()) {
            OverloadReply::Answer(decision) => answer(&decision, state.settings.deny_status),
            OverloadReply::Unavailable => overloaded_response(),
        };
    }
    match state
        .limiter
        .decide_traced(request, trace_parent(headers))
        .await
    {
        Ok(decision) => answer(&decision, state.settings.deny_status),
        Err(error) => {
            if let Some(suppressed) = NOT_DECIDED.allow() {
                tracing::warn!(
                    error = %ClientText(&error.to_string()),
                    domain = %ClientText(&request.domain),
                    suppressed,
                    "check request not decided"
                );
            }
            limit_error_response(&error, ErrorCodes::Distinct)
        }
    }
}

/// 200 or the deny status, with the headers.
fn answer(decision: &Decision, deny: DenyStatus) -> Response {
    let mut response = match decision.overall_code {
        Code::Ok => text_response(StatusCode::OK, "OK"),
        Code::OverLimit => text_response(deny.status_code(), "OVER_LIMIT"),
    };
    for (name, value) in check_headers(decision) {
        // The core writes header-safe ASCII; anything else is skipped rather than sent broken.
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// 400 with the reason. Logged, since with a fail-open nginx nobody else sees it: nginx answers
/// the client from the upstream and only logs "auth request unexpected status: 400".
fn refuse(error: &CheckInputError) -> Response {
    if let Some(suppressed) = REFUSED.allow() {
        tracing::warn!(
            error = %ClientText(&error.to_string()),
            suppressed,
            "check request refused"
        );
    }
    text_response(StatusCode::BAD_REQUEST, error)
}

fn unknown_profile<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Response {
    let message = unknown_profile_message(name, known);
    if let Some(suppressed) = UNKNOWN_PROFILE.allow() {
        tracing::warn!(profile = %ClientText(name), suppressed, "check for an unknown profile");
    }
    text_response(StatusCode::NOT_FOUND, message)
}

fn first_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|value| lossy(value).into_owned())
}

fn lossy(value: &HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::headers::{response_headers, HeaderMode, PlainHeaderNames};
    use crate::core::decision::overload::{OverloadAnswer, OVERLOADED_HEADER};
    use crate::core::decision::status::{CurrentLimit, DescriptorStatus};
    use crate::core::ground::unit::Unit;

    fn decision(code: Code, configured: HeaderMode) -> Decision {
        let statuses = vec![DescriptorStatus {
            code,
            current_limit: Some(CurrentLimit {
                requests_per_unit: 10,
                unit: Unit::Second,
                unit_multiplier: 1,
                name: Some("per_user".to_owned()),
            }),
            in_flight_limit: None,
            limit_remaining: if code == Code::Ok { 4 } else { 0 },
            duration_until_reset: Some(300_000),
            rule_path: Some("web.user".to_owned()),
            shadowed: false,
            quota: false,
        }];
        Decision {
            overall_code: code,
            response_headers: response_headers(configured, &statuses),
            statuses,
            dynamic_metadata: None,
        }
    }

    fn names(headers: &[(String, String)]) -> Vec<&str> {
        headers.iter().map(|(name, _)| name.as_str()).collect()
    }

    #[test]
    fn headers_are_sent_even_when_none_are_configured() {
        let headers = check_headers(&decision(Code::Ok, HeaderMode::None));
        assert_eq!(
            names(&headers),
            [
                "RateLimit-Policy",
                "RateLimit",
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset"
            ]
        );
        assert_eq!(headers[1].1, "\"per_user\";r=4;t=1");
    }

    #[test]
    fn configured_headers_come_first_and_no_name_twice() {
        let headers = check_headers(&decision(
            Code::OverLimit,
            HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
        ));
        assert_eq!(
            names(&headers),
            [
                "RateLimit-Limit",
                "RateLimit-Remaining",
                "RateLimit-Reset",
                "Retry-After",
                "RateLimit-Policy",
                "RateLimit",
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset"
            ]
        );
    }

    #[test]
    fn the_over_limit_overload_answer_denies_with_retry_after_and_the_overloaded_header() {
        let OverloadReply::Answer(decision) = overload_reply(OverloadAnswer::OverLimit, 2) else {
            panic!("over_limit is an answer");
        };
        let denied = answer(&decision, DenyStatus::Forbidden);
        assert_eq!(denied.status(), StatusCode::FORBIDDEN);
        let header = |name| denied.headers().get(name).map(HeaderValue::as_bytes);
        assert_eq!(header("retry-after"), Some(&b"1"[..]));
        assert_eq!(header(OVERLOADED_HEADER), Some(&b"true"[..]));
    }

    #[test]
    fn rejection_is_the_deny_status_never_429() {
        let denied = answer(
            &decision(Code::OverLimit, HeaderMode::None),
            DenyStatus::Forbidden,
        );
        assert_eq!(denied.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            denied
                .headers()
                .get("retry-after")
                .map(HeaderValue::as_bytes),
            Some(&b"1"[..])
        );
        let unauthorized = answer(
            &decision(Code::OverLimit, HeaderMode::None),
            DenyStatus::Unauthorized,
        );
        assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
        let allowed = answer(&decision(Code::Ok, HeaderMode::Ietf), DenyStatus::Forbidden);
        assert_eq!(allowed.status(), StatusCode::OK);
        assert!(allowed.headers().get("retry-after").is_none());
    }
}
