//! The HTTP client of the OTLP/HTTP trace exporter. The SDK's batch processor exports from a
//! thread of its own, outside the Tokio runtime, where Hyper's client can neither time a request
//! out nor spawn its connections: each request is sent as a task on the runtime, which the
//! processor waits for.

use std::time::Duration;

use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// OpenTelemetry's default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Hyper's client, sending on the runtime it was made in.
#[derive(Debug, Clone)]
pub(super) struct RuntimeHttpClient {
    client: HyperClient,
    runtime: tokio::runtime::Handle,
}

impl RuntimeHttpClient {
    /// A client on the current runtime (call it inside the runtime), each request bounded by
    /// [`export_timeout`].
    pub(super) fn on_current_runtime() -> Result<Self, tokio::runtime::TryCurrentError> {
        Ok(Self {
            client: HyperClient::with_default_connector(export_timeout(), None),
            runtime: tokio::runtime::Handle::try_current()?,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for RuntimeHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        sent.await.map_err(|error| Box::new(error) as HttpError)?
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds; a value
/// that is not a number is passed over), else 10 s: what the exporter does itself when it
/// makes its own client.
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse::<u64>().ok())
    .map_or(DEFAULT_EXPORT_TIMEOUT, Duration::from_millis)
}
