//! Tests of the decision algorithms: worked examples at the edges, one file per algorithm,
//! properties over random traffic in `properties.rs`, priority classes in `priority.rs`.

mod all_algorithms;
mod calendar_months;
mod fixed_window;
mod fullness;
mod gcra;
mod priority;
mod properties;
mod queue;
mod sliding_log;
mod sliding_window;

use super::{evaluate, fullness, Algorithm, Evaluation, Fullness, Hits, Quota, State, Tiling};
use crate::ground::time::{Micros, MICROS_PER_SECOND};
use crate::ground::unit::Unit;

pub(super) const SECOND: Micros = MICROS_PER_SECOND;
pub(super) const MINUTE: Micros = 60 * SECOND;
pub(super) const YEAR: Micros = 365 * 24 * 3_600 * SECOND;

/// 2023-12-09T00:00:00Z: a realistic instant on a day boundary, so on every shorter window's.
pub(super) const T0: Micros = 19_700 * 86_400 * SECOND;

pub(super) fn quota(algorithm: Algorithm, limit: u32, unit: Unit) -> Quota {
    Quota::new(limit, unit).with_algorithm(algorithm)
}

/// One counter driven through time; like a store, it keeps `next_state` of what it admits.
pub(super) struct Sim {
    pub quota: Quota,
    pub state: Option<State>,
    pub now: Micros,
}

impl Sim {
    pub fn new(quota: Quota, now: Micros) -> Self {
        Self {
            quota,
            state: None,
            now,
        }
    }

    pub fn at(&mut self, now: Micros) -> &mut Self {
        self.now = now;
        self
    }

    pub fn advance(&mut self, by: Micros) -> &mut Self {
        self.now += by;
        self
    }

    /// Evaluates without storing anything.
    pub fn peek(&self, hits: Hits) -> Evaluation {
        evaluate(&self.quota, self.state.as_ref(), self.now, hits)
    }

    pub fn hit(&mut self, hits: Hits) -> Evaluation {
        let evaluation = self.peek(hits);
        if evaluation.admitted {
            self.state = Some(evaluation.next_state.clone());
        }
        evaluation
    }

    pub fn charge(&mut self, hits: u64) -> Evaluation {
        self.hit(Hits::Charge(hits))
    }

    /// How many of `attempts` single hits at the current instant are admitted.
    pub fn burst(&mut self, attempts: usize) -> usize {
        (0..attempts).filter(|_| self.charge(1).admitted).count()
    }

    pub fn remaining(&self) -> u64 {
        self.peek(Hits::PEEK).uncommitted.remaining
    }
}

/// Asserts a rejected evaluation left everything as it was.
pub(super) fn assert_rejected_unchanged(sim: &Sim, evaluation: &Evaluation) {
    assert!(!evaluation.admitted);
    assert!(evaluation.retry_after >= 1);
    assert_eq!(evaluation.committed, evaluation.uncommitted);
    let check = sim.peek(Hits::PEEK);
    assert_eq!(evaluation.next_state, check.next_state);
}
