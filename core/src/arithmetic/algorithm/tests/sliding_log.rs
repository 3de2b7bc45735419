use std::collections::VecDeque;

use super::*;
use crate::arithmetic::algorithm::SLIDING_LOG_MAX_LIMIT;

fn three_per_minute() -> Quota {
    quota(Algorithm::SlidingLog, 3, Unit::Minute)
}

fn log(entries: &[(Micros, u64)]) -> State {
    State::SlidingLog(Box::new(entries.iter().copied().collect()))
}

fn entries(state: &State) -> Vec<(Micros, u64)> {
    match state {
        State::SlidingLog(entries) => entries.iter().copied().collect(),
        other => panic!("not a log: {other:?}"),
    }
}

/// One hit at T0, T0 + 20 s and T0 + 40 s.
fn spread_over_a_minute() -> Sim {
    let mut sim = Sim::new(three_per_minute(), T0);
    for _ in 0..3 {
        assert!(sim.charge(1).admitted);
        sim.advance(20 * SECOND);
    }
    sim
}

#[test]
fn admits_the_limit_then_waits_for_the_oldest_to_expire() {
    let mut sim = Sim::new(three_per_minute(), T0);
    assert_eq!(sim.burst(3), 3);
    sim.advance(10 * SECOND);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 50 * SECOND);
    assert_eq!(rejected.committed.reset_after, 50 * SECOND);
    assert_eq!(rejected.expires_at, T0 + MINUTE);
}

#[test]
fn hits_at_the_same_instant_share_one_entry() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.burst(3);
    assert_eq!(entries(sim.state.as_ref().unwrap()), vec![(T0, 3)]);
}

#[test]
fn an_entry_expires_exactly_one_window_later() {
    let mut sim = spread_over_a_minute();
    sim.at(T0 + MINUTE - 1);
    let last = sim.peek(Hits::Charge(1));
    assert!(!last.admitted);
    assert_eq!(last.retry_after, 1);
    assert_eq!(last.committed.reset_after, 40 * SECOND + 1);
    sim.advance(1);
    let first = sim.charge(1);
    assert!(first.admitted);
    assert_eq!(
        entries(&first.next_state),
        vec![
            (T0 + 20 * SECOND, 1),
            (T0 + 40 * SECOND, 1),
            (T0 + MINUTE, 1)
        ]
    );
}

#[test]
fn a_multi_hit_charge_waits_for_enough_entries() {
    let mut sim = spread_over_a_minute();
    sim.at(T0 + 50 * SECOND);
    let rejected = sim.charge(2);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 30 * SECOND);
}

#[test]
fn check_only_takes_nothing() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.charge(2);
    let check = sim.hit(Hits::PEEK);
    assert!(check.admitted);
    assert_eq!(check.committed.remaining, 1);
    assert_eq!(entries(&check.next_state), vec![(T0, 2)]);
}

#[test]
fn refunds_take_back_the_newest_hits_and_stop_at_empty() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.charge(2);
    sim.advance(20 * SECOND);
    sim.charge(1);
    let refund = sim.hit(Hits::Refund(2));
    assert_eq!(entries(&refund.next_state), vec![(T0, 1)]);
    assert_eq!(refund.committed.remaining, 2);
    let everything = sim.hit(Hits::Refund(u64::MAX));
    assert!(entries(&everything.next_state).is_empty());
    assert_eq!(everything.committed.remaining, 3);
    assert_eq!(everything.committed.reset_after, 0);
    assert_eq!(everything.expires_at, sim.now);
}

#[test]
fn hits_beyond_the_limit_report_when_all_expire() {
    let mut sim = spread_over_a_minute();
    sim.at(T0 + 50 * SECOND);
    let rejected = sim.charge(u64::MAX);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 50 * SECOND);
    let fresh = Sim::new(three_per_minute(), T0).peek(Hits::Charge(4));
    assert_eq!(fresh.retry_after, 1);
}

#[test]
fn a_zero_limit_admits_nothing() {
    let mut sim = Sim::new(quota(Algorithm::SlidingLog, 0, Unit::Second), T0);
    let rejected = sim.charge(1);
    assert!(!rejected.admitted);
    assert_eq!(rejected.retry_after, 1);
    assert!(!sim.peek(Hits::PEEK).admitted);
}

#[test]
fn the_clock_going_back_gives_no_free_capacity() {
    let mut sim = Sim::new(three_per_minute(), T0 + 30 * SECOND);
    sim.burst(3);
    sim.at(T0 + 10 * SECOND);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 80 * SECOND);
    assert_eq!(rejected.committed.reset_after, 80 * SECOND);
}

#[test]
fn hits_while_the_clock_is_behind_join_the_newest_entry() {
    let mut sim = Sim::new(three_per_minute(), T0 + 30 * SECOND);
    sim.charge(1);
    sim.at(T0 + 10 * SECOND);
    let admitted = sim.charge(1);
    assert_eq!(entries(&admitted.next_state), vec![(T0 + 30 * SECOND, 2)]);
}

#[test]
fn long_idle_starts_afresh() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.burst(3);
    sim.advance(25 * YEAR);
    let check = sim.peek(Hits::PEEK);
    assert_eq!(check.committed.remaining, 3);
    assert!(entries(&check.next_state).is_empty());
}

#[test]
fn stale_and_empty_entries_are_dropped() {
    let mut sim = Sim::new(three_per_minute(), T0 + MINUTE);
    sim.state = Some(log(&[(T0, 1), (T0 + SECOND, 0), (T0 + 2 * SECOND, 1)]));
    let check = sim.peek(Hits::PEEK);
    assert_eq!(entries(&check.next_state), vec![(T0 + 2 * SECOND, 1)]);
    assert_eq!(check.committed.remaining, 2);
}

#[test]
fn an_oversized_log_is_capped_without_losing_hits() {
    let cap = SLIDING_LOG_MAX_LIMIT as i64;
    let stored: VecDeque<(Micros, u64)> = (0..cap + 50).map(|i| (T0 + i, 1)).collect();
    let mut sim = Sim::new(
        quota(Algorithm::SlidingLog, u32::MAX, Unit::Hour),
        T0 + 2 * cap,
    );
    sim.state = Some(State::SlidingLog(Box::new(stored)));
    let admitted = sim.charge(1);
    assert!(admitted.admitted);
    let kept = entries(&admitted.next_state);
    assert_eq!(kept.len(), SLIDING_LOG_MAX_LIMIT as usize);
    assert_eq!(
        kept.iter().map(|&(_, count)| count).sum::<u64>(),
        cap as u64 + 51
    );
    assert_eq!(
        admitted.committed.remaining,
        u64::from(u32::MAX) - cap as u64 - 51
    );
}
