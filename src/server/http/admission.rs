//! The in-flight bound of the HTTP decision endpoints (`/json`, `/check`, `/check/<profile>`):
//! the same budget as gRPC's (`server::admission::Admission`), taken the same way, without
//! waiting, once the whole request has been read (for `/json`, its body), and held until the
//! handler has its answer. A client that sends its body slowly holds no permit. `/healthcheck` is not bounded: a probe must see an overloaded
//! process as alive.
//!
//! Beyond the bound, `--overload-answer unavailable` is a 503 at once (nginx's `error_page`
//! then applies the location's failure policy, as for a store failure);
//! `ok` and `over_limit` reach the handler as [`Admit::Shed`], which answers in its endpoint's
//! terms without deciding. Each refusal counts in
//! `floodgate_overload_rejections_total{reason="in_flight"}`, like gRPC's.

use axum::http::StatusCode;
use axum::response::Response;
use tokio::sync::OwnedSemaphorePermit;

use super::{text_response, HttpState};
use crate::core::decision::overload::OverloadAnswer;
use crate::server::admission::OVERLOADED_MESSAGE;
use crate::telemetry::metrics::{self, OverloadReason};

/// What a handler may do with its request.
#[derive(Debug)]
pub(super) enum Admit {
    /// Decide; the permit goes when this value does, so keep it until the answer is built.
    Decide { _permit: OwnedSemaphorePermit },
    /// Do not decide: answer `--overload-answer` in the endpoint's terms at once.
    Shed(OverloadAnswer),
}

/// Takes a permit for a request read in full, or says how to answer without one.
pub(super) fn admit<S>(state: &HttpState<S>) -> Admit {
    if let Some(permit) = state.admission.try_admit() {
        return Admit::Decide { _permit: permit };
    }
    metrics::overload_rejected(OverloadReason::InFlight);
    Admit::Shed(state.admission.overload_answer())
}

/// 503 with the reason: what an HTTP caller gets under `--overload-answer unavailable`.
pub(super) fn overloaded_response() -> Response {
    text_response(StatusCode::SERVICE_UNAVAILABLE, OVERLOADED_MESSAGE)
}
