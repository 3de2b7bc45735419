//! Sends the reference's stats to statsd (`USE_STATSD`) or DogStatsD (`USE_DOG_STATSD`): a
//! task of its own reads the counters every `STATS_FLUSH_INTERVAL` and sends what moved as
//! batched lines (`telemetry::statsd::lines`) over TCP or UDP. The decision path only adds to
//! in-memory counters; a statsd that is down or refuses costs a count in
//! `floodgate_statsd_send_errors_total` and a log line at most every
//! [`ERROR_LOG_INTERVAL`], and the stats of that flush.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpStream, UdpSocket};

use super::lines::{Deltas, Tagging};
use super::options::{Protocol, StatsdOptions};
use crate::telemetry::paced_log::PacedLog;
use crate::telemetry::reference::stats::ReferenceStats;

/// At most one log line about a failing statsd per interval.
pub const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The largest UDP payload sent: lines are batched up to it (gostats' default).
const UDP_PAYLOAD: usize = 1432;

/// How long a TCP connect or write may take before the flush counts as failed.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

static FAILING: PacedLog = PacedLog::every(ERROR_LOG_INTERVAL);

/// Why a flush did not reach statsd.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no address for {0}")]
    NoAddress(String),
    #[error("timed out")]
    TimedOut,
}

enum Connection {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// The sink: where to send, and what was sent already.
pub struct StatsdSink {
    options: StatsdOptions,
    tagging: Tagging,
    deltas: Deltas,
    connection: Option<Connection>,
}

impl StatsdSink {
    pub fn new(options: StatsdOptions) -> Self {
        let tagging = Tagging {
            dog: options.dog,
            extra_tags: options.extra_tags.clone(),
            mogrifiers: options.mogrifiers.clone(),
        };
        Self {
            options,
            tagging,
            deltas: Deltas::default(),
            connection: None,
        }
    }

    /// Flushes every interval until `stop` fires, then once more.
    pub async fn run(mut self, stats: &'static ReferenceStats, stop: impl Future<Output = ()>) {
        tracing::info!(
            host = %self.options.host,
            port = self.options.port,
            protocol = ?self.options.protocol,
            dogstatsd = self.options.dog,
            flush_interval_ms = self.options.flush_interval.as_millis() as u64,
            "sending envoyproxy/ratelimit's stats to statsd"
        );
        let mut ticker = tokio::time::interval(self.options.flush_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once: nothing to send yet.
        ticker.tick().await;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = ticker.tick() => self.flush(stats).await,
                () = &mut stop => {
                    self.flush(stats).await;
                    return;
                }
            }
        }
    }

    async fn flush(&mut self, stats: &ReferenceStats) {
        let lines = self.deltas.lines(&stats.statsd_snapshot(), &self.tagging);
        if lines.is_empty() {
            return;
        }
        if let Err(error) = self.send(&lines).await {
            // Reconnect at the next flush.
            self.connection = None;
            if let Some(counter) = send_errors() {
                counter.inc();
            }
            if let Some(left_out) = FAILING.allow() {
                tracing::warn!(
                    host = %self.options.host,
                    port = self.options.port,
                    left_out,
                    "statsd did not take the stats: {error}"
                );
            }
        }
    }

    async fn send(&mut self, lines: &[String]) -> Result<(), SendError> {
        if self.connection.is_none() {
            self.connection = Some(self.connect().await?);
        }
        let Some(connection) = &mut self.connection else {
            return Ok(());
        };
        match connection {
            Connection::Udp(socket) => {
                for payload in batches(lines, UDP_PAYLOAD) {
                    socket.send(payload.as_bytes()).await?;
                }
            }
            Connection::Tcp(stream) => {
                let mut payload = lines.join("\n");
                payload.push('\n');
                tokio::time::timeout(SEND_TIMEOUT, stream.write_all(payload.as_bytes()))
                    .await
                    .map_err(|_| SendError::TimedOut)??;
            }
        }
        Ok(())
    }

    async fn connect(&self) -> Result<Connection, SendError> {
        let target = (self.options.host.as_str(), self.options.port);
        let address = tokio::net::lookup_host(target)
            .await?
            .next()
            .ok_or_else(|| SendError::NoAddress(self.options.host.clone()))?;
        match self.options.protocol {
            Protocol::Udp => {
                let local = if address.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let socket = UdpSocket::bind(local).await?;
                socket.connect(address).await?;
                Ok(Connection::Udp(socket))
            }
            Protocol::Tcp => {
                let stream = tokio::time::timeout(SEND_TIMEOUT, TcpStream::connect(address))
                    .await
                    .map_err(|_| SendError::TimedOut)??;
                Ok(Connection::Tcp(stream))
            }
        }
    }
}

/// `lines` joined by newlines into payloads of at most `limit` bytes (a longer line alone).
fn batches(lines: &[String], limit: usize) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut current = String::new();
    for line in lines {
        if !current.is_empty() && current.len() + 1 + line.len() > limit {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    payloads
}

fn send_errors() -> Option<&'static IntCounter> {
    static COUNTER: OnceLock<Option<IntCounter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            let metrics = crate::telemetry::metrics::global()?;
            let counter = IntCounter::new(
                "floodgate_statsd_send_errors_total",
                "Flushes of envoyproxy/ratelimit's stats that statsd did not take (down, \
                 refusing, unknown host); their stats are dropped.",
            )
            .ok()?;
            metrics
                .registry()
                .register(Box::new(counter.clone()))
                .ok()?;
            Some(counter)
        })
        .as_ref()
}

/// Registers `floodgate_statsd_send_errors_total` at start, so it shows before any error.
pub fn register_metrics() {
    let _ = send_errors();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_batched_up_to_the_payload_size() {
        let lines: Vec<String> = ["aaaa", "bbbb", "cccc"].map(String::from).into();
        assert_eq!(batches(&lines, 9), ["aaaa\nbbbb", "cccc"]);
        assert_eq!(batches(&lines, 3), ["aaaa", "bbbb", "cccc"]);
        assert_eq!(batches(&lines, 100), ["aaaa\nbbbb\ncccc"]);
    }
}
