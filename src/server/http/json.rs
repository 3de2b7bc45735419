//! `/json`: envoyproxy/ratelimit's JSON endpoint. The body is a `RateLimitRequest` in proto3
//! JSON; the answer is the `RateLimitResponse` in proto3 JSON with 200 (OK) or 429
//! (OVER_LIMIT), or plain text: 400 for a body that is not a request; for a request not decided,
//! what `--error-codes` says (floodgate's: 400 with the reason for one that cannot be decided,
//! 503 when the store is unavailable; the reference's: `400 Bad Request`). Beyond the in-flight
//! bound the answer is `--overload-answer`'s, shaped as gRPC's: 503, or the undecided OK /
//! OVER_LIMIT response.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::admission::{admit, overloaded_response, Admit};
use super::protojson::{request_from_json, response_to_json};
use super::{
    body_rejection_response, limit_error_response, text_response, trace_parent, HttpState,
};
use crate::core::decision::error_codes::{ErrorCodes, HttpErrorBody, Undecided};
use crate::core::decision::overload::{overload_reply, OverloadReply};
use crate::core::decision::response::Response as Decision;
use crate::core::decision::semantics::Traces;
use crate::core::decision::status::Code;
use crate::server::convert::{request_from_wire, response_to_wire};
use crate::store::Store;
use crate::telemetry::traces::{reference_json_span, RemoteParent};

pub(super) async fn json_endpoint<S: Store>(
    State(state): State<HttpState<S>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return body_rejection_response(rejection),
    };
    let codes = state.limiter.settings().error_codes;
    let wire = match request_from_json(&body) {
        Ok(wire) => wire,
        Err(error) => return not_a_request(codes, error),
    };
    // The whole body is in: only now may the request hold a permit, until its answer is built.
    let admitted = admit(&state);
    if let Admit::Shed(answer) = admitted {
        return match overload_reply(answer, wire.descriptors.len()) {
            OverloadReply::Answer(response) => json_answer(response),
            OverloadReply::Unavailable => overloaded_response(),
        };
    }
    let request = request_from_wire(wire);
    let as_the_reference = state.limiter.settings().traces == Traces::AsTheReference;
    // The reference's handler continues no caller's trace.
    let parent = if as_the_reference {
        RemoteParent::none()
    } else {
        trace_parent(&headers)
    };
    let decided = state.limiter.decide_traced(&request, parent).await;
    match decided {
        Ok(response) if as_the_reference => {
            let _remaining = reference_json_span().entered();
            json_answer(response)
        }
        Ok(response) => json_answer(response),
        Err(error) => limit_error_response(&error, codes),
    }
}

/// A body that is not a `RateLimitRequest`: 400, saying why unless `codes` are the reference's,
/// whose handler answers `Bad Request` to any error.
fn not_a_request(codes: ErrorCodes, error: impl std::fmt::Display) -> Response {
    match codes.answer(Undecided::InvalidRequest).http_body {
        HttpErrorBody::Reason => text_response(StatusCode::BAD_REQUEST, error),
        HttpErrorBody::StatusText => text_response(StatusCode::BAD_REQUEST, "Bad Request"),
    }
}

/// 200 or 429 by the overall code, the response in proto3 JSON.
fn json_answer(response: Decision) -> Response {
    let status = match response.overall_code {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::TOO_MANY_REQUESTS,
    };
    let body = response_to_json(&response_to_wire(response));
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
