//! GCRA, for token buckets and nginx-style leaky buckets alike: they differ only in the
//! capacity C (`Quota::capacity`). One hit costs T = W / L µs; a counter may run at most
//! τ = C · T ahead of `now`, so exactly C hits fit at once on a fresh counter.
//!
//! T is rarely a whole number of µs (60 s / 7), and rounding it at every hit either drifts
//! from the rate or stops C hits from fitting at once. So everything is counted in ticks of
//! 1/L µs, where a hit costs exactly W ticks and all arithmetic is integer — no float, no
//! epsilon, no drift. (The Lua port computes the same integers in doubles; they stay exact
//! while C·W and n·W are below 2^53: C ≤ 100 000 for a one-day window.)
//!
//!   debt        = max(0, (tat − now) · L + tat_remainder)        ticks still to drain
//!                 (tat in the future after the clock went back: more debt, no free capacity)
//!   admit       ⇔ n ≤ C  and  debt + n·W ≤ C·W
//!   charge      : debt' = debt + n·W
//!   refund      : debt' = max(0, debt − n·W)
//!   next state  : tat = now + floor(debt' / L),  tat_remainder = debt' mod L
//!   remaining   = clamp(floor((C·W − debt') / W), 0, C)           hits that still fit
//!   reset_after = ceil(debt' / L)                                  µs until empty
//!   retry_after = ceil((debt + n·W − C·W) / L)                     µs (n > C: reset_after)
//!   expires_at  = now + reset_after
//!   L = 0 or C = 0: nothing ever fits; remaining 0, reset_after 0, retry_after W.
//!   C·W/L > 2^62 µs (146 000 years to drain): C is what drains in 2^62 µs (`MAX_DRAIN_MICROS`).
//!
//! A leaky bucket that queues (`Quota::queue`) also waits and refuses past its longest wait:
//! see `queue.rs`.

use super::counter::{decide, Counter};
use super::{Evaluation, Hits, Queue, Quota, Refused, Snapshot, State};
use crate::ground::time::Micros;

pub(super) fn evaluate(
    quota: &Quota,
    state: Option<&State>,
    now: Micros,
    hits: Hits,
    reserve: u64,
) -> Evaluation {
    // A bucket's debt is what admitted hits cost: a refused hit takes nothing from it.
    match Bucket::at(quota, state, now) {
        Some(bucket) => decide(bucket, hits, reserve, Refused::TakeNothing),
        None => decide(
            Closed {
                now,
                window: quota.window_micros(),
            },
            hits,
            reserve,
            Refused::TakeNothing,
        ),
    }
}

/// The longest a full bucket may take to drain: 2^62 µs, about 146 000 years. A bucket configured
/// to drain slower (C·W/L: a large burst over a long window, or a limit lowered at run time
/// under one) holds only what drains in this time, so that its arrival time `now + debt / L`
/// stays within an i64 of µs; held in full, its debt could pass `Micros::MAX`, and the state
/// would keep less debt than was charged. The Redis store refuses such buckets beforehand
/// (`check_quota`: 2^51 µs), so the Lua port never meets this.
const MAX_DRAIN_MICROS: i128 = 1 << 62;

/// Bounds that keep the i128 arithmetic far from overflow: L < 2^32, W < 2^62, C ≤ 2^32,
/// |tat − now| < 2^64, so every product below is < 2^127.
#[derive(Debug, Clone)]
struct Bucket {
    now: Micros,
    /// L: ticks drained per µs.
    ticks_per_micro: i128,
    /// W: ticks one hit costs.
    hit_cost: i128,
    capacity: u64,
    debt: i128,
    /// How a queueing leaky bucket holds its answers.
    queue: Option<Queue>,
}

impl Bucket {
    /// `None` when nothing can ever fit (L = 0 or C = 0).
    fn at(quota: &Quota, state: Option<&State>, now: Micros) -> Option<Self> {
        let capacity = quota.capacity();
        if quota.requests_per_unit == 0 || capacity == 0 {
            return None;
        }
        let ticks_per_micro = i128::from(quota.requests_per_unit);
        let hit_cost = i128::from(quota.window_micros().max(1));
        let capacity = drainable_capacity(capacity, ticks_per_micro, hit_cost);
        let debt = match state {
            Some(&State::Gcra { tat, tat_remainder }) => {
                let ahead = i128::from(tat) - i128::from(now);
                (ahead * ticks_per_micro + i128::from(tat_remainder)).max(0)
            }
            _ => 0,
        };
        Some(Self {
            now,
            ticks_per_micro,
            hit_cost,
            capacity,
            debt,
            queue: quota.queue,
        })
    }

    fn with_debt(&self, debt: i128) -> Self {
        Self {
            debt,
            ..self.clone()
        }
    }

    fn cost(&self, hits: u64) -> i128 {
        i128::from(hits).saturating_mul(self.hit_cost)
    }

    fn capacity_ticks(&self) -> i128 {
        self.cost(self.capacity)
    }

    /// Whole µs until `ticks` have drained (ceil).
    fn micros_to_drain(&self, ticks: i128) -> Micros {
        let micros = quotient(
            ticks.max(0).saturating_add(self.ticks_per_micro - 1),
            self.ticks_per_micro,
        );
        Micros::try_from(micros).unwrap_or(Micros::MAX)
    }

    fn reset_after(&self) -> Micros {
        self.micros_to_drain(self.debt)
    }

