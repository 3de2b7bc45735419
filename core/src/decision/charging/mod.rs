//! Which of a request's counters a store charges, once each is evaluated: the one rule both
//! stores follow (the memory store calls [`settle`]; the Redis script `decide.lua` carries the
//! same steps in Lua — keep them in step).
//!
//! A request is settled in units. Within a unit a counter named twice sees what its earlier
//! mention would leave if the unit passes; at the unit's end its verdict
//! ([`request_over_limit`] over the unit's counters: roles and `--shadow-mode` as for a whole
//! request) says which of its counters keep their new state:
//!
//!   kept ⇔ not a check, and (admitted and the unit passes, or the hits are recorded
//!          whatever the verdict, or they are recorded when refused and were refused)
//!
//! where, under all-or-refused, a unit passes only when none of its counters refused.
//!
//! - [`Charging::AllOrNothing`], floodgate's default: the unit is the whole request. A rejected
//!   request charges nothing; one that passes charges every counter that admitted it.
//! - [`Charging::EveryDescriptor`], envoyproxy/ratelimit's default
//!   (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`): each descriptor is a unit, settled as if
//!   it were the only descriptor of its request, and nothing is rolled back because another
//!   descriptor is over. Refused hits are recorded ([`Refused::Recorded`]) by the algorithms
//!   that count every hit (fixed and sliding window: the reference's `INCRBY` counts the
//!   refused ones too); a bucket or a log takes nothing for a refused hit. A later descriptor
//!   naming a counter sees what the earlier ones kept.
//! - [`Charging::AllOrRefused`], envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
//!   =true`: the unit is the whole request, and it stops when any of its counters refuses,
//!   whatever its role (`shadow_mode`, `quota_mode`, `--shadow-mode` included). One that does not
//!   stop charges every counter; one that stops charges only the refused hits, recorded by the
//!   algorithms that count every hit — the reference reads every counter first and, when any
//!   would go over, increments only those (its `fixed_cache_impl.go`, `getHitsAddend`, which
//!   looks at no role: the roles act later, on the answer). An admitted charge held back so is
//!   *withheld* ([`CounterOutcome::withheld`]): the reference's stats read it differently.
//!
//! In every mode a rule with `overflow: owe` ([`Overflow::Owe`]) records its refused charges
//! too: usage reported after the response has happened, so it is counted even past the limit
//! (and even when another descriptor refuses the request), and the counter then refuses until
//! the overshoot has left its window.
//!
//! The request's own verdict is the same in both: [`request_over_limit`] over all its counters.
//! An outcome reports the counter after its charge when it admitted and was kept, else as it
//! was judged (a refused counter answers 0 remaining whatever it records, and near-limit counts
//! need the count before the hits).

use std::ops::Range;

use smallvec::SmallVec;

use crate::arithmetic::algorithm::{evaluate_counter, Evaluation, Hits, Overflow, Refused, State};
use crate::decision::plan::Counter;
use crate::decision::response::CounterOutcome;
use crate::ground::time::Micros;
use crate::ground::verdict::{request_over_limit, Vote};

/// How a request's counters are charged (`--charge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Charging {
    /// A rejected request charges nothing; one that passes charges every counter.
    #[default]
    AllOrNothing,
    /// Every descriptor is charged by its own verdict, as envoyproxy/ratelimit charges.
    EveryDescriptor,
    /// A request any of whose counters refuses (whatever its role) charges only its refused
    /// hits (by the algorithms that count every hit); one where none does charges every
    /// counter: envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`.
    AllOrRefused,
}

/// When a counter's charge is kept past the verdict that a unit keeps admitted charges by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// Kept only when admitted in a unit that passes.
    Never,
    /// Counted whatever its verdict and its unit's: kept always.
    Always,
    /// Counted when refused, and then kept; admitted, kept only if its unit passes.
    WhenRefused,
}

impl Charging {
    pub const ALL: [Charging; 3] = [
        Charging::AllOrNothing,
        Charging::EveryDescriptor,
        Charging::AllOrRefused,
    ];

