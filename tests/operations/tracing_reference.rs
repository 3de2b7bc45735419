//! Started as `ratelimit`, traces as envoyproxy/ratelimit makes them: on with `TRACING_ENABLED`,
//! sent by its `TRACING_EXPORTER_PROTOCOL` (OTLP/HTTP by default, or gRPC) to the
//! `OTEL_EXPORTER_OTLP_ENDPOINT` collector, under its `TRACING_SERVICE_*` resource; a gRPC call
//! is the `otelgrpc` server span `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! its decision the child `ShouldRateLimit Execution`, a Redis store call the grandchild `Redis
//! Pipeline Execution`; `/json` starts a trace of its own and adds `NewJsonHandler Remaining
//! Execution`. Over TLS when the endpoint says `https://` (the reference's default), with the
//! `OTEL_EXPORTER_OTLP_*` certificate files and compression. Real receivers of both transports,
//! the real binary.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::otlp::{OtlpReceiver, ReceivedSpan, ReceiverTls};
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls;
use floodgate_testkit::testca::TestCa;
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

/// The test CA's files for `ratelimit`: its CA, and a client certificate and key of its own.
struct TlsFiles {
    ca: String,
    client_cert: String,
    client_key: String,
}

fn write_tls_files(dir: &Path, ca: &TestCa) -> TlsFiles {
    let client = ca.client("ratelimit");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap_or_else(|error| panic!("cannot write {name}: {error}"));
        path.to_string_lossy().into_owned()
    };
    TlsFiles {
        ca: write("otel-ca.pem", &ca.pem()),
        client_cert: write("otel-client.pem", &client.cert),
        client_key: write("otel-client-key.pem", &client.key),
    }
}

/// Over TLS both ways (the collector asks for a client certificate) and gzip, as OpenTelemetry
/// Go's exporters read `OTEL_EXPORTER_OTLP_*`: the spans of one call arrive, every export gzip.
async fn spans_arrive_over_mutual_tls_and_gzip(protocol: &str) {
    let ca = TestCa::new("otel collector CA");
    let server = ca.server();
    let ca_pem = ca.pem();
    let tls = ReceiverTls {
        server: &server,
        client_ca: Some(&ca_pem),
    };
    let receiver = if protocol == "grpc" {
        OtlpReceiver::start_grpc_tls(&tls).await
    } else {
        OtlpReceiver::start_https(&tls).await
    };
    let dir = tempdir();
    let files = write_tls_files(dir.path(), &ca);
    let endpoint = receiver.endpoint();
    assert!(endpoint.starts_with("https://"), "{endpoint}");
    let door = start_door(
        dir.path(),
        &[
            ("BACKEND_TYPE", "memory"),
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", protocol),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &files.ca),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &files.client_cert),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &files.client_key),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ],
    );
    call(&door, false).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| !named(spans, DECISION_SPAN).is_empty())
        .await;
    let log = door.process.log_text();
    only(&spans, DECISION_SPAN, &log);
    only(&spans, SERVER_SPAN, &log);
    let encodings = receiver.encodings();
    assert!(
        !encodings.is_empty() && encodings.iter().all(|encoding| encoding == "gzip"),
        "{encodings:?}\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_with_the_otel_ca_client_certificate_and_gzip_spans_arrive() {
    spans_arrive_over_mutual_tls_and_gzip("http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_with_tls_the_otel_ca_client_certificate_and_gzip_spans_arrive() {
    spans_arrive_over_mutual_tls_and_gzip("grpc").await;
}

/// A CA file that cannot be used is passed over with a warning naming the variable, as
/// OpenTelemetry Go's exporters do: the answers go on; the collector's certificate, which the
/// system does not trust, gets no spans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_ca_file_is_named_in_a_warning_and_the_service_answers() {
    let ca = TestCa::new("otel collector CA");
    let server = ca.server();
    let receiver = OtlpReceiver::start_https(&ReceiverTls {
        server: &server,
        client_ca: None,
    })
    .await;
    let dir = tempdir();
    let not_a_certificate = dir.path().join("otel-ca.pem");
    std::fs::write(&not_a_certificate, "not a certificate")
        .unwrap_or_else(|error| panic!("cannot write the CA file: {error}"));
    let endpoint = receiver.endpoint();
    let door = start_door(
        dir.path(),
        &[
            ("BACKEND_TYPE", "memory"),
            ("TRACING_ENABLED", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            (
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                &not_a_certificate.to_string_lossy(),
            ),
        ],
    );
    call(&door, false).await;
    let log = door.process.log_text();
    assert!(
        log.contains("OTEL_EXPORTER_OTLP_CERTIFICATE=") && log.contains("holds no PEM CA"),
        "{log}"
    );
    let spans = receiver
        .wait_for(Duration::from_secs(3), |spans| !spans.is_empty())
        .await;
    assert!(spans.is_empty(), "{spans:#?}");
}
