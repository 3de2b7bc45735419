//! A test xDS management server: the ADS state-of-the-world stream
//! (`envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`) as
//! go-control-plane serves it with a snapshot cache, on a loopback port, plain h2c or TLS.
//!
//! It mirrors what Envoy Gateway runs for the rate-limit service (its
//! `internal/globalratelimit/runner`): `serverv3.NewServer` without `WithOrderedADS`, so the
//! unordered `process` loop of go-control-plane's `pkg/server/sotw/v3/xds.go`, over
//! `cachev3.NewSnapshotCache(false, cachev3.IDHash{}, ...)` (`pkg/cache/v3/simple.go`). Written
//! from that code (go-control-plane at the commit Envoy Gateway pins, a2d8c7492908: the files
//! below are the same at 2b88c16), not from floodgate's client. The rules:
//!
//! - **Streams and nonces** (`server.go`): streams are numbered from 1 in the order they open;
//!   each stream has one nonce counter for all its types, and every response takes the next
//!   value in base 10 (`"1"`, `"2"`, ...).
//! - **Node** (`xds.go`): a request's node replaces the stream's; a request without one is
//!   treated as carrying the stream's last node (empty before any). The cache is keyed by
//!   `node.id` (`IDHash`).
//! - **Type URL** (`xds.go`): an ADS request with an empty `type_url` ends the stream with
//!   `INVALID_ARGUMENT` "type URL is required for ADS".
//! - **Stale requests** (`xds.go`): once a response of a type was sent on a stream, a request
//!   of that type whose `response_nonce` is not the latest nonce sent for it is ignored (no
//!   watch change, no response). Before the first response of a type any nonce is accepted.
//! - **Every other request** closes the stream's open watch of that type (a response the cache
//!   had queued for it is dropped), updates the subscription (`pkg/server/stream/v3`), and opens
//!   a new watch (`CreateWatch`): with no snapshot for the node it waits; otherwise the cache
//!   answers at once when `createResponse` has something to say, and else waits.
//! - **`createResponse`** (`simple.go`): if the request's `version_info` differs from the
//!   snapshot's version, all resources the subscription covers (state of the world), with the
//!   snapshot's version. If it is equal, only resources of the subscription not yet sent on
//!   this stream (by name); nothing if there are none. So an ACK gets nothing, but a *new*
//!   stream whose first request already carries the current version gets the whole snapshot
//!   again (nothing was sent on that stream yet) — unless the snapshot has no resources.
//! - **`SetSnapshot`** (`simple.go`): every open watch of the node whose request version differs
//!   from the new snapshot's version is answered by `createResponse` and closed; a watch whose
//!   version equals it stays open. A stream gets at most one response per request: a snapshot
//!   set while the stream's last response is not yet ACKed or NACKed reaches it only with its
//!   next request (which then gets the newest snapshot at once).
//! - **NACKs**: go-control-plane's server and cache never look at `error_detail`. A NACK
//!   carries the last *accepted* version, which differs from the snapshot's, so by default
//!   ([`NackPolicy::Resend`]) the rejected snapshot is sent again at once, with a new nonce —
//!   and a client that NACKs it again at once loops with the server (go-control-plane issue
//!   #962, PR #794). [`NackPolicy::HoldUntilNewSnapshot`] is what the xDS protocol
//!   recommends and some control planes add (kgateway): a NACK of the version last sent on the
//!   stream opens a watch that answers only when a snapshot of another version is set.
//! - **Subscriptions** (`pkg/server/stream/v3/subscription.go`): a first request without
//!   `resource_names` is a legacy wildcard (everything) until a request names resources; `*`
//!   is an explicit wildcard; otherwise only the named resources are sent. Resources are named
//!   as go-control-plane does (`GetResourceName`: a `RateLimitConfig`'s `name`); resources of
//!   one snapshot with the same name keep only the last. go-control-plane keeps them in a map,
//!   so its order within a response is random; this server keeps the order given.
//! - **Versions of other types**: a snapshot holds `RateLimitConfig` resources only; for any
//!   other type URL its version is `""` and it has no resources (as `Snapshot.GetVersion` of a
//!   type the snapshot does not hold).
//! - **Delta xDS** is not served (`UNIMPLEMENTED`); go-control-plane has it, floodgate's client
//!   does not use it.
//! - **Stop** is `grpc.Server.Stop` (what Envoy Gateway calls): listener and connections closed
//!   at once, so a client sees its stream fail with a transport error, not a status.
//!
//! For the tests' sake the server also accepts resources go-control-plane cannot hold (bytes
//! that do not decode, another message type under the `RateLimitConfig` type URL: each keeps
//! its own, made-up name), and records every request as the client sent it (before the node is
//! filled in) and every response.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::metadata::KeyAndValueRef;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// go-control-plane's `ResourceRequiresFullStateInSotw`: types whose every response carries all
/// subscribed resources even when the version did not change.
const FULL_STATE_TYPES: [&str; 2] = [
    "type.googleapis.com/envoy.config.cluster.v3.Cluster",
    "type.googleapis.com/envoy.config.listener.v3.Listener",
];

/// How many requests and responses are kept (the oldest go first): a client and the server
/// NACKing and resending in a loop must not fill the memory.
const RECORDED: usize = 100_000;

/// How long `start_on` tries to bind a port the previous server may still be releasing, and
/// `stop` waits for the server's tasks to end.
const BIND_AND_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Server certificate and key (PEM); with `client_ca_pem`, clients must present a certificate
/// that CA signed (mutual TLS, as Envoy Gateway's `RequireAndVerifyClientCert`).
#[derive(Debug, Clone)]
pub struct XdsServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    pub client_ca_pem: Option<String>,
}

/// What the server does with a NACK (a request with `error_detail`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NackPolicy {
    /// go-control-plane's: the NACK is an ordinary request, its version (the last accepted)
    /// differs from the snapshot's, so the rejected snapshot is sent again at once.
    #[default]
    Resend,
    /// The NACKed version is not sent again on that stream; the next snapshot of another
    /// version is.
    HoldUntilNewSnapshot,
}

