//! `floodgate counters get|reset`: one descriptor's counters, shown or reset through a running
//! floodgate's admin API (`POST /v1/counters/get`, `/v1/counters/reset`), with its bearer
//! token; the answer is printed as the API gives it (JSON).

use std::process::ExitCode;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::cmd::check::parse_descriptor;
use crate::cmd::cli::{CounterTarget, CountersAction, CountersArgs};

/// How long the call may take, connecting included.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Runs the command: 0 when the server answered 200, else 1 (the server's message printed),
/// or the usage code for a malformed descriptor.
pub async fn main(args: CountersArgs) -> ExitCode {
    let (path, target) = match &args.action {
        CountersAction::Get(target) => ("/v1/counters/get", target),
        CountersAction::Reset(target) => ("/v1/counters/reset", target),
    };
    let body = match request_body(target) {
        Ok(body) => body,
        Err(message) => {
            eprintln!("floodgate: {message}");
            return ExitCode::from(crate::cmd::EXIT_USAGE);
        }
    };
    match call(target, path, body).await {
        Ok((200, answer)) => {
            print!("{answer}");
            ExitCode::SUCCESS
        }
        Ok((status, answer)) => {
            eprintln!(
                "floodgate: the admin API answered {status}: {}",
                answer.trim()
            );
            ExitCode::FAILURE
        }
        Err(message) => {
            eprintln!("floodgate: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `{"domain": …, "descriptor": [{"key": …, "value": …}, …]}`.
fn request_body(target: &CounterTarget) -> Result<String, String> {
    let descriptor = parse_descriptor(&target.descriptor).map_err(|error| error.to_string())?;
    let entries: Vec<serde_json::Value> = descriptor
        .entries
        .iter()
        .map(|entry| serde_json::json!({ "key": entry.key, "value": entry.value }))
        .collect();
    Ok(serde_json::json!({ "domain": target.domain, "descriptor": entries }).to_string())
}

/// The token: the file's first non-empty line.
fn token(target: &CounterTarget) -> Result<String, String> {
    let path = &target.admin_token_file;
    let text = std::fs::read_to_string(path).map_err(|error| {
        format!(
            "cannot read the admin token file {}: {error}",
            path.display()
        )
    })?;
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("the admin token file {} holds no token", path.display()))
}

/// POSTs `body` to `path`: the status and the answer's text.
async fn call(target: &CounterTarget, path: &str, body: String) -> Result<(u16, String), String> {
    let token = token(target)?;
    let addr = target.admin_addr;
    let request = hyper::Request::post(format!("http://{addr}{path}"))
        .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| format!("cannot build the request: {error}"))?;
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let exchange = async {
        let response = client.request(request).await.map_err(|error| {
            format!(
                "cannot reach the admin API at {addr}: {error} (is floodgate running with \
                 --admin-token-file? pass --admin-addr HOST:PORT)"
            )
        })?;
        let status = response.status().as_u16();
        let answer = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|error| format!("cannot read the admin API's answer: {error}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&answer).into_owned()))
    };
    tokio::time::timeout(CALL_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the admin API at {addr} did not answer within {CALL_TIMEOUT:?}"
            ))
        })
}