    /// The name `--charge` takes.
    pub fn name(self) -> &'static str {
        match self {
            Charging::AllOrNothing => "all-or-nothing",
            Charging::EveryDescriptor => "every-descriptor",
            Charging::AllOrRefused => "all-or-refused",
        }
    }

    pub fn parse(text: &str) -> Option<Charging> {
        Charging::ALL.into_iter().find(|mode| mode.name() == text)
    }

    /// What a refused charge leaves in a counter, in this mode.
    pub fn refused(self) -> Refused {
        match self {
            Charging::AllOrNothing => Refused::TakeNothing,
            Charging::EveryDescriptor | Charging::AllOrRefused => Refused::Recorded,
        }
    }

    /// Whether `counter`'s hits are recorded when refused: a charge on an algorithm that
    /// counts every hit, in a mode that records refused hits or on a rule that owes its
    /// overflow ([`Overflow::Owe`]).
    pub fn records(self, counter: &Counter) -> bool {
        self.recording(counter) != Recording::Never
    }

    /// When `counter`'s charge is kept past its unit's verdict: an owed overflow and every
    /// descriptor's recorded hits always (usage that happened; the reference's increment
    /// whatever the verdict), all or refused's only when refused.
    pub fn recording(self, counter: &Counter) -> Recording {
        let counts =
            counter.quota.algorithm.counts_in_windows() && matches!(counter.hits, Hits::Charge(_));
        if !counts {
            return Recording::Never;
        }
        match (counter.quota.overflow, self) {
            (Overflow::Owe, _) | (Overflow::Refuse, Charging::EveryDescriptor) => Recording::Always,
            (Overflow::Refuse, Charging::AllOrRefused) => Recording::WhenRefused,
            (Overflow::Refuse, Charging::AllOrNothing) => Recording::Never,
        }
    }

    /// Whether `counter`, `admitted` and `charged` or not, is a withheld charge
    /// ([`CounterOutcome::withheld`]): admitted but not charged under all-or-refused.
    pub fn withholds(self, counter: &Counter, admitted: bool, charged: bool) -> bool {
        self == Charging::AllOrRefused
            && matches!(counter.hits, Hits::Charge(_))
            && admitted
            && !charged
    }

    /// Marks the withheld charges among `outcomes` of `counters` (one each, in order), for a
    /// store whose answers say only admitted and charged (the Redis script's).
    pub fn mark_withheld(self, counters: &[Counter], outcomes: &mut [CounterOutcome]) {
        for (counter, outcome) in counters.iter().zip(outcomes) {
            outcome.withheld = self.withholds(counter, outcome.admitted, outcome.charged);
        }
    }

    /// What a refused charge leaves in `counter`.
    pub fn refused_for(self, counter: &Counter) -> Refused {
        if self.records(counter) {
            Refused::Recorded
        } else {
            Refused::TakeNothing
        }
    }
}

impl std::fmt::Display for Charging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A request's counters, evaluated and settled.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// One per counter, in order.
    pub evaluations: Vec<Evaluation>,
    /// One per counter: whether the store keeps its `next_state` (the last kept mention of a
    /// key is what the key holds afterwards).
    pub kept: PerCounter<bool>,
    /// The request's verdict.
    pub over_limit: bool,
    /// One per counter: an admitted charge that all-or-refused held back because another
    /// counter of the request refused ([`CounterOutcome::withheld`]).
    pub withheld: PerCounter<bool>,
}

/// One value per counter of a request, on the stack for the usual few counters (the flags
/// and votes below were allocations per decision as `Vec`s).
pub type PerCounter<T> = SmallVec<[T; 4]>;

impl Settled {
    /// What each counter reports.
    pub fn outcomes(&self) -> impl Iterator<Item = CounterOutcome> + '_ {
        self.evaluations
            .iter()
            .zip(&self.kept)
            .zip(&self.withheld)
            .map(|((evaluation, &kept), &withheld)| CounterOutcome {
                withheld,
                ..outcome(evaluation, kept)
            })
    }
}

/// What an evaluated counter reports, `kept` or not.
pub fn outcome(evaluation: &Evaluation, kept: bool) -> CounterOutcome {
    CounterOutcome {
        admitted: evaluation.admitted,
        snapshot: if kept && evaluation.admitted {
            evaluation.committed
        } else {
            evaluation.uncommitted
        },
        retry_after: evaluation.retry_after,
        charged: kept,
        withheld: false,
        wait: if kept && evaluation.admitted {
            evaluation.wait
        } else {
            0
        },
    }
}