/// A DiscoveryRequest as the client sent it, the stream it came on (numbered from 1), and that
/// stream's gRPC metadata.
#[derive(Debug, Clone)]
pub struct ReceivedRequest {
    pub stream: usize,
    pub request: DiscoveryRequest,
    pub headers: Vec<(String, String)>,
}

impl ReceivedRequest {
    /// An ACK of `version`: it answers a response (`response_nonce` set), reports `version`
    /// as applied and carries no `error_detail`.
    pub fn is_ack_of(&self, version: &str) -> bool {
        self.request.error_detail.is_none()
            && !self.request.response_nonce.is_empty()
            && self.request.version_info == version
    }

    /// A NACK: `error_detail` is set.
    pub fn is_nack(&self) -> bool {
        self.request.error_detail.is_some()
    }

    /// The value of metadata `name` (lower case), if the stream carried it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The node id the request carried (`""` if it carried no node).
    pub fn node_id(&self) -> &str {
        self.request
            .node
            .as_ref()
            .map(|node| node.id.as_str())
            .unwrap_or("")
    }
}

/// A DiscoveryResponse the server sent, and the stream it went on.
#[derive(Debug, Clone)]
pub struct SentResponse {
    pub stream: usize,
    pub response: DiscoveryResponse,
}

/// A RateLimitConfig resource packed in an Any with the right type URL.
pub fn rate_limit_config(config: &RateLimitConfig) -> Any {
    Any {
        type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
        value: config.encode_to_vec(),
    }
}

/// The RateLimitConfigs of a response, decoded; panics on a resource that is not one.
pub fn rate_limit_configs(response: &DiscoveryResponse) -> Vec<RateLimitConfig> {
    response
        .resources
        .iter()
        .map(|any| {
            assert_eq!(any.type_url, RATE_LIMIT_CONFIG_TYPE, "resource type URL");
            RateLimitConfig::decode(any.value.as_slice())
                .unwrap_or_else(|error| panic!("resource is no RateLimitConfig: {error}"))
        })
        .collect()
}

/// The snapshot of one node: `RateLimitConfig` resources by name, in the order given.
struct Snapshot {
    version: String,
    resources: Vec<(String, Any)>,
}

impl Snapshot {
    fn new(version: &str, resources: Vec<Any>) -> Snapshot {
        let mut named: Vec<(String, Any)> = Vec::with_capacity(resources.len());
        for (index, any) in resources.into_iter().enumerate() {
            let name = resource_name(&any, index);
            match named.iter_mut().find(|(known, _)| *known == name) {
                Some(slot) => slot.1 = any,
                None => named.push((name, any)),
            }
        }
        Snapshot {
            version: version.to_owned(),
            resources: named,
        }
    }

    fn version_of(&self, type_url: &str) -> &str {
        if type_url == RATE_LIMIT_CONFIG_TYPE {
            &self.version
        } else {
            ""
        }
    }

    fn resources_of(&self, type_url: &str) -> &[(String, Any)] {
        if type_url == RATE_LIMIT_CONFIG_TYPE {
            &self.resources
        } else {
            &[]
        }
    }
}

/// go-control-plane's `GetResourceName` of a RateLimitConfig; anything else (which a Go
/// snapshot could not hold) gets a name of its own.
fn resource_name(any: &Any, index: usize) -> String {
    if any.type_url == RATE_LIMIT_CONFIG_TYPE {
        if let Ok(config) = RateLimitConfig::decode(any.value.as_slice()) {
            return config.name;
        }
    }
    format!(
        "(resource {index} of type {:?}, not a RateLimitConfig)",
        any.type_url
    )
}

/// The server's view of one type's subscription on one stream (`stream.Subscription`).
#[derive(Debug, Clone)]
struct Subscription {
    wildcard: bool,
    allow_legacy_wildcard: bool,
    names: BTreeSet<String>,
    /// `x/*` subscriptions; go-control-plane's `createResponse` returns nothing for them.
    prefixes: BTreeSet<String>,
    /// Resource name → version, of what was last sent on the stream.
    returned: HashMap<String, String>,
}

impl Subscription {
    /// `NewSotwSubscription` with legacy wildcard active (go-control-plane's default).
    fn new_sotw(names: &[String]) -> Subscription {
        let mut subscription = Subscription {
            wildcard: names.is_empty(),
            allow_legacy_wildcard: true,
            names: BTreeSet::new(),
            prefixes: BTreeSet::new(),
            returned: HashMap::new(),
        };
        subscription.set_resource_subscription(names);
        subscription
    }

    /// `SetResourceSubscription`.
    fn set_resource_subscription(&mut self, subscribed: &[String]) {
        if self.allow_legacy_wildcard {
            if subscribed.is_empty() {
                return;
            }
            self.allow_legacy_wildcard = false;
        }
        let mut names = BTreeSet::new();
        let mut prefixes = BTreeSet::new();
        let mut explicit_wildcard = false;
        for name in subscribed {
            if name == "*" {
                explicit_wildcard = true;
            } else if let Some(prefix) = name.strip_suffix("/*") {
                prefixes.insert(format!("{prefix}/"));
            } else {
                names.insert(name.clone());
            }
        }
        if !explicit_wildcard {
            self.returned.retain(|name, _| {
                names.contains(name) || prefixes.iter().any(|prefix| name.starts_with(prefix))
            });
        }
        self.wildcard = explicit_wildcard;
        self.names = names;
        self.prefixes = prefixes;
    }
}

/// A response the cache made for a watch (`RawResponse`).
#[derive(Debug)]
struct RawResponse {
    version: String,
    resources: Vec<Any>,
    returned: HashMap<String, String>,
}

