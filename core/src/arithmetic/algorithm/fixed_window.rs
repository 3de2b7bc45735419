//! Fixed window, counted as envoyproxy/ratelimit counts: windows of W µs aligned to the Unix
//! epoch, so every replica and the Redis script agree on where a window starts; or, for a
//! MONTH limit under `--calendar-months`, UTC calendar months (`window.rs`), as the reference
//! counts with `USE_CALENDAR_MONTH_RATE_LIMIT`. All integer.
//!
//!   [start, end) = the window holding now: start = now − (now mod⁺ W), end = start + W
//!                  (mod⁺ Euclidean: instants before 1970 align too); calendar months: the 1st
//!                  at 00:00 UTC to the next 1st
//!   count       = stored count if stored start ≥ start, else 0
//!                 (a later stored start means the clock went back: keep that window, its end
//!                 and its count rather than hand out a fresh one)
//!   admit       ⇔ count + n ≤ L
//!   charge      : count' = min(count + n, MAX_RECORDED_COUNT)   (only recorded refused hits
//!                 reach the cap: `Refused::Recorded`)
//!   remaining   = max(0, L − count)      (L may have been lowered on reload)
//!   reset_after = end − now              (Envoy's `W − now % W`, before rounding to seconds;
//!                                         calendar months: the reference's
//!                                         `MonthExpirationSeconds`, until the next 1st)
//!   retry_after = reset_after            (even when n > L: it never fits, but the window turns)
//!   expires_at  = end                    (calendar months: the reference's TTL too, the rest
//!                                         of the month)

use super::counter::{decide, Counter};
use super::window::Span;
use super::{Evaluation, Hits, Quota, Refused, Snapshot, State, MAX_RECORDED_COUNT};
use crate::ground::time::Micros;

pub(super) fn evaluate(
    quota: &Quota,
    state: Option<&State>,
    now: Micros,
    hits: Hits,
    reserve: u64,
    refused: Refused,
) -> Evaluation {
    decide(Window::at(quota, state, now), hits, reserve, refused)
}

#[derive(Debug, Clone)]
struct Window {
    limit: u64,
    now: Micros,
    span: Span,
    count: u64,
}

impl Window {
    fn at(quota: &Quota, state: Option<&State>, now: Micros) -> Self {
        let tiling = quota.tiling();
        let current = tiling.holding(now);
        let (span, count) = match state {
            Some(&State::FixedWindow {
                window_start,
                count,
            }) if window_start == current.start => (current, count),
            Some(&State::FixedWindow {
                window_start,
                count,
            }) if window_start > current.start => (tiling.holding(window_start), count),
            _ => (current, 0),
        };
        Self {
            limit: u64::from(quota.requests_per_unit),
            now,
            span,
            count,
        }
    }

    fn with_count(&self, count: u64) -> Self {
        Self {
            count,
            ..self.clone()
        }
    }

    fn reset_after(&self) -> Micros {
        self.span.end.saturating_sub(self.now).max(0)
    }
}

impl Counter for Window {
    fn fits(&self, hits: u64) -> bool {
        self.count.saturating_add(hits) <= self.limit
    }

    /// remaining = L − count ≥ 1 ⇔ count + 1 ≤ L.
    fn has_room(&self, snapshot: &Snapshot) -> bool {
        snapshot.remaining > 0
    }

    /// Refused hits recorded may pass the limit: the count stops at MAX_RECORDED_COUNT.
    fn charged(&self, hits: u64) -> Self {
        self.with_count(self.count.saturating_add(hits).min(MAX_RECORDED_COUNT))
    }

    fn refunded(&self, hits: u64) -> Self {
        self.with_count(self.count.saturating_sub(hits))
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            remaining: self.limit.saturating_sub(self.count),
            reset_after: self.reset_after(),
        }
    }

    fn retry_after(&self, _hits: u64) -> Micros {
        self.reset_after()
    }

    fn expires_at(&self) -> Micros {
        self.span.end
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn into_state(self) -> State {
        State::FixedWindow {
            window_start: self.span.start,
            count: self.count,
        }
    }
}
