//! The HTTP client of the OTLP/HTTP trace exporter. The SDK's batch processor exports from a
//! thread of its own, outside the Tokio runtime, where Hyper's client can neither time a request
//! out nor spawn its connections: each request is sent as a task on the runtime, which the
//! processor waits for. An `https://` URL is reached over TLS (hyper-rustls, on the rustls the
//! servers already use), with the roots and client certificate of [`OtlpTls`].

use std::time::Duration;

use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

use super::otlp_tls::OtlpTls;

/// OpenTelemetry's default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Hyper's client, sending on the runtime it was made in.
#[derive(Debug, Clone)]
pub(super) struct RuntimeHttpClient {
    client: HyperClient<HttpsConnector<HttpConnector>>,
    runtime: tokio::runtime::Handle,
}

impl RuntimeHttpClient {
    /// A client on the current runtime (call it inside the runtime), each request bounded by
    /// [`export_timeout`]; it speaks TLS with `tls`'s settings (the system's roots without).
    pub(super) fn on_current_runtime(tls: Option<&OtlpTls>) -> Result<Self, String> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|error| error.to_string())?;
        let tls = OtlpTls::rustls(tls)?;
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: HyperClient::new(connector, export_timeout(), None),
            runtime,
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
