//! Started as `ratelimit`, traces as envoyproxy/ratelimit makes them: on with `TRACING_ENABLED`,
//! sent by its `TRACING_EXPORTER_PROTOCOL` (OTLP/HTTP by default, or gRPC) to the
//! `OTEL_EXPORTER_OTLP_ENDPOINT` collector, under its `TRACING_SERVICE_*` resource; a gRPC call
//! is the `otelgrpc` server span `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! its decision the child `ShouldRateLimit Execution`, a Redis store call the grandchild `Redis
//! Pipeline Execution`; `/json` starts a trace of its own and adds `NewJsonHandler Remaining
//! Execution`. Real receivers of both transports, the real binary.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls;
use floodgate_testkit::{ratelimit_command, subdir, tempdir, wait_for_port, Running};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use tonic::metadata::MetadataValue;

const RULES: &str = "
domain: edge
descriptors:
  - key: client_id
    rate_limit: {unit: hour, requests_per_unit: 5}
";

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

const SERVER_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const DECISION_SPAN: &str = "ShouldRateLimit Execution";

/// How long spans may take to arrive.
const PROMPTLY: Duration = Duration::from_secs(10);

struct Door {
    process: Running,
    grpc_port: u16,
    http_port: u16,
}

/// `ratelimit` with the reference's layout of `RULES` and `env`.
fn start_door(dir: &Path, env: &[(&str, &str)]) -> Door {
    let config = subdir(dir, "config");
    std::fs::write(config.join("config.yaml"), RULES)
        .unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    let (mut command, (grpc_port, http_port, _)) = ratelimit_command(dir);
    command
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "debug")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_BSP_SCHEDULE_DELAY")
        .env_remove("FLOODGATE_TRACES");
    for (name, value) in env {
        command.env(name, value);
    }
    let process = Running::spawn("ratelimit", &mut command, dir);
    wait_for_port(grpc_port, Duration::from_secs(10), "ratelimit");
    Door {
        process,
        grpc_port,
        http_port,
    }
}

/// One gRPC call for alice, with W3C trace context when `traced`.
async fn call(door: &Door, traced: bool) {
    let mut client = rls::connect(&format!("http://127.0.0.1:{}", door.grpc_port)).await;
    let mut request = tonic::Request::new(rls::request("edge", &[&[("client_id", "alice")]]));
    if traced {
        let parent: MetadataValue<_> = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")
            .parse()
            .unwrap_or_else(|error| panic!("bad metadata: {error}"));
        request.metadata_mut().insert("traceparent", parent);
    }
    let answer = client.should_rate_limit(request).await;
    assert!(answer.is_ok(), "{answer:?}\n{}", door.process.log_text());
}

fn named<'s>(spans: &'s [ReceivedSpan], name: &str) -> Vec<&'s ReceivedSpan> {
    spans.iter().filter(|span| span.span.name == name).collect()
}

fn only<'s>(spans: &'s [ReceivedSpan], name: &str, log: &str) -> &'s ReceivedSpan {
    match named(spans, name).as_slice() {
        [span] => span,
        other => panic!(
            "one {name:?} span expected, got {}: {spans:#?}\n{log}",
            other.len()
        ),
    }
}

