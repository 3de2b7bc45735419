//! The xDS subscription as its user sees it: [`XdsClient::next_snapshot`] hands over the next
//! response whose resources are new, and [`XdsClient::accept`] / [`XdsClient::reject`] answer
//! it. Everything else happens inside: connecting (every
//! `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` while the server cannot be reached),
//! reopening the stream after it ends (after the `XDS_CLIENT_BACKOFF_*` pause), ACKing the rules
//! in force when a new stream sends them again, and NACKing a rejected snapshot that is sent
//! again (after `exchange`'s growing pause).
//!
//! The rules in force are not touched by any of it: a lost server only delays the next change.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{node, Node};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Any, Struct, Value};

use super::backoff::{connect_retry_pause, Backoff};
use super::exchange::{Exchange, Next};
use super::settings::{ServerAddress, XdsSettings};
use super::stream::{self, AdsStream, StreamError};

/// A response with resources to load.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The management server's `version_info`.
    pub version: String,
    pub resources: Vec<Any>,
}

/// One subscription to `RateLimitConfig`, across connections.
pub struct XdsClient {
    settings: XdsSettings,
    exchange: Exchange,
    backoff: Backoff,
    stream: Option<AdsStream>,
    /// The last connection failure logged as a warning (the same one again is logged at debug).
    last_failure: Option<String>,
}

impl XdsClient {
    pub fn new(settings: XdsSettings) -> Self {
        let exchange = Exchange::new(node(&settings), settings.backoff.max);
        Self {
            backoff: Backoff::new(settings.backoff),
            exchange,
            settings,
            stream: None,
            last_failure: None,
        }
    }

    pub fn server(&self) -> &ServerAddress {
        &self.settings.server
    }

    /// The version in force (`""` before the first accepted snapshot).
    pub fn accepted_version(&self) -> &str {
        self.exchange.accepted_version()
    }

    /// Waits for the next response whose resources are new, connecting as often as it takes.
    pub async fn next_snapshot(&mut self) -> Snapshot {
        loop {
            let Some(stream) = self.stream.as_mut() else {
                self.establish().await;
                continue;
            };
            let why = match stream.next().await {
                Ok(Some(response)) => {
                    // A server that answers is back: the next loss starts the pauses over.
                    self.backoff.reset();
                    match self.exchange.on_response(&response) {
                        Next::Load => {
                            return Snapshot {
                                version: response.version_info,
                                resources: response.resources,
                            }
                        }
                        Next::Ignore { type_url } => {
                            tracing::warn!(
                                type_url,
                                "xDS: a response of a type floodgate did not subscribe to; \
                                 ignored"
                            );
                        }
                        Next::Ack(request) => {
                            tracing::debug!(
                                version = %response.version_info,
                                "xDS: the rules in force were sent again; acknowledged"
                            );
                            stream.send(request).await;
                        }
                        Next::NackAgain {
                            request,
                            after,
                            version,
                        } => {
                            tracing::debug!(
                                version,
                                pause_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
                                "xDS: the rejected snapshot was sent again; rejecting it again \
                                 after a pause"
                            );
                            crate::telemetry::config_source::xds_rejected();
                            tokio::time::sleep(after).await;
                            stream.send(request).await;
                        }
                    }
                    continue;
                }
                Ok(None) => "the management server ended the stream".to_owned(),
                Err(status) => format!("the stream failed: {}", status_text(&status)),
            };
            self.lost(&why).await;
        }
    }

    /// The last snapshot went into force: ACK it.
    pub async fn accept(&mut self) {
        if let (Some(request), Some(stream)) = (self.exchange.accepted(), &self.stream) {
            stream.send(request).await;
        }
    }

    /// The last snapshot was refused for `message` (every bad resource and what is wrong):
    /// NACK it.
    pub async fn reject(&mut self, message: &str) {
        crate::telemetry::config_source::xds_rejected();
        if let (Some(request), Some(stream)) = (self.exchange.rejected(message), &self.stream) {
            stream.send(request).await;
        }
    }

