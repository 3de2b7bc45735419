//! What to send after which response: the ACK/NACK state machine of one state-of-the-world
//! subscription to `RateLimitConfig`, kept apart from the stream so every rule of it is tested
//! without a server.
//!
//! * A stream's first request carries the node and, as version, the last accepted version
//!   (`""` before any), so a management server knows what this client runs after a reconnect.
//! * A response whose resources are new is loaded (`Next::Load`), then answered by
//!   [`Exchange::accepted`] (ACK: its version and nonce) or [`Exchange::rejected`] (NACK: the
//!   last *accepted* version, its nonce, and a `google.rpc.Status` INVALID_ARGUMENT naming
//!   every bad resource and what is wrong with it). The response as a whole is either taken or
//!   refused: a NACK keeps the rules in force.
//! * The resources in force sent again (a new stream gets the whole snapshot again) are ACKed
//!   without loading them again.
//! * The resources rejected last sent again — go-control-plane answers a NACK by sending the
//!   rejected snapshot at once with a new nonce (its issue #962) — are NACKed again without
//!   loading them, after a pause that starts at 1 s and doubles up to the backoff's maximum,
//!   so client and server do not spin. The pause ends when anything else arrives.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status;
use sha2::{Digest as _, Sha256};

/// The type URL of the resources floodgate subscribes to.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The pause before the second NACK of the same resources; each further one doubles it.
pub const FIRST_REPEAT_PAUSE: Duration = Duration::from_secs(1);

/// google.rpc.Code INVALID_ARGUMENT.
const INVALID_ARGUMENT: i32 = 3;

/// A NACK's message is cut here: the whole list of problems is in floodgate's log.
const MAX_NACK_MESSAGE_BYTES: usize = 16 * 1024;

/// What the client does with a response.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// A response of a type floodgate did not subscribe to: left unanswered, nothing changes
    /// (loading it as an empty `RateLimitConfig` snapshot would drop every rule).
    Ignore { type_url: String },
    /// New resources: decode and load them, then call `accepted` or `rejected`.
    Load,
    /// The resources in force: send this ACK at once.
    Ack(DiscoveryRequest),
    /// The resources rejected last, again: send this NACK after the pause.
    NackAgain {
        request: DiscoveryRequest,
        after: Duration,
        /// The version rejected, for logs.
        version: String,
    },
}

/// The SHA-256 of a response's resources (type URLs and bytes, in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ResourcesDigest([u8; 32]);

impl ResourcesDigest {
    fn of(response: &DiscoveryResponse) -> Self {
        let mut hasher = Sha256::new();
        for resource in &response.resources {
            for part in [resource.type_url.as_bytes(), resource.value.as_slice()] {
                hasher.update(u64::try_from(part.len()).unwrap_or(u64::MAX).to_le_bytes());
                hasher.update(part);
            }
        }
        Self(hasher.finalize().into())
    }
}

#[derive(Debug, Clone)]
struct Received {
    version: String,
    nonce: String,
    digest: ResourcesDigest,
}

#[derive(Debug, Clone)]
struct Rejection {
    version: String,
    digest: ResourcesDigest,
    message: String,
    /// The pause before the next NACK of the same resources.
    pause: Duration,
}

/// The state of one subscription, across streams.
#[derive(Debug, Clone)]
pub struct Exchange {
    node: Node,
    /// The version and resources in force (`""`, none, before the first ACK).
    accepted_version: String,
    accepted_digest: Option<ResourcesDigest>,
    /// The response being loaded, until it is accepted or rejected.
    pending: Option<Received>,
    rejection: Option<Rejection>,
    /// Whether this stream's requests carried the node yet.
    node_sent: bool,
    max_repeat_pause: Duration,
}

impl Exchange {
    /// `max_repeat_pause` caps the pause between NACKs of the same resources (the backoff's
    /// maximum).
    pub fn new(node: Node, max_repeat_pause: Duration) -> Self {
        Self {
            node,
            accepted_version: String::new(),
            accepted_digest: None,
            pending: None,
            rejection: None,
            node_sent: false,
            max_repeat_pause: max_repeat_pause.max(FIRST_REPEAT_PAUSE),
        }
    }

    /// The version in force (`""` before the first accepted response).
    pub fn accepted_version(&self) -> &str {
        &self.accepted_version
    }

    /// The first request of a new stream. A response being loaded when the last stream ended is
    /// forgotten: the server sends it again on this one.
    pub fn stream_opened(&mut self) -> DiscoveryRequest {
        self.node_sent = false;
        self.pending = None;
        self.request("", None)
    }