fn text(value: &str) -> Value {
    Value::StringValue(value.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_a_call_is_the_references_server_span_decision_and_store_call() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempdir();
    let endpoint = receiver.endpoint();
    let door = start_door(
        dir.path(),
        &[
            ("BACKEND_TYPE", "memory"),
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "gateway"),
            ("TRACING_SERVICE_INSTANCE_ID", "ratelimit-7d9f"),
        ],
    );
    call(&door, true).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| !named(spans, "store.decide").is_empty())
        .await;
    let log = door.process.log_text();
    let server = only(&spans, SERVER_SPAN, &log);
    assert_eq!(server.trace_id_hex(), CALLER_TRACE);
    assert_eq!(server.parent_span_id_hex(), CALLER_SPAN);
    assert_eq!(server.span.kind, SpanKind::Server as i32);
    assert_eq!(server.string("rpc.system"), Some("grpc"));
    assert_eq!(server.string("rpc.method"), Some("ShouldRateLimit"));
    assert_eq!(server.int("rpc.grpc.status_code"), Some(0));
    let decision = only(&spans, DECISION_SPAN, &log);
    assert_eq!(decision.parent_span_id_hex(), server.span_id_hex());
    assert_eq!(decision.span.kind, SpanKind::Internal as i32);
    let store = only(&spans, "store.decide", &log);
    assert_eq!(store.parent_span_id_hex(), decision.span_id_hex());
    assert!(named(&spans, "ShouldRateLimit").is_empty(), "{spans:#?}");
    for (key, value) in [
        ("service.name", "envoy-ratelimit"),
        ("service.namespace", "gateway"),
        ("service.instance.id", "ratelimit-7d9f"),
    ] {
        assert_eq!(server.resource.get(key), Some(&text(value)), "{key}");
    }

    // `/json`: the reference's handler continues no caller's trace.
    let body = r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "client_id", "value": "bob"}]}]}"#;
    let headers = [(
        "traceparent",
        "00-11111111111111111111111111111111-00f067aa0ba902b7-01",
    )];
    let answer = floodgate_testkit::http::request(door.http_port, "POST", "/json", &headers, body)
        .unwrap_or_else(|error| panic!("POST /json: {error}"));
    assert_eq!(answer.status, 200, "{answer:?}");
    let spans = receiver
        .wait_for(PROMPTLY, |spans| {
            named(spans, DECISION_SPAN).len() == 2
                && !named(spans, "NewJsonHandler Remaining Execution").is_empty()
        })
        .await;
    let log = door.process.log_text();
    let remaining = only(&spans, "NewJsonHandler Remaining Execution", &log);
    assert!(
        remaining.span.parent_span_id.is_empty(),
        "a trace of its own"
    );
    let json_decision = named(&spans, DECISION_SPAN)
        .into_iter()
        .find(|span| span.span.parent_span_id.is_empty())
        .unwrap_or_else(|| panic!("/json's decision is a root span: {spans:#?}\n{log}"));
    assert_ne!(
        json_decision.trace_id_hex(),
        "11111111111111111111111111111111"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_references_default_posts_to_v1_traces_with_its_redis_span() {
    let receiver = OtlpReceiver::start_http().await;
    let redis = tokio::task::block_in_place(RedisServer::start);
    let dir = tempdir();
    let endpoint = receiver.endpoint();
    let redis_url = format!("127.0.0.1:{}", redis.port());
    let door = start_door(
        dir.path(),
        &[
            ("TRACING_ENABLED", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &redis_url),
        ],
    );
    call(&door, false).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| {
            !named(spans, "Redis Pipeline Execution").is_empty()
        })
        .await;
    let log = door.process.log_text();
    let decision = only(&spans, DECISION_SPAN, &log);
    let pipeline = only(&spans, "Redis Pipeline Execution", &log);
    assert_eq!(pipeline.parent_span_id_hex(), decision.span_id_hex());
    let server = only(&spans, SERVER_SPAN, &log);
    assert!(
        server.span.parent_span_id.is_empty(),
        "no caller's trace: a root"
    );
    assert!(
        receiver.paths().iter().all(|path| path == "/v1/traces"),
        "{:?}",
        receiver.paths()
    );
    assert_eq!(
        server.resource.get("service.name"),
        Some(&text("RateLimit"))
    );
    assert_eq!(server.resource.get("service.namespace"), Some(&text("")));
    let instance = server.resource.get("service.instance.id");
    assert!(
        matches!(instance, Some(Value::StringValue(id)) if id.len() == 36),
        "a random UUID: {instance:?}"
    );
}

#[test]
fn over_tls_which_floodgate_does_not_send_there_the_door_refuses_to_start() {
    let dir = tempdir();
    let config = subdir(dir.path(), "config");
    std::fs::write(config.join("config.yaml"), RULES)
        .unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    let (mut command, _) = ratelimit_command(dir.path());
    command
        .env("BACKEND_TYPE", "memory")
        .env("TRACING_ENABLED", "true")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://collector.example:4318",
        );
    let mut process = Running::spawn("ratelimit", &mut command, dir.path());
    let log = process.log_of_a_refused_start(Duration::from_secs(10));
    assert!(
        log.contains("OTEL_EXPORTER_OTLP_ENDPOINT=https://collector.example:4318")
            && log.contains("OTEL_EXPORTER_OTLP_INSECURE=true"),
        "{log}"
    );
    assert_eq!(
        process
            .exit_within(Duration::from_secs(1))
            .and_then(|status| status.code()),
        Some(64)
    );
}
