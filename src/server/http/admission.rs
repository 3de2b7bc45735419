//! The in-flight bound of the HTTP decision endpoints (`/json`, `/check`, `/check/<profile>`):
//! the same budget as gRPC's (`server::admission::Admission`), taken the same way, without
//! waiting, as soon as the request's headers are in and before its body is read, and held until
//! the handler has its answer. `/healthcheck` is not bounded: a probe must see an overloaded
//! process as alive.
//!
//! Beyond the bound, `--overload-answer unavailable` is a 503 at once, before the body is read
//! (nginx's `error_page` then applies the location's failure policy, as for a store failure);
//! `ok` and `over_limit` reach the handler as [`Admit::Shed`], which answers in its endpoint's
//! terms without deciding. Each refusal counts in
//! `floodgate_overload_rejections_total{reason="in_flight"}`, like gRPC's.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;
use tokio::sync::OwnedSemaphorePermit;

use super::{text_response, HttpState};
use crate::core::overload::OverloadAnswer;
use crate::server::admission::OVERLOADED_MESSAGE;
use crate::store::Store;
use crate::telemetry::metrics::{self, OverloadReason};

/// What a handler may do with its request.
#[derive(Debug)]
pub(super) enum Admit {
    /// Decide; the permit goes when this value does, so keep it until the answer is built.
    Decide { _permit: OwnedSemaphorePermit },
    /// Do not decide: answer this (`ok` or `over_limit`) at once.
    Shed(OverloadAnswer),
}

impl<S: Store> FromRequestParts<HttpState<S>> for Admit {
    type Rejection = Response;

    async fn from_request_parts(
        _parts: &mut Parts,
        state: &HttpState<S>,
    ) -> Result<Self, Self::Rejection> {
        if let Some(permit) = state.admission.try_admit() {
            return Ok(Admit::Decide { _permit: permit });
        }
        metrics::overload_rejected(OverloadReason::InFlight);
        match state.admission.overload_answer() {
            OverloadAnswer::Unavailable => Err(overloaded_response()),
            answer => Ok(Admit::Shed(answer)),
        }
    }
}

/// 503 with the reason: what an HTTP caller gets under `--overload-answer unavailable`.
pub(super) fn overloaded_response() -> Response {
    text_response(StatusCode::SERVICE_UNAVAILABLE, OVERLOADED_MESSAGE)
}