    /// Connects and opens a stream, or pauses after a failure (the caller loops).
    async fn establish(&mut self) {
        let channel = loop {
            match stream::connect(&self.settings).await {
                Ok(channel) => break channel,
                Err(error) => {
                    self.failed(&error);
                    let pause =
                        connect_retry_pause(self.settings.connect_retry_interval, rand::random());
                    tokio::time::sleep(pause).await;
                }
            }
        };
        let first = self.exchange.stream_opened();
        tracing::info!(
            server = %self.settings.server,
            node = %self.settings.node_id,
            version = %first.version_info,
            "xDS: connected to the management server; subscribed to RateLimitConfig"
        );
        match stream::open(channel, &self.settings, first).await {
            Ok(stream) => {
                self.last_failure = None;
                crate::telemetry::config_source::xds_connected(true);
                self.stream = Some(stream);
            }
            Err(error) => {
                self.failed(&error);
                self.pause_after_loss().await;
            }
        }
    }

    async fn lost(&mut self, why: &str) {
        self.stream = None;
        crate::telemetry::config_source::xds_connected(false);
        tracing::warn!(
            server = %self.settings.server,
            "xDS: {why}; the rules in force stay, reconnecting"
        );
        self.pause_after_loss().await;
    }

    async fn pause_after_loss(&mut self) {
        let pause = self.backoff.next(rand::random());
        tracing::debug!(
            pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
            "xDS: pausing before the next stream (XDS_CLIENT_BACKOFF_*)"
        );
        tokio::time::sleep(pause).await;
    }

    /// Logs a failure to connect: a warning when it differs from the last one, else at debug.
    fn failed(&mut self, error: &StreamError) {
        let text = error.to_string();
        if self.last_failure.as_deref() == Some(text.as_str()) {
            tracing::debug!("xDS: {text}; retrying");
        } else {
            tracing::warn!(
                "xDS: {text}; the rules in force stay, retrying every {:?} or so",
                self.settings.connect_retry_interval
            );
            self.last_failure = Some(text);
        }
        crate::telemetry::config_source::xds_connected(false);
    }
}

/// A gRPC status for a log line: its code, message and cause.
fn status_text(status: &tonic::Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    if let Some(cause) = std::error::Error::source(status) {
        text.push_str(" (");
        text.push_str(&stream::error_chain(cause));
        text.push(')');
    }
    text
}

/// The node this client announces: the reference's id and string-valued metadata, and
/// floodgate as the user agent.
fn node(settings: &XdsSettings) -> Node {
    let fields = settings
        .node_metadata
        .iter()
        .map(|(key, value)| {
            (
                key.clone(),
                Value {
                    kind: Some(Kind::StringValue(value.clone())),
                },
            )
        })
        .collect();
    Node {
        id: settings.node_id.clone(),
        metadata: Some(Struct { fields }),
        user_agent_name: "floodgate".to_owned(),
        user_agent_version_type: Some(node::UserAgentVersionType::UserAgentVersion(
            env!("CARGO_PKG_VERSION").to_owned(),
        )),
        ..Node::default()
    }
}

/// Why [`fetch_once`] got no snapshot.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(
        "the xDS management server at {server} sent no RateLimitConfig within {waited:?}: a \
         server sends snapshots to the node id they are set for; check \
         CONFIG_GRPC_XDS_NODE_ID (here {node:?})"
    )]
    Timeout {
        server: String,
        node: String,
        waited: Duration,
    },
    #[error(
        "the xDS management server at {server} ended the stream before any snapshot: {reason}"
    )]
    Ended { server: String, reason: String },
}

/// The first snapshot the server sends, not acknowledged (the stream is dropped unanswered, so
/// the server records nothing as applied): what `floodgate validate` checks.
pub async fn fetch_once(settings: &XdsSettings, waited: Duration) -> Result<Snapshot, FetchError> {
    let server = settings.server.to_string();
    let fetch = async {
        let channel = stream::connect(settings).await?;
        let first = Exchange::new(node(settings), settings.backoff.max).stream_opened();
        let mut stream = stream::open(channel, settings, first).await?;
        let ended = |reason: String| FetchError::Ended {
            server: server.clone(),
            reason,
        };
        match stream.next().await {
            Ok(Some(response)) => Ok(Snapshot {
                version: response.version_info,
                resources: response.resources,
            }),
            Ok(None) => Err(ended("the stream ended".to_owned())),
            Err(status) => Err(ended(status_text(&status))),
        }
    };
    tokio::time::timeout(waited, fetch)
        .await
        .map_err(|_| FetchError::Timeout {
            server: server.clone(),
            node: settings.node_id.clone(),
            waited,
        })?
}
