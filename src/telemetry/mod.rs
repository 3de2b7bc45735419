//! Logs, metrics and traces.
//!
//! Logging: the filter the command line builds (`LOG_LEVEL` as envoyproxy/ratelimit reads it, or
//! `RUST_LOG` directives) and `LOG_FORMAT=json|text`. Metrics: [`metrics`], served on the debug
//! port's `/metrics`; envoyproxy/ratelimit's stats under its names: [`reference`], served on
//! its Prometheus listener and sent to statsd by [`statsd`].
//! Traces: [`traces`], exported over OTLP when configured.

pub(crate) mod config_loads;
pub(crate) mod config_source;
pub(crate) mod connections;
pub(crate) mod label_budget;
pub(crate) mod metrics;
mod otlp_http;
mod otlp_tls;
pub(crate) mod paced_log;
pub(crate) mod record;
pub(crate) mod reference;
pub(crate) mod rlqs;
pub(crate) mod statsd;
#[cfg(test)]
mod test_rules;
pub(crate) mod traces;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

pub use otlp_tls::OtlpTlsFiles;
pub use traces::{OtlpExport, TraceError, TraceOptions, TracedService, TracingGuard};

/// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO` default.
pub const DEFAULT_NEAR_LIMIT_RATIO: f32 = 0.8;

/// Every metric of this process as the debug port's `/metrics` serves it: what a limiter run in
/// process (a test's) has counted.
pub fn metrics_text() -> Result<String, String> {
    metrics::render().map_err(|error| error.to_string())
}

/// How decisions are reported (`serve` flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionTelemetry {
    /// A hit counts as near the limit once the counter is past this share of its capacity.
    pub near_limit_ratio: f32,
    /// Put descriptor values into spans as they are, instead of hashed.
    pub trace_descriptor_values: bool,
    /// Count each rule's heavy hitters (`engine::heavy_hitters`, `--heavy-hitters`).
    pub heavy_hitters: bool,
}

impl Default for DecisionTelemetry {
    fn default() -> Self {
        Self {
            near_limit_ratio: DEFAULT_NEAR_LIMIT_RATIO,
            trace_descriptor_values: false,
            heavy_hitters: false,
        }
    }
}

/// What must outlive serving: the trace exporter, flushed by [`Telemetry::shutdown`].
#[derive(Default)]
pub struct Telemetry {
    tracing: Option<TracingGuard>,
}

impl Telemetry {
    /// Sends the spans still buffered. It blocks until the exporter (a task on the runtime) has
    /// sent them: call it from a thread that runs no tasks, while the runtime still runs.
    pub fn shutdown(self) {
        if let Some(guard) = self.tracing {
            guard.shutdown();
        }
    }
}

/// Logging, of the lines `filter` lets through, and, when `traces` names an endpoint, trace
/// export. Call it inside the Tokio runtime (`Runtime::enter`): the OTLP exporter's gRPC channel
/// is spawned there.
pub fn init(traces: Option<&TraceOptions>, filter: EnvFilter) -> Result<Telemetry, TraceError> {
    let json = std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    // Colours only for a person at a terminal: in files and log collectors they are noise.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colours);
    let logs = if json {
        logs.json().boxed()
    } else {
        logs.boxed()
    };

    let exporter = match traces {
        Some(options) => traces::otlp_tracer(options)?,
        None => None,
    };
    let (spans, guard) = match exporter {
        Some((tracer, guard)) => {
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_location(false)
                .with_threads(false)
                // Only floodgate's own spans: the log level must not decide what is traced,
                // and the HTTP/2 and gRPC libraries' spans would only add noise.
                .with_filter(Targets::new().with_target("floodgate", tracing::Level::INFO));
            (Some(layer), Some(guard))
        }
        None => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(spans)
        .try_init();
    if let Some(guard) = &guard {
        tracing::info!(
            endpoint = guard.endpoint(),
            "exporting traces over {}",
            guard.transport()
        );
        for passed_over in guard.tls_passed_over() {
            tracing::warn!("{passed_over}");
        }
    }
    Ok(Telemetry { tracing: guard })
}