    /// What to do with `response`.
    pub fn on_response(&mut self, response: &DiscoveryResponse) -> Next {
        if !response.type_url.is_empty() && response.type_url != RATE_LIMIT_CONFIG_TYPE {
            return Next::Ignore {
                type_url: response.type_url.clone(),
            };
        }
        let received = Received {
            version: response.version_info.clone(),
            nonce: response.nonce.clone(),
            digest: ResourcesDigest::of(response),
        };
        self.pending = None;
        if self.accepted_digest == Some(received.digest)
            && self.accepted_version == received.version
        {
            return Next::Ack(self.request(&received.nonce, None));
        }
        let repeated = self.rejection.as_mut().filter(|rejection| {
            rejection.version == received.version && rejection.digest == received.digest
        });
        if let Some(rejection) = repeated {
            let after = rejection.pause;
            rejection.pause = after.saturating_mul(2).min(self.max_repeat_pause);
            let status = invalid_argument(&rejection.message);
            let version = rejection.version.clone();
            return Next::NackAgain {
                request: self.request(&received.nonce, Some(status)),
                after,
                version,
            };
        }
        self.pending = Some(received);
        Next::Load
    }

    /// The response being loaded went into force: its ACK. `None` when nothing is pending (the
    /// stream it came on has ended).
    pub fn accepted(&mut self) -> Option<DiscoveryRequest> {
        let received = self.pending.take()?;
        self.accepted_version = received.version;
        self.accepted_digest = Some(received.digest);
        self.rejection = None;
        Some(self.request(&received.nonce, None))
    }

    /// The response being loaded was refused for `message`: its NACK, or `None` when nothing is
    /// pending.
    pub fn rejected(&mut self, message: &str) -> Option<DiscoveryRequest> {
        let received = self.pending.take()?;
        let message = truncated(message);
        let status = invalid_argument(&message);
        self.rejection = Some(Rejection {
            version: received.version,
            digest: received.digest,
            message,
            pause: FIRST_REPEAT_PAUSE,
        });
        Some(self.request(&received.nonce, Some(status)))
    }

    fn request(&mut self, nonce: &str, error_detail: Option<Status>) -> DiscoveryRequest {
        let node = (!self.node_sent).then(|| self.node.clone());
        self.node_sent = true;
        DiscoveryRequest {
            version_info: self.accepted_version.clone(),
            node,
            // None: every resource of the type (the reference's client names none either).
            resource_names: Vec::new(),
            resource_locators: Vec::new(),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            response_nonce: nonce.to_owned(),
            error_detail,
        }
    }
}

fn invalid_argument(message: &str) -> Status {
    Status {
        code: INVALID_ARGUMENT,
        message: message.to_owned(),
        details: Vec::new(),
    }
}