/// go-control-plane's `createResponse` (the `ads` check does not apply: Envoy Gateway's cache
/// is not in ADS mode).
fn create_response(
    snapshot: &Snapshot,
    type_url: &str,
    request_version: &str,
    subscription: &Subscription,
) -> Option<RawResponse> {
    let resources = snapshot.resources_of(type_url);
    let version = snapshot.version_of(type_url);
    let full_state = FULL_STATE_TYPES.contains(&type_url);
    let exists = |name: &str| resources.iter().any(|(known, _)| known == name);
    let known = &subscription.returned;

    let mut changed: Vec<&str> = Vec::new();
    let mut deleted: Vec<String> = Vec::new();
    if version == request_version {
        if subscription.wildcard {
            changed.extend(
                resources
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .filter(|name| !known.contains_key(*name)),
            );
        }
        for name in &subscription.names {
            if exists(name) && !known.contains_key(name) && !changed.contains(&name.as_str()) {
                changed.push(name);
            }
        }
        if changed.is_empty() && !full_state {
            return None;
        }
        for name in known.keys() {
            if !exists(name) || (!subscription.wildcard && !subscription.names.contains(name)) {
                deleted.push(name.clone());
            }
        }
        if changed.is_empty() && deleted.is_empty() {
            return None;
        }
    }

    let mut out = Vec::new();
    let mut returned = HashMap::new();
    if version != request_version || full_state {
        if subscription.wildcard {
            for (name, any) in resources {
                out.push(any.clone());
                returned.insert(name.clone(), version.to_owned());
            }
        }
        // As go-control-plane: a resource both named and covered by the wildcard is sent twice.
        for name in &subscription.names {
            if let Some((_, any)) = resources.iter().find(|(known, _)| known == name) {
                out.push(any.clone());
                returned.insert(name.clone(), version.to_owned());
            }
        }
    } else {
        returned = known.clone();
        for name in changed {
            if let Some((_, any)) = resources.iter().find(|(known, _)| known == name) {
                out.push(any.clone());
                returned.insert(name.to_owned(), version.to_owned());
            }
        }
        for name in &deleted {
            returned.remove(name);
        }
    }
    Some(RawResponse {
        version: version.to_owned(),
        resources: out,
        returned,
    })
}

/// A watch the cache holds for a stream until a snapshot answers it.
struct OpenWatch {
    stream: usize,
    node: String,
    type_url: String,
    request_version: String,
    subscription: Subscription,
    /// With [`NackPolicy::HoldUntilNewSnapshot`], after a NACK: the version not to send again.
    held_version: Option<String>,
    answer: mpsc::UnboundedSender<Answer>,
}

/// The cache's answer to watch `watch`.
struct Answer {
    watch: u64,
    type_url: String,
    response: RawResponse,
}

#[derive(Default)]
struct State {
    snapshots: HashMap<String, Snapshot>,
    watches: BTreeMap<u64, OpenWatch>,
    next_watch: u64,
    streams_opened: usize,
    nack_policy: NackPolicy,
    requests: VecDeque<ReceivedRequest>,
    requests_total: usize,
    responses: VecDeque<SentResponse>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn push_bounded<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.len() == RECORDED {
        queue.pop_front();
    }
    queue.push_back(item);
}

/// What `CreateWatch` did.
enum Watched {
    /// The cache answered at once (no watch kept).
    Now(RawResponse),
    /// The cache keeps watch `id` open.
    Open(u64),
}

impl State {
    /// `snapshotCache.CreateWatch`.
    fn create_watch(
        &mut self,
        stream: usize,
        node: &str,
        request: &DiscoveryRequest,
        subscription: &Subscription,
        held_version: Option<String>,
        answer: &mpsc::UnboundedSender<Answer>,
    ) -> Watched {
        if let Some(snapshot) = self.snapshots.get(node) {
            let held = held_version.as_deref() == Some(snapshot.version_of(&request.type_url));
            if !held {
                if let Some(response) = create_response(
                    snapshot,
                    &request.type_url,
                    &request.version_info,
                    subscription,
                ) {
                    return Watched::Now(response);
                }
            }
        }
        self.next_watch += 1;
        let id = self.next_watch;
        self.watches.insert(
            id,
            OpenWatch {
                stream,
                node: node.to_owned(),
                type_url: request.type_url.clone(),
                request_version: request.version_info.clone(),
                subscription: subscription.clone(),
                held_version,
                answer: answer.clone(),
            },
        );
        Watched::Open(id)
    }

    /// `snapshotCache.SetSnapshot` and its `respondSOTWWatches`.
    fn set_snapshot(&mut self, node: &str, snapshot: Snapshot) {
        let mut answered = Vec::new();
        for (&id, watch) in self.watches.iter().filter(|(_, watch)| watch.node == node) {
            let version = snapshot.version_of(&watch.type_url);
            if version == watch.request_version || watch.held_version.as_deref() == Some(version) {
                continue;
            }
            if let Some(response) = create_response(
                &snapshot,
                &watch.type_url,
                &watch.request_version,
                &watch.subscription,
            ) {
                // A stream that has ended drops its watches; a failed send loses nothing.
                let _ = watch.answer.send(Answer {
                    watch: id,
                    type_url: watch.type_url.clone(),
                    response,
                });
                answered.push(id);
            }
        }
        for id in answered {
            self.watches.remove(&id);
        }
        self.snapshots.insert(node.to_owned(), snapshot);
    }
}

/// The service, shared by every connection.
#[derive(Clone)]
struct Ads {
    state: Arc<Mutex<State>>,
}

/// Removes a stream's watches from the cache when the stream's task ends or is dropped (the
/// `watches.close()` of go-control-plane's stream shutdown).
struct StreamWatches {
    state: Arc<Mutex<State>>,
    stream: usize,
}

impl Drop for StreamWatches {
    fn drop(&mut self) {
        let stream = self.stream;
        lock(&self.state)
            .watches
            .retain(|_, watch| watch.stream != stream);
    }
}

/// One type's state on a stream (go-control-plane's `watch` in `sw.watches.responders`).
struct Responder {
    /// The latest nonce sent for this type, `""` before the first response.
    nonce: String,
    subscription: Subscription,
    /// The cache's open watch for this type, if any.
    watch: Option<u64>,
    /// The version of the latest response sent for this type.
    sent_version: Option<String>,
}

