//! What a connection has been doing, and what that says should happen to it.
//!
//! [`Activity`] is written by the connection's I/O ([`TrackedIo`]) and by its requests (an
//! [`InFlight`] guard lives from the moment hyper hands a request over, its headers complete,
//! until its answer has been written), and read by the connection's supervisor, which asks
//! [`Snapshot::verdict`] what to do next. The verdict is a pure function of times in
//! milliseconds since the connection opened, so it is tested without a clock.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// "Not set" for the optional times below.
const UNSET: u64 = u64::MAX;

/// An HTTP/2 client's connection preface (`PRI * HTTP/2.0…`): a gRPC connection that has not
/// sent this many bytes has not even started speaking HTTP/2.
const HTTP2_PREFACE_LEN: u64 = 24;

/// The shortest wait between two looks at one connection: a deadline that is due now is
/// looked at again a moment later rather than in a busy loop.
const MIN_RECHECK_MS: u64 = 10;

/// What the connection speaks, which decides how its silence is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// One request at a time; bytes arriving with none open are the next request's head.
    Http1,
    /// Many streams; bytes arriving with none open may be pings or settings.
    Http2,
}

/// The bounds a connection is held to, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub header_ms: u64,
    pub idle_ms: u64,
}

impl Timeouts {
    pub fn new(header: Duration, idle: Duration) -> Self {
        let ms = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Self {
            header_ms: ms(header),
            idle_ms: ms(idle),
        }
    }
}

/// Why a connection is dropped without a goodbye.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortReason {
    /// An HTTP/1 request's head was started and not finished in time (slowloris).
    HeaderTimeout,
    /// A gRPC client connected and did not start HTTP/2 in time.
    HandshakeTimeout,
    /// Nothing moved on an HTTP/1 connection with a request open (a client that stopped
    /// reading its answer, or stopped sending while a handler waited on it).
    Stalled,
}

impl AbortReason {
    /// The `reason` label of `floodgate_connections_closed_total`.
    pub fn label(self) -> &'static str {
        match self {
            AbortReason::HeaderTimeout => "header_timeout",
            AbortReason::HandshakeTimeout => "handshake_timeout",
            AbortReason::Stalled => "stalled",
        }
    }

    /// For the connection's debug line.
    pub fn describe(self) -> &'static str {
        match self {
            AbortReason::HeaderTimeout => "request headers not complete within --header-timeout-ms",
            AbortReason::HandshakeTimeout => "no HTTP/2 preface within --header-timeout-ms",
            AbortReason::Stalled => {
                "nothing sent or read within --idle-timeout-ms with a request open"
            }
        }
    }
}

/// What the supervisor does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it; look again at this time (ms since the connection opened).
    Keep { recheck_at_ms: u64 },
    /// No request for the idle timeout: close it politely (HTTP/2 GOAWAY).
    CloseIdle,
    /// Drop it now.
    Abort(AbortReason),
}

/// One connection's activity, shared by its I/O, its requests and its supervisor.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    /// HTTP/2 needs no time of its reads and writes (see [`Snapshot::verdict`]): none is
    /// taken, as that would be a clock read for every frame.
    wire: Wire,
    in_flight: AtomicU32,
    requests: AtomicU64,
    /// When the last open request ended (or the connection opened).
    idle_since_ms: AtomicU64,
    /// When the first byte arrived while no request was open: an HTTP/1 request's head.
    head_started_ms: AtomicU64,
    /// When a byte was last read or written.
    last_io_ms: AtomicU64,
    bytes_read: AtomicU64,
}

impl Activity {
    pub fn new(wire: Wire) -> Self {
        Self {
            opened: Instant::now(),
            wire,
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            idle_since_ms: AtomicU64::new(0),
            head_started_ms: AtomicU64::new(UNSET),
            last_io_ms: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
        }
    }

    /// Milliseconds since the connection opened.
    pub fn now_ms(&self) -> u64 {
        // Seconds and milliseconds apart: `as_millis` divides a u128, on every read and write.
        let elapsed = self.opened.elapsed();
        elapsed
            .as_secs()
            .saturating_mul(1000)
            .saturating_add(u64::from(elapsed.subsec_millis()))
            .min(UNSET - 1)
    }

