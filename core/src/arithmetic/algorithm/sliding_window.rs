//! Sliding window counter: the count of the current window plus the previous window's count
//! weighted by how much of it still overlaps the last window's length. Two integers of state
//! instead of a log; the price is assuming the previous window's hits were spread evenly.
//! Windows are epoch-aligned W µs, or UTC calendar months for a MONTH limit under
//! `--calendar-months` (`window.rs`); W is then the length of the month looked at.
//!
//!   [start, end) = the window holding now, W = end − start; [start', start) the one before it;
//!              the stored (start, previous, current) becomes
//!              stored start = start      → as stored
//!              stored start = start'     → (start, stored current, 0)
//!              stored start > start      → as stored, in the window starting there (the clock
//!                                          went back: no free capacity)
//!              otherwise                 → (start, 0, 0)
//!   elapsed  = clamp(now − start, 0, W)
//!   weight   = (W − elapsed) / W                       f64: float(W − elapsed) / float(W)
//!   estimate = previous · weight + current             f64: float(previous) * weight + float(current)
//!     With calendar months the weight is the part of the current month still to come, so the
//!     counted span reaches back exactly one calendar month, as far into the previous month as
//!     now is into this one: previous counts in full at the 1st and not at all at the next 1st,
//!     whatever the two months' lengths, and the estimate never jumps at a boundary.
//!   admit    ⇔ estimate + float(n) ≤ float(L)
//!   charge   : current' = min(current + n, MAX_RECORDED_COUNT)  (only recorded refused hits
//!              reach the cap: `Refused::Recorded`)
//!   remaining   = clamp(floor(float(L) − estimate), 0, L), estimate taken after the commit
//!   W⁺ = the length of the window after [start, end) (W for epoch windows)
//!   reset_after = current > 0 ? (end − now) + W⁺ : previous > 0 ? end − now : 0
//!   retry_after: the first µs at which the hits fit, while `previous` decays (or, when
//!     current + n > L, while `current` decays as the next window's previous):
//!       decay(count, room, W) = count = 0 ? 0
//!                             : allowance ≥ W ? 0 : W − floor(allowance),
//!         allowance = float(room) * float(W) / float(count)
//!       current + n ≤ L → guess = start + decay(previous, L − current − n, W)
//!       otherwise       → guess = end + decay(current, L − n, W⁺)
//!     The guess is exact in real numbers, but the admission test runs in doubles and can
//!     disagree right at the boundary (25 · 0.56 = 14.000000000000002), so it is nudged to the
//!     first µs the admission test itself accepts: up to 4 times `+1 µs` while the hits do not
//!     fit at it, then up to 4 times `−1 µs` while they fit 1 µs earlier (the test is monotone
//!     in time, so this lands on the boundary when it is within 4 µs of the guess). The test
//!     at an instant sees the windows as they are at that instant (the window holding it).
//!       retry_after = at − now;  n > L → reset_after;  always at least 1
//!   expires_at = end + W⁺

use super::counter::{decide, Counter};
use super::window::{Span, Tiling};
use super::{Evaluation, Hits, Quota, Refused, Snapshot, State, MAX_RECORDED_COUNT};
use crate::ground::time::Micros;

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
    tiling: Tiling,
    limit: u64,
    now: Micros,
    /// The current window.
    span: Span,
    previous: u64,
    current: u64,
}

impl Windows {
    fn at(quota: &Quota, state: Option<&State>, now: Micros) -> Self {
        let tiling = quota.tiling();
        let here = tiling.holding(now);
        let (span, previous, current) = match state {
            Some(&State::SlidingWindow {
                window_start,
                previous,
                current,
            }) => carried_over(
                tiling,
                window_start,
                (u64::from(previous), u64::from(current)),
                here,
            ),
            _ => (here, 0, 0),
        };
        Self {
            tiling,
            limit: u64::from(quota.requests_per_unit),
            now,
            span,
            previous,
            current,
        }
    }

    /// The same counter seen at another instant, with no hits in between.
    fn seen_at(&self, now: Micros) -> Self {
        let here = self.tiling.holding(now);
        let (span, previous, current) = carried_over(
            self.tiling,
            self.span.start,
            (self.previous, self.current),
            here,
        );
        Self {
            now,
            span,
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

    fn length(&self) -> Micros {
        self.span.length().max(1)
    }

    /// The window after the current one.
    fn next(&self) -> Span {
        self.tiling.after(self.span)
    }

    fn previous_weight(&self) -> f64 {
        let length = self.length();
        let elapsed = self.now.saturating_sub(self.span.start).clamp(0, length);
        (length - elapsed) as f64 / length as f64
    }

    fn estimate(&self) -> f64 {
        self.previous as f64 * self.previous_weight() + self.current as f64
    }

    fn reset_after(&self) -> Micros {
        let until_end = self.span.end.saturating_sub(self.now).max(0);
        if self.current > 0 {
            until_end.saturating_add(self.next().length())
        } else if self.previous > 0 {
            until_end
        } else {
            0
        }
    }
}

/// The stored windows (starting at `stored_start`, with `(previous, current)` hits) as seen
/// from the window `here`.
fn carried_over(
    tiling: Tiling,
    stored_start: Micros,
    (previous, current): (u64, u64),
    here: Span,
) -> (Span, u64, u64) {
    if stored_start == here.start {
        (here, previous, current)
    } else if stored_start > here.start {
        (tiling.holding(stored_start), previous, current)
    } else if stored_start == tiling.before(here).start {
        (here, current, 0)
    } else {
        (here, 0, 0)
    }
}

/// Time into a window of `length` µs until `count` hits of the window before it, weighted by
/// their remaining overlap, take at most `room`.
fn decay_time(count: u64, room: u64, length: Micros) -> Micros {
    if count == 0 {
        return 0;
    }
    let length = length.max(1);
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
            Some(room) => {
                self.span
                    .start
                    .saturating_add(decay_time(self.previous, room, self.length()))
            }
            None => self.span.end.saturating_add(decay_time(
                self.current,
                self.limit - hits,
                self.next().length(),
            )),
        };
        self.first_fit_near(guess, hits).saturating_sub(self.now)
    }

    fn expires_at(&self) -> Micros {
        self.next().end
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn into_state(self) -> State {
        // Hits that fit stay within the limit, a u32, and recorded ones stop at
        // MAX_RECORDED_COUNT = u32::MAX: neither count is ever cut here.
        State::SlidingWindow {
            window_start: self.span.start,
            previous: u32::try_from(self.previous).unwrap_or(u32::MAX),
            current: u32::try_from(self.current).unwrap_or(u32::MAX),
        }
    }
}
