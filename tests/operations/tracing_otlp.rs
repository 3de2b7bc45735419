//! Traces from the real binary to a real OTLP/gRPC receiver: the caller's trace (W3C
//! `traceparent` or B3 in the gRPC metadata) is continued, the span carries the decision's
//! attributes, descriptor values are hashed unless asked otherwise, the store call is a child
//! span, spans arrive promptly and on shutdown, and over TLS to an `https://` endpoint.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit::otlp::{OtlpReceiver, ReceivedSpan, ReceiverTls};
use floodgate_testkit::rls;
use floodgate_testkit::testca::TestCa;
use floodgate_testkit::{serve_command, tempdir, wait_for_port, Running};
use tonic::metadata::MetadataValue;

const RULES: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit: {unit: hour, requests_per_unit: 1, algorithm: sliding_window}
"#;

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// How long a span may take to arrive with the default (short) batch delay.
const PROMPTLY: Duration = Duration::from_secs(10);

struct Traced {
    process: Running,
    grpc_port: u16,
}

/// `floodgate serve` exporting to `receiver`, with extra flags and environment.
fn start(dir: &Path, receiver: &OtlpReceiver, extra: &[&str], env: &[(&str, &str)]) -> Traced {
    let config = dir.join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    let (mut command, (grpc_port, _, _)) = serve_command();
    command
        .arg("--config")
        .arg(&config)
        .arg("--otlp-endpoint")
        .arg(receiver.endpoint())
        .args(extra)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_BSP_SCHEDULE_DELAY")
        .env("LOG_LEVEL", "debug");
    for (name, value) in env {
        command.env(name, value);
    }
    let process = Running::spawn("floodgate", &mut command, dir);
    wait_for_port(grpc_port, Duration::from_secs(10), "floodgate");
    Traced { process, grpc_port }
}

/// One call for alice with `metadata` (name, value) pairs.
async fn call_with(traced: &Traced, metadata: &[(&'static str, &str)]) -> i32 {
    let mut client = rls::connect(&format!("http://127.0.0.1:{}", traced.grpc_port)).await;
    let mut request = tonic::Request::new(rls::request(
        "edge",
        &[&[("generic_key", "api"), ("client_id", "alice")]],
    ));
    for (name, value) in metadata {
        let value: MetadataValue<_> = value
            .parse()
            .unwrap_or_else(|error| panic!("bad metadata {value}: {error}"));
        request.metadata_mut().insert(*name, value);
    }
    client
        .should_rate_limit(request)
        .await
        .unwrap_or_else(|status| panic!("{status:?}"))
        .into_inner()
        .overall_code
}

fn traceparent() -> String {
    format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01")
}

fn decision_spans(spans: &[ReceivedSpan], trace: &str) -> Vec<ReceivedSpan> {
    spans
        .iter()
        .filter(|span| span.span.name == "ShouldRateLimit" && span.trace_id_hex() == trace)
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_call_with_traceparent_continues_the_callers_trace_with_the_decision_attributes() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempdir();
    let traced = start(dir.path(), &receiver, &[], &[]);

    assert_eq!(
        call_with(&traced, &[("traceparent", &traceparent())]).await,
        1
    );
    assert_eq!(
        call_with(&traced, &[("traceparent", &traceparent())]).await,
        2
    );

    let spans = receiver
        .wait_for(PROMPTLY, |spans| {
            decision_spans(spans, CALLER_TRACE).len() == 2
                && spans
                    .iter()
                    .filter(|s| s.span.name == "store.decide")
                    .count()
                    == 2
        })
        .await;
    let decisions = decision_spans(&spans, CALLER_TRACE);
    assert_eq!(
        decisions.len(),
        2,
        "spans received: {spans:#?}\n{}",
        traced.process.log_text()
    );

    for span in &decisions {
        assert_eq!(span.parent_span_id_hex(), CALLER_SPAN);
        assert_eq!(span.string("floodgate.domain"), Some("edge"));
        assert_eq!(span.int("floodgate.descriptor_count"), Some(1));
        assert_eq!(
            span.string("floodgate.rule"),
            Some("edge.generic_key_api.client_id")
        );
        assert_eq!(span.string("floodgate.algorithm"), Some("sliding_window"));
        assert_eq!(span.string("floodgate.store.backend"), Some("memory"));
        let store_seconds = span.double("floodgate.store.duration_seconds");
        assert!(
            store_seconds.is_some_and(|s| s > 0.0 && s < 5.0),
            "{store_seconds:?}"
        );
        let descriptors = span.string("floodgate.descriptors").unwrap_or_default();
        assert!(
            descriptors.starts_with("generic_key=#") && descriptors.contains(",client_id=#"),
            "{descriptors}"
        );
        assert!(
            !descriptors.contains("alice"),
            "values must be hashed: {descriptors}"
        );
        assert_eq!(
            span.resource.get("service.name"),
            Some(&otlp_string("floodgate"))
        );
        // The store round trip is a child of the decision.
        let children: Vec<&ReceivedSpan> = spans
            .iter()
            .filter(|s| {
                s.span.name == "store.decide" && s.parent_span_id_hex() == span.span_id_hex()
            })
            .collect();
        assert_eq!(children.len(), 1, "{spans:#?}");
        assert_eq!(children[0].trace_id_hex(), CALLER_TRACE);
        assert_eq!(
            children[0].string("floodgate.store.backend"),
            Some("memory")
        );
    }
    let decided: Vec<Option<&str>> = decisions
        .iter()
        .map(|span| span.string("floodgate.decision"))
        .collect();
    assert!(decided.contains(&Some("ok")), "{decided:?}");
    assert!(decided.contains(&Some("over_limit")), "{decided:?}");
}

fn otlp_string(text: &str) -> opentelemetry_proto::tonic::common::v1::any_value::Value {
    opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(text.to_owned())
}

#[tokio::test]
async fn b3_metadata_continues_the_callers_trace() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempdir();
    let traced = start(dir.path(), &receiver, &[], &[]);
    let trace = "80f198ee56343ba864fe8b2a57d3eff7";
    call_with(&traced, &[("b3", &format!("{trace}-e457b5a2e4d86bd1-1"))]).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| !decision_spans(spans, trace).is_empty())
        .await;
    let decisions = decision_spans(&spans, trace);
    assert_eq!(
        decisions.len(),
        1,
        "{spans:#?}\n{}",
        traced.process.log_text()
    );
    assert_eq!(decisions[0].parent_span_id_hex(), "e457b5a2e4d86bd1");
}

