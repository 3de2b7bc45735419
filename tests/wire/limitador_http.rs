//! Limitador's HTTP API on its own listener: POST /check, /report and /check_and_report answer
//! 200 or 429 as Limitador does, `values` bound as `descriptors[0]`; GET /counters/{namespace}
//! and /limits/{namespace} list what Limitador lists.

use std::sync::Arc;

use floodgate::core::arithmetic::held_window::HoldBounds;
use floodgate::engine::limitador::{limits_file, Limitador};
use floodgate::engine::shutdown;
use floodgate::store::held_windows::memory::MemoryHeldWindows;
use floodgate_testkit::http::{request, HttpResponse};
use tokio::net::TcpListener;

const LIMITS: &str = r#"
- namespace: api
  max_value: 2
  seconds: 60
  name: per-user
  conditions:
  - "descriptors[0].method == 'GET'"
  variables:
  - descriptors[0].user
"#;

async fn call(
    port: u16,
    method: &'static str,
    path: &'static str,
    body: &'static str,
) -> HttpResponse {
    let sent = tokio::task::spawn_blocking(move || request(port, method, path, &[], body)).await;
    match sent {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => panic!("{method} {path}: {error}"),
        Err(error) => panic!("{method} {path}: {error}"),
    }
}

const ANN: &str = r#"{"namespace": "api", "values": {"method": "GET", "user": "ann"}, "delta": 1}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limitadors_http_api_answers_as_limitador() {
    let limits = limits_file::parse(LIMITS, "limits.yaml")
        .unwrap_or_else(|error| panic!("test limits do not load: {error}"));
    let limitador = Arc::new(Limitador::new(
        limits,
        Arc::new(MemoryHeldWindows::default()),
        HoldBounds::default(),
    ));
    let socket = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|error| panic!("bind: {error}"));
    let port = socket.local_addr().map(|a| a.port()).unwrap_or_default();
    let (trigger, shutdown) = shutdown::channel();
    tokio::spawn(floodgate::server::limitador_http::serve(
        socket,
        limitador,
        floodgate::server::Operations::default().connections,
        shutdown,
    ));
    assert_eq!(call(port, "POST", "/check", ANN).await.status, 200);
    assert_eq!(
        call(port, "POST", "/check_and_report", ANN).await.status,
        200
    );
    assert_eq!(call(port, "POST", "/report", ANN).await.status, 200);
    assert_eq!(call(port, "POST", "/check", ANN).await.status, 429);
    assert_eq!(
        call(port, "POST", "/check_and_report", ANN).await.status,
        429
    );
    let counters = call(port, "GET", "/counters/api", "").await;
    assert_eq!(counters.status, 200);
    assert!(
        counters.body.contains(r#""remaining":0"#),
        "{}",
        counters.body
    );
    assert!(
        counters.body.contains(r#""descriptors[0].user":"ann""#),
        "{}",
        counters.body
    );
    let limits = call(port, "GET", "/limits/api", "").await;
    assert!(
        limits.body.contains(r#""name":"per-user""#),
        "{}",
        limits.body
    );
    assert_eq!(call(port, "POST", "/check", "{").await.status, 400);
    trigger.fire();
}
