//! A batching lane's own socket to Redis. A lane has at most one call in flight (`batch/`), so
//! its socket needs no multiplexing: the lane's task writes the call and reads the reply itself
//! (`wire.rs`). The redis crate's multiplexed socket hands each call through a channel to a
//! task of its own, which writes it, parses the reply with a general parser and hands it back
//! through another channel: 11 k of the 50 k instructions a Redis decision cost over a memory
//! one (callgrind, docs/benchmarks.md, "A socket of its own for each lane").
//!
//! What it keeps from `connection.rs`:
//! - the server in use: after a Sentinel failover the next call connects to the new master, and
//!   a failed call asks the sentinels again;
//! - the URL's credentials and database (`AUTH`, `SELECT`), and TCP_NODELAY;
//! - each call's deadline, errors that name the server and never the credentials, and
//!   `SCRIPT LOAD` again on `NOSCRIPT`;
//! - the silence rule (`silence.rs`): a late call leaves its reply owed, read and dropped before
//!   the next call's, so a Redis that is only slow keeps its socket; a socket owing replies that
//!   has heard nothing for [`SILENCE`] is dropped and the next call connects again.
//!
//! Plain TCP or a unix socket: over TLS the lanes keep the pool's sockets (`lanes.rs`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::connection::{failed, lock, Connection, PlainAddress, PlainEndpoint};
use super::errors::unavailable;
use super::script::{Call, SOURCE};
use super::silence::SILENCE;
use super::wire::{read_reply, write_command, write_evalsha, Garbled, Reply};
use crate::store::StoreError;

/// The most replies a socket may owe for calls given up before it is dropped instead.
const MAX_OWED: usize = 64;

/// A lane's socket, connected at its first call and again after it broke.
pub(super) struct OwnSocket {
    connection: Connection,
    /// The decision script's SHA-1, as `EVALSHA` names it.
    sha: String,
    /// Taken out for a call (a lane makes one at a time) and put back if still in step.
    wire: Mutex<Option<Wire>>,
}

/// One connected socket and what is in flight on it.
struct Wire {
    stream: Stream,
    /// The server it reaches, to notice a failover.
    server: Arc<str>,
    out: Vec<u8>,
    /// Received and not yet read.
    input: Vec<u8>,
    /// Replies still to come: the current command's, after those of calls given up.
    owed: usize,
    /// A write was cut off: the server may hold half a command.
    torn: bool,
    heard: Instant,
}

/// Why a call on the socket failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("cannot connect to Redis at {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Garbled(#[from] Garbled),
    /// An error reply: the socket stays in step.
    #[error("{0}")]
    Refused(String),
    /// A reply of the wrong shape: the socket stays in step.
    #[error("{0}")]
    Unexpected(&'static str),
}

impl Failure {
    /// Whether the socket is still usable after it.
    fn keeps_socket(&self) -> bool {
        matches!(self, Self::Refused(_) | Self::Unexpected(_))
    }
}

impl OwnSocket {
    /// A socket for a lane of `connection`, running `script` (not yet connected).
    pub fn new(connection: Connection, script: &redis::Script) -> Self {
        Self {
            connection,
            sha: script.get_hash().to_owned(),
            wire: Mutex::new(None),
        }
    }

    /// Runs `call` within `deadline`, connecting first if need be.
    pub async fn invoke(&self, call: &Call, deadline: Duration) -> Result<Vec<i64>, StoreError> {
        let mut wire = lock(&self.wire).take();
        let outcome = tokio::time::timeout(deadline, self.exchange(&mut wire, call)).await;
        let result = match outcome {
            Ok(Ok(values)) => Ok(values),
            Ok(Err(failure)) => {
                if !failure.keeps_socket() {
                    wire = None;
                }
                Err(self.failed(&wire, &failure))
            }
            Err(_) => {
                if wire.as_ref().is_some_and(Wire::too_far_behind) {
                    wire = None;
                }
                self.connection.call_failed();
                Err(self.connection.late(deadline))
            }
        };
        *lock(&self.wire) = wire;
        result
    }

    /// What a call gets when `deadline` passed before Redis answered.
    pub fn late(&self, deadline: Duration) -> StoreError {
        self.connection.late(deadline)
    }

    /// What a failed call reports; the master may have moved.
    fn failed(&self, wire: &Option<Wire>, failure: &Failure) -> StoreError {
        self.connection.call_failed();
        let message = self.connection.scrub(&failure.to_string());
        match (failure, wire) {
            (Failure::Connect { .. }, _) => unavailable(message),
            (_, Some(wire)) => failed(&wire.server, &message),
            (_, None) => failed(&self.connection.server(), &message),
        }
    }

