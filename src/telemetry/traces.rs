//! Traces: one span per ShouldRateLimit call (and a child for the store round trip), exported
//! over OTLP/gRPC when an endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `--otlp-endpoint`), or as envoyproxy/ratelimit's `TRACING_*` settings say
//! (`cmd::reference_tracing`): over OTLP/HTTP or OTLP/gRPC, under its service attributes.
//!
//! Off by default, and then free: the limiter asks [`enabled`] (one relaxed atomic load) before
//! it builds a span or reads a header, so no span, field or allocation exists per call.
//!
//! A caller's trace is continued when the request carries W3C `traceparent` (what Envoy sends
//! with OpenTelemetry tracing) or B3 (`b3`, or `x-b3-traceid`/`x-b3-spanid`/`x-b3-sampled`, what
//! Envoy sends with Zipkin tracing).

use std::hash::Hasher as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use siphasher::sip::SipHasher13;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::otlp_http::RuntimeHttpClient;
use super::otlp_tls::{OtlpTls, OtlpTlsFiles};
use crate::core::decision::semantics::Traces;

/// Whether an OTLP exporter is installed. Set once at start-up, before any call is served.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// How long finished spans wait before being sent: short, so a trace shows up while the
/// operator is still looking, yet batched under load. `OTEL_BSP_SCHEDULE_DELAY` overrides it.
const DEFAULT_BATCH_DELAY: Duration = Duration::from_millis(200);

/// The `service.name` when `OTEL_SERVICE_NAME` is not set.
const DEFAULT_SERVICE_NAME: &str = "floodgate";

/// Whether spans are being recorded and exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Where and how much to trace (`serve` flags and the standard `OTEL_*` variables, or the
/// reference's `TRACING_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceOptions {
    /// Where spans go. `None`: tracing off.
    pub export: Option<OtlpExport>,
    /// The share of new traces recorded, 0.0–1.0; a caller's sampling decision is followed.
    pub sample_ratio: f64,
    /// The service the spans come from.
    pub service: TracedService,
    /// The CA and client certificate files of an `https://` endpoint.
    pub tls: OtlpTlsFiles,
}

/// A collector and the OTLP transport it is reached by; over TLS when the URL says `https://`.
/// Compressed as `OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION` says (`gzip`), which the exporter
/// reads itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtlpExport {
    /// OTLP/gRPC, e.g. `http://jaeger:4317`.
    Grpc(String),
    /// OTLP/HTTP: protobuf posted to this URL, e.g. `http://collector:4318/v1/traces`.
    Http(String),
}

impl OtlpExport {
    fn endpoint(&self) -> &str {
        match self {
            OtlpExport::Grpc(endpoint) | OtlpExport::Http(endpoint) => endpoint,
        }
    }

    /// The transport, for the start-up log line.
    pub fn transport(&self) -> &'static str {
        match self {
            OtlpExport::Grpc(_) => "OTLP/gRPC",
            OtlpExport::Http(_) => "OTLP/HTTP",
        }
    }
}

/// The resource's `service.*` attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedService {
    pub name: String,
    /// `service.namespace`, when given (the reference always sets it, `""` by default).
    pub namespace: Option<String>,
    /// `service.instance.id`, when given.
    pub instance_id: Option<String>,
}

