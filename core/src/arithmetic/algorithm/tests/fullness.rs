//! How full each algorithm says a counter is (`Evaluation::fullness`), worked by hand: the share
//! used, and for an exhausted counter the time until one hit fits again. The properties over
//! random traffic are in `properties.rs`.

use super::*;

/// A third of the capacity used, in 65 535ths.
const A_THIRD: u16 = 21_845;

fn exhausted_for(sim: &Sim) -> Option<Micros> {
    sim.peek(Hits::PEEK).fullness.exhausted_for
}

#[test]
fn a_fixed_window_is_exhausted_until_it_turns() {
    let mut sim = Sim::new(
        quota(Algorithm::FixedWindow, 3, Unit::Minute),
        T0 + 10 * SECOND,
    );
    let first = sim.charge(1).fullness;
    assert_eq!(first.used, A_THIRD);
    assert!(!first.is_exhausted());
    sim.charge(1);
    let last = sim.charge(1).fullness;
    assert_eq!(last.used, Fullness::ALL_USED);
    assert_eq!(last.exhausted_for, Some(50 * SECOND));
    // A rejection says the same of the counter it leaves as it was.
    assert_eq!(sim.charge(1).fullness, last);
}

#[test]
fn a_sliding_window_is_exhausted_until_the_previous_window_weighs_one_hit_less() {
    let mut sim = Sim::new(quota(Algorithm::SlidingWindow, 10, Unit::Minute), T0);
    assert_eq!(sim.burst(10), 10);
    sim.at(T0 + MINUTE);
    // 10 · (1 − elapsed / 60 s) ≤ 9 from 6 s into the window on.
    assert_eq!(exhausted_for(&sim), Some(6 * SECOND));
    sim.advance(6 * SECOND);
    assert_eq!(exhausted_for(&sim), None);
}

#[test]
fn a_sliding_log_is_exhausted_until_its_oldest_hit_leaves() {
    let mut sim = Sim::new(quota(Algorithm::SlidingLog, 2, Unit::Minute), T0);
    sim.charge(1);
    sim.advance(10 * SECOND);
    assert_eq!(sim.charge(1).fullness.exhausted_for, Some(50 * SECOND));
}

#[test]
fn a_token_bucket_is_exhausted_until_one_token_drips_back() {
    let mut sim = Sim::new(quota(Algorithm::TokenBucket, 6, Unit::Minute), T0);
    assert_eq!(sim.burst(6), 6);
    let fullness = sim.peek(Hits::PEEK).fullness;
    assert_eq!(fullness.used, Fullness::ALL_USED);
    assert_eq!(fullness.exhausted_for, Some(10 * SECOND));
    sim.advance(10 * SECOND);
    let refilled = sim.peek(Hits::PEEK).fullness;
    assert_eq!(refilled.exhausted_for, None);
    assert!(refilled.used < Fullness::ALL_USED);
}

#[test]
fn a_leaky_bucket_without_burst_is_exhausted_for_one_emission_interval() {
    let mut sim = Sim::new(quota(Algorithm::LeakyBucket, 6, Unit::Minute), T0);
    assert_eq!(sim.charge(1).fullness.exhausted_for, Some(10 * SECOND));
}

#[test]
fn a_fresh_counter_is_empty_and_a_zero_limit_always_full() {
    for algorithm in Algorithm::ALL {
        let fresh = fullness(&quota(algorithm, 5, Unit::Minute), None, T0);
        assert_eq!(
            fresh,
            Fullness {
                used: 0,
                exhausted_for: None
            },
            "{algorithm}"
        );
        let closed = fullness(&quota(algorithm, 0, Unit::Minute), None, T0);
        assert_eq!(closed.used, Fullness::ALL_USED, "{algorithm}");
        assert!(closed.is_exhausted(), "{algorithm}");
    }
}

#[test]
fn a_priority_reserve_does_not_make_a_counter_exhausted() {
    // A class may be refused while hits still fit for the classes above it: the counter is
    // not exhausted, and forgetting it first would be wrong only once it is.
    let quota = quota(Algorithm::FixedWindow, 4, Unit::Minute);
    let state = evaluate(&quota, None, T0, Hits::Charge(3)).next_state;
    let low = super::super::evaluate_reserving(&quota, Some(&state), T0, Hits::Charge(1), 2);
    assert!(!low.admitted);
    assert!(!low.fullness.is_exhausted());
    // 3 of 4 used: floor(3 · 65 535 / 4).
    assert_eq!(low.fullness.used, 49_151);
}
