//! `POST /v1/counters/get` and `POST /v1/counters/reset`: what the store holds for one
//! descriptor's counters, and forgetting them (`engine::counters` does both). The body names
//! the descriptor as a request would: `{"domain": "edge", "descriptor": [{"key":
//! "remote_address", "value": "10.0.0.7"}]}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde::Serialize;
use serde_json::Value;

use super::{caller, descriptor_entry, json_error, json_response, MAX_BODY_BYTES};
use crate::core::arithmetic::algorithm::State as CounterState;
use crate::core::ground::time::Micros;
use crate::engine::counters::{CounterDesk, CounterQuery, CounterReading, CounterRefused};
use crate::engine::limiter::Limiter;
use crate::store::Store;

const EXAMPLE: &str = "{\"domain\": \"edge\", \"descriptor\": [{\"key\": \"remote_address\", \
                       \"value\": \"10.0.0.7\"}]}";

/// `/v1/counters/get` and `/v1/counters/reset`, for [`super::serve`].
pub fn routes<S: Store>(limiter: Arc<Limiter<S>>) -> Router {
    Router::new()
        .route("/v1/counters/get", post(read::<S>))
        .route("/v1/counters/reset", post(reset::<S>))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(CounterDesk::new(limiter)))
}

async fn read<S: Store>(State(desk): State<Arc<CounterDesk<S>>>, body: Bytes) -> Response {
    let query = match decode_query(&body) {
        Ok(query) => query,
        Err(message) => return json_error(StatusCode::BAD_REQUEST, message),
    };
    match desk.read(&query).await {
        Ok(reading) => {
            let counters: Vec<CounterView> = reading.counters.iter().map(CounterView::of).collect();
            let mut answer = serde_json::json!({ "domain": query.domain, "counters": counters });
            if let (Some(ban), Some(fields)) = (reading.ban, answer.as_object_mut()) {
                fields.insert(
                    "ban".to_owned(),
                    serde_json::json!({
                        "banned": ban.banned_for > 0,
                        "banned_for_seconds": seconds(ban.banned_for),
                        "strikes": ban.strikes,
                        "level": ban.level,
                    }),
                );
            }
            json_response(StatusCode::OK, &answer)
        }
        Err(refused) => refusal(&refused),
    }
}

async fn reset<S: Store>(
    State(desk): State<Arc<CounterDesk<S>>>,
    extensions: axum::http::Extensions,
    body: Bytes,
) -> Response {
    let query = match decode_query(&body) {
        Ok(query) => query,
        Err(message) => return json_error(StatusCode::BAD_REQUEST, message),
    };
    match desk.reset(&query, &caller(&extensions)).await {
        Ok(removed) => json_response(
            StatusCode::OK,
            &serde_json::json!({ "domain": query.domain, "reset": removed }),
        ),
        Err(refused) => refusal(&refused),
    }
}

fn refusal(refused: &CounterRefused) -> Response {
    let status = match refused {
        CounterRefused::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    };
    json_error(status, refused)
}

/// The body, field by field, each message naming its field and what to send.
fn decode_query(body: &[u8]) -> Result<CounterQuery, String> {
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        format!("the body is not JSON ({error}); send an object like {EXAMPLE}")
    })?;
    let Value::Object(mut fields) = value else {
        return Err(format!("the body must be a JSON object like {EXAMPLE}"));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|key| !["domain", "descriptor"].contains(&key.as_str()))
    {
        return Err(format!(
            "{unknown}: unknown field; the fields are domain and descriptor, e.g. {EXAMPLE}"
        ));
    }
    let domain = match fields.remove("domain") {
        Some(Value::String(domain)) if !domain.is_empty() => domain,
        None | Some(Value::Null) => return Err(format!("domain: missing; e.g. {EXAMPLE}")),
        Some(other) => return Err(format!("domain: must be a non-empty string, not {other}")),
    };
    let entries = match fields.remove("descriptor") {
        Some(Value::Array(entries)) if !entries.is_empty() => entries
            .iter()
            .enumerate()
            .map(|(index, entry)| descriptor_entry(index, entry))
            .collect::<Result<Vec<_>, String>>()?,
        None | Some(Value::Null) => {
            return Err(format!(
                "descriptor: missing; the entries a request would send, e.g. {EXAMPLE}"
            ))
        }
        Some(other) => {
            return Err(format!(
                "descriptor: must be a non-empty list of {{\"key\": …, \"value\": …}}, not \
                 {other}"
            ))
        }
    };
    Ok(CounterQuery { domain, entries })
}

