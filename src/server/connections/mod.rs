//! Every listener's connections: how many there may be, how long each may take to say what it
//! wants, how long it may sit idle, and how they all end at shutdown.
//!
//! One accept loop per listener ([`serve`]) and one task per connection, which drives hyper's
//! connection (and, on gRPC, its calls: [`CallTasks`]) and watches its
//! [`Activity`](activity::Activity):
//! - at `--max-connections` a new connection is closed as soon as it is accepted (counted, and
//!   logged at most once per 10 s), so a flood on one port never takes the descriptors another
//!   needs (the bounds are fitted to RLIMIT_NOFILE together: [`descriptors`]);
//! - an HTTP/1 request head must be complete within `--header-timeout-ms` of its first byte,
//!   and its body within `--body-timeout-ms` of the head (else 408: [`requests`]); a gRPC
//!   client must finish TLS and start HTTP/2 within `--header-timeout-ms`; gRPC calls have
//!   deadlines of their own (`server::grpc_deadline`);
//! - a connection with no request for `--idle-timeout-ms` is closed (HTTP/2: GOAWAY), and so is
//!   an HTTP/1 connection on which nothing moves for as long while a request is open;
//! - when shutdown fires, the listener stops accepting, every connection is asked to finish
//!   (GOAWAY, or close after the answer in progress) and whatever is still open
//!   [`CLOSE_GRACE`] later is dropped, so the process exits whatever its clients do.
//!
//! Why not hyper's own `header_read_timeout`: it also runs while an HTTP/1 connection waits
//! for its next request, so it would close keep-alive connections after 5 s of quiet.

mod activity;
mod calls_on_connection;
pub mod descriptors;
mod requests;
pub mod streams;
mod watch;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use activity::{Activity, Timeouts, TrackedIo, Wire};
pub use calls_on_connection::CallTasks;
use calls_on_connection::Calls;
use requests::TrackedService;
pub use requests::{is_body_timeout, RequestBody};
use watch::{keep_time, Ended, Obeying, Orders, Watch};

use super::tls::ServerTls;
use crate::engine::shutdown::Shutdown;
use crate::telemetry::connections::{connection_closed, connection_opened, connection_refused};
use crate::telemetry::paced_log::PacedLog;

/// Connections each listener holds at once unless `--max-connections` says otherwise (and
/// RLIMIT_NOFILE leaves room).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 4096;

/// What a connection that was asked to close (at shutdown or for being idle) still gets to
/// finish the answer in progress before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(3);

/// TCP keepalive on a gRPC connection: after [`KEEPALIVE_IDLE`] without a packet the kernel
/// probes the peer every [`KEEPALIVE_INTERVAL`], and after [`KEEPALIVE_PROBES`] unanswered
/// probes the connection is gone, and its streams (an RLQS stream has no deadline) with it.
/// The kernel's probes, not HTTP/2 pings: hyper re-arms its ping timer at every frame read,
/// which cost each call a timer reset for a deadline half a minute away.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_PROBES: u32 = 4;

/// How long the accept loop pauses after accept itself failed (out of descriptors, say).
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Each kind of line at most once per this interval, per process.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The bounds of `--max-connections`, `--header-timeout-ms`, `--body-timeout-ms` and
/// `--idle-timeout-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: u32,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// What a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1: the HTTP, debug and admin listeners.
    Http1,
    /// HTTP/2 only, at most this many streams per connection, its calls run as `calls` says:
    /// gRPC.
    Http2 { max_streams: u32, calls: CallTasks },
}

impl Protocol {
    fn wire(self) -> Wire {
        match self {
            Protocol::Http1 => Wire::Http1,
            Protocol::Http2 { .. } => Wire::Http2,
        }
    }
}

/// One listening socket and how to serve what it accepts.
pub struct Listener {
    /// For logs and the `listener` label: grpc, http, debug, admin, debug_pages.
    pub name: &'static str,
    pub socket: TcpListener,
    pub protocol: Protocol,
    pub tls: Option<ServerTls>,
    /// Hand each request the peer's address as axum's `ConnectInfo`.
    pub connect_info: bool,
}

/// The shape of a listener's service: axum's `Router` and tonic's `Routes` both fit.
pub trait ListenerService<B>:
    tower::Service<Request<RequestBody>, Response = Response<B>, Error = Infallible>
    + Clone
    + Send
    + 'static
{
}

