//! The decision algorithms as pure arithmetic: a quota, the stored state of one counter, the
//! time and the hits in; a decision and the next state out. No I/O, no clock, no locks.
//!
//! Every algorithm here also exists in Lua for the Redis store; both must compute the same
//! numbers in the same order (IEEE doubles where fractions appear), so keep formulas in step.

mod counter;
mod fixed_window;
mod gcra;
mod queue;
mod share;
mod sliding_log;
mod sliding_window;
#[cfg(test)]
mod tests;
mod window;

pub use queue::{Queue, MAX_QUEUE_WAIT};
pub use share::Share;
pub use window::{Span, Tiling};

use std::collections::VecDeque;
use std::fmt;

use crate::ground::time::{Micros, MICROS_PER_SECOND};
use crate::ground::unit::Unit;

/// Which algorithm decides a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Epoch-aligned windows, as envoyproxy/ratelimit counts.
    #[default]
    FixedWindow,
    /// Sliding window counter: `previous × (1 − elapsed/window) + current`.
    SlidingWindow,
    /// Exact log of admitted hits; for small limits only.
    SlidingLog,
    /// Token bucket: capacity `burst` (or the limit), refilled continuously.
    TokenBucket,
    /// Leaky bucket with nginx `limit_req` semantics (GCRA): capacity `burst + 1`.
    LeakyBucket,
}

impl Algorithm {
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ];

    /// The name used in configuration files (`sliding_window`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
        }
    }

    pub fn parse(text: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.name() == text)
    }

    pub fn accepts_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::LeakyBucket)
    }

    /// Whether it counts hits in windows with edges (fixed and sliding windows): calendar months
    /// can place those edges, and the count can hold refused hits too, as envoyproxy/ratelimit's
    /// `INCRBY` counts every hit. The others have no edges to place (a sliding log looks back over
    /// a span that slides with `now`, the buckets refill at a rate; under `--calendar-months`
    /// their MONTH is still 30 days, docs/algorithms.md#windows says why) and hold admitted hits
    /// only ([`Refused`]).
    pub fn counts_in_windows(self) -> bool {
        matches!(self, Algorithm::FixedWindow | Algorithm::SlidingWindow)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a charge that does not fit does to its counter (`overflow:` on a rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Overflow {
    /// Refused and, unless the charging mode records refused hits, not counted.
    #[default]
    Refuse,
    /// Counted anyway, past the limit: the overshoot is owed, and the counter refuses until its
    /// window has turned (or slid) past what was owed. For usage reported after the response
    /// (an LLM's tokens, bytes sent), which has happened whatever the verdict says. Only the
    /// algorithms that [count hits in windows](Algorithm::counts_in_windows) can hold it.
    Owe,
}

impl Overflow {
    pub const ALL: [Overflow; 2] = [Overflow::Refuse, Overflow::Owe];

    /// The name `overflow:` takes.
    pub fn name(self) -> &'static str {
        match self {
            Overflow::Refuse => "refuse",
            Overflow::Owe => "owe",
        }
    }

    pub fn parse(text: &str) -> Option<Overflow> {
        Overflow::ALL
            .into_iter()
            .find(|overflow| overflow.name() == text)
    }
}

impl fmt::Display for Overflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a limit's counter is decided (`counting:`), when the store can do either: `exact`,
/// every decision in the shared store (`--store redis`), or `hybrid`, counted on each instance
/// and synced in the background (`--store hybrid`). Unset, a limit is counted as its store
/// counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counting {
    Exact,
    Hybrid,
}

impl Counting {
    pub const ALL: [Counting; 2] = [Counting::Exact, Counting::Hybrid];

    /// The name `counting:` takes.
    pub fn name(self) -> &'static str {
        match self {
            Counting::Exact => "exact",
            Counting::Hybrid => "hybrid",
        }
    }

    pub fn parse(text: &str) -> Option<Counting> {
        Counting::ALL
            .into_iter()
            .find(|counting| counting.name() == text)
    }
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The largest limit a sliding log accepts: its memory grows with the limit.
pub const SLIDING_LOG_MAX_LIMIT: u64 = 10_000;