    /// The call on a socket in step with the server in use: `EVALSHA`, and on `NOSCRIPT` (a
    /// restarted or flushed Redis) `SCRIPT LOAD` and `EVALSHA` again.
    async fn exchange(&self, slot: &mut Option<Wire>, call: &Call) -> Result<Vec<i64>, Failure> {
        let wire = match slot {
            Some(wire) if !wire.torn && self.connection.still_serves(&wire.server) => wire,
            _ => {
                *slot = None;
                slot.insert(self.open().await?)
            }
        };
        write_evalsha(&mut wire.out, &self.sha, call);
        match wire.ask().await? {
            Reply::Error(message) if message.starts_with("NOSCRIPT") => {
                write_command(&mut wire.out, &[b"SCRIPT", b"LOAD", SOURCE.as_bytes()]);
                match wire.ask().await? {
                    Reply::Bulk(Some(_)) => {}
                    Reply::Error(message) => return Err(Failure::Refused(message)),
                    _ => return Err(Failure::Unexpected("SCRIPT LOAD answered no hash")),
                }
                write_evalsha(&mut wire.out, &self.sha, call);
                integers(wire.ask().await?)
            }
            reply => integers(reply),
        }
    }

    /// A new socket to the server in use, past `AUTH` and `SELECT`, within the connect timeout.
    async fn open(&self) -> Result<Wire, Failure> {
        let Some(endpoint) = self.connection.plain_endpoint() else {
            return Err(Failure::Connect {
                server: self.connection.server(),
                reason: "the server in use is no longer plain TCP or a unix socket".to_owned(),
            });
        };
        let timeout = self.connection.connect_timeout();
        match tokio::time::timeout(timeout, Wire::open(&endpoint)).await {
            Ok(Ok(wire)) => Ok(wire),
            Ok(Err(Failure::Io(error))) => Err(Failure::Connect {
                server: endpoint.server.to_string(),
                reason: error.to_string(),
            }),
            Ok(Err(failure)) => Err(failure),
            Err(_) => Err(Failure::Connect {
                server: endpoint.server.to_string(),
                reason: format!("no connection within {timeout:?}"),
            }),
        }
    }
}

impl Wire {
    async fn open(endpoint: &PlainEndpoint) -> Result<Self, Failure> {
        let stream = Stream::connect(&endpoint.address).await?;
        let mut wire = Self {
            stream,
            server: Arc::clone(&endpoint.server),
            out: Vec::new(),
            input: Vec::new(),
            owed: 0,
            torn: false,
            heard: Instant::now(),
        };
        if let Some(password) = &endpoint.password {
            match &endpoint.username {
                Some(user) => write_command(
                    &mut wire.out,
                    &[b"AUTH", user.as_bytes(), password.as_bytes()],
                ),
                None => write_command(&mut wire.out, &[b"AUTH", password.as_bytes()]),
            }
            wire.expect_ok().await?;
        }
        if endpoint.db != 0 {
            let db = endpoint.db.to_string();
            write_command(&mut wire.out, &[b"SELECT", db.as_bytes()]);
            wire.expect_ok().await?;
        }
        Ok(wire)
    }

    async fn expect_ok(&mut self) -> Result<(), Failure> {
        match self.ask().await? {
            Reply::Status(_) => Ok(()),
            Reply::Error(message) => Err(Failure::Refused(message)),
            _ => Err(Failure::Unexpected(
                "a command of the handshake was not answered OK",
            )),
        }
    }

    /// Sends the command written to `out` (leaving it empty for the next) and reads its reply,
    /// first dropping the replies owed to calls given up.
    async fn ask(&mut self) -> Result<Reply, Failure> {
        self.torn = true;
        self.stream.write_all(&self.out).await?;
        self.torn = false;
        self.out.clear();
        self.owed += 1;
        loop {
            let reply = self.next_reply().await?;
            self.owed -= 1;
            if self.owed == 0 {
                return Ok(reply);
            }
        }
    }

    async fn next_reply(&mut self) -> Result<Reply, Failure> {
        loop {
            if let Some((reply, taken)) = read_reply(&self.input)? {
                self.input.drain(..taken);
                return Ok(reply);
            }
            self.input.reserve(512);
            if self.stream.read_buf(&mut self.input).await? == 0 {
                return Err(Failure::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.heard = Instant::now();
        }
    }

    /// After a call given up: whether to drop the socket rather than read what it owes.
    fn too_far_behind(&self) -> bool {
        self.torn || self.owed > MAX_OWED || (self.owed > 0 && self.heard.elapsed() >= SILENCE)
    }
}

/// A socket to a plain server.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    async fn connect(address: &PlainAddress) -> std::io::Result<Self> {
        match address {
            PlainAddress::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), *port)).await?;
                // As every socket to Redis (`tls::tcp_settings`): no wait for the previous ACK.
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            PlainAddress::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.write_all(bytes).await,
            Stream::Unix(stream) => stream.write_all(bytes).await,
        }
    }

    async fn read_buf(&mut self, buffer: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read_buf(buffer).await,
            Stream::Unix(stream) => stream.read_buf(buffer).await,
        }
    }
}

/// The script's answer: integers only.
fn integers(reply: Reply) -> Result<Vec<i64>, Failure> {
    const NOT_INTEGERS: Failure = Failure::Unexpected("the script answered other than integers");
    match reply {
        Reply::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Reply::Integer(value) => Ok(value),
                _ => Err(NOT_INTEGERS),
            })
            .collect(),
        Reply::Error(message) => Err(Failure::Refused(message)),
        _ => Err(NOT_INTEGERS),
    }
}