impl<S, B> ListenerService<B> for S where
    S: tower::Service<Request<RequestBody>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static
{
}

/// Serves `listener` with `service` until `shutdown`, then closes every connection within
/// [`CLOSE_GRACE`].
pub async fn serve<S, B>(
    listener: Listener,
    service: S,
    limits: ConnectionLimits,
    shutdown: Shutdown,
) where
    S: ListenerService<B> + Sync,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Listener {
        name,
        socket,
        protocol,
        tls,
        connect_info,
    } = listener;
    let stop = shutdown.clone().fired();
    tokio::pin!(stop);
    let accepting = Accepting {
        name,
        protocol,
        tls,
        connect_info,
        limits,
        shutdown,
        service,
    };
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = socket.accept() => match accepted {
                Ok((stream, peer)) => accepting.admit(&mut connections, stream, peer),
                Err(error) => {
                    accept_failed(name, &error);
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            },
        }
    }
    // Stop accepting now: a client that connects during the close waits for nothing.
    drop(socket);
    close_all(name, connections).await;
}

/// What a listener's accepted connections are served with.
struct Accepting<S> {
    name: &'static str,
    protocol: Protocol,
    tls: Option<ServerTls>,
    connect_info: bool,
    limits: ConnectionLimits,
    shutdown: Shutdown,
    service: S,
}

impl<S> Accepting<S> {
    /// Serves the connection on a task of its own, or, with `--max-connections` reached,
    /// closes it at once.
    fn admit<B>(&self, connections: &mut JoinSet<()>, stream: TcpStream, peer: SocketAddr)
    where
        S: ListenerService<B> + Sync,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let bound = usize::try_from(self.limits.max_connections).unwrap_or(usize::MAX);
        if connections.len() >= bound {
            refused_at_bound(self.name, self.limits.max_connections, peer);
            return;
        }
        let _ = stream.set_nodelay(true);
        if matches!(self.protocol, Protocol::Http2 { .. }) {
            keep_alive(&stream, peer);
        }
        let connection = Connection {
            listener: self.name,
            peer,
            protocol: self.protocol,
            limits: self.limits,
            shutdown: self.shutdown.clone(),
        };
        let (name, connect_info) = (self.name, self.connect_info);
        let service = self.service.clone();
        let tls = self.tls.clone();
        connections.spawn(async move {
            let _open = connection_opened(name);
            connection.run(stream, tls, service, connect_info).await;
        });
    }
}

/// Has the kernel probe a quiet gRPC peer (see [`KEEPALIVE_IDLE`]); a socket that refuses
/// is served without, and said so.
fn keep_alive(stream: &TcpStream, peer: SocketAddr) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    if let Err(error) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::debug!(%peer, %error, "TCP keepalive not set: a vanished peer is noticed only by its calls' deadlines");
    }
}

/// A connection closed for `--max-connections`: counted, and logged at most once per
/// [`LOG_INTERVAL`].
fn refused_at_bound(name: &'static str, max_connections: u32, peer: SocketAddr) {
    static AT_BOUND: PacedLog = PacedLog::every(LOG_INTERVAL);
    connection_refused(name);
    if let Some(suppressed) = AT_BOUND.allow() {
        tracing::warn!(
            listener = name,
            max_connections,
            %peer,
            suppressed,
            "listener at --max-connections: new connections are closed until some end"
        );
    }
}

/// Accept itself failed (out of descriptors, say): logged at most once per [`LOG_INTERVAL`].
fn accept_failed(name: &'static str, error: &std::io::Error) {
    static ACCEPT_FAILED: PacedLog = PacedLog::every(LOG_INTERVAL);
    if let Some(suppressed) = ACCEPT_FAILED.allow() {
        tracing::warn!(listener = name, %error, suppressed, "accept failed");
    }
}

/// Waits for every connection to end; each ends itself within [`CLOSE_GRACE`], and what is
/// left a moment later is dropped.
async fn close_all(name: &'static str, mut connections: JoinSet<()>) {
    let closing = async { while connections.join_next().await.is_some() {} };
    // Each connection ends itself within CLOSE_GRACE; this is the backstop.
    if tokio::time::timeout(CLOSE_GRACE + Duration::from_secs(1), closing)
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            left = connections.len(),
            "connections dropped at shutdown"
        );
        connections.abort_all();
    }
}