type Outgoing = mpsc::Sender<Result<DiscoveryResponse, Status>>;

/// One ADS stream: go-control-plane's `process` loop.
struct AdsStream {
    state: Arc<Mutex<State>>,
    id: usize,
    headers: Vec<(String, String)>,
    node: Node,
    nonce: u64,
    responders: HashMap<String, Responder>,
    answers: mpsc::UnboundedSender<Answer>,
    out: Outgoing,
}

/// Why a stream's loop ends.
enum End {
    /// The stream ends with OK (the client closed its side, or went away).
    Ok,
    /// The stream ends with this status.
    Status(Status),
}

impl AdsStream {
    async fn run(
        mut self,
        mut incoming: Streaming<DiscoveryRequest>,
        mut answered: mpsc::UnboundedReceiver<Answer>,
    ) {
        let _watches = StreamWatches {
            state: Arc::clone(&self.state),
            stream: self.id,
        };
        let out = self.out.clone();
        let end = loop {
            let step = tokio::select! {
                message = incoming.message() => match message {
                    Ok(Some(request)) => self.on_request(request).await,
                    // The request stream ended or failed: go-control-plane returns nil.
                    Ok(None) | Err(_) => Err(End::Ok),
                },
                Some(answer) = answered.recv() => self.on_answer(answer).await,
                () = out.closed() => Err(End::Ok),
            };
            if let Err(end) = step {
                break end;
            }
        };
        if let End::Status(status) = end {
            let _ = self.out.send(Err(status)).await;
        }
    }

    async fn on_request(&mut self, mut request: DiscoveryRequest) -> Result<(), End> {
        {
            let mut state = lock(&self.state);
            state.requests_total += 1;
            push_bounded(
                &mut state.requests,
                ReceivedRequest {
                    stream: self.id,
                    request: request.clone(),
                    headers: self.headers.clone(),
                },
            );
        }
        match &request.node {
            Some(node) => self.node = node.clone(),
            None => request.node = Some(self.node.clone()),
        }
        if request.type_url.is_empty() {
            return Err(End::Status(Status::invalid_argument(
                "type URL is required for ADS",
            )));
        }
        let type_url = request.type_url.clone();
        let nack_policy = lock(&self.state).nack_policy;
        let responder = match self.responders.get_mut(&type_url) {
            Some(responder) => {
                if !responder.nonce.is_empty() && request.response_nonce != responder.nonce {
                    eprintln!(
                        "xds test server: stream {}: skipping request as nonce is stale \
                         for {type_url} (got {:?}, latest {:?})",
                        self.id, request.response_nonce, responder.nonce
                    );
                    return Ok(());
                }
                if let Some(watch) = responder.watch.take() {
                    lock(&self.state).watches.remove(&watch);
                }
                responder
                    .subscription
                    .set_resource_subscription(&request.resource_names);
                responder
            }
            None => self
                .responders
                .entry(type_url.clone())
                .or_insert_with(|| Responder {
                    nonce: String::new(),
                    subscription: Subscription::new_sotw(&request.resource_names),
                    watch: None,
                    sent_version: None,
                }),
        };
        let mut held_version = None;
        if let Some(error) = &request.error_detail {
            eprintln!(
                "xds test server: stream {}: NACK of nonce {:?} ({type_url}, \
                 last accepted version {:?}): code {} {:?}",
                self.id, request.response_nonce, request.version_info, error.code, error.message
            );
            if nack_policy == NackPolicy::HoldUntilNewSnapshot {
                held_version = responder.sent_version.clone();
            }
        }
        let node_id = self.node.id.clone();
        let watched = lock(&self.state).create_watch(
            self.id,
            &node_id,
            &request,
            &responder.subscription,
            held_version,
            &self.answers,
        );
        match watched {
            Watched::Open(watch) => {
                responder.watch = Some(watch);
                Ok(())
            }
            Watched::Now(response) => self.send(&type_url, response).await,
        }
    }

    async fn on_answer(&mut self, answer: Answer) -> Result<(), End> {
        let current = self
            .responders
            .get_mut(&answer.type_url)
            .filter(|responder| responder.watch == Some(answer.watch));
        match current {
            Some(responder) => {
                responder.watch = None;
                self.send(&answer.type_url, answer.response).await
            }
            // The answer of a watch a later request closed: dropped, as go-control-plane drops
            // what was queued on a closed watch's channel.
            None => Ok(()),
        }
    }

    /// `streamWrapper.send`.
    async fn send(&mut self, type_url: &str, response: RawResponse) -> Result<(), End> {
        self.nonce += 1;
        let nonce = self.nonce.to_string();
        let out = DiscoveryResponse {
            version_info: response.version.clone(),
            resources: response.resources,
            type_url: type_url.to_owned(),
            nonce: nonce.clone(),
            ..Default::default()
        };
        if let Some(responder) = self.responders.get_mut(type_url) {
            responder.subscription.returned = response.returned;
            responder.nonce = nonce;
            responder.sent_version = Some(response.version);
        }
        push_bounded(
            &mut lock(&self.state).responses,
            SentResponse {
                stream: self.id,
                response: out.clone(),
            },
        );
        self.out.send(Ok(out)).await.map_err(|_| End::Ok)
    }
}

fn metadata_pairs(metadata: &tonic::metadata::MetadataMap) -> Vec<(String, String)> {
    metadata
        .iter()
        .map(|entry| match entry {
            KeyAndValueRef::Ascii(key, value) => (
                key.as_str().to_owned(),
                value
                    .to_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|_| String::from_utf8_lossy(value.as_bytes()).into_owned()),
            ),
            KeyAndValueRef::Binary(key, value) => (
                key.as_str().to_owned(),
                match value.to_bytes() {
                    Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    Err(_) => String::from_utf8_lossy(value.as_encoded_bytes()).into_owned(),
                },
            ),
        })
        .collect()
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let headers = metadata_pairs(request.metadata());
        let id = {
            let mut state = lock(&self.state);
            state.streams_opened += 1;
            state.streams_opened
        };
        let (out, responses) = mpsc::channel(16);
        let (answers, answered) = mpsc::unbounded_channel();
        let stream = AdsStream {
            state: Arc::clone(&self.state),
            id,
            headers,
            node: Node::default(),
            nonce: 0,
            responders: HashMap::new(),
            answers,
            out,
        };
        tokio::spawn(stream.run(request.into_inner(), answered));
        Ok(Response::new(ReceiverStream::new(responses)))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented(
            "delta xDS is not served by the test management server",
        ))
    }
}