    /// The instant `ms` after the connection opened.
    pub fn instant_at(&self, ms: u64) -> Instant {
        self.opened + Duration::from_millis(ms)
    }

    fn read(&self, bytes: usize) {
        self.bytes_read.fetch_add(bytes as u64, Ordering::Relaxed);
        if self.wire == Wire::Http2 {
            return;
        }
        let now = self.now_ms();
        self.last_io_ms.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            let _ = self.head_started_ms.compare_exchange(
                UNSET,
                now,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    fn wrote(&self) {
        if self.wire == Wire::Http2 {
            return;
        }
        self.last_io_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A request's headers are in: it is open until the guard is dropped with its answer.
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.head_started_ms.store(UNSET, Ordering::Relaxed);
        InFlight {
            activity: Arc::clone(self),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            now_ms: self.now_ms(),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            idle_since_ms: self.idle_since_ms.load(Ordering::Relaxed),
            head_started_ms: Some(self.head_started_ms.load(Ordering::Relaxed))
                .filter(|&ms| ms != UNSET),
            last_io_ms: self.last_io_ms.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
        }
    }
}

/// One open request; the connection is busy while any exists.
#[derive(Debug)]
pub struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.activity.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            let now = self.activity.now_ms();
            self.activity.idle_since_ms.store(now, Ordering::Relaxed);
            self.activity
                .head_started_ms
                .store(UNSET, Ordering::Relaxed);
        }
    }
}

/// The activity at one moment, every time in milliseconds since the connection opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub now_ms: u64,
    pub in_flight: u32,
    pub requests: u64,
    pub idle_since_ms: u64,
    pub head_started_ms: Option<u64>,
    pub last_io_ms: u64,
    pub bytes_read: u64,
}

impl Snapshot {
    pub fn verdict(&self, wire: Wire, timeouts: Timeouts) -> Verdict {
        let (due_ms, on_due) = match wire {
            Wire::Http1 if self.in_flight > 0 => (
                self.last_io_ms.saturating_add(timeouts.idle_ms),
                Verdict::Abort(AbortReason::Stalled),
            ),
            Wire::Http1 => match self.head_started_ms {
                Some(started) => (
                    started.saturating_add(timeouts.header_ms),
                    Verdict::Abort(AbortReason::HeaderTimeout),
                ),
                None => (
                    self.idle_since_ms.saturating_add(timeouts.idle_ms),
                    Verdict::CloseIdle,
                ),
            },
            Wire::Http2 if self.requests == 0 && self.bytes_read < HTTP2_PREFACE_LEN => (
                timeouts.header_ms,
                Verdict::Abort(AbortReason::HandshakeTimeout),
            ),
            // Open streams are watched by TCP keepalive and by their own deadlines.
            Wire::Http2 if self.in_flight > 0 => {
                return self.keep_until(self.now_ms.saturating_add(timeouts.idle_ms));
            }
            Wire::Http2 => (
                self.idle_since_ms.saturating_add(timeouts.idle_ms),
                Verdict::CloseIdle,
            ),
        };
        if self.now_ms >= due_ms {
            on_due
        } else {
            self.keep_until(due_ms)
        }
    }

    fn keep_until(&self, at_ms: u64) -> Verdict {
        Verdict::Keep {
            recheck_at_ms: at_ms.max(self.now_ms.saturating_add(MIN_RECHECK_MS)),
        }
    }
}

