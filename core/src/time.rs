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

/// `2026-11-30T10:00:00Z`, UTC, whole seconds.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    let seconds = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let days = i64::try_from(seconds / 86_400).unwrap_or(i64::MAX);
    let of_day = seconds % 86_400;
    let (year, month, day) = crate::calendar::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn timestamps_are_utc_rfc3339() {
        let at = |seconds| UNIX_EPOCH + Duration::from_secs(seconds);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_796_083_210)), "2026-12-01T00:00:10Z");
        assert_eq!(rfc3339(at(4_107_542_399)), "2100-02-28T23:59:59Z");
    }
}