/// A running test management server on 127.0.0.1; stopped (as `grpc.Server.Stop`) when
/// dropped.
pub struct XdsServer {
    port: u16,
    state: Arc<Mutex<State>>,
    /// The server's own runtime: shutting it down drops the listener and every connection at
    /// once, whatever the streams are doing.
    runtime: Option<tokio::runtime::Runtime>,
}

impl XdsServer {
    /// On a free loopback port.
    pub async fn start(tls: Option<XdsServerTls>) -> XdsServer {
        Self::start_on(crate::free_port(), tls).await
    }

    /// On `port` (a restarted server on the port of a stopped one): binding is retried for a
    /// few seconds while the port is still taken.
    pub async fn start_on(port: u16, tls: Option<XdsServerTls>) -> XdsServer {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = tokio::time::Instant::now() + BIND_AND_STOP_TIMEOUT;
        let listener = loop {
            match std::net::TcpListener::bind(addr) {
                Ok(listener) => break listener,
                Err(error) if tokio::time::Instant::now() >= deadline => {
                    panic!("xds test server cannot bind {addr}: {error}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|error| panic!("xds test server listener: {error}"));

        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            let mut config = ServerTlsConfig::new().identity(Identity::from_pem(
                tls.cert_pem.as_bytes(),
                tls.key_pem.as_bytes(),
            ));
            if let Some(ca) = &tls.client_ca_pem {
                config = config.client_ca_root(Certificate::from_pem(ca.as_bytes()));
            }
            builder = builder
                .tls_config(config)
                .unwrap_or_else(|error| panic!("xds test server TLS: {error}"));
        }
        let state = Arc::new(Mutex::new(State::default()));
        let router = builder.add_service(AggregatedDiscoveryServiceServer::new(Ads {
            state: Arc::clone(&state),
        }));

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("xds-test-server")
            .enable_all()
            .build()
            .unwrap_or_else(|error| panic!("xds test server runtime: {error}"));
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .unwrap_or_else(|error| panic!("xds test server listener: {error}"));
            if let Err(error) = router
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await
            {
                eprintln!("xds test server on {addr}: {error}");
            }
        });
        XdsServer {
            port,
            state,
            runtime: Some(runtime),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Closes the listener and every connection at once (`grpc.Server.Stop`): clients see
    /// their streams fail. Returns once the port is free again (bounded).
    pub async fn stop(mut self) {
        if let Some(runtime) = self.runtime.take() {
            let stopped = tokio::task::spawn_blocking(move || {
                runtime.shutdown_timeout(BIND_AND_STOP_TIMEOUT);
            })
            .await;
            if let Err(error) = stopped {
                panic!("xds test server did not stop: {error}");
            }
        }
    }

    /// Sets the snapshot of `node_id`: `version` and its `RateLimitConfig` resources (any Any:
    /// tests may push bytes that do not decode, or another type). Answers the node's open
    /// watches as go-control-plane's `SetSnapshot` does.
    pub fn set_snapshot(&self, node_id: &str, version: &str, resources: Vec<Any>) {
        lock(&self.state).set_snapshot(node_id, Snapshot::new(version, resources));
    }

    /// What later NACKs get (requests already waiting keep what they got).
    pub fn set_nack_policy(&self, policy: NackPolicy) {
        lock(&self.state).nack_policy = policy;
    }

    /// Every DiscoveryRequest received so far (the latest 100 000), in order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        lock(&self.state).requests.iter().cloned().collect()
    }

    /// How many DiscoveryRequests were received, including any no longer kept.
    pub fn requests_total(&self) -> usize {
        lock(&self.state).requests_total
    }

    /// Every DiscoveryResponse sent so far (the latest 100 000), in order.
    pub fn responses(&self) -> Vec<SentResponse> {
        lock(&self.state).responses.iter().cloned().collect()
    }

    /// How many ADS streams were opened.
    pub fn streams_opened(&self) -> usize {
        lock(&self.state).streams_opened
    }

    /// The first request (of those kept) matching `predicate`, once it has arrived; panics
    /// after `timeout` with the requests seen.
    pub async fn wait_for_request(
        &self,
        timeout: Duration,
        predicate: impl Fn(&ReceivedRequest) -> bool,
    ) -> ReceivedRequest {
        self.wait_for(
            timeout,
            |state| &state.requests,
            predicate,
            || format!("xDS request; {} received", self.requests_total()),
        )
        .await
    }

    /// Like [`XdsServer::wait_for_request`], for responses sent.
    pub async fn wait_for_response(
        &self,
        timeout: Duration,
        predicate: impl Fn(&SentResponse) -> bool,
    ) -> SentResponse {
        self.wait_for(
            timeout,
            |state| &state.responses,
            predicate,
            || "xDS response".to_owned(),
        )
        .await
    }

    /// The first item of `kept` matching `predicate`, polled until `timeout`; then a panic
    /// naming `what` with the last 50 items kept.
    async fn wait_for<T: Clone + std::fmt::Debug>(
        &self,
        timeout: Duration,
        kept: impl Fn(&State) -> &VecDeque<T>,
        predicate: impl Fn(&T) -> bool,
        what: impl Fn() -> String,
    ) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found = kept(&lock(&self.state))
                .iter()
                .find(|item| predicate(item))
                .cloned();
            if let Some(item) = found {
                return item;
            }
            if tokio::time::Instant::now() >= deadline {
                let items: Vec<T> = kept(&lock(&self.state)).iter().cloned().collect();
                let shown = items.len().saturating_sub(50);
                panic!(
                    "no matching {} within {timeout:?}; the last ones: {:#?}",
                    what(),
                    &items[shown..]
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for XdsServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testca::TestCa;
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client as ads_client;
    use envoy_types::pb::google::rpc::Status as RpcStatus;
    use envoy_types::pb::ratelimit::config::ratelimit::v3::{
        RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
    };
    use tonic::transport::{Channel, ClientTlsConfig};

    const NODE: &str = "test-node";
    const STEP: Duration = Duration::from_secs(5);
    /// How long "nothing arrives" is watched for.
    const QUIET: Duration = Duration::from_millis(300);
    const TEST: Duration = Duration::from_secs(30);

    fn config(name: &str, requests_per_unit: u32) -> RateLimitConfig {
        RateLimitConfig {
            name: name.to_owned(),
            domain: format!("{name}-domain"),
            descriptors: vec![RateLimitDescriptor {
                key: "path".to_owned(),
                value: "/".to_owned(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Second as i32,
                    requests_per_unit,
                    ..Default::default()
                }),
                ..Default::default()
            }],
        }
    }

    fn request(node: Option<&str>, version: &str, nonce: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.to_owned(),
            node: node.map(|id| Node {
                id: id.to_owned(),
                ..Default::default()
            }),
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            response_nonce: nonce.to_owned(),
            ..Default::default()
        }
    }

    fn nack(version: &str, nonce: &str) -> DiscoveryRequest {
        DiscoveryRequest {
            error_detail: Some(RpcStatus {
                code: 3,
                message: "bad config".to_owned(),
                ..Default::default()
            }),
            ..request(None, version, nonce)
        }
    }

    /// A client's ADS stream.
    struct Client {
        requests: mpsc::Sender<DiscoveryRequest>,
        responses: Streaming<DiscoveryResponse>,
    }

    impl Client {
        async fn open(channel: Channel, headers: &[(&'static str, &str)]) -> Client {
            let (requests, outgoing) = mpsc::channel(16);
            let mut call = Request::new(ReceiverStream::new(outgoing));
            for (key, value) in headers {
                let value = value
                    .parse()
                    .unwrap_or_else(|error| panic!("metadata value {value}: {error}"));
                call.metadata_mut().insert(*key, value);
            }
            let responses = tokio::time::timeout(
                STEP,
                ads_client::AggregatedDiscoveryServiceClient::new(channel)
                    .stream_aggregated_resources(call),
            )
            .await
            .unwrap_or_else(|_| panic!("ADS stream not opened within {STEP:?}"))
            .unwrap_or_else(|status| panic!("ADS stream: {status}"))
            .into_inner();
            Client {
                requests,
                responses,
            }
        }

        async fn plain(server: &XdsServer) -> Client {
            Client::open(plain_channel(server.port()).await, &[]).await
        }

        async fn send(&self, request: DiscoveryRequest) {
            self.requests
                .send(request)
                .await
                .unwrap_or_else(|error| panic!("send DiscoveryRequest: {error}"));
        }

        async fn next(&mut self) -> DiscoveryResponse {
            tokio::time::timeout(STEP, self.responses.message())
                .await
                .unwrap_or_else(|_| panic!("no DiscoveryResponse within {STEP:?}"))
                .unwrap_or_else(|status| panic!("ADS stream failed: {status}"))
                .unwrap_or_else(|| panic!("ADS stream ended"))
        }

        async fn nothing(&mut self) {
            if let Ok(message) = tokio::time::timeout(QUIET, self.responses.message()).await {
                panic!("expected no response, got {message:?}");
            }
        }
    }

    async fn plain_channel(port: u16) -> Channel {
        Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap_or_else(|error| panic!("endpoint: {error}"))
            .connect_timeout(STEP)
            .connect()
            .await
            .unwrap_or_else(|error| panic!("connect to 127.0.0.1:{port}: {error}"))
    }

    async fn bounded(test: impl std::future::Future<Output = ()>) {
        tokio::time::timeout(TEST, test)
            .await
            .unwrap_or_else(|_| panic!("test did not finish within {TEST:?}"));
    }

    #[tokio::test]
    async fn xds_first_request_gets_the_snapshot_and_an_ack_gets_nothing() {
        bounded(async {
            let server = XdsServer::start(None).await;
            let a = config("a", 10);
            let b = config("b", 20);
            server.set_snapshot(
                NODE,
                "v1",
                vec![rate_limit_config(&a), rate_limit_config(&b)],
            );
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            let response = client.next().await;
            assert_eq!(response.version_info, "v1");
            assert_eq!(response.nonce, "1");
            assert_eq!(response.type_url, RATE_LIMIT_CONFIG_TYPE);
            assert_eq!(rate_limit_configs(&response), vec![a, b]);

            client.send(request(None, "v1", "1")).await;
            client.nothing().await;
            let ack = server
                .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
                .await;
            assert_eq!(ack.stream, 1);
            assert!(ack.request.node.is_none(), "recorded as sent, without node");
            assert_eq!(server.requests().len(), 2);
            assert_eq!(server.responses().len(), 1);
            assert_eq!(server.streams_opened(), 1);

            let c = config("c", 30);
            server.set_snapshot(NODE, "v2", vec![rate_limit_config(&c)]);
            let response = client.next().await;
            assert_eq!(response.version_info, "v2");
            assert_eq!(response.nonce, "2");
            assert_eq!(rate_limit_configs(&response), vec![c]);
        })
        .await;
    }

    #[tokio::test]
    async fn xds_no_snapshot_waits_and_only_its_node_wakes_it() {
        bounded(async {
            let server = XdsServer::start(None).await;
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            client.nothing().await;
            server.set_snapshot("other-node", "v1", vec![rate_limit_config(&config("x", 1))]);
            client.nothing().await;
            server.set_snapshot(NODE, "v7", vec![rate_limit_config(&config("a", 1))]);
            let response = client.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v7", "1")
            );

            // Later requests without a node keep the stream's.
            client.send(request(None, "v7", "1")).await;
            client.nothing().await;
            server.set_snapshot(NODE, "v8", vec![]);
            let response = client.next().await;
            assert_eq!(response.version_info, "v8");
            assert!(response.resources.is_empty());
        })
        .await;
    }

    #[tokio::test]
    async fn xds_snapshots_set_before_the_ack_reach_the_client_with_its_next_request() {
        bounded(async {
            let server = XdsServer::start(None).await;
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            assert_eq!(client.next().await.version_info, "v1");
            // No request is open: nothing is pushed, however many snapshots are set.
            server.set_snapshot(NODE, "v2", vec![rate_limit_config(&config("a", 2))]);
            server.set_snapshot(NODE, "v3", vec![rate_limit_config(&config("a", 3))]);
            client.nothing().await;
            client.send(request(None, "v1", "1")).await;
            let response = client.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v3", "2")
            );
            assert_eq!(
                rate_limit_configs(&response)[0].descriptors[0]
                    .rate_limit
                    .as_ref()
                    .map(|policy| policy.requests_per_unit),
                Some(3)
            );
        })
        .await;
    }

    #[tokio::test]
    async fn xds_a_nack_gets_the_rejected_snapshot_again_as_go_control_plane_does() {
        bounded(async {
            let server = XdsServer::start(None).await;
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            assert_eq!(client.next().await.nonce, "1");
            client.send(request(None, "v1", "1")).await;
            let bad = Any {
                type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
                value: vec![0xff, 0xff, 0xff],
            };
            server.set_snapshot(NODE, "v2", vec![bad.clone()]);
            let response = client.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v2", "2")
            );
            assert_eq!(response.resources, vec![bad.clone()]);

            client.send(nack("v1", "2")).await;
            let again = client.next().await;
            assert_eq!(
                (again.version_info.as_str(), again.nonce.as_str()),
                ("v2", "3")
            );
            assert_eq!(again.resources, vec![bad]);
            let nacked = server
                .wait_for_request(STEP, ReceivedRequest::is_nack)
                .await;
            assert_eq!(nacked.request.response_nonce, "2");
            assert_eq!(nacked.request.version_info, "v1");

            // A NACK with a stale nonce is ignored like any stale request.
            client.send(nack("v1", "2")).await;
            client.nothing().await;
        })
        .await;
    }

    #[tokio::test]
    async fn xds_a_held_nack_gets_nothing_until_the_next_snapshot() {
        bounded(async {
            let server = XdsServer::start(None).await;
            server.set_nack_policy(NackPolicy::HoldUntilNewSnapshot);
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            assert_eq!(client.next().await.version_info, "v1");
            client.send(nack("", "1")).await;
            client.nothing().await;
            assert!(server.requests().iter().any(ReceivedRequest::is_nack));
            // The same version set again is still held.
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            client.nothing().await;
            server.set_snapshot(NODE, "v2", vec![rate_limit_config(&config("a", 2))]);
            let response = client.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v2", "2")
            );
        })
        .await;
    }

