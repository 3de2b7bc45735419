//! Sliding window counter: the count of the current epoch-aligned window plus the previous
//! window's count weighted by how much of it still overlaps the last W µs. Two integers of
//! state instead of a log; the price is assuming the previous window's hits were spread evenly.
//!
//!   start    = now − (now mod⁺ W); the stored (start, previous, current) becomes
//!              stored start = start      → as stored
//!              stored start = start − W  → (start, stored current, 0)
//!              stored start > start      → as stored (the clock went back: no free capacity)
//!              otherwise                 → (start, 0, 0)
//!   elapsed  = clamp(now − start, 0, W)
//!   weight   = (W − elapsed) / W                       f64: float(W − elapsed) / float(W)
//!   estimate = previous · weight + current             f64: float(previous) * weight + float(current)
//!   admit    ⇔ estimate + float(n) ≤ float(L)
//!   charge   : current' = min(current + n, MAX_RECORDED_COUNT)  (only recorded refused hits
//!              reach the cap: `Refused::Recorded`)
//!   remaining   = clamp(floor(float(L) − estimate), 0, L), estimate taken after the commit
//!   reset_after = current > 0 ? (start + W − now) + W : previous > 0 ? start + W − now : 0
//!   retry_after: the first µs at which the hits fit, while `previous` decays (or, when
//!     current + n > L, while `current` decays as the next window's previous):
//!       decay(count, room) = count = 0 ? 0
//!                          : allowance ≥ W ? 0 : W − floor(allowance),
//!         allowance = float(room) * float(W) / float(count)
//!       current + n ≤ L → guess = start + decay(previous, L − current − n)
//!       otherwise       → guess = start + W + decay(current, L − n)
//!     The guess is exact in real numbers, but the admission test runs in doubles and can
//!     disagree right at the boundary (25 · 0.56 = 14.000000000000002), so it is nudged to the
//!     first µs the admission test itself accepts: up to 4 times `+1 µs` while the hits do not
//!     fit at it, then up to 4 times `−1 µs` while they fit 1 µs earlier (the test is monotone
//!     in time, so this lands on the boundary when it is within 4 µs of the guess).
//!       retry_after = at − now;  n > L → reset_after;  always at least 1
//!   expires_at = start + 2W

use super::counter::{decide, Counter};
use super::fixed_window::epoch_window_start;
use super::{Evaluation, Hits, Quota, Refused, Snapshot, State, MAX_RECORDED_COUNT};
use crate::time::Micros;

/// How far (in µs, each way) a retry guess is nudged to agree with the admission test.
const MAX_NUDGES: usize = 4;

pub(super) fn evaluate(
    quota: &Quota,
    state: Option<&State>,
    now: Micros,
    hits: Hits,
    reserve: u64,
    refused: Refused,
) -> Evaluation {
    decide(Windows::at(quota, state, now), hits, reserve, refused)
}

#[derive(Debug, Clone, Copy)]
struct Windows {
    limit: u64,
    now: Micros,
    start: Micros,
    length: Micros,
    previous: u64,
    current: u64,
}

impl Windows {
    fn at(quota: &Quota, state: Option<&State>, now: Micros) -> Self {
        let length = quota.window_micros().max(1);
        let current_start = epoch_window_start(now, length);
        let (start, previous, current) = match state {
            Some(&State::SlidingWindow {
                window_start,
                previous,
                current,
            }) => carried_over(
                window_start,
                u64::from(previous),
                u64::from(current),
                current_start,
                length,
            ),
            _ => (current_start, 0, 0),
        };
        Self {
            limit: u64::from(quota.requests_per_unit),
            now,
            start,
            length,
            previous,
            current,
        }
    }

    /// The same counter seen at another instant, with no hits in between.
    fn seen_at(&self, now: Micros) -> Self {
        let current_start = epoch_window_start(now, self.length);
        let (start, previous, current) = carried_over(
            self.start,
            self.previous,
            self.current,
            current_start,
            self.length,
        );
        Self {
            now,
            start,
            previous,
            current,
            ..*self
        }
    }

