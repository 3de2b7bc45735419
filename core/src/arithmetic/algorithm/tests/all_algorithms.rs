use std::collections::VecDeque;

use super::*;
use crate::arithmetic::algorithm::{evaluate_counter, CheckRule, Refused};

fn one_state_of_each_variant(now: Micros) -> Vec<State> {
    vec![
        State::FixedWindow {
            window_start: now,
            count: 1_000,
        },
        State::SlidingWindow {
            window_start: now,
            previous: 1_000,
            current: 1_000,
        },
        State::Gcra {
            tat: now.saturating_add(YEAR),
            tat_remainder: 0,
        },
        State::SlidingLog(Box::new(VecDeque::from([(now, 1_000)]))),
    ]
}

fn same_variant(a: &State, b: &State) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

#[test]
fn a_state_of_another_algorithm_counts_as_no_state() {
    for algorithm in Algorithm::ALL {
        let quota = quota(algorithm, 5, Unit::Minute);
        let fresh = evaluate(&quota, None, T0, Hits::Charge(1));
        for state in one_state_of_each_variant(T0) {
            if !same_variant(&state, &fresh.next_state) {
                let evaluation = evaluate(&quota, Some(&state), T0, Hits::Charge(1));
                assert_eq!(evaluation, fresh, "{algorithm} with {state:?}");
            }
        }
    }
}

#[test]
fn the_variant_stored_matches_the_algorithm() {
    for algorithm in Algorithm::ALL {
        let quota = quota(algorithm, 5, Unit::Minute);
        for hits in [Hits::Charge(1), Hits::PEEK, Hits::Refund(1)] {
            let evaluation = evaluate(&quota, None, T0, hits);
            let stored = evaluate(&quota, Some(&evaluation.next_state), T0, Hits::Charge(1));
            assert_eq!(
                stored.uncommitted, evaluation.committed,
                "{algorithm} {hits:?}"
            );
        }
    }
}

#[test]
fn a_check_within_the_limit_passes_at_the_limit_where_one_more_fits_refuses() {
    let within = Hits::CheckOnly(CheckRule::WithinLimit);
    for algorithm in Algorithm::ALL {
        let mut sim = Sim::new(quota(algorithm, 3, Unit::Minute), T0);
        assert!(sim.peek(within).admitted, "{algorithm}: a fresh counter");
        let capacity = usize::try_from(sim.quota.capacity()).unwrap_or(usize::MAX);
        assert_eq!(sim.burst(capacity), capacity, "{algorithm}");
        assert!(!sim.peek(Hits::PEEK).admitted, "{algorithm}: full");
        let at_the_limit = sim.peek(within);
        assert!(
            at_the_limit.admitted,
            "{algorithm}: at the limit, not beyond it"
        );
        assert_eq!(at_the_limit.uncommitted.remaining, 0, "{algorithm}");
        assert_eq!(at_the_limit.next_state, sim.peek(Hits::PEEK).next_state);
    }
}

#[test]
fn a_check_within_the_limit_refuses_a_count_beyond_it_until_the_window_turns() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let quota = quota(algorithm, 100, Unit::Minute);
        // 10 000 tokens recorded against a limit of 100 (a charge counted whatever its
        // verdict, as every-descriptor charging or `overflow: owe` count it).
        let recorded = evaluate_counter(
            &quota,
            None,
            T0,
            (Hits::Charge(10_000), 0),
            Refused::Recorded,
        );
        assert!(!recorded.admitted);
        let state = Some(recorded.next_state);
        let check = evaluate(
            &quota,
            state.as_ref(),
            T0,
            Hits::CheckOnly(CheckRule::WithinLimit),
        );
        assert!(!check.admitted, "{algorithm}: beyond the limit");
        assert!(check.retry_after >= 1, "{algorithm}");
        assert_eq!(
            check.retry_after,
            evaluate(&quota, state.as_ref(), T0, Hits::PEEK).retry_after,
            "{algorithm}: refused, a check waits as one more hit would"
        );
        let turned = T0 + 2 * MINUTE;
        let later = evaluate(
            &quota,
            state.as_ref(),
            turned,
            Hits::CheckOnly(CheckRule::WithinLimit),
        );
        assert!(
            later.admitted,
            "{algorithm}: the overshoot has left the window"
        );
    }
}

fn extreme_quotas() -> Vec<Quota> {
    let mut quotas = Vec::new();
    for algorithm in Algorithm::ALL {
        for limit in [0, 1, u32::MAX] {
            for (unit, multiplier) in [(Unit::Second, 1), (Unit::Year, u32::MAX)] {
                for burst in [None, Some(0), Some(u32::MAX)] {
                    let mut quota = quota(algorithm, limit, unit).with_multiplier(multiplier);
                    quota.burst = burst;
                    quotas.push(quota);
                }
            }
        }
    }
    quotas
}

const EXTREME_TIMES: [Micros; 6] = [Micros::MIN, Micros::MIN + 1, -1, 0, T0, Micros::MAX];
const EXTREME_HITS: [Hits; 7] = [
    Hits::Charge(0),
    Hits::Charge(1),
    Hits::Charge(u64::MAX),
    Hits::PEEK,
    Hits::CheckOnly(CheckRule::WithinLimit),
    Hits::Refund(1),
    Hits::Refund(u64::MAX),
];

#[test]
fn extreme_inputs_do_not_panic() {
    for quota in extreme_quotas() {
        for now in EXTREME_TIMES {
            for stored_at in EXTREME_TIMES {
                let mut states: Vec<Option<State>> = vec![None];
                states.extend(one_state_of_each_variant(stored_at).into_iter().map(Some));
                for state in &states {
                    for hits in EXTREME_HITS {
                        let evaluation = evaluate(&quota, state.as_ref(), now, hits);
                        assert!(evaluation.committed.reset_after >= 0);
                        assert!(evaluation.uncommitted.reset_after >= 0);
                        assert!(evaluation.retry_after >= 0);
                        assert!(evaluation.committed.remaining <= quota.capacity());
                        assert!(evaluation.uncommitted.remaining <= quota.capacity());
                        assert_eq!(evaluation.admitted, evaluation.retry_after == 0);
                    }
                }
            }
        }
    }
}

#[test]
fn huge_stored_counts_do_not_overflow() {
    let now = T0;
    let states = [
        State::FixedWindow {
            window_start: now,
            count: u64::MAX,
        },
        State::SlidingWindow {
            window_start: now,
            previous: u32::MAX,
            current: u32::MAX,
        },
        State::Gcra {
            tat: Micros::MAX,
            tat_remainder: u32::MAX,
        },
        State::SlidingLog(Box::new(VecDeque::from([
            (now, u64::MAX),
            (now + 1, u64::MAX),
        ]))),
    ];
    for algorithm in Algorithm::ALL {
        let quota = quota(algorithm, u32::MAX, Unit::Second);
        for state in &states {
            for hits in EXTREME_HITS {
                let evaluation = evaluate(&quota, Some(state), now, hits);
                assert!(evaluation.committed.remaining <= quota.capacity());
            }
        }
    }
}
