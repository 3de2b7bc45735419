use std::collections::VecDeque;

use super::*;

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
        for hits in [Hits::Charge(1), Hits::CheckOnly, Hits::Refund(1)] {
            let evaluation = evaluate(&quota, None, T0, hits);
            let stored = evaluate(&quota, Some(&evaluation.next_state), T0, Hits::Charge(1));
            assert_eq!(
                stored.uncommitted, evaluation.committed,
                "{algorithm} {hits:?}"
            );
        }
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
const EXTREME_HITS: [Hits; 6] = [
    Hits::Charge(0),
    Hits::Charge(1),
    Hits::Charge(u64::MAX),
    Hits::CheckOnly,
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