/// One counter as the API shows it.
#[derive(Debug, Serialize)]
struct CounterView {
    rule: String,
    algorithm: &'static str,
    requests_per_unit: u32,
    unit: &'static str,
    unit_multiplier: u32,
    window_seconds: u64,
    capacity: u64,
    /// What the store holds; absent when it holds nothing (a fresh counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    stored: Option<Value>,
    /// As a request of one hit would find the counter now.
    remaining: u64,
    reset_after_seconds: f64,
    one_more_fits: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_seconds: Option<f64>,
}

impl CounterView {
    fn of(reading: &CounterReading) -> Self {
        let quota = &reading.quota;
        let now = &reading.now;
        Self {
            rule: reading.rule.clone(),
            algorithm: quota.algorithm.name(),
            requests_per_unit: quota.requests_per_unit,
            unit: quota.unit.name(),
            unit_multiplier: quota.unit_multiplier,
            window_seconds: quota.window_seconds(),
            capacity: quota.capacity(),
            stored: reading.held.as_ref().map(|held| {
                let mut stored = stored_state(&held.state);
                if let Some(fields) = stored.as_object_mut() {
                    fields.insert("expires_at_unix_us".to_owned(), held.expires_at.into());
                }
                stored
            }),
            remaining: now.snapshot.remaining,
            reset_after_seconds: seconds(now.snapshot.reset_after),
            one_more_fits: now.admitted,
            retry_after_seconds: (!now.admitted).then(|| seconds(now.retry_after)),
        }
    }
}

/// A stored state's fields, named as docs/algorithms.md names them.
fn stored_state(state: &CounterState) -> Value {
    match state {
        CounterState::FixedWindow {
            window_start,
            count,
        } => serde_json::json!({ "window_start_unix_us": window_start, "count": count }),
        CounterState::SlidingWindow {
            window_start,
            previous,
            current,
        } => serde_json::json!({
            "window_start_unix_us": window_start, "previous": previous, "current": current
        }),
        CounterState::Gcra { tat, .. } => serde_json::json!({ "arrival_time_unix_us": tat }),
        CounterState::SlidingLog(log) => serde_json::json!({
            "entries": log.len(),
            "hits": log.iter().map(|(_, hits)| hits).sum::<u64>(),
            "oldest_unix_us": log.front().map(|(time, _)| time),
        }),
    }
}

fn seconds(micros: Micros) -> f64 {
    micros as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_bodies_say_what_to_send() {
        let error = |body: &str| decode_query(body.as_bytes()).err().unwrap_or_default();
        assert!(error("nope").contains("not JSON"));
        assert!(error("[]").contains("JSON object"));
        assert!(error("{\"descriptor\": [{\"key\": \"a\"}]}").starts_with("domain: missing"));
        assert!(error("{\"domain\": \"d\"}").starts_with("descriptor: missing"));
        assert!(error("{\"domain\": \"d\", \"descriptor\": []}").starts_with("descriptor: must"));
        assert!(error("{\"domain\": \"d\", \"descriptor\": [{\"key\": 1}]}")
            .starts_with("descriptor[0].key"));
        assert!(
            error("{\"domain\": \"d\", \"descriptor\": [], \"x\": 1}").starts_with("x: unknown")
        );
        let query = decode_query(
            b"{\"domain\": \"d\", \"descriptor\": [{\"key\": \"k\", \"value\": \"v\"}]}",
        );
        assert_eq!(query.map(|query| query.shown()), Ok("k=v".to_owned()));
    }
}
