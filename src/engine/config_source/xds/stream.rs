//! One connection and one ADS stream to the management server: connect (TLS when asked), open
//! `StreamAggregatedResources` with the additional headers as gRPC metadata, and move
//! requests and responses. What to send is `exchange`'s business, when to reconnect `client`'s.

use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use super::settings::XdsSettings;
use super::tls::{client_tls, XdsTlsError};

/// How long one attempt to connect (TCP, TLS and HTTP/2 handshakes) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Dead peers behind a silent network are found by the kernel. No HTTP/2 pings: gRPC-go
/// servers (go-control-plane's) close connections that ping more often than every 5 minutes.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// Requests waiting to be written: an ACK or NACK at a time, never more than a few.
const REQUEST_QUEUE: usize = 4;

/// Why a connection or a stream could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Tls(#[from] XdsTlsError),
    #[error("cannot connect to the xDS management server at {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("the xDS management server at {server} refused the stream: {status}")]
    Open {
        server: String,
        status: tonic::Status,
    },
}

/// A connection to the management server.
pub async fn connect(settings: &XdsSettings) -> Result<Channel, StreamError> {
    let server = settings.server.to_string();
    let failed = |reason: String| StreamError::Connect {
        server: server.clone(),
        reason,
    };
    let mut endpoint = Endpoint::from_shared(settings.server.uri(settings.tls.is_some()))
        .map_err(|error| failed(error.to_string()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_keepalive(Some(TCP_KEEPALIVE))
        .user_agent(concat!("floodgate/", env!("CARGO_PKG_VERSION")))
        .map_err(|error| failed(error.to_string()))?;
    if let Some(files) = &settings.tls {
        endpoint = endpoint
            .tls_config(client_tls(files, settings.server.host())?)
            .map_err(|error| failed(error_chain(&error)))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|error| failed(error_chain(&error)))
}

/// An open ADS stream.
pub struct AdsStream {
    requests: mpsc::Sender<DiscoveryRequest>,
    responses: tonic::Streaming<DiscoveryResponse>,
}

/// Opens the stream on `channel`, `first` its first request. A gRPC-go server sends the
/// stream's headers with its first response, so this may wait for that response.
pub async fn open(
    channel: Channel,
    settings: &XdsSettings,
    first: DiscoveryRequest,
) -> Result<AdsStream, StreamError> {
    let (requests, outgoing) = mpsc::channel(REQUEST_QUEUE);
    // Queued before the call starts: the server answers nothing until it has it.
    let _ = requests.send(first).await;
    let mut request = tonic::Request::new(ReceiverStream::new(outgoing));
    for (key, value) in settings.headers.iter() {
        request.metadata_mut().insert(key.clone(), value.clone());
    }
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    if let Some(bytes) = settings.max_message_bytes {
        client = client.max_decoding_message_size(bytes);
    }
    let responses = client
        .stream_aggregated_resources(request)
        .await
        .map_err(|status| StreamError::Open {
            server: settings.server.to_string(),
            status,
        })?
        .into_inner();
    Ok(AdsStream {
        requests,
        responses,
    })
}

impl AdsStream {
    /// The next response; `Ok(None)` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<DiscoveryResponse>, tonic::Status> {
        self.responses.message().await
    }

    /// Queues `request`. A stream that has ended takes nothing, which its next response (an
    /// error) will say; so a failure here needs no handling of its own.
    pub async fn send(&self, request: DiscoveryRequest) {
        let _ = self.requests.send(request).await;
    }
}

/// An error with its causes (`transport error: tcp connect error: Connection refused`).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = inner.source();
    }
    text
}