/// `message`, at most [`MAX_NACK_MESSAGE_BYTES`] of it (cut at a character boundary).
fn truncated(message: &str) -> String {
    if message.len() <= MAX_NACK_MESSAGE_BYTES {
        return message.to_owned();
    }
    let mut end = MAX_NACK_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} … (cut; floodgate's log has every problem)",
        &message[..end]
    )
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::google::protobuf::Any;

    use super::*;

    const MAX: Duration = Duration::from_secs(5);

    fn exchange() -> Exchange {
        Exchange::new(
            Node {
                id: "edge".to_owned(),
                ..Node::default()
            },
            MAX,
        )
    }

    fn response(version: &str, nonce: &str, bytes: &[u8]) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: version.to_owned(),
            nonce: nonce.to_owned(),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            resources: vec![Any {
                type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                value: bytes.to_vec(),
            }],
            ..DiscoveryResponse::default()
        }
    }

    fn ack_or_panic(request: Option<DiscoveryRequest>) -> DiscoveryRequest {
        request.unwrap_or_else(|| panic!("nothing was pending"))
    }

    #[test]
    fn the_first_request_carries_the_node_and_later_ones_do_not() {
        let mut exchange = exchange();
        let first = exchange.stream_opened();
        assert_eq!(
            first.node.as_ref().map(|node| node.id.as_str()),
            Some("edge")
        );
        assert_eq!(first.version_info, "");
        assert_eq!(first.response_nonce, "");
        assert_eq!(first.type_url, RATE_LIMIT_CONFIG_TYPE);
        assert!(first.resource_names.is_empty() && first.error_detail.is_none());
        assert_eq!(exchange.on_response(&response("v1", "1", b"a")), Next::Load);
        let ack = ack_or_panic(exchange.accepted());
        assert_eq!(
            (ack.version_info.as_str(), ack.response_nonce.as_str()),
            ("v1", "1")
        );
        assert!(ack.node.is_none() && ack.error_detail.is_none());
        // A new stream: the node again, the version in force, no nonce.
        let again = exchange.stream_opened();
        assert!(again.node.is_some());
        assert_eq!(
            (again.version_info.as_str(), again.response_nonce.as_str()),
            ("v1", "")
        );
    }

    #[test]
    fn a_rejected_response_is_nacked_with_the_version_in_force() {
        let mut exchange = exchange();
        exchange.stream_opened();
        assert_eq!(exchange.on_response(&response("v1", "1", b"a")), Next::Load);
        ack_or_panic(exchange.accepted());
        assert_eq!(
            exchange.on_response(&response("v2", "2", b"bad")),
            Next::Load
        );
        let nack = ack_or_panic(exchange.rejected("xds:edge: edge.k: bad"));
        assert_eq!(
            (nack.version_info.as_str(), nack.response_nonce.as_str()),
            ("v1", "2")
        );
        let status = nack
            .error_detail
            .unwrap_or_else(|| panic!("no error_detail"));
        assert_eq!(status.code, INVALID_ARGUMENT);
        assert_eq!(status.message, "xds:edge: edge.k: bad");
        assert_eq!(exchange.accepted_version(), "v1");
        // Before anything was accepted a NACK says "".
        let mut fresh = super::tests::exchange();
        fresh.stream_opened();
        fresh.on_response(&response("v1", "1", b"bad"));
        assert_eq!(ack_or_panic(fresh.rejected("no")).version_info, "");
    }

    #[test]
    fn the_same_rejected_snapshot_again_is_nacked_after_a_growing_pause() {
        let mut exchange = exchange();
        exchange.stream_opened();
        exchange.on_response(&response("v2", "1", b"bad"));
        ack_or_panic(exchange.rejected("xds:edge: broken"));
        let mut pauses = Vec::new();
        for nonce in 2..8 {
            match exchange.on_response(&response("v2", &nonce.to_string(), b"bad")) {
                Next::NackAgain {
                    request,
                    after,
                    version,
                } => {
                    assert_eq!(version, "v2");
                    assert_eq!(request.response_nonce, nonce.to_string());
                    assert_eq!(
                        request.error_detail.map(|status| status.message),
                        Some("xds:edge: broken".to_owned())
                    );
                    pauses.push(after.as_secs());
                }
                other => panic!("expected a NACK again, got {other:?}"),
            }
        }
        assert_eq!(pauses, vec![1, 2, 4, 5, 5, 5]);
        // Something else under the same version is loaded; a good one ends the pauses.
        assert_eq!(
            exchange.on_response(&response("v2", "9", b"other")),
            Next::Load
        );
        ack_or_panic(exchange.accepted());
        exchange.on_response(&response("v3", "10", b"bad"));
        ack_or_panic(exchange.rejected("again"));
        assert!(matches!(
            exchange.on_response(&response("v3", "11", b"bad")),
            Next::NackAgain { after, .. } if after == FIRST_REPEAT_PAUSE
        ));
    }

    #[test]
    fn the_resources_in_force_sent_again_are_acked_without_loading() {
        let mut exchange = exchange();
        exchange.stream_opened();
        exchange.on_response(&response("v1", "1", b"a"));
        ack_or_panic(exchange.accepted());
        exchange.stream_opened();
        match exchange.on_response(&response("v1", "1", b"a")) {
            Next::Ack(request) => {
                assert_eq!(request.version_info, "v1");
                assert!(request.node.is_none(), "the stream's first request had it");
            }
            other => panic!("expected an ACK, got {other:?}"),
        }
        // Same version, other bytes: loaded.
        assert_eq!(exchange.on_response(&response("v1", "2", b"b")), Next::Load);
    }

    #[test]
    fn a_response_of_another_type_changes_nothing() {
        let mut exchange = exchange();
        exchange.stream_opened();
        exchange.on_response(&response("v1", "1", b"a"));
        ack_or_panic(exchange.accepted());
        let cluster = DiscoveryResponse {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            ..response("c1", "2", b"")
        };
        assert!(matches!(
            exchange.on_response(&cluster),
            Next::Ignore { .. }
        ));
        assert_eq!(exchange.accepted_version(), "v1");
        assert!(exchange.accepted().is_none());
    }

    #[test]
    fn nothing_pending_after_a_new_stream() {
        let mut exchange = exchange();
        exchange.stream_opened();
        exchange.on_response(&response("v1", "1", b"a"));
        exchange.stream_opened();
        assert!(exchange.accepted().is_none());
        assert!(exchange.rejected("late").is_none());
        assert_eq!(exchange.accepted_version(), "");
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "é".repeat(MAX_NACK_MESSAGE_BYTES);
        let cut = truncated(&long);
        assert!(cut.len() < MAX_NACK_MESSAGE_BYTES + 100);
        assert!(cut.ends_with("every problem)"));
        assert_eq!(truncated("short"), "short");
    }
}
