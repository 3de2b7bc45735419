//! Time as the core sees it: whole microseconds since the Unix epoch.
//!
//! Microseconds because Redis `TIME` has that resolution, so the Rust and Lua versions of every
//! algorithm can run the same arithmetic on the same numbers. An `i64` holds them exactly, and so
//! does a Lua double (2^53 µs is about 285 years).

use std::sync::atomic::{AtomicI64, Ordering};

/// Microseconds since the Unix epoch (a point in time) or a span of microseconds.
pub type Micros = i64;

pub const MICROS_PER_SECOND: Micros = 1_000_000;

/// Where "now" comes from. The core never reads a clock itself; shells inject one.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Micros;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Micros {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to: deterministic tests, benchmarks and the differential
/// test against Redis.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    pub fn new(start: Micros) -> Self {
        Self {
            now: AtomicI64::new(start),
        }
    }

    pub fn set(&self, now: Micros) {
        self.now.store(now, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Micros) {
        self.now.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.now.load(Ordering::SeqCst)
    }
}

/// Rounds a span up to whole seconds: Envoy reads only `Duration.seconds`, so a truncated
/// 0.4 s would tell a client it may retry at once.
pub fn ceil_seconds(span: Micros) -> i64 {
    if span <= 0 {
        0
    } else {
        (span + MICROS_PER_SECOND - 1) / MICROS_PER_SECOND
    }
}
