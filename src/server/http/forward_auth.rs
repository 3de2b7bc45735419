//! The HTTP form of the ext_authz check (`server::authz`), for proxies that call an HTTP
//! endpoint before each request and pass its answer to the client when it is not 2xx:
//!
//! * Caddy's `forward_auth` and Traefik's `forwardAuth` call a fixed URI (`/authz/<profile>`, or
//!   `/authz` to choose the profile by host and path) with `X-Forwarded-Method`,
//!   `X-Forwarded-Uri`, `X-Forwarded-Host`, `X-Forwarded-Proto` and `X-Forwarded-For`;
//! * Envoy's HTTP ext_authz calls with the request's own method and its path appended to the
//!   service's `path_prefix` (`/authz/<profile>` + `/orders?id=1`), and no `X-Forwarded-*`.
//!
//! So `/authz/<profile>/<anything>` takes any method, and the request's attributes come from the
//! `X-Forwarded-*` headers when sent, else from the call itself. The answer is 200 with the
//! rate-limit headers to allow, 429 with them (`Retry-After` among them) and the profile's
//! `deny_body` to refuse: unlike nginx, these proxies hand the client that answer as it is.
//! Errors are 404 (no such profile), 400 (a bad hits header) and 503 (the store failed, under
//! the `error` failure policy, or overloaded), on which the proxy's own policy decides.

use std::borrow::Cow;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;

use super::admission::{admit, overloaded_response, Admit};
use super::{limit_error_response, text_response, trace_parent, HttpState};
use crate::core::decision::error_codes::ErrorCodes;
use crate::core::decision::overload::{overload_reply, OverloadReply};
use crate::server::authz::answer::{Answer, TOO_MANY_REQUESTS};
use crate::server::authz::attributes::RequestAttributes;
use crate::server::authz::plan::{plan, Plan};
use crate::store::Store;

/// Where the routes are; Envoy's `path_prefix` is this and the profile.
pub(super) const PREFIX: &str = "/authz";

/// `/authz`: the profile chosen by host and path.
pub(super) async fn check_any_profile<S: Store>(
    State(state): State<HttpState<S>>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let attributes = attributes(&method, None, &headers);
    decide(&state, None, &attributes, &headers).await
}

/// `/authz/<profile>` and `/authz/<profile>/<original path>`.
pub(super) async fn check_named_profile<S: Store>(
    State(state): State<HttpState<S>>,
    Path(params): Path<Vec<(String, String)>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let Some((_, profile)) = params.first() else {
        return text_response(
            StatusCode::NOT_FOUND,
            "name a check profile: /authz/<profile>",
        );
    };
    let original = original_path(uri.path(), profile, uri.query());
    let attributes = attributes(&method, original, &headers);
    decide(&state, Some(profile), &attributes, &headers).await
}

/// What Envoy appended to `/authz/<profile>`, with the query; `None` when nothing was.
fn original_path(path: &str, profile: &str, query: Option<&str>) -> Option<String> {
    let rest = path
        .strip_prefix(PREFIX)?
        .strip_prefix('/')?
        .strip_prefix(profile)?;
    if rest.is_empty() {
        return None;
    }
    Some(match query {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_owned(),
    })
}

/// The request under check: `X-Forwarded-*` when sent, else the call's own method, path and
/// host.
fn attributes<'h>(
    method: &Method,
    original_path: Option<String>,
    headers: &'h HeaderMap,
) -> RequestAttributes<'h> {
    let forwarded = |name: &str| {
        headers
            .get(name)
            .map(lossy)
            .filter(|value| !value.is_empty())
    };
    RequestAttributes {
        headers: headers
            .iter()
            .map(|(name, value)| (Cow::Borrowed(name.as_str()), lossy(value)))
            .collect(),
        method: forwarded("x-forwarded-method")
            .unwrap_or_else(|| Cow::Owned(method.as_str().to_owned())),
        path: forwarded("x-forwarded-uri")
            .or_else(|| original_path.map(Cow::Owned))
            .unwrap_or_default(),
        authority: forwarded("x-forwarded-host")
            .or_else(|| headers.get(header::HOST).map(lossy))
            .unwrap_or_default(),
        scheme: forwarded("x-forwarded-proto").unwrap_or_default(),
        // The last hop: the address the proxy in front of floodgate saw and appended.
        source_address: forwarded("x-forwarded-for")
            .and_then(|list| {
                let last = list.rsplit(',').next()?.trim().to_owned();
                Some(Cow::Owned(last))
            })
            .unwrap_or_default(),
    }
}

async fn decide<S: Store>(
    state: &HttpState<S>,
    named: Option<&str>,
    attributes: &RequestAttributes<'_>,
    headers: &HeaderMap,
) -> Response {
    let (request, deny_body) = match plan(&state.limiter.rules(), named, attributes) {
        Plan::Decide { request, deny_body } => (request, deny_body),
        Plan::Allow => {
            return respond(Answer::Allowed {
                headers: Vec::new(),
            })
        }
        Plan::UnknownProfile(message) => return text_response(StatusCode::NOT_FOUND, message),
        Plan::Refuse(error) => return text_response(StatusCode::BAD_REQUEST, error),
    };
    let admitted = admit(state);
    if let Admit::Shed(overload) = admitted {
        return match overload_reply(overload, request.descriptors.len()) {
            OverloadReply::Answer(decision) => respond(Answer::of(&decision, &deny_body)),
            OverloadReply::Unavailable => overloaded_response(),
        };
    }
    match state
        .limiter
        .decide_traced(&request, trace_parent(headers))
        .await
    {
        Ok(decision) => respond(Answer::of(&decision, &deny_body)),
        Err(error) => limit_error_response(&error, ErrorCodes::Distinct),
    }
}

/// 200 or 429, with the headers.
fn respond(answer: Answer) -> Response {
    let (mut response, headers) = match answer {
        Answer::Allowed { headers } => (text_response(StatusCode::OK, "OK"), headers),
        Answer::Denied { headers, body } => {
            let status =
                StatusCode::from_u16(TOO_MANY_REQUESTS).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
            let mut response = text_response(status, "");
            *response.body_mut() = body.into();
            (response, headers)
        }
    };
    for (name, value) in headers {
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

fn lossy(value: &HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envoy_appends_the_original_path_to_the_prefix() {
        let path = |full, query| original_path(full, "site", query);
        assert_eq!(
            path("/authz/site/orders/7", Some("a=1")).as_deref(),
            Some("/orders/7?a=1")
        );
        assert_eq!(path("/authz/site/", None).as_deref(), Some("/"));
        assert_eq!(path("/authz/site", None), None);
    }

    #[test]
    fn forwarded_headers_win_over_the_call() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-method", HeaderValue::from_static("DELETE"));
        headers.insert("x-forwarded-uri", HeaderValue::from_static("/items/1"));
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("1.1.1.1, 10.0.0.9"),
        );
        headers.insert(header::HOST, HeaderValue::from_static("floodgate:8080"));
        let read = attributes(&Method::GET, Some("/ignored".to_owned()), &headers);
        assert_eq!(read.get(":method"), Some("DELETE"));
        assert_eq!(read.get(":path"), Some("/items/1"));
        assert_eq!(read.get(":source-address"), Some("10.0.0.9"));
        assert_eq!(read.get(":authority"), Some("floodgate:8080"));
        let none = HeaderMap::new();
        let plain = attributes(&Method::POST, Some("/orders".to_owned()), &none);
        assert_eq!(plain.get(":method"), Some("POST"));
        assert_eq!(plain.get(":path"), Some("/orders"));
    }
}