impl TraceOptions {
    /// floodgate's own: OTLP/gRPC to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (signal-specific, as
    /// the OTel specification ranks it), else `--otlp-endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`),
    /// as the service `OTEL_SERVICE_NAME` names, `floodgate` without it; an `https://`
    /// endpoint with the TLS files of `OTEL_EXPORTER_OTLP_*CERTIFICATE` / `*CLIENT_KEY`.
    pub fn floodgate(endpoint_flag: Option<String>, sample_ratio: f64) -> TraceOptions {
        let given = |endpoint: &String| !endpoint.trim().is_empty();
        let endpoint = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .ok()
            .filter(given)
            .or_else(|| endpoint_flag.filter(given));
        let name = std::env::var("OTEL_SERVICE_NAME")
            .ok()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        TraceOptions {
            export: endpoint.map(OtlpExport::Grpc),
            sample_ratio,
            service: TracedService {
                name,
                namespace: None,
                instance_id: None,
            },
            tls: OtlpTlsFiles::from_env(|name| std::env::var(name).ok()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the trace sample ratio must be between 0 and 1, not {0}")]
    SampleRatio(f64),
    #[error("cannot set up the OTLP trace exporter for {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
}

/// Keeps the exporter alive; [`TracingGuard::shutdown`] sends what is still buffered.
pub struct TracingGuard {
    export: OtlpExport,
    provider: SdkTracerProvider,
    /// Why TLS files were passed over, for the log once it is set up.
    tls_passed_over: Vec<String>,
}

impl TracingGuard {
    /// The TLS files passed over, each with why (for start-up warnings).
    pub fn tls_passed_over(&self) -> &[String] {
        &self.tls_passed_over
    }

    /// Where spans go (for the start-up log line).
    pub fn endpoint(&self) -> &str {
        self.export.endpoint()
    }

    /// How they get there (for the start-up log line).
    pub fn transport(&self) -> &'static str {
        self.export.transport()
    }

    /// Flushes buffered spans and stops the exporter. Call it from outside the async runtime
    /// (the export runs on the runtime's threads) while the runtime is still alive.
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!("trace exporter did not shut down cleanly: {error}");
        }
    }
}

/// The tracer that exports over OTLP, and its guard; `None` when tracing is off. Must run
/// inside the Tokio runtime: the exporter's connections live there.
pub fn otlp_tracer(
    options: &TraceOptions,
) -> Result<Option<(opentelemetry_sdk::trace::Tracer, TracingGuard)>, TraceError> {
    let Some(export) = options.export.clone() else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&options.sample_ratio) {
        return Err(TraceError::SampleRatio(options.sample_ratio));
    }
    let tls = export
        .endpoint()
        .starts_with("https://")
        .then(|| OtlpTls::load(&options.tls));
    let exporter = span_exporter(&export, tls.as_ref()).map_err(|source| TraceError::Exporter {
        endpoint: export.endpoint().to_owned(),
        source,
    })?;
    let mut batch = BatchConfigBuilder::default();
    if std::env::var_os("OTEL_BSP_SCHEDULE_DELAY").is_none() {
        batch = batch.with_scheduled_delay(DEFAULT_BATCH_DELAY);
    }
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch.build())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            options.sample_ratio,
        ))))
        .with_resource(resource(&options.service))
        .build();
    let tracer = provider.tracer("floodgate");
    ENABLED.store(true, Ordering::Relaxed);
    let tls_passed_over = tls.map(|tls| tls.passed_over).unwrap_or_default();
    Ok(Some((
        tracer,
        TracingGuard {
            export,
            provider,
            tls_passed_over,
        },
    )))
}

/// The exporter of `export`'s transport; the endpoint given is used as it is, over TLS with
/// `tls` when it is an `https://` URL.
fn span_exporter(
    export: &OtlpExport,
    tls: Option<&OtlpTls>,
) -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    match export {
        OtlpExport::Grpc(endpoint) => {
            let mut grpc = builder.with_tonic().with_endpoint(endpoint);
            if let Some(tls) = tls {
                grpc = grpc.with_tls_config(tls.tonic());
            }
            grpc.build()
        }
        OtlpExport::Http(url) => {
            let client = RuntimeHttpClient::on_current_runtime(tls)
                .map_err(opentelemetry_otlp::ExporterBuildError::InternalFailure)?;
            builder
                .with_http()
                .with_http_client(client)
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(url)
                .build()
        }
    }
}