/// One accepted connection and what it is held to.
struct Connection {
    listener: &'static str,
    peer: SocketAddr,
    protocol: Protocol,
    limits: ConnectionLimits,
    shutdown: Shutdown,
}

impl Connection {
    async fn run<S, B>(
        self,
        stream: TcpStream,
        tls: Option<ServerTls>,
        service: S,
        connect_info: bool,
    ) where
        S: ListenerService<B>,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let activity = Arc::new(Activity::new(self.protocol.wire()));
        let service = TrackedService {
            inner: service,
            activity: Arc::clone(&activity),
            body_timeout: matches!(self.protocol, Protocol::Http1)
                .then_some(self.limits.body_timeout),
            peer: connect_info.then_some(self.peer),
            streams: matches!(self.protocol, Protocol::Http2 { .. })
                .then(streams::ConnectionStreams::default),
        };
        let Some(tls) = tls else {
            return self
                .drive(TrackedIo::new(stream, activity.clone()), activity, service)
                .await;
        };
        let handshake =
            tokio::time::timeout(self.limits.header_timeout, tls.acceptor().accept(stream));
        let stop = self.shutdown.clone().fired();
        let secured = tokio::select! {
            secured = handshake => secured,
            () = stop => return,
        };
        match secured {
            Ok(Ok(secured)) => {
                self.drive(TrackedIo::new(secured, activity.clone()), activity, service)
                    .await;
            }
            // Per connection, so not worth more than debug: a probe, or a client without a
            // certificate under mutual TLS.
            Ok(Err(error)) => tracing::debug!(peer = %self.peer, %error, "TLS handshake failed"),
            Err(_) => {
                connection_closed(self.listener, "handshake_timeout");
                tracing::debug!(peer = %self.peer, "TLS handshake not done within --header-timeout-ms");
            }
        }
    }

    async fn drive<IO, S, B>(self, io: IO, activity: Arc<Activity>, service: TrackedService<S>)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: ListenerService<B>,
        S::Future: Send + 'static,
        B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let io = TokioIo::new(io);
        match self.protocol {
            Protocol::Http1 => {
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    // Ours (see the module's notes) replaces it.
                    .header_read_timeout(None)
                    .serve_connection(io, service);
                self.supervise(connection, activity, Wire::Http1, None)
                    .await;
            }
            Protocol::Http2 { max_streams, calls } => {
                let (executor, calls) = calls_on_connection::executor(calls);
                let connection = hyper::server::conn::http2::Builder::new(executor)
                    .timer(TokioTimer::new())
                    .max_concurrent_streams(max_streams)
                    .serve_connection(io, service);
                self.supervise(connection, activity, Wire::Http2, calls)
                    .await;
            }
        }
    }

    /// Drives `connection` to its end (and `calls`, its calls run on its task), closing it when
    /// its activity breaks a bound or at shutdown, as the watch on a task of its own (`watch`)
    /// orders.
    async fn supervise<C: GracefulConnection>(
        self,
        connection: C,
        activity: Arc<Activity>,
        wire: Wire,
        calls: Option<Calls>,
    ) {
        let orders = Arc::new(Orders::default());
        let watch = Watch {
            listener: self.listener,
            peer: self.peer,
            wire,
            timeouts: Timeouts::new(self.limits.header_timeout, self.limits.idle_timeout),
            shutdown: self.shutdown,
        };
        let watching = tokio::spawn(keep_time(watch, activity, Arc::clone(&orders)));
        let _stop_watching = AbortOnDrop(watching.abort_handle());
        tokio::pin!(connection);
        let obeying = Obeying::new(connection.as_mut(), orders);
        let ended = match calls {
            Some(calls) => calls_on_connection::drive(obeying, calls).await,
            None => obeying.await,
        };
        if let Ended::Finished(Err(error)) = ended {
            tracing::debug!(peer = %self.peer, listener = self.listener, %error, "connection ended");
        }
    }
}

/// Ends a task when the guard goes, however its owner ends.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// hyper's HTTP/1 and HTTP/2 server connections, which share no trait of their own.
trait GracefulConnection: Future<Output = Result<(), hyper::Error>> {
    fn graceful_close(self: Pin<&mut Self>);
}

impl<I, S, B> GracefulConnection for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_close(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B, E> GracefulConnection for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: http_body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_close(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}