    fn fits_at(&self, now: Micros, hits: u64) -> bool {
        self.seen_at(now).fits(hits)
    }

    /// The first µs near `guess` at which the admission test accepts `hits`.
    fn first_fit_near(&self, guess: Micros, hits: u64) -> Micros {
        let mut at = guess;
        for _ in 0..MAX_NUDGES {
            if self.fits_at(at, hits) {
                break;
            }
            at = at.saturating_add(1);
        }
        for _ in 0..MAX_NUDGES {
            if !self.fits_at(at.saturating_sub(1), hits) {
                break;
            }
            at = at.saturating_sub(1);
        }
        at
    }

    fn end(&self) -> Micros {
        self.start.saturating_add(self.length)
    }

    fn previous_weight(&self) -> f64 {
        let elapsed = self.now.saturating_sub(self.start).clamp(0, self.length);
        (self.length - elapsed) as f64 / self.length as f64
    }

    fn estimate(&self) -> f64 {
        self.previous as f64 * self.previous_weight() + self.current as f64
    }

    fn reset_after(&self) -> Micros {
        let until_end = self.end().saturating_sub(self.now).max(0);
        if self.current > 0 {
            until_end.saturating_add(self.length)
        } else if self.previous > 0 {
            until_end
        } else {
            0
        }
    }
}

/// The stored windows as seen from the window starting at `current_start`.
fn carried_over(
    stored_start: Micros,
    previous: u64,
    current: u64,
    current_start: Micros,
    length: Micros,
) -> (Micros, u64, u64) {
    if stored_start >= current_start {
        (stored_start, previous, current)
    } else if stored_start == current_start.saturating_sub(length) {
        (current_start, current, 0)
    } else {
        (current_start, 0, 0)
    }
}

/// Time into a window until `count` hits of the window before it, weighted by their remaining
/// overlap, take at most `room`.
fn decay_time(count: u64, room: u64, length: Micros) -> Micros {
    if count == 0 {
        return 0;
    }
    let allowance = room as f64 * length as f64 / count as f64;
    if allowance >= length as f64 {
        0
    } else {
        length - allowance.floor() as Micros
    }
}

impl Counter for Windows {
    fn fits(&self, hits: u64) -> bool {
        self.estimate() + hits as f64 <= self.limit as f64
    }

    /// Refused hits recorded may pass the limit: the count stops at MAX_RECORDED_COUNT.
    fn charged(&self, hits: u64) -> Self {
        Self {
            current: self.current.saturating_add(hits).min(MAX_RECORDED_COUNT),
            ..*self
        }
    }

    fn refunded(&self, hits: u64) -> Self {
        let from_current = hits.min(self.current);
        Self {
            current: self.current - from_current,
            previous: self.previous.saturating_sub(hits - from_current),
            ..*self
        }
    }

    fn snapshot(&self) -> Snapshot {
        let room = (self.limit as f64 - self.estimate()).floor();
        // `as` saturates: a negative room becomes 0.
        Snapshot {
            remaining: (room as u64).min(self.limit),
            reset_after: self.reset_after(),
        }
    }

    fn retry_after(&self, hits: u64) -> Micros {
        if hits > self.limit {
            return self.reset_after();
        }
        let guess = match self.limit.checked_sub(self.current.saturating_add(hits)) {
            Some(room) => self
                .start
                .saturating_add(decay_time(self.previous, room, self.length)),
            None => {
                self.end()
                    .saturating_add(decay_time(self.current, self.limit - hits, self.length))
            }
        };
        self.first_fit_near(guess, hits).saturating_sub(self.now)
    }

    fn expires_at(&self) -> Micros {
        self.end().saturating_add(self.length)
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn into_state(self) -> State {
        // Hits that fit stay within the limit, a u32, and recorded ones stop at
        // MAX_RECORDED_COUNT = u32::MAX: neither count is ever cut here.
        State::SlidingWindow {
            window_start: self.start,
            previous: u32::try_from(self.previous).unwrap_or(u32::MAX),
            current: u32::try_from(self.current).unwrap_or(u32::MAX),
        }
    }
}