/// The resource the spans come from: `service.name` and, when given, `service.namespace` and
/// `service.instance.id` (with the SDK's own attributes and `OTEL_RESOURCE_ATTRIBUTES`).
fn resource(service: &TracedService) -> Resource {
    let mut resource = Resource::builder().with_service_name(service.name.clone());
    if let Some(namespace) = &service.namespace {
        resource = resource.with_attribute(KeyValue::new("service.namespace", namespace.clone()));
    }
    if let Some(instance) = &service.instance_id {
        resource = resource.with_attribute(KeyValue::new("service.instance.id", instance.clone()));
    }
    resource.build()
}

/// The name and the kind of a call's decision span: floodgate's `ShouldRateLimit` is the
/// call's server span; the reference's `ShouldRateLimit Execution` (its service's
/// `tracer.Start`) is an internal span below the gRPC server span ([`reference_grpc_span`]).
pub fn decision_span(traces: Traces) -> (&'static str, &'static str) {
    match traces {
        Traces::Floodgate => ("ShouldRateLimit", "server"),
        Traces::AsTheReference => ("ShouldRateLimit Execution", "internal"),
    }
}

/// The name of the store call's span: the reference's Redis cache calls its own `Redis
/// Pipeline Execution`; its other stores are not floodgate's, whose span is `store.decide`.
pub fn store_span_name(traces: Traces, backend: &str) -> &'static str {
    match (traces, backend) {
        (Traces::AsTheReference, "redis") => "Redis Pipeline Execution",
        _ => "store.decide",
    }
}

/// The gRPC method the reference's server span is named after (OpenTelemetry Go's `otelgrpc`
/// interceptor names it `<service>/<method>`).
const RLS_SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// The server span the reference's `otelgrpc` interceptor makes of a `ShouldRateLimit` call,
/// with its `rpc.*` attributes; [`record_grpc_code`] adds the call's status. Disabled when
/// tracing is off.
pub fn reference_grpc_span() -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        "grpc",
        otel.name = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        rpc.system = "grpc",
        rpc.service = RLS_SERVICE,
        rpc.method = "ShouldRateLimit",
        rpc.grpc.status_code = tracing::field::Empty,
    )
}

/// The gRPC status `code` of the call `span` stands for; a server-side failure (UNKNOWN 2,
/// DEADLINE_EXCEEDED 4, UNIMPLEMENTED 12, INTERNAL 13, UNAVAILABLE 14, DATA_LOSS 15) marks the
/// span an error, as `otelgrpc` does.
pub fn record_grpc_code(span: &Span, code: i32) {
    span.record("rpc.grpc.status_code", i64::from(code));
    if matches!(code, 2 | 4 | 12..=15) {
        span.record("otel.status_code", "ERROR");
    }
}

/// The span the reference's `/json` handler starts once the service has answered (`NewJsonHandler
/// Remaining Execution`), a trace of its own: that handler continues no caller's trace.
pub fn reference_json_span() -> Span {
    if !enabled() {
        return Span::none();
    }
    tracing::info_span!(
        parent: None,
        "json",
        otel.name = "NewJsonHandler Remaining Execution",
    )
}

/// The caller's trace, if its request carried one; `None` continues nothing (a new trace).
#[derive(Debug, Clone, Default)]
pub struct RemoteParent(Option<Context>);

impl RemoteParent {
    pub fn none() -> Self {
        Self(None)
    }

    /// The caller's trace from request headers (or gRPC metadata), looked up by lower-case
    /// name. Reads nothing when tracing is off.
    pub fn from_headers<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Self {
        if !enabled() {
            return Self(None);
        }
        Self(
            parent_context(&header)
                .map(|span_context| Context::new().with_remote_span_context(span_context)),
        )
    }

    /// Makes `span` a child of the caller's span. Before the span is first entered.
    pub fn adopt(self, span: &Span) {
        if let Some(context) = self.0 {
            // Fails only when the span is disabled (then nothing is exported anyway).
            let _ = span.set_parent(context);
        }
    }
}