#[tokio::test]
async fn a_call_without_trace_context_starts_a_new_trace_and_values_can_be_shown() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempdir();
    let traced = start(dir.path(), &receiver, &["--trace-descriptor-values"], &[]);
    call_with(&traced, &[]).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| {
            spans.iter().any(|span| span.span.name == "ShouldRateLimit")
        })
        .await;
    let span = spans
        .iter()
        .find(|span| span.span.name == "ShouldRateLimit")
        .unwrap_or_else(|| panic!("no span: {}", traced.process.log_text()));
    assert!(span.span.parent_span_id.is_empty(), "a root span");
    assert_ne!(span.trace_id_hex(), CALLER_TRACE);
    assert_eq!(
        span.string("floodgate.descriptors"),
        Some("generic_key=api,client_id=alice")
    );
}

/// An `https://` endpoint is reached over TLS, trusting the `OTEL_EXPORTER_OTLP_CERTIFICATE` CA
/// (the variable OpenTelemetry's exporters read) at `floodgate serve` as at the ratelimit door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_endpoint_is_reached_over_tls_with_the_otel_ca_file() {
    let ca = TestCa::new("otel collector CA");
    let server = ca.server();
    let receiver = OtlpReceiver::start_grpc_tls(&ReceiverTls {
        server: &server,
        client_ca: None,
    })
    .await;
    let dir = tempdir();
    let ca_file = dir.path().join("otel-ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap_or_else(|error| panic!("cannot write: {error}"));
    let traced = start(
        dir.path(),
        &receiver,
        &[],
        &[("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_file.to_string_lossy())],
    );
    call_with(&traced, &[]).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| {
            spans.iter().any(|span| span.span.name == "ShouldRateLimit")
        })
        .await;
    assert!(
        spans.iter().any(|span| span.span.name == "ShouldRateLimit"),
        "no span over TLS: {}",
        traced.process.log_text()
    );
}

#[tokio::test]
async fn a_caller_that_does_not_sample_gets_no_span() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempdir();
    let traced = start(dir.path(), &receiver, &[], &[]);
    let unsampled = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-00");
    call_with(&traced, &[("traceparent", &unsampled)]).await;
    // A sampled call afterwards proves the exporter works; the unsampled one never shows.
    let sampled_trace = "11111111111111111111111111111111";
    let sampled = format!("00-{sampled_trace}-{CALLER_SPAN}-01");
    call_with(&traced, &[("traceparent", &sampled)]).await;
    let spans = receiver
        .wait_for(PROMPTLY, |spans| {
            !decision_spans(spans, sampled_trace).is_empty()
        })
        .await;
    assert_eq!(decision_spans(&spans, sampled_trace).len(), 1, "{spans:#?}");
    assert!(
        decision_spans(&spans, CALLER_TRACE).is_empty(),
        "{spans:#?}"
    );
}

// Both schedulers: one thread (every task runs inside `block_on`) and several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_buffered_are_sent_on_shutdown_with_one_thread() {
    spans_still_buffered_are_sent_on_shutdown("1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_buffered_are_sent_on_shutdown_with_two_threads() {
    spans_still_buffered_are_sent_on_shutdown("2").await;
}

// Multi-threaded: the receiver must keep answering while the test waits for the exit.
async fn spans_still_buffered_are_sent_on_shutdown(worker_threads: &str) {
    let receiver = OtlpReceiver::start().await;
    let dir = tempdir();
    // A batch delay far longer than the test: only the shutdown flush can deliver the span.
    let mut traced = start(
        dir.path(),
        &receiver,
        &["--worker-threads", worker_threads],
        &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
    );
    call_with(&traced, &[("traceparent", &traceparent())]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        decision_spans(&receiver.spans(), CALLER_TRACE).is_empty(),
        "the span was sent before shutdown; the batch delay was not honoured"
    );
    let status = tokio::task::block_in_place(|| traced.process.terminate(Duration::from_secs(15)));
    assert!(
        status.is_some_and(|status| status.success()),
        "floodgate did not stop cleanly: {status:?}\n{}",
        traced.process.log_text()
    );
    let spans = receiver
        .wait_for(Duration::from_secs(2), |spans| {
            !decision_spans(spans, CALLER_TRACE).is_empty()
        })
        .await;
    assert_eq!(
        decision_spans(&spans, CALLER_TRACE).len(),
        1,
        "{spans:#?}\n{}",
        traced.process.log_text()
    );
}