/// Evaluates `counters` at `now` and settles them as `charging` says. `stored(i)` is the state
/// counter `i`'s key holds in the store (live at `now`), before this request.
pub fn settle<'s>(
    counters: &[Counter],
    charging: Charging,
    global_shadow: bool,
    now: Micros,
    stored: impl Fn(usize) -> Option<&'s State>,
) -> Settled {
    let mut evaluations: Vec<Evaluation> = Vec::with_capacity(counters.len());
    let mut kept: PerCounter<bool> = SmallVec::from_elem(false, counters.len());
    let mut withheld: PerCounter<bool> = SmallVec::from_elem(false, counters.len());
    let votes: PerCounter<Vote> = SmallVec::with_capacity(counters.len());
    let mut settling = Settling {
        counters,
        charging,
        global_shadow,
        votes,
    };
    for unit in units(counters, charging) {
        for index in unit.clone() {
            let Some(counter) = counters.get(index) else {
                continue;
            };
            let earlier = settling.latest_mention(index, unit.start, &evaluations, &kept);
            let state = match earlier {
                Some(earlier) => evaluations.get(earlier).map(|e| &e.next_state),
                None => stored(index),
            };
            let evaluation = evaluate_counter(
                &counter.quota,
                state,
                now,
                (counter.hits, counter.quota.reserve(counter.share)),
                charging.refused_for(counter),
            );
            settling.votes.push(Vote {
                descriptor: counter.descriptor,
                role: counter.role,
                admitted: evaluation.admitted,
            });
            evaluations.push(evaluation);
        }
        settling.settle_unit(unit, &evaluations, (&mut kept, &mut withheld));
    }
    Settled {
        over_limit: request_over_limit(&settling.votes, global_shadow),
        evaluations,
        kept,
        withheld,
    }
}

/// The units a request is settled in: the whole request, or each descriptor (whose counters
/// come together).
fn units(counters: &[Counter], charging: Charging) -> SmallVec<[Range<usize>; 4]> {
    match charging {
        Charging::AllOrNothing | Charging::AllOrRefused => {
            std::iter::once(0..counters.len()).collect()
        }
        Charging::EveryDescriptor => {
            let mut units: SmallVec<[Range<usize>; 4]> = SmallVec::new();
            for (index, counter) in counters.iter().enumerate() {
                match units.last_mut() {
                    Some(unit)
                        if counters
                            .get(unit.start)
                            .is_some_and(|first| first.descriptor == counter.descriptor) =>
                    {
                        unit.end = index + 1;
                    }
                    _ => units.push(index..index + 1),
                }
            }
            units
        }
    }
}

struct Settling<'c> {
    counters: &'c [Counter],
    charging: Charging,
    global_shadow: bool,
    votes: PerCounter<Vote>,
}

impl Settling<'_> {
    /// The latest mention before `index` of the same key whose next state counter `index`
    /// starts from: in its own unit (from `unit_start`), one that would be kept if the unit
    /// passes; before it, one that was kept.
    fn latest_mention(
        &self,
        index: usize,
        unit_start: usize,
        evaluations: &[Evaluation],
        kept: &[bool],
    ) -> Option<usize> {
        let key = &self.counters.get(index)?.key;
        (0..index).rev().find(|&earlier| {
            let Some(counter) = self.counters.get(earlier) else {
                return false;
            };
            if counter.key != *key {
                return false;
            }
            if earlier >= unit_start {
                self.charging.records(counter)
                    || evaluations.get(earlier).is_some_and(|e| e.admitted)
            } else {
                kept.get(earlier).copied().unwrap_or(false)
            }
        })
    }

    /// Marks which counters of `unit` are kept, by the unit's verdict, and which admitted
    /// charges all-or-refused withheld.
    fn settle_unit(
        &self,
        unit: Range<usize>,
        evaluations: &[Evaluation],
        (kept, withheld): (&mut [bool], &mut [bool]),
    ) {
        let unit_over = self.unit_stops(&unit);
        for index in unit {
            let (Some(counter), Some(evaluation)) =
                (self.counters.get(index), evaluations.get(index))
            else {
                continue;
            };
            let recorded = match self.charging.recording(counter) {
                Recording::Never => false,
                Recording::Always => true,
                Recording::WhenRefused => !evaluation.admitted,
            };
            let charges =
                !counter.hits.is_check() && ((evaluation.admitted && !unit_over) || recorded);
            if let Some(slot) = kept.get_mut(index) {
                *slot = charges;
            }
            if let Some(slot) = withheld.get_mut(index) {
                *slot = self
                    .charging
                    .withholds(counter, evaluation.admitted, charges);
            }
        }
    }

    /// Whether `unit` keeps only what is recorded whatever its verdict: when its verdict is
    /// over (roles and `--shadow-mode` count), or, under all-or-refused, when any of its
    /// counters refused, whatever its role (the reference's `getHitsAddend` stops the
    /// increments on any key that would go over).
    fn unit_stops(&self, unit: &Range<usize>) -> bool {
        let Some(votes) = self.votes.get(unit.clone()) else {
            return false;
        };
        match self.charging {
            Charging::AllOrRefused => votes.iter().any(|vote| !vote.admitted),
            Charging::AllOrNothing | Charging::EveryDescriptor => {
                request_over_limit(votes, self.global_shadow)
            }
        }
    }
}

#[cfg(test)]
mod tests;
