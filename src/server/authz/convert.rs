//! Envoy's ext_authz messages (`envoy.service.auth.v3`) to and from the check's own terms.

use std::borrow::Cow;

use envoy_types::pb::envoy::config::core::v3::address;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::r#type::v3::{HttpStatus, StatusCode as HttpStatusCode};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::HttpRequest;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    AttributeContext, CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::google::rpc::Status as RpcStatus;

use crate::core::policy::http_check::selection::PROFILE_CONTEXT_EXTENSION;
use crate::server::authz::answer::Answer;
use crate::server::authz::attributes::RequestAttributes;

/// google.rpc codes of a `CheckResponse`: Envoy lets the request through on OK only.
const RPC_OK: i32 = tonic::Code::Ok as i32;
const RPC_RESOURCE_EXHAUSTED: i32 = tonic::Code::ResourceExhausted as i32;

/// The profile named by the context extension, and the request's attributes.
pub(crate) fn attributes_from_wire(check: &CheckRequest) -> (Option<&str>, RequestAttributes<'_>) {
    let Some(context) = check.attributes.as_ref() else {
        return (None, RequestAttributes::default());
    };
    let named = context
        .context_extensions
        .get(PROFILE_CONTEXT_EXTENSION)
        .map(String::as_str);
    let http = context
        .request
        .as_ref()
        .and_then(|request| request.http.as_ref());
    let attributes = RequestAttributes {
        headers: http.map(headers_of).unwrap_or_default(),
        method: http.map_or_else(Cow::default, |http| Cow::from(http.method.as_str())),
        path: http.map_or_else(Cow::default, |http| Cow::from(http.path.as_str())),
        authority: http.map_or_else(Cow::default, |http| Cow::from(http.host.as_str())),
        scheme: http.map_or_else(Cow::default, |http| Cow::from(http.scheme.as_str())),
        source_address: Cow::from(source_address(context)),
    };
    (named, attributes)
}

/// The headers, from the `headers` map or, when Envoy sends raw ones (`encode_raw_headers`),
/// from `header_map`, whose values may be bytes (read as UTF-8, invalid bytes replaced).
fn headers_of(http: &HttpRequest) -> Vec<(Cow<'_, str>, Cow<'_, str>)> {
    let mut headers: Vec<(Cow<'_, str>, Cow<'_, str>)> = http
        .headers
        .iter()
        .map(|(name, value)| (lower(name), Cow::from(value.as_str())))
        .collect();
    if let Some(raw) = &http.header_map {
        headers.extend(raw.headers.iter().map(|header| {
            let value = if header.raw_value.is_empty() {
                Cow::from(header.value.as_str())
            } else {
                String::from_utf8_lossy(&header.raw_value)
            };
            (lower(&header.key), value)
        }));
    }
    headers
}

fn lower(name: &str) -> Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

/// The downstream peer's IP, as Envoy saw it.
fn source_address(context: &AttributeContext) -> &str {
    let address = context
        .source
        .as_ref()
        .and_then(|peer| peer.address.as_ref())
        .and_then(|address| address.address.as_ref());
    match address {
        Some(address::Address::SocketAddress(socket)) => socket.address.as_str(),
        _ => "",
    }
}

/// The `CheckResponse` for `answer`. Allowed: OK, with the headers in `response_headers_to_add`,
/// which Envoy adds to the response the client gets (`OkHttpResponse.headers` would go to the
/// upstream instead). Refused: RESOURCE_EXHAUSTED and a `DeniedHttpResponse` of 429, whose
/// headers and body Envoy sends the client.
pub(crate) fn answer_to_wire(answer: Answer) -> CheckResponse {
    match answer {
        Answer::Allowed { headers } => CheckResponse {
            status: Some(rpc_status(RPC_OK, "")),
            http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
                response_headers_to_add: header_options(headers),
                ..OkHttpResponse::default()
            })),
            dynamic_metadata: None,
        },
        Answer::Denied { headers, body } => CheckResponse {
            status: Some(rpc_status(RPC_RESOURCE_EXHAUSTED, "over the rate limit")),
            http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                status: Some(HttpStatus {
                    code: HttpStatusCode::TooManyRequests as i32,
                }),
                headers: header_options(headers),
                body,
            })),
            dynamic_metadata: None,
        },
    }
}

fn rpc_status(code: i32, message: &str) -> RpcStatus {
    RpcStatus {
        code,
        message: message.to_owned(),
        details: Vec::new(),
    }
}

/// Each header set once: an upstream's own `RateLimit` headers are replaced, not doubled.
fn header_options(headers: Vec<(String, String)>) -> Vec<HeaderValueOption> {
    headers
        .into_iter()
        .map(|(key, value)| {
            #[allow(deprecated)] // `append`: left unset, as `append_action` replaces it.
            HeaderValueOption {
                header: Some(HeaderValue {
                    key,
                    value,
                    raw_value: Vec::new(),
                }),
                append: None,
                append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
                keep_empty_value: false,
            }
        })
        .collect()
}