    #[tokio::test]
    async fn xds_a_stale_nonce_is_ignored() {
        bounded(async {
            let server = XdsServer::start(None).await;
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            assert_eq!(client.next().await.nonce, "1");
            // Its version differs from the snapshot's, yet it gets nothing: the nonce is stale.
            client.send(request(None, "", "0")).await;
            client.nothing().await;
            client.send(request(None, "v1", "1")).await;
            client.nothing().await;
            server.set_snapshot(NODE, "v2", vec![rate_limit_config(&config("a", 2))]);
            assert_eq!(client.next().await.nonce, "2");
            assert_eq!(
                server.requests().len(),
                3,
                "the stale request is recorded too"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn xds_a_new_stream_with_the_current_version_gets_the_snapshot_again_unless_empty() {
        bounded(async {
            let server = XdsServer::start(None).await;
            let a = config("a", 1);
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&a)]);
            // go-control-plane's createResponse: nothing was sent on this stream yet, so every
            // resource is new to it although the version is the same.
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "v1", "")).await;
            let response = client.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v1", "1")
            );
            assert_eq!(rate_limit_configs(&response), vec![a]);

            server.set_snapshot(NODE, "v2", vec![]);
            let mut empty = Client::plain(&server).await;
            empty.send(request(Some(NODE), "v2", "")).await;
            empty.nothing().await;
            server.set_snapshot(NODE, "v3", vec![rate_limit_config(&config("b", 1))]);
            let response = empty.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v3", "1")
            );
            let streams: BTreeSet<usize> =
                server.requests().iter().map(|seen| seen.stream).collect();
            assert_eq!(streams, BTreeSet::from([1, 2]));
        })
        .await;
    }

    #[tokio::test]
    async fn xds_named_subscriptions_and_empty_type_urls() {
        bounded(async {
            let server = XdsServer::start(None).await;
            let a = config("a", 1);
            let b = config("b", 1);
            server.set_snapshot(
                NODE,
                "v1",
                vec![rate_limit_config(&a), rate_limit_config(&b)],
            );
            let mut client = Client::plain(&server).await;
            client
                .send(DiscoveryRequest {
                    resource_names: vec!["b".to_owned()],
                    ..request(Some(NODE), "", "")
                })
                .await;
            assert_eq!(rate_limit_configs(&client.next().await), vec![b]);
            // Adding a name at the same version sends only what is new to the stream.
            client
                .send(DiscoveryRequest {
                    resource_names: vec!["a".to_owned(), "b".to_owned()],
                    ..request(None, "v1", "1")
                })
                .await;
            assert_eq!(rate_limit_configs(&client.next().await), vec![a]);

            client
                .send(DiscoveryRequest {
                    type_url: String::new(),
                    ..request(None, "v1", "2")
                })
                .await;
            let status = tokio::time::timeout(STEP, client.responses.message())
                .await
                .unwrap_or_else(|_| panic!("stream did not end within {STEP:?}"))
                .err()
                .unwrap_or_else(|| panic!("expected INVALID_ARGUMENT"));
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
        })
        .await;
    }

    #[tokio::test]
    async fn xds_headers_are_recorded_per_stream() {
        bounded(async {
            let server = XdsServer::start(None).await;
            let channel = plain_channel(server.port()).await;
            let client = Client::open(channel.clone(), &[("x-test", "1")]).await;
            client.send(request(Some(NODE), "", "")).await;
            let other = Client::open(channel, &[("x-test", "2")]).await;
            other.send(request(Some(NODE), "", "")).await;
            let first = server.wait_for_request(STEP, |seen| seen.stream == 1).await;
            assert_eq!(first.header("x-test"), Some("1"));
            let second = server.wait_for_request(STEP, |seen| seen.stream == 2).await;
            assert_eq!(second.header("x-test"), Some("2"));
            assert_eq!(second.node_id(), NODE);
        })
        .await;
    }

    #[tokio::test]
    async fn xds_stop_ends_the_stream_and_the_port_serves_again() {
        bounded(async {
            let server = XdsServer::start(None).await;
            let port = server.port();
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "", "")).await;
            assert_eq!(client.next().await.version_info, "v1");
            server.stop().await;
            let ended = tokio::time::timeout(STEP, client.responses.message())
                .await
                .unwrap_or_else(|_| panic!("stream still open {STEP:?} after stop"));
            assert!(
                !matches!(ended, Ok(Some(_))),
                "got a response after stop: {ended:?}"
            );

            let server = XdsServer::start_on(port, None).await;
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);
            let mut client = Client::plain(&server).await;
            client.send(request(Some(NODE), "v1", "")).await;
            let response = client.next().await;
            assert_eq!(
                (response.version_info.as_str(), response.nonce.as_str()),
                ("v1", "1")
            );
            assert_eq!(server.streams_opened(), 1);
        })
        .await;
    }

    fn tls_endpoint(
        port: u16,
        ca: &str,
        identity: Option<&crate::testca::Pair>,
    ) -> tonic::transport::Endpoint {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca.as_bytes()))
            .domain_name("localhost");
        if let Some(pair) = identity {
            tls = tls.identity(Identity::from_pem(
                pair.cert.as_bytes(),
                pair.key.as_bytes(),
            ));
        }
        Channel::from_shared(format!("https://127.0.0.1:{port}"))
            .unwrap_or_else(|error| panic!("endpoint: {error}"))
            .connect_timeout(STEP)
            .tls_config(tls)
            .unwrap_or_else(|error| panic!("client TLS: {error}"))
    }

    /// Connects, opens a stream and waits for the first response; the failure, if any.
    async fn first_response(
        endpoint: tonic::transport::Endpoint,
    ) -> Result<DiscoveryResponse, String> {
        let channel = endpoint
            .connect()
            .await
            .map_err(|error| format!("connect: {error}"))?;
        let (requests, outgoing) = mpsc::channel(1);
        requests
            .send(request(Some(NODE), "", ""))
            .await
            .map_err(|error| format!("send: {error}"))?;
        let mut responses = ads_client::AggregatedDiscoveryServiceClient::new(channel)
            .stream_aggregated_resources(ReceiverStream::new(outgoing))
            .await
            .map_err(|status| format!("open: {status}"))?
            .into_inner();
        match responses.message().await {
            Ok(Some(response)) => Ok(response),
            Ok(None) => Err("stream ended".to_owned()),
            Err(status) => Err(format!("stream: {status}")),
        }
    }

    #[tokio::test]
    async fn xds_mutual_tls_refuses_a_client_without_a_certificate() {
        bounded(async {
            let ca = TestCa::new("xds test CA");
            let server_pair = ca.server();
            let server = XdsServer::start(Some(XdsServerTls {
                cert_pem: server_pair.cert.clone(),
                key_pem: server_pair.key.clone(),
                client_ca_pem: Some(ca.pem()),
            }))
            .await;
            server.set_snapshot(NODE, "v1", vec![rate_limit_config(&config("a", 1))]);

            let refused = tokio::time::timeout(
                STEP,
                first_response(tls_endpoint(server.port(), &ca.pem(), None)),
            )
            .await
            .unwrap_or_else(|_| panic!("no outcome within {STEP:?}"));
            assert!(
                refused.is_err(),
                "served without a client certificate: {refused:?}"
            );
            let stranger = TestCa::new("another CA").client("stranger");
            let refused = tokio::time::timeout(
                STEP,
                first_response(tls_endpoint(server.port(), &ca.pem(), Some(&stranger))),
            )
            .await
            .unwrap_or_else(|_| panic!("no outcome within {STEP:?}"));
            assert!(
                refused.is_err(),
                "served a certificate of another CA: {refused:?}"
            );

            let client = ca.client("floodgate");
            let served = tokio::time::timeout(
                STEP,
                first_response(tls_endpoint(server.port(), &ca.pem(), Some(&client))),
            )
            .await
            .unwrap_or_else(|_| panic!("no outcome within {STEP:?}"))
            .unwrap_or_else(|error| panic!("mTLS client refused: {error}"));
            assert_eq!(served.version_info, "v1");
            assert_eq!(server.streams_opened(), 1);
        })
        .await;
    }

    #[tokio::test]
    async fn xds_tls_without_client_certificates() {
        bounded(async {
            let ca = TestCa::new("xds test CA");
            let server_pair = ca.server();
            let server = XdsServer::start(Some(XdsServerTls {
                cert_pem: server_pair.cert,
                key_pem: server_pair.key,
                client_ca_pem: None,
            }))
            .await;
            server.set_snapshot(NODE, "v1", vec![]);
            // An empty snapshot: the first request (version "") differs, so it is answered.
            let served = tokio::time::timeout(
                STEP,
                first_response(tls_endpoint(server.port(), &ca.pem(), None)),
            )
            .await
            .unwrap_or_else(|_| panic!("no outcome within {STEP:?}"))
            .unwrap_or_else(|error| panic!("TLS client refused: {error}"));
            assert_eq!(served.version_info, "v1");
            assert!(served.resources.is_empty());
        })
        .await;
    }
}