/// What one limit allows: `requests_per_unit` per `unit × unit_multiplier`, decided by `algorithm`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Quota {
    pub requests_per_unit: u32,
    pub unit: Unit,
    /// Window = unit × multiplier (≥ 1), e.g. 30 × SECOND.
    pub unit_multiplier: u32,
    pub algorithm: Algorithm,
    /// Token bucket: capacity (default `requests_per_unit`). Leaky bucket: nginx `burst`
    /// (extra requests beyond the first; default 0).
    pub burst: Option<u32>,
    /// A MONTH limit whose windows are UTC calendar months (`--calendar-months`,
    /// envoyproxy/ratelimit's `USE_CALENDAR_MONTH_RATE_LIMIT`); always false for other units.
    /// Only the windowed algorithms have windows to place ([`Quota::tiling`]).
    pub calendar_months: bool,
    /// What a charge that does not fit does (`overflow:`); [`Overflow::Owe`] only with an
    /// algorithm that counts hits in windows (the config refuses it elsewhere).
    pub overflow: Overflow,
    /// Where the counter is decided (`counting:`); `None`: as the store counts. Only fixed and
    /// sliding windows can be counted in parts (`hybrid::supports`); the others are decided
    /// exactly whatever this says.
    pub counting: Option<Counting>,
    /// A leaky bucket that holds its answers until each request's turn (`queue: true`);
    /// `None`: admitted requests are answered at once.
    pub queue: Option<Queue>,
}

impl Quota {
    pub fn new(requests_per_unit: u32, unit: Unit) -> Self {
        Self {
            requests_per_unit,
            unit,
            unit_multiplier: 1,
            algorithm: Algorithm::FixedWindow,
            burst: None,
            calendar_months: false,
            overflow: Overflow::Refuse,
            counting: None,
            queue: None,
        }
    }

    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    pub fn with_burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    pub fn with_multiplier(mut self, unit_multiplier: u32) -> Self {
        self.unit_multiplier = unit_multiplier;
        self
    }

    pub fn with_overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    pub fn with_queue(mut self, queue: Queue) -> Self {
        self.queue = Some(queue);
        self
    }

    pub fn with_counting(mut self, counting: Counting) -> Self {
        self.counting = Some(counting);
        self
    }

    /// MONTH windows follow the UTC calendar when `enabled` (and the unit is MONTH); call it
    /// after the unit is set, as `Quota::new` does.
    pub fn with_calendar_months(mut self, enabled: bool) -> Self {
        self.calendar_months = enabled && self.unit == Unit::Month;
        self
    }

    /// Where a windowed algorithm's windows lie: calendar months for a MONTH limit of fixed or
    /// sliding windows under `--calendar-months`, else `window_micros` aligned to the epoch.
    pub fn tiling(&self) -> Tiling {
        if self.calendar_months && self.unit == Unit::Month && self.algorithm.counts_in_windows() {
            Tiling::CalendarMonths {
                months: self.unit_multiplier.max(1),
            }
        } else {
            Tiling::Epoch {
                length: self.window_micros().max(1),
            }
        }
    }

    /// Window length in whole seconds (unit × multiplier; a MONTH is 30 days here, also under
    /// `--calendar-months`, where [`Quota::tiling`] says where windows really lie).
    pub fn window_seconds(&self) -> u64 {
        self.unit.seconds() * u64::from(self.unit_multiplier.max(1))
    }

    pub fn window_micros(&self) -> Micros {
        // At most 31 536 000 × 4 294 967 295 s ≈ 1.4e17 s: saturate rather than overflow.
        i64::try_from(self.window_seconds())
            .ok()
            .and_then(|s| s.checked_mul(MICROS_PER_SECOND))
            .unwrap_or(i64::MAX / 4)
    }

    /// How many hits fit at once when the counter is fresh.
    pub fn capacity(&self) -> u64 {
        match self.algorithm {
            Algorithm::TokenBucket => u64::from(self.burst.unwrap_or(self.requests_per_unit)),
            Algorithm::LeakyBucket => u64::from(self.burst.unwrap_or(0)) + 1,
            _ => u64::from(self.requests_per_unit),
        }
    }
}

