//! Sliding log: the exact list of admitted hits, (time, count) oldest first. Exact for any
//! interval of W µs, at the cost of memory that grows with L. All integer.
//!
//!   log         = stored entries with time > now − W and count > 0
//!                 (entries from the future — the clock went back — still count)
//!   used        = Σ count
//!   admit       ⇔ used + n ≤ L
//!   commit      : append (max(now, newest), n), merged into the newest entry if same time.
//!                 Never before the newest, so the log stays sorted and a clock that went back
//!                 cannot make a hit expire before the ones already logged.
//!   refund      : take n back from the newest entries first
//!   remaining   = max(0, L − used)
//!   reset_after = newest + W − now       (0 when empty)
//!   retry_after = oldest-first, the first entry whose expiry frees used + n − L:
//!                 entry.time + W − now   (n > L: reset_after; always at least 1)
//!   expires_at  = newest + W             (now when empty)
//!   More than SLIDING_LOG_MAX_LIMIT entries (only with a limit config validation refuses):
//!   the oldest entry is folded into the next one, which only delays its expiry.

use std::collections::VecDeque;

use super::counter::{decide, Counter};
use super::{Evaluation, Hits, Quota, Refused, Snapshot, State, SLIDING_LOG_MAX_LIMIT};
use crate::ground::time::Micros;

/// Entries kept at most; every entry holds at least one hit, so a valid limit never reaches it.
const MAX_ENTRIES: usize = SLIDING_LOG_MAX_LIMIT as usize;

pub(super) fn evaluate(
    quota: &Quota,
    state: Option<&State>,
    now: Micros,
    hits: Hits,
    reserve: u64,
) -> Evaluation {
    // A log holds admitted hits only: a refused one has no place in it.
    decide(
        Log::at(quota, state, now),
        hits,
        reserve,
        Refused::TakeNothing,
    )
}

#[derive(Debug, Clone)]
struct Log {
    limit: u64,
    now: Micros,
    length: Micros,
    entries: VecDeque<(Micros, u64)>,
}

impl Log {
    fn at(quota: &Quota, state: Option<&State>, now: Micros) -> Self {
        let length = quota.window_micros().max(1);
        let oldest_kept = now.saturating_sub(length);
        let entries = match state {
            Some(State::SlidingLog(entries)) => entries
                .iter()
                .copied()
                .filter(|&(time, count)| time > oldest_kept && count > 0)
                .collect(),
            _ => VecDeque::new(),
        };
        let mut log = Self {
            limit: u64::from(quota.requests_per_unit),
            now,
            length,
            entries,
        };
        log.fold_oldest_beyond_cap();
        log
    }

    fn used(&self) -> u64 {
        self.entries
            .iter()
            .fold(0, |used, &(_, count)| used.saturating_add(count))
    }

    fn newest_time(&self) -> Option<Micros> {
        self.entries.back().map(|&(time, _)| time)
    }

    fn expiry(&self, time: Micros) -> Micros {
        time.saturating_add(self.length)
    }

    fn reset_after(&self) -> Micros {
        self.newest_time().map_or(0, |newest| {
            self.expiry(newest).saturating_sub(self.now).max(0)
        })
    }

    fn append(&mut self, hits: u64) {
        let time = self
            .newest_time()
            .map_or(self.now, |newest| newest.max(self.now));
        match self.entries.back_mut() {
            Some((newest, count)) if *newest == time => *count = count.saturating_add(hits),
            _ => self.entries.push_back((time, hits)),
        }
        self.fold_oldest_beyond_cap();
    }

    fn fold_oldest_beyond_cap(&mut self) {
        while self.entries.len() > MAX_ENTRIES {
            if let (Some((_, oldest)), Some((_, next))) =
                (self.entries.pop_front(), self.entries.front_mut())
            {
                *next = next.saturating_add(oldest);
            }
        }
    }

    fn take_back_newest(&mut self, mut hits: u64) {
        while hits > 0 {
            let Some((_, count)) = self.entries.back_mut() else {
                return;
            };
            let taken = hits.min(*count);
            *count -= taken;
            hits -= taken;
            if *count == 0 {
                self.entries.pop_back();
            }
        }
    }

    /// When enough of the oldest entries have expired to free `excess` hits.
    fn freed_at(&self, excess: u64) -> Option<Micros> {
        let mut freed = 0u64;
        self.entries.iter().find_map(|&(time, count)| {
            freed = freed.saturating_add(count);
            (freed >= excess).then(|| self.expiry(time))
        })
    }
}

impl Counter for Log {
    fn fits(&self, hits: u64) -> bool {
        self.used().saturating_add(hits) <= self.limit
    }

    /// remaining = L − used ≥ 1 ⇔ used + 1 ≤ L.
    fn has_room(&self, snapshot: &Snapshot) -> bool {
        snapshot.remaining > 0
    }

    fn charged(&self, hits: u64) -> Self {
        let mut next = self.clone();
        if hits > 0 {
            next.append(hits);
        }
        next
    }

    fn refunded(&self, hits: u64) -> Self {
        let mut next = self.clone();
        next.take_back_newest(hits);
        next
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            remaining: self.limit.saturating_sub(self.used()),
            reset_after: self.reset_after(),
        }
    }

    fn retry_after(&self, hits: u64) -> Micros {
        if hits > self.limit {
            return self.reset_after();
        }
        let excess = self.used().saturating_add(hits).saturating_sub(self.limit);
        self.freed_at(excess)
            .map_or_else(|| self.reset_after(), |at| at.saturating_sub(self.now))
    }

    fn expires_at(&self) -> Micros {
        self.newest_time()
            .map_or(self.now, |newest| self.expiry(newest))
    }

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn into_state(self) -> State {
        State::SlidingLog(Box::new(self.entries))
    }
}