/// The caller's span from W3C trace context, else B3. Pure apart from the header lookup.
pub fn parent_context<'a>(header: &dyn Fn(&str) -> Option<&'a str>) -> Option<SpanContext> {
    struct Headers<'h, 'a>(&'h dyn Fn(&str) -> Option<&'a str>);
    impl Extractor for Headers<'_, '_> {
        fn get(&self, key: &str) -> Option<&str> {
            (self.0)(key)
        }
        fn keys(&self) -> Vec<&str> {
            Vec::new()
        }
    }
    static W3C: OnceLock<TraceContextPropagator> = OnceLock::new();
    let w3c = W3C
        .get_or_init(TraceContextPropagator::new)
        .extract(&Headers(header));
    let span_context = w3c.span().span_context().clone();
    if span_context.is_valid() {
        return Some(span_context);
    }
    match header("b3") {
        Some(single) => b3_single(single),
        None => b3_multi(
            header("x-b3-traceid")?,
            header("x-b3-spanid")?,
            header("x-b3-sampled"),
            header("x-b3-flags"),
        ),
    }
}

/// `b3: {trace id}-{span id}[-{sampling state}[-{parent span id}]]`; `b3: 0` alone only
/// refuses sampling and carries no trace.
fn b3_single(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let sampled = match parts.next() {
        None => None,
        Some("1" | "d") => Some(true),
        Some("0") => Some(false),
        Some(_) => return None,
    };
    b3_span_context(trace_id, span_id, sampled)
}

fn b3_multi(
    trace_id: &str,
    span_id: &str,
    sampled: Option<&str>,
    flags: Option<&str>,
) -> Option<SpanContext> {
    let debug = flags.is_some_and(|flags| flags.trim() == "1");
    let sampled = match sampled.map(str::trim) {
        _ if debug => Some(true),
        None => None,
        Some(value) if value == "1" || value.eq_ignore_ascii_case("true") => Some(true),
        Some(value) if value == "0" || value.eq_ignore_ascii_case("false") => Some(false),
        Some(_) => return None,
    };
    b3_span_context(trace_id.trim(), span_id.trim(), sampled)
}

