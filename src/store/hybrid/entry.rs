//! One counter as an instance of the hybrid store sees it: the global state Redis last gave,
//! the hits this instance admitted since (sent and not yet answered, or not yet sent), its
//! local budget, and whether it is decided exactly until its window ends.

use crate::core::arithmetic::algorithm::{Quota, State};
use crate::core::arithmetic::hybrid::{add_hits, local_budget, window_end, window_start};
use crate::core::ground::time::Micros;

/// Hits counted in one window: (its start, how many).
pub(super) type WindowHits = (Micros, u64);

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub quota: Quota,
    /// The counter's Redis key (what the exact path and the sync use).
    pub key: String,
    /// Redis's state at the last sync (`None`: Redis held nothing).
    pub seen: Option<State>,
    /// Hits sent with the sync under way, not yet in `seen`.
    pub in_flight: Vec<WindowHits>,
    /// Hits admitted here and not yet sent, oldest window first.
    pub pending: Vec<WindowHits>,
    /// The local budget and the window it is for (recomputed when the window turns).
    pub budget: Option<WindowHits>,
    /// Decided exactly, in Redis, before this instant (the end of the window in which the
    /// budget reached 0).
    pub exact_until: Micros,
    /// Whether a decision looked at it since the last sync: its global state is wanted.
    pub touched: bool,
    /// Whether a sync has read its global state: until then it is decided exactly, since a
    /// counter new here may be old everywhere else.
    pub known: bool,
    /// Syncs in a row that found it untouched (it is read on the first, forgotten as unknown
    /// on the second).
    pub idle_syncs: u8,
}

impl Entry {
    pub fn new(quota: Quota, key: String) -> Self {
        Self {
            quota,
            key,
            seen: None,
            in_flight: Vec::new(),
            pending: Vec::new(),
            budget: None,
            exact_until: Micros::MIN,
            touched: true,
            known: false,
            idle_syncs: 0,
        }
    }

    /// Takes on `quota` when a reload changed it: with another algorithm or other windows
    /// what Redis holds is read anew; any change recomputes the budget.
    pub fn follow_quota(&mut self, quota: &Quota) {
        if self.quota == *quota {
            return;
        }
        if self.quota.algorithm != quota.algorithm || self.quota.tiling() != quota.tiling() {
            self.seen = None;
            self.known = false;
        }
        self.quota = quota.clone();
        self.budget = None;
    }

    /// The counter as this instance knows it: what Redis said, with its own unsent hits.
    pub fn view(&self) -> Option<State> {
        let mut state = self.seen.clone();
        for &(start, hits) in self.in_flight.iter().chain(&self.pending) {
            state = add_hits(&self.quota, state.as_ref(), start, hits);
        }
        state
    }

    /// This instance's hits in the window starting at `start` that Redis has not counted.
    pub fn unsynced_in(&self, start: Micros) -> u64 {
        self.in_flight
            .iter()
            .chain(&self.pending)
            .filter(|(window, _)| *window == start)
            .map(|(_, hits)| *hits)
            .sum()
    }

    /// The budget for the window holding `now`: the one computed at the last sync if it is for
    /// that window, else one from `seen` as it stands at `now` (a window that turned since).
    pub fn budget_at(&mut self, now: Micros, instances: u64, share: f64) -> u64 {
        let start = window_start(&self.quota, now);
        match self.budget {
            Some((window, amount)) if window == start => amount,
            _ => {
                let amount = local_budget(&self.quota, self.seen.as_ref(), now, instances, share);
                self.budget = Some((start, amount));
                amount
            }
        }
    }

    /// Takes in the global `state` a sync read back: what was in flight is in it now, and the
    /// budget for the window holding `now` follows from it (0: exact until the window ends).
    pub fn synced(&mut self, state: Option<State>, now: Micros, instances: u64, share: f64) {
        self.in_flight.clear();
        self.seen = state;
        self.known = true;
        let budget = local_budget(&self.quota, self.seen.as_ref(), now, instances, share);
        self.budget = Some((window_start(&self.quota, now), budget));
        if budget == 0 {
            self.exact_until = self.exact_until.max(window_end(&self.quota, now));
        }
    }

    /// Counts `hits` admitted here in the window starting at `start`.
    pub fn add_pending(&mut self, start: Micros, hits: u64) {
        match self.pending.last_mut() {
            Some((window, count)) if *window == start => *count = count.saturating_add(hits),
            _ => self.pending.push((start, hits)),
        }
    }

    /// Whether it has nothing to send and nothing it stands for at `now` (an unknown state is
    /// read anew anyway): it may be forgotten.
    pub fn is_idle(&self, now: Micros) -> bool {
        if self.touched || !self.pending.is_empty() || !self.in_flight.is_empty() {
            return false;
        }
        let evaluation = crate::core::arithmetic::algorithm::evaluate(
            &self.quota,
            self.seen.as_ref(),
            now,
            crate::core::arithmetic::algorithm::Hits::PEEK,
        );
        !self.known || self.seen.is_none() || evaluation.expires_at <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arithmetic::algorithm::Algorithm;
    use crate::core::ground::time::MICROS_PER_SECOND;
    use crate::core::ground::unit::Unit;

    const T: Micros = 1_796_083_200 * MICROS_PER_SECOND;

    fn entry() -> Entry {
        Entry::new(
            Quota::new(1_000, Unit::Minute).with_algorithm(Algorithm::FixedWindow),
            "k".to_owned(),
        )
    }

    #[test]
    fn the_view_lays_unsent_hits_over_what_redis_said() {
        let mut entry = entry();
        entry.seen = Some(State::FixedWindow {
            window_start: T,
            count: 100,
        });
        entry.in_flight.push((T, 5));
        entry.add_pending(T, 2);
        entry.add_pending(T, 3);
        assert_eq!(entry.pending, vec![(T, 5)]);
        assert_eq!(
            entry.view(),
            Some(State::FixedWindow {
                window_start: T,
                count: 110
            })
        );
        assert_eq!(entry.unsynced_in(T), 10);
        assert_eq!(entry.unsynced_in(T + 60 * MICROS_PER_SECOND), 0);
    }

    #[test]
    fn a_budget_belongs_to_its_window() {
        let mut entry = entry();
        entry.seen = Some(State::FixedWindow {
            window_start: T,
            count: 900,
        });
        assert_eq!(entry.budget_at(T, 1, 0.5), 50);
        entry.budget = Some((T, 7));
        assert_eq!(entry.budget_at(T + 1, 1, 0.5), 7);
        // The next minute: the whole limit is left.
        assert_eq!(entry.budget_at(T + 60 * MICROS_PER_SECOND, 1, 0.5), 500);
    }
}
