//! `grpc_request`: a `RateLimitRequest` in protobuf, sent to `ShouldRateLimit` as Envoy sends
//! it (one gRPC frame), through tonic's decoding into the limiter on the memory store.
//!
//! Must hold: bytes that decode as a `RateLimitRequest` get a decision (OK, with one status per
//! descriptor and a known overall code) or INVALID_ARGUMENT with a reason; bytes that do not
//! decode get tonic's INTERNAL. Nothing else (no UNKNOWN, no UNAVAILABLE: the memory store
//! cannot fail), no panic.

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use floodgate::server::in_process::grpc_routes;
use prost::Message as _;

use crate::service::{block_on, limiter, send};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// gRPC status codes.
const OK: &str = "0";
const INVALID_ARGUMENT: &str = "3";
const INTERNAL: &str = "13";

pub fn run(data: &[u8]) {
    let decoded = RateLimitRequest::decode(data).ok();
    let router = grpc_routes(limiter());
    let answer = block_on(send(&router, grpc_request(data)));
    let trailers = answer.trailers.as_ref().unwrap_or(&answer.headers);
    let status = grpc_field(trailers, "grpc-status")
        .or_else(|| grpc_field(&answer.headers, "grpc-status"))
        .unwrap_or_else(|| panic!("no grpc-status (HTTP {})", answer.status));
    let message = grpc_field(trailers, "grpc-message").unwrap_or_default();
    match (&decoded, status.as_str()) {
        (Some(request), OK) => check_decision(request, &answer.body),
        (Some(_), INVALID_ARGUMENT) => {
            assert!(!message.is_empty(), "INVALID_ARGUMENT without a reason");
        }
        (None, INTERNAL) => {}
        (decoded, status) => panic!(
            "grpc-status {status} ({message}) for {}",
            match decoded {
                Some(request) => format!("the request {request:?}"),
                None => "bytes that are no RateLimitRequest".to_owned(),
            }
        ),
    }
}

/// One uncompressed gRPC frame holding `message`.
fn grpc_request(message: &[u8]) -> Request<Body> {
    let length = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(message.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(message);
    Request::post(PATH)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Body::from(frame))
        .unwrap_or_else(|error| panic!("cannot build the gRPC request: {error}"))
}

fn grpc_field(headers: &HeaderMap, name: &str) -> Option<String> {
    Some(headers.get(name)?.to_str().ok()?.to_owned())
}

/// An OK answer: one frame holding a `RateLimitResponse` that answers every descriptor.
fn check_decision(request: &RateLimitRequest, body: &[u8]) {
    let message = body
        .get(5..)
        .unwrap_or_else(|| panic!("an OK answer without a gRPC frame: {body:?}"));
    let response = RateLimitResponse::decode(message)
        .unwrap_or_else(|error| panic!("an OK answer that is no RateLimitResponse: {error}"));
    assert!(
        matches!(
            Code::try_from(response.overall_code),
            Ok(Code::Ok | Code::OverLimit)
        ),
        "overall_code {} in {response:?}",
        response.overall_code
    );
    assert_eq!(
        response.statuses.len(),
        request.descriptors.len(),
        "one status per descriptor: {response:?}"
    );
}