/// B3 ids are lower-case hex: 16 or 32 digits for the trace (64-bit ids are left-padded),
/// 16 for the span. A missing sampling state means the caller deferred the decision; it is
/// taken as sampled, since a caller that does not want a trace says `0`.
fn b3_span_context(trace_id: &str, span_id: &str, sampled: Option<bool>) -> Option<SpanContext> {
    let hex = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit());
    if !(trace_id.len() == 16 || trace_id.len() == 32) || span_id.len() != 16 {
        return None;
    }
    if !hex(trace_id) || !hex(span_id) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = if sampled.unwrap_or(true) {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

/// A descriptor value as it may appear in a span: a keyed hash, the same for the same value
/// within this process (so one client's calls can be followed) but not reversible by trying
/// likely values (IP addresses, user ids) without the per-process key.
pub fn hashed_value(value: &str) -> String {
    static KEYS: OnceLock<(u64, u64)> = OnceLock::new();
    let (first, second) = *KEYS.get_or_init(|| (rand::random(), rand::random()));
    let mut hasher = SipHasher13::new_with_keys(first, second);
    hasher.write(value.as_bytes());
    format!("#{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(headers: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
        move |name| {
            headers
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| *value)
        }
    }

    fn parent(headers: &[(&str, &str)]) -> Option<SpanContext> {
        parent_context(&lookup(headers))
    }

    #[test]
    fn w3c_traceparent_is_continued() {
        let found = parent(&[(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )]);
        let found = found.unwrap_or_else(|| panic!("no parent"));
        assert_eq!(
            found.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(found.span_id().to_string(), "00f067aa0ba902b7");
        assert!(found.is_sampled());
        assert!(found.is_remote());
    }

    #[test]
    fn w3c_wins_over_b3() {
        let found = parent(&[
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"),
        ]);
        assert_eq!(
            found.map(|c| c.trace_id().to_string()).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
    }

    #[test]
    fn b3_single_header_is_continued() {
        let found = parent(&[(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
        )]);
        let found = found.unwrap_or_else(|| panic!("no parent"));
        assert_eq!(
            found.trace_id().to_string(),
            "80f198ee56343ba864fe8b2a57d3eff7"
        );
        assert_eq!(found.span_id().to_string(), "e457b5a2e4d86bd1");
        assert!(found.is_sampled());
    }

    #[test]
    fn b3_sampling_states() {
        let sampled = |value: &str| parent(&[("b3", value)]).map(|c| c.is_sampled());
        assert_eq!(sampled("80f198ee56343ba8-e457b5a2e4d86bd1-0"), Some(false));
        assert_eq!(sampled("80f198ee56343ba8-e457b5a2e4d86bd1-d"), Some(true));
        assert_eq!(sampled("80f198ee56343ba8-e457b5a2e4d86bd1"), Some(true));
        assert_eq!(sampled("0"), None);
        assert_eq!(sampled("80f198ee56343ba8-e457b5a2e4d86bd1-x"), None);
    }

    #[test]
    fn b3_sixty_four_bit_trace_ids_are_left_padded() {
        let found = parent(&[("b3", "80f198ee56343ba8-e457b5a2e4d86bd1-1")]);
        assert_eq!(
            found.map(|c| c.trace_id().to_string()).as_deref(),
            Some("000000000000000080f198ee56343ba8")
        );
    }

    #[test]
    fn b3_multi_headers_are_continued() {
        let found = parent(&[
            ("x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7"),
            ("x-b3-spanid", "e457b5a2e4d86bd1"),
            ("x-b3-sampled", "0"),
            ("x-b3-flags", "1"),
        ]);
        let found = found.unwrap_or_else(|| panic!("no parent"));
        assert_eq!(found.span_id().to_string(), "e457b5a2e4d86bd1");
        assert!(found.is_sampled(), "the debug flag forces sampling");
    }

    #[test]
    fn malformed_ids_continue_nothing() {
        for value in [
            "",
            "xyz-e457b5a2e4d86bd1-1",
            "80f198ee56343ba8-e457b5a2e4d86bd-1",
            "00000000000000000000000000000000-e457b5a2e4d86bd1-1",
            "80f198ee56343ba8-0000000000000000-1",
            "80f198ee56343ba8",
            "+0f198ee56343ba8-e457b5a2e4d86bd1-1",
        ] {
            assert!(parent(&[("b3", value)]).is_none(), "{value:?}");
        }
        assert!(parent(&[("traceparent", "00-zz-00f067aa0ba902b7-01")]).is_none());
        assert!(parent(&[]).is_none());
    }

    #[test]
    fn hashed_values_are_stable_and_hide_the_value() {
        assert_eq!(hashed_value("alice"), hashed_value("alice"));
        assert_ne!(hashed_value("alice"), hashed_value("bob"));
        assert!(!hashed_value("alice").contains("alice"));
        assert_eq!(hashed_value("alice").len(), 17);
    }

    #[test]
    fn without_an_endpoint_tracing_stays_off() {
        if std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() {
            assert_eq!(TraceOptions::floodgate(None, 1.0).export, None);
            let blank = TraceOptions::floodgate(Some("  ".into()), 1.0);
            assert_eq!(blank.export, None);
            let given = TraceOptions::floodgate(Some("http://jaeger:4317".into()), 1.0);
            assert_eq!(
                given.export,
                Some(OtlpExport::Grpc("http://jaeger:4317".into()))
            );
        }
        if !enabled() {
            // Nothing is read from the request while tracing is off.
            assert!(RemoteParent::from_headers(|_| panic!("a header was read"))
                .0
                .is_none());
        }
    }
}
