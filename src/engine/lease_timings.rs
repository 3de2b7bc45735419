//! What adaptive concurrency measures (`core::arithmetic::gradient`): for each adaptive concurrency rule a
//! controller watches, how long its leases were held (one time per release this instance
//! decided) and the most leases in flight any of its calls saw, gathered between two steps of
//! the controller, which takes them. Rules nobody watches cost one map lookup per lease call.
//!
//! An interval keeps at most [`MAX_SAMPLES`] times, a uniform sample of all its releases
//! (reservoir sampling), so a busy rule costs bounded memory and its median stays unbiased.

use std::collections::HashMap;

use parking_lot::{Mutex, RwLock};

use crate::core::arithmetic::lease::{LeaseAction, LeaseCall, LeaseOutcome};
use crate::core::ground::time::Micros;

/// Times kept per interval and rule.
pub const MAX_SAMPLES: usize = 4096;

/// One interval of one rule.
#[derive(Debug)]
struct Window {
    held: Vec<Micros>,
    /// Releases seen this interval (kept or not).
    seen: u64,
    peak_in_flight: u32,
    /// xorshift64 state for the reservoir's choices.
    random: u64,
}

impl Window {
    fn new() -> Window {
        Window {
            held: Vec::new(),
            seen: 0,
            peak_in_flight: 0,
            random: 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn add(&mut self, held_for: Micros) {
        self.seen += 1;
        if self.held.len() < MAX_SAMPLES {
            self.held.push(held_for);
            return;
        }
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        let slot = self.random % self.seen;
        if let Some(kept) = usize::try_from(slot)
            .ok()
            .and_then(|slot| self.held.get_mut(slot))
        {
            *kept = held_for;
        }
    }
}

/// By domain, then rule path.
#[derive(Debug, Default)]
pub struct LeaseTimings {
    rules: RwLock<HashMap<String, HashMap<String, Mutex<Window>>>>,
}

impl LeaseTimings {
    /// Watches exactly `rules` (domain, rule path) from now on: the windows of rules still
    /// watched are kept, the others dropped.
    pub fn watch_only(&self, rules: &[(String, String)]) {
        let mut watched = self.rules.write();
        watched.retain(|domain, paths| {
            paths.retain(|path, _| rules.iter().any(|(d, p)| d == domain && p == path));
            !paths.is_empty()
        });
        for (domain, path) in rules {
            watched
                .entry(domain.clone())
                .or_default()
                .entry(path.clone())
                .or_insert_with(|| Mutex::new(Window::new()));
        }
    }

    /// Whether any rule is watched (a decision skips the rest when none is).
    pub fn any(&self) -> bool {
        !self.rules.read().is_empty()
    }

    /// Notes one decided lease call of `rule_path` in `domain`.
    pub fn record(&self, domain: &str, rule_path: &str, call: &LeaseCall, outcome: &LeaseOutcome) {
        let watched = self.rules.read();
        let Some(window) = watched.get(domain).and_then(|paths| paths.get(rule_path)) else {
            return;
        };
        let mut window = window.lock();
        window.peak_in_flight = window.peak_in_flight.max(outcome.in_flight);
        if call.action == LeaseAction::Release && outcome.released {
            window.add(outcome.held_for);
        }
    }

    /// The times held since the last take and the peak in flight, and a fresh interval; `None`
    /// for a rule not watched.
    pub fn take(&self, domain: &str, rule_path: &str) -> Option<(Vec<Micros>, u32)> {
        let watched = self.rules.read();
        let window = watched.get(domain)?.get(rule_path)?;
        let taken = std::mem::replace(&mut *window.lock(), Window::new());
        Some((taken.held, taken.peak_in_flight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(action: LeaseAction) -> LeaseCall {
        LeaseCall {
            descriptor: 0,
            key: b"pool".to_vec(),
            lease_id: "a".to_owned(),
            action,
            max_in_flight: 8,
            reserve: 0,
            lease_ttl: 30_000_000,
            shed_above: 0,
            draw: 0,
        }
    }

    fn outcome(in_flight: u32, released: bool, held_for: Micros) -> LeaseOutcome {
        LeaseOutcome {
            admitted: true,
            in_flight,
            retry_after: 0,
            released,
            held_for,
            shed: false,
        }
    }

    fn watched() -> LeaseTimings {
        let timings = LeaseTimings::default();
        timings.watch_only(&[("backend".to_owned(), "backend.slow".to_owned())]);
        timings
    }

    #[test]
    fn releases_are_timed_and_acquires_count_towards_the_peak() {
        let timings = watched();
        let acquire = call(LeaseAction::Acquire);
        let release = call(LeaseAction::Release);
        timings.record("backend", "backend.slow", &acquire, &outcome(5, false, 0));
        timings.record("backend", "backend.slow", &release, &outcome(4, true, 120));
        timings.record("backend", "backend.slow", &release, &outcome(4, false, 0));
        timings.record("backend", "other", &release, &outcome(9, true, 7));
        assert_eq!(
            timings.take("backend", "backend.slow"),
            Some((vec![120], 5))
        );
        assert_eq!(
            timings.take("backend", "backend.slow"),
            Some((Vec::new(), 0))
        );
        assert_eq!(timings.take("backend", "other"), None);
    }

    #[test]
    fn watching_other_rules_drops_the_old_ones() {
        let timings = watched();
        assert!(timings.any());
        timings.watch_only(&[]);
        assert!(!timings.any());
        assert_eq!(timings.take("backend", "backend.slow"), None);
    }

    #[test]
    fn a_busy_interval_keeps_a_bounded_uniform_sample() {
        let timings = watched();
        let release = call(LeaseAction::Release);
        let total = MAX_SAMPLES * 4;
        for held in 0..total {
            let held = Micros::try_from(held).unwrap_or(0);
            timings.record("backend", "backend.slow", &release, &outcome(1, true, held));
        }
        let (mut held, _) = timings.take("backend", "backend.slow").unwrap_or_default();
        assert_eq!(held.len(), MAX_SAMPLES);
        held.sort_unstable();
        let median = held[held.len() / 2];
        let middle = Micros::try_from(total / 2).unwrap_or(0);
        assert!(
            (median - middle).abs() < middle / 10,
            "median {median} of a uniform 0..{total}"
        );
    }
}
