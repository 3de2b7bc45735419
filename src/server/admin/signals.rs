//! `POST /v1/signals/{name}` on the admin listener: a pushed signal's value.
//!
//! The body is a bare number (`312.5`) or JSON (`{"value": 312.5}`), in the unit the rules
//! reading the signal name in `signal_unit` (a ratio for an `errors` signal). The admin
//! listener authenticates the caller before this handler runs. With the Redis store the value
//! is shared through Redis (`shared::write_signal`); if Redis cannot take it, the answer is
//! 503 and the pusher should retry.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use crate::engine::adaptive::shared::{write_signal, SharesLimits};
use crate::engine::adaptive::signals::{PushError, PushedSignals};
use crate::engine::limiter::Limiter;

struct PushState<S> {
    signals: Arc<PushedSignals>,
    limiter: Arc<Limiter<S>>,
}

/// The route, for the admin router to merge.
pub fn routes<S: SharesLimits>(signals: Arc<PushedSignals>, limiter: Arc<Limiter<S>>) -> Router {
    Router::new()
        .route("/v1/signals/{name}", post(push::<S>))
        .with_state(Arc::new(PushState { signals, limiter }))
}

async fn push<S: SharesLimits>(
    State(state): State<Arc<PushState<S>>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let value = match value_of(&body) {
        Ok(value) => value,
        Err(message) => return refused(StatusCode::BAD_REQUEST, message),
    };
    match state.signals.push(&name, value) {
        Ok(fresh) => {
            if let Some(redis) = state.limiter.store().shared_limits() {
                if let Err(error) = write_signal(redis, &name, value, fresh).await {
                    let message = format!("the value could not be shared through Redis: {error}");
                    return refused(StatusCode::SERVICE_UNAVAILABLE, message);
                }
            }
            tracing::debug!(signal = %name, value, "signal pushed");
            json(
                StatusCode::OK,
                &serde_json::json!({ "signal": name, "value": value }),
            )
        }
        Err(error @ PushError::Unknown { .. }) => refused(StatusCode::NOT_FOUND, error.to_string()),
        Err(error @ PushError::BadValue { .. }) => {
            refused(StatusCode::BAD_REQUEST, error.to_string())
        }
    }
}

/// `312.5` or `{"value": 312.5}`.
fn value_of(body: &[u8]) -> Result<f64, String> {
    let text = std::str::from_utf8(body).unwrap_or("").trim();
    if let Ok(value) = text.parse::<f64>() {
        return Ok(value);
    }
    let parsed: Option<serde_json::Value> = serde_json::from_str(text).ok();
    match parsed.as_ref().and_then(|json| json.get("value")) {
        Some(serde_json::Value::Number(number)) => number
            .as_f64()
            .ok_or_else(|| format!("the value {number} is out of range")),
        _ => Err(
            "the body must be a number (`312.5`) or JSON with a number in `value` \
             (`{\"value\": 312.5}`)"
                .to_owned(),
        ),
    }
}

fn refused(status: StatusCode, message: String) -> Response {
    json(status, &serde_json::json!({ "error": message }))
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    let text = format!("{body}\n");
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::value_of;

    #[test]
    fn a_bare_number_or_json_with_value() {
        assert_eq!(value_of(b"312.5"), Ok(312.5));
        assert_eq!(value_of(b" 7\n"), Ok(7.0));
        assert_eq!(value_of(br#"{"value": 0.25}"#), Ok(0.25));
        assert_eq!(value_of(br#"{"value": 3, "note": "x"}"#), Ok(3.0));
        for bad in [
            &b""[..],
            b"fast",
            br#"{"value": "3"}"#,
            br#"{"p95": 3}"#,
            b"[3]",
        ] {
            assert!(value_of(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