/// A connection's socket (or TLS stream) that records its reads and writes in `activity`.
pub struct TrackedIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> TrackedIo<T> {
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for TrackedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len().saturating_sub(before);
        if read > 0 {
            self.activity.read(read);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TrackedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: Timeouts = Timeouts {
        header_ms: 5_000,
        idle_ms: 60_000,
    };

    fn quiet(now_ms: u64) -> Snapshot {
        Snapshot {
            now_ms,
            in_flight: 0,
            requests: 0,
            idle_since_ms: 0,
            head_started_ms: None,
            last_io_ms: 0,
            bytes_read: 0,
        }
    }

    #[test]
    fn a_half_sent_http1_head_is_dropped_after_the_header_timeout() {
        let started = Snapshot {
            head_started_ms: Some(1_000),
            bytes_read: 10,
            ..quiet(3_000)
        };
        assert_eq!(
            started.verdict(Wire::Http1, TIMEOUTS),
            Verdict::Keep {
                recheck_at_ms: 6_000
            }
        );
        let late = Snapshot {
            now_ms: 6_000,
            ..started
        };
        assert_eq!(
            late.verdict(Wire::Http1, TIMEOUTS),
            Verdict::Abort(AbortReason::HeaderTimeout)
        );
    }

    #[test]
    fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
        let after_a_request = Snapshot {
            requests: 3,
            idle_since_ms: 2_000,
            ..quiet(10_000)
        };
        for wire in [Wire::Http1, Wire::Http2] {
            let snapshot = Snapshot {
                bytes_read: 500,
                ..after_a_request
            };
            assert_eq!(
                snapshot.verdict(wire, TIMEOUTS),
                Verdict::Keep {
                    recheck_at_ms: 62_000
                }
            );
            let later = Snapshot {
                now_ms: 62_000,
                ..snapshot
            };
            assert_eq!(later.verdict(wire, TIMEOUTS), Verdict::CloseIdle);
        }
    }

    #[test]
    fn a_stalled_http1_request_is_dropped_but_a_moving_one_is_not() {
        let open = Snapshot {
            in_flight: 1,
            requests: 1,
            last_io_ms: 50_000,
            ..quiet(100_000)
        };
        assert_eq!(
            open.verdict(Wire::Http1, TIMEOUTS),
            Verdict::Keep {
                recheck_at_ms: 110_000
            }
        );
        let stalled = Snapshot {
            last_io_ms: 40_000,
            ..open
        };
        assert_eq!(
            stalled.verdict(Wire::Http1, TIMEOUTS),
            Verdict::Abort(AbortReason::Stalled)
        );
    }

    #[test]
    fn a_grpc_client_that_never_speaks_http2_is_dropped_after_the_header_timeout() {
        let silent = Snapshot {
            bytes_read: 3,
            ..quiet(5_000)
        };
        assert_eq!(
            silent.verdict(Wire::Http2, TIMEOUTS),
            Verdict::Abort(AbortReason::HandshakeTimeout)
        );
        let spoke = Snapshot {
            bytes_read: 100,
            ..silent
        };
        assert_eq!(
            spoke.verdict(Wire::Http2, TIMEOUTS),
            Verdict::Keep {
                recheck_at_ms: 60_000
            }
        );
    }

    #[test]
    fn an_open_grpc_stream_keeps_its_connection() {
        let streaming = Snapshot {
            in_flight: 1,
            requests: 1,
            bytes_read: 100,
            ..quiet(1_000_000)
        };
        assert!(matches!(
            streaming.verdict(Wire::Http2, TIMEOUTS),
            Verdict::Keep { .. }
        ));
    }

    #[test]
    fn a_due_deadline_is_rechecked_a_moment_later_not_at_once() {
        let snapshot = Snapshot {
            in_flight: 1,
            requests: 1,
            bytes_read: 100,
            ..quiet(7)
        };
        let zero = Timeouts {
            header_ms: 0,
            idle_ms: 0,
        };
        assert_eq!(
            snapshot.verdict(Wire::Http2, zero),
            Verdict::Keep {
                recheck_at_ms: 7 + MIN_RECHECK_MS
            }
        );
    }

    #[test]
    fn requests_and_reads_move_the_clocks() {
        let activity = Arc::new(Activity::new(Wire::Http1));
        activity.read(10);
        assert!(activity.snapshot().head_started_ms.is_some());
        let request = activity.request_started();
        let busy = activity.snapshot();
        assert_eq!(
            (busy.in_flight, busy.requests, busy.head_started_ms),
            (1, 1, None)
        );
        activity.read(10);
        assert_eq!(
            activity.snapshot().head_started_ms,
            None,
            "a body is no head"
        );
        drop(request);
        let idle = activity.snapshot();
        assert_eq!((idle.in_flight, idle.bytes_read), (0, 20));
        assert_eq!(idle.head_started_ms, None);
    }
}