    /// The debt a queued request waits to drain (the debt less what `delay` lets through),
    /// and the most it may wait for (µs); `None` for a bucket that answers at once.
    fn queued_debt(&self) -> Option<(i128, Micros)> {
        let queue = self.queue?;
        let waiting = self.debt - self.cost(u64::from(queue.delay));
        Some((waiting.max(0), queue.max_wait))
    }

    /// Whether the request's turn comes within the queue's longest wait.
    fn turn_in_time(&self) -> bool {
        self.queued_debt()
            .is_none_or(|(debt, max_wait)| debt <= i128::from(max_wait) * self.ticks_per_micro)
    }

    /// µs until the request's turn would come within the longest wait (0 when it does).
    fn retry_for_turn(&self) -> Micros {
        self.queued_debt().map_or(0, |(debt, max_wait)| {
            self.micros_to_drain(debt - i128::from(max_wait) * self.ticks_per_micro)
        })
    }
}

impl Counter for Bucket {
    fn fits(&self, hits: u64) -> bool {
        hits <= self.capacity
            && self.debt + self.cost(hits) <= self.capacity_ticks()
            && self.turn_in_time()
    }

    fn wait(&self) -> Micros {
        self.queued_debt()
            .map_or(0, |(debt, _)| self.micros_to_drain(debt))
    }

    /// remaining = ⌊(C·W − debt) / W⌋ ≥ 1 ⇔ debt + W ≤ C·W, and C ≥ 1 here.
    fn has_room(&self, snapshot: &Snapshot) -> bool {
        snapshot.remaining > 0 && self.turn_in_time()
    }

    fn charged(&self, hits: u64) -> Self {
        self.with_debt(self.debt.saturating_add(self.cost(hits)))
    }

    fn refunded(&self, hits: u64) -> Self {
        self.with_debt((self.debt - self.cost(hits)).max(0))
    }

    fn snapshot(&self) -> Snapshot {
        let room = quotient((self.capacity_ticks() - self.debt).max(0), self.hit_cost);
        Snapshot {
            remaining: u64::try_from(room).unwrap_or(u64::MAX).min(self.capacity),
            reset_after: self.reset_after(),
        }
    }

    fn retry_after(&self, hits: u64) -> Micros {
        if hits > self.capacity {
            return self.reset_after();
        }
        let room = self.micros_to_drain(self.debt + self.cost(hits) - self.capacity_ticks());
        room.max(self.retry_for_turn())
    }

    fn expires_at(&self) -> Micros {
        self.now.saturating_add(self.reset_after())
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn into_state(self) -> State {
        let (ahead, remainder) = quotient_and_remainder(self.debt, self.ticks_per_micro);
        let tat = Micros::try_from(i128::from(self.now) + ahead);
        let remainder = u32::try_from(remainder);
        match (tat, remainder) {
            (Ok(tat), Ok(tat_remainder)) => State::Gcra { tat, tat_remainder },
            _ => State::Gcra {
                tat: Micros::MAX,
                tat_remainder: 0,
            },
        }
    }
}

/// C, or what drains in `MAX_DRAIN_MICROS` when that is less: C · W ≤ 2^62 · L, compared as
/// products (below 2^127 by `Bucket`'s bounds), so the usual bucket pays no division.
fn drainable_capacity(capacity: u64, ticks_per_micro: i128, hit_cost: i128) -> u64 {
    if i128::from(capacity) * hit_cost <= MAX_DRAIN_MICROS * ticks_per_micro {
        return capacity;
    }
    // W ≤ 2^61 (`Quota::window_micros`) and L ≥ 1: at least one hit always fits in it.
    let drainable = MAX_DRAIN_MICROS * ticks_per_micro / hit_cost;
    capacity.min(u64::try_from(drainable).unwrap_or(u64::MAX))
}

/// `dividend / divisor` for a dividend ≥ 0 and a divisor > 0. Both nearly always fit in 64
/// bits, where the division is one instruction; an i128 one is a library call, and a decision
/// makes several.
fn quotient(dividend: i128, divisor: i128) -> i128 {
    quotient_and_remainder(dividend, divisor).0
}

/// `(dividend / divisor, dividend % divisor)`, as [`quotient`].
fn quotient_and_remainder(dividend: i128, divisor: i128) -> (i128, i128) {
    match (u64::try_from(dividend), u64::try_from(divisor)) {
        (Ok(dividend), Ok(divisor)) if divisor > 0 => (
            i128::from(dividend / divisor),
            i128::from(dividend % divisor),
        ),
        _ => (dividend / divisor, dividend % divisor),
    }
}

/// A bucket that admits nothing: no rate (L = 0) or no room (C = 0).
#[derive(Debug, Clone)]
struct Closed {
    now: Micros,
    window: Micros,
}

impl Counter for Closed {
    fn fits(&self, _hits: u64) -> bool {
        false
    }

    fn charged(&self, _hits: u64) -> Self {
        self.clone()
    }

    fn refunded(&self, _hits: u64) -> Self {
        self.clone()
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            remaining: 0,
            reset_after: 0,
        }
    }

    fn retry_after(&self, _hits: u64) -> Micros {
        self.window
    }

    fn expires_at(&self) -> Micros {
        self.now
    }

    fn capacity(&self) -> u64 {
        0
    }

    fn into_state(self) -> State {
        State::Gcra {
            tat: self.now,
            tat_remainder: 0,
        }
    }
}