/// What a request does to one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hits {
    /// Take `n` (n ≥ 1) units of budget if all of them fit.
    Charge(u64),
    /// Ask whether the counter admits, by `CheckRule`, without taking anything
    /// (`hits_addend: 0`).
    CheckOnly(CheckRule),
    /// Give `n` units back (`is_negative_hits`), never beyond a fresh counter.
    Refund(u64),
}

impl Hits {
    /// A look at a counter that takes nothing and asks what a request of one hit would find
    /// (how full it is, what remains).
    pub const PEEK: Hits = Hits::CheckOnly(CheckRule::OneMoreFits);

    pub fn is_check(self) -> bool {
        matches!(self, Hits::CheckOnly(_))
    }
}

/// Which check-only request (`hits_addend: 0`) a counter admits. Envoy sends one before a
/// request whose cost is known only afterwards (LLM tokens), and charges the cost when the
/// response is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CheckRule {
    /// One more hit would fit: a check at the limit is refused, as the hit it stands for
    /// would be. floodgate's.
    #[default]
    OneMoreFits,
    /// The count is within the limit (not beyond it): a check at the limit passes, and only a
    /// count a charge pushed past the limit refuses. envoyproxy/ratelimit's (`INCRBY key 0`,
    /// over when the count is above the limit), so a budget of N with calls of C admits
    /// N/C + 1 calls.
    WithinLimit,
}

impl CheckRule {
    pub const ALL: [CheckRule; 2] = [CheckRule::OneMoreFits, CheckRule::WithinLimit];

    /// The hits a check asks to fit (before a priority class's reserve).
    pub fn asked(self) -> u64 {
        match self {
            CheckRule::OneMoreFits => 1,
            CheckRule::WithinLimit => 0,
        }
    }

    /// The name `--check-only` takes.
    pub fn name(self) -> &'static str {
        match self {
            CheckRule::OneMoreFits => "one-more-fits",
            CheckRule::WithinLimit => "within-limit",
        }
    }
}

impl fmt::Display for CheckRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a refused charge leaves in the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Refused {
    /// Nothing: the counter stays as it was (floodgate's all-or-nothing).
    #[default]
    TakeNothing,
    /// The hits, counted although refused, as envoyproxy/ratelimit counts them, by an algorithm
    /// that [counts hits in windows](Algorithm::counts_in_windows); the others take nothing still. A
    /// count holds at most [`MAX_RECORDED_COUNT`].
    Recorded,
}

/// The most hits a fixed or sliding window counts: over every limit (a limit is a `u32`), so
/// no decision depends on counting further, and a sliding window's state keeps `u32` counts.
/// Only recorded refused hits get there; admitted ones stop at the limit.
pub const MAX_RECORDED_COUNT: u64 = u32::MAX as u64;

/// The stored state of one counter. The variant always matches the quota's algorithm; a state
/// of another variant (the rule's algorithm changed on reload) is treated as absent.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    FixedWindow {
        window_start: Micros,
        count: u64,
    },
    /// The counts are at most the limit, a `u32`; kept as such, a state takes 24 bytes, not
    /// 32 (the memory store holds up to millions).
    SlidingWindow {
        window_start: Micros,
        previous: u32,
        current: u32,
    },
    /// GCRA's theoretical arrival time, for token and leaky buckets: exactly
    /// `tat + tat_remainder / requests_per_unit` µs. One hit costs `window / requests_per_unit`
    /// µs, rarely a whole number (60 s / 7); rounding the arrival time to whole µs at every hit
    /// would drift, so the fraction is kept exactly, as a numerator (`< requests_per_unit`).
    Gcra {
        tat: Micros,
        tat_remainder: u32,
    },
    /// Admitted hits, oldest first: (time, how many).
    SlidingLog(Box<VecDeque<(Micros, u64)>>),
}

/// How full a counter is, for a store that must forget some: forgetting a counter hands its
/// budget back, so an exhausted one must go last, and a less used one before a more used one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fullness {
    /// The share of the capacity in use, in 65 535ths ([`Fullness::ALL_USED`]: no budget left).
    pub used: u16,
    /// When not even one more hit fits: how long until one does (µs, ≥ 1) with no traffic in
    /// between; `None` when one fits now. A counter only regains room as time passes, so it is
    /// exhausted exactly until then (one that can never fit, with a limit of 0, says when its
    /// state turns over: forgetting it loses nothing).
    pub exhausted_for: Option<Micros>,
}

