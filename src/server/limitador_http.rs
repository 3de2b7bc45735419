//! Limitador's HTTP API on a listener of its own (`--limitador-http-addr`): `POST /check`,
//! `/report` and `/check_and_report` with `{namespace, values, delta}`, and `GET
//! /counters/{namespace}` and `/limits/{namespace}`, answered as Limitador answers them (200
//! with `null`, 429 when limited, 500 when the call fails, a failing Redis included).
//! `values` is bound as Limitador binds it: `descriptors[0]`. Its own listener, because
//! floodgate's `/check` (nginx's `auth_request`) takes any method on the main HTTP port.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::engine::limitador::expression::Bindings;
use crate::engine::limitador::limits_file::Limit;
use crate::engine::limitador::{CounterAnswer, Limitador};
use crate::engine::shutdown::Shutdown;
use crate::server::connections::{self, ConnectionLimits};

/// Limitador's `CheckAndReportInfo`.
#[derive(Debug, Deserialize)]
struct CallInfo {
    namespace: String,
    #[serde(default)]
    values: HashMap<String, String>,
    delta: u64,
}

/// A limit as `GET /limits/{namespace}` lists it.
#[derive(Debug, Serialize)]
struct LimitView {
    id: Option<String>,
    namespace: String,
    max_value: u64,
    seconds: u64,
    name: Option<String>,
    conditions: Vec<String>,
    variables: Vec<String>,
}

impl From<&Limit> for LimitView {
    fn from(limit: &Limit) -> Self {
        let sources = |expressions: &[crate::engine::limitador::expression::Expression]| {
            expressions
                .iter()
                .map(|expression| expression.source().to_owned())
                .collect()
        };
        Self {
            id: limit.id.clone(),
            namespace: limit.namespace.clone(),
            max_value: limit.max_value,
            seconds: limit.seconds,
            name: limit.name.clone(),
            conditions: sources(&limit.conditions),
            variables: sources(&limit.variables),
        }
    }
}

/// A counter as `GET /counters/{namespace}` lists it.
#[derive(Debug, Serialize)]
struct CounterView {
    limit: LimitView,
    set_variables: BTreeMap<String, String>,
    remaining: Option<u64>,
    expires_in_seconds: Option<u64>,
}

impl From<&CounterAnswer> for CounterView {
    fn from(counter: &CounterAnswer) -> Self {
        Self {
            limit: LimitView::from(counter.limit.as_ref()),
            set_variables: counter.values.clone(),
            remaining: Some(counter.remaining),
            expires_in_seconds: Some(counter.expires_in.as_secs()),
        }
    }
}

/// Serves Limitador's HTTP API for `limitador` on `socket` until `shutdown`.
pub async fn serve(
    socket: TcpListener,
    limitador: Arc<Limitador>,
    limits: ConnectionLimits,
    shutdown: Shutdown,
) {
    let routes = Router::new()
        .route("/check", post(check))
        .route("/report", post(report))
        .route("/check_and_report", post(check_and_report))
        .route("/counters/{namespace}", get(counters))
        .route("/limits/{namespace}", get(limits_of))
        .with_state(limitador);
    let listener = super::http1_listener("limitador_http", socket);
    connections::serve(listener, routes, limits, shutdown).await;
}

fn json(status: StatusCode, body: &impl Serialize) -> Response {
    let text = serde_json::to_string(body).unwrap_or_else(|_| "null".to_owned());
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// The namespace, bindings and delta of a call's body, or why it cannot be read.
fn call_info(body: &Bytes) -> Result<(String, Bindings, u64), String> {
    let info: CallInfo = serde_json::from_slice(body).map_err(|error| {
        format!("expected {{\"namespace\": …, \"values\": {{…}}, \"delta\": N}}: {error}")
    })?;
    Ok((
        info.namespace,
        Bindings::descriptors(vec![info.values]),
        info.delta,
    ))
}

fn bad_request(why: String) -> Response {
    (StatusCode::BAD_REQUEST, why).into_response()
}

fn failed(error: &impl std::fmt::Display) -> Response {
    tracing::error!(%error, "a call of Limitador's HTTP API failed");
    (StatusCode::INTERNAL_SERVER_ERROR, "Internal server error").into_response()
}

async fn decide(limitador: &Limitador, body: &Bytes, apply: bool) -> Response {
    let (namespace, bindings, delta) = match call_info(body) {
        Ok(call) => call,
        Err(why) => return bad_request(why),
    };
    match limitador.check(&namespace, bindings, delta, apply).await {
        Ok(answer) if answer.limited => json(StatusCode::TOO_MANY_REQUESTS, &()),
        Ok(_) => json(StatusCode::OK, &()),
        Err(error) => failed(&error),
    }
}

async fn check(State(limitador): State<Arc<Limitador>>, body: Bytes) -> Response {
    decide(&limitador, &body, false).await
}

async fn check_and_report(State(limitador): State<Arc<Limitador>>, body: Bytes) -> Response {
    decide(&limitador, &body, true).await
}

async fn report(State(limitador): State<Arc<Limitador>>, body: Bytes) -> Response {
    let (namespace, bindings, delta) = match call_info(&body) {
        Ok(call) => call,
        Err(why) => return bad_request(why),
    };
    match limitador.report(&namespace, bindings, delta).await {
        Ok(()) => json(StatusCode::OK, &()),
        Err(error) => failed(&error),
    }
}

async fn counters(
    State(limitador): State<Arc<Limitador>>,
    Path(namespace): Path<String>,
) -> Response {
    match limitador.counters(&namespace).await {
        Ok(counters) => {
            let views: Vec<CounterView> = counters.iter().map(CounterView::from).collect();
            json(StatusCode::OK, &views)
        }
        Err(error) => failed(&error),
    }
}

async fn limits_of(
    State(limitador): State<Arc<Limitador>>,
    Path(namespace): Path<String>,
) -> Response {
    let limits = limitador.limits(&namespace);
    let views: Vec<LimitView> = limits
        .iter()
        .map(|limit| LimitView::from(limit.as_ref()))
        .collect();
    json(StatusCode::OK, &views)
}