impl Fullness {
    /// `used` of a counter with nothing left.
    pub const ALL_USED: u16 = u16::MAX;

    pub fn is_exhausted(&self) -> bool {
        self.exhausted_for.is_some()
    }

    /// (capacity − remaining) / capacity in 65 535ths, rounded down (all used when the
    /// capacity is 0).
    fn share_used(remaining: u64, capacity: u64) -> u16 {
        if capacity == 0 {
            return Self::ALL_USED;
        }
        let used = capacity - remaining.min(capacity);
        // A capacity is at most 2^32 (`Quota::capacity`): the product stays below 2^48.
        let share = used.saturating_mul(u64::from(Self::ALL_USED)) / capacity;
        u16::try_from(share).unwrap_or(Self::ALL_USED)
    }
}

/// Remaining budget and time until the counter is whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub remaining: u64,
    /// Time until the counter is back to its full capacity (µs, ≥ 0).
    pub reset_after: Micros,
}

/// The result of evaluating one counter. Nothing is applied: the store decides whether to keep
/// `next_state`, after the core has looked at every counter of the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Whether these hits fit (always true for a refund; for a check, whether one more fits).
    pub admitted: bool,
    /// Budget and reset if `next_state` is stored.
    pub committed: Snapshot,
    /// Budget and reset if nothing is stored (the request was rejected elsewhere).
    pub uncommitted: Snapshot,
    /// When not admitted: time until these hits could fit (µs, ≥ 1); 0 when admitted.
    pub retry_after: Micros,
    /// When an admitted charge is answered: after this many µs, its turn in a queueing leaky
    /// bucket ([`Queue`]); 0 at once.
    pub wait: Micros,
    /// How full `next_state` is at this instant.
    pub fullness: Fullness,
    /// The state to store when the request is committed.
    pub next_state: State,
    /// After this instant `next_state` means the same as no state: the store may drop it.
    pub expires_at: Micros,
}

/// Evaluates `hits` against one counter at `now`.
pub fn evaluate(quota: &Quota, state: Option<&State>, now: Micros, hits: Hits) -> Evaluation {
    evaluate_reserving(quota, state, now, hits, 0)
}

/// How full the counter in `state` is at `now` (`Evaluation::fullness` of a check).
pub fn fullness(quota: &Quota, state: Option<&State>, now: Micros) -> Fullness {
    evaluate(quota, state, now, Hits::PEEK).fullness
}

/// Evaluates `hits` for a priority class that must leave `reserve` units of the counter
/// unused (`Quota::reserve`; 0 for no class). Only admission and the retry time depend on
/// it: the snapshots are the shared counter's.
pub fn evaluate_reserving(
    quota: &Quota,
    state: Option<&State>,
    now: Micros,
    hits: Hits,
    reserve: u64,
) -> Evaluation {
    evaluate_counter(quota, state, now, (hits, reserve), Refused::TakeNothing)
}

/// Evaluates `hits` with `reserve` (see [`evaluate_reserving`]), a refused charge leaving what
/// `refused` says: with [`Refused::Recorded`], a counting algorithm's `next_state` holds the
/// refused hits, `committed` is the counter with them and `retry_after` is asked of it, while
/// `uncommitted` is the counter the refusal was judged against.
pub fn evaluate_counter(
    quota: &Quota,
    state: Option<&State>,
    now: Micros,
    (hits, reserve): (Hits, u64),
    refused: Refused,
) -> Evaluation {
    match quota.algorithm {
        Algorithm::FixedWindow => fixed_window::evaluate(quota, state, now, hits, reserve, refused),
        Algorithm::SlidingWindow => {
            sliding_window::evaluate(quota, state, now, hits, reserve, refused)
        }
        Algorithm::SlidingLog => sliding_log::evaluate(quota, state, now, hits, reserve),
        Algorithm::TokenBucket | Algorithm::LeakyBucket => {
            gcra::evaluate(quota, state, now, hits, reserve)
        }
    }
}
