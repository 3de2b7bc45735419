use super::*;

fn three_per_minute() -> Quota {
    quota(Algorithm::FixedWindow, 3, Unit::Minute)
}

#[test]
fn admits_the_limit_then_rejects_until_the_window_turns() {
    let mut sim = Sim::new(three_per_minute(), T0 + 10 * SECOND);
    assert_eq!(sim.burst(3), 3);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 50 * SECOND);
    assert_eq!(rejected.committed.remaining, 0);
    assert_eq!(rejected.committed.reset_after, 50 * SECOND);
    assert_eq!(rejected.expires_at, T0 + MINUTE);
}

#[test]
fn snapshots_before_and_after_the_commit() {
    let mut sim = Sim::new(three_per_minute(), T0 + 15 * SECOND);
    let first = sim.charge(1);
    assert!(first.admitted);
    assert_eq!(first.retry_after, 0);
    assert_eq!(first.uncommitted.remaining, 3);
    assert_eq!(first.committed.remaining, 2);
    assert_eq!(first.committed.reset_after, 45 * SECOND);
    assert_eq!(
        first.next_state,
        State::FixedWindow {
            window_start: T0,
            count: 1
        }
    );
}

#[test]
fn last_micro_of_a_window_and_first_of_the_next() {
    let mut sim = Sim::new(three_per_minute(), T0 + MINUTE - 1);
    assert_eq!(sim.burst(4), 3);
    let last = sim.peek(Hits::Charge(1));
    assert_eq!(last.retry_after, 1);
    assert_eq!(last.committed.reset_after, 1);
    sim.advance(1);
    let first = sim.charge(1);
    assert!(first.admitted);
    assert_eq!(first.committed.remaining, 2);
    assert_eq!(first.committed.reset_after, MINUTE);
}

#[test]
fn reset_after_matches_envoy() {
    for offset in [0, 1, 999_999, SECOND, 59 * SECOND + 999_999] {
        let now = T0 + offset;
        let evaluation = Sim::new(three_per_minute(), now).peek(Hits::PEEK);
        assert_eq!(evaluation.committed.reset_after, MINUTE - now % MINUTE);
    }
}

#[test]
fn a_multi_hit_charge_is_all_or_nothing() {
    let mut sim = Sim::new(three_per_minute(), T0);
    assert!(sim.charge(2).admitted);
    let rejected = sim.charge(2);
    assert_rejected_unchanged(&sim, &rejected);
    assert!(sim.charge(1).admitted);
    assert_eq!(sim.remaining(), 0);
}

#[test]
fn check_only_asks_for_one_hit_and_takes_nothing() {
    let mut sim = Sim::new(three_per_minute(), T0 + 20 * SECOND);
    sim.charge(2);
    let check = sim.hit(Hits::PEEK);
    assert!(check.admitted);
    assert_eq!(check.committed.remaining, 1);
    assert_eq!(sim.remaining(), 1);
    sim.charge(1);
    let full = sim.hit(Hits::PEEK);
    assert!(!full.admitted);
    assert_eq!(full.retry_after, 40 * SECOND);
}

#[test]
fn refunds_never_go_beyond_a_fresh_counter() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.charge(3);
    let refund = sim.hit(Hits::Refund(1));
    assert!(refund.admitted);
    assert_eq!(refund.uncommitted.remaining, 0);
    assert_eq!(refund.committed.remaining, 1);
    let too_much = sim.hit(Hits::Refund(u64::MAX));
    assert_eq!(too_much.committed.remaining, 3);
    assert_eq!(sim.burst(4), 3);
}

#[test]
fn a_zero_limit_admits_nothing() {
    let mut sim = Sim::new(quota(Algorithm::FixedWindow, 0, Unit::Second), T0 + 250_000);
    let rejected = sim.charge(1);
    assert!(!rejected.admitted);
    assert_eq!(rejected.retry_after, 750_000);
    assert_eq!(rejected.committed.remaining, 0);
    assert!(!sim.peek(Hits::PEEK).admitted);
}

#[test]
fn huge_hits_neither_fit_nor_overflow() {
    let mut sim = Sim::new(three_per_minute(), T0 + 30 * SECOND);
    let rejected = sim.charge(u64::MAX);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 30 * SECOND);
    sim.state = Some(State::FixedWindow {
        window_start: T0,
        count: u64::MAX,
    });
    assert_eq!(sim.remaining(), 0);
    assert!(!sim.charge(1).admitted);
    assert!(sim.hit(Hits::Refund(u64::MAX)).admitted);
    assert_eq!(sim.remaining(), 3);
}

#[test]
fn a_lowered_limit_leaves_no_room() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.state = Some(State::FixedWindow {
        window_start: T0,
        count: 5,
    });
    assert_eq!(sim.remaining(), 0);
    assert!(!sim.charge(1).admitted);
}

#[test]
fn the_clock_going_back_gives_no_free_capacity() {
    let mut sim = Sim::new(three_per_minute(), T0 + MINUTE + 5 * SECOND);
    assert_eq!(sim.burst(3), 3);
    sim.at(T0 + 30 * SECOND);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    // The stored (later) window still ends at T0 + 2 min.
    assert_eq!(rejected.retry_after, 90 * SECOND);
    assert_eq!(rejected.expires_at, T0 + 2 * MINUTE);
    sim.at(T0 + 2 * MINUTE);
    assert!(sim.charge(1).admitted);
}

#[test]
fn the_clock_going_back_keeps_counting_the_later_window() {
    let mut sim = Sim::new(three_per_minute(), T0 + MINUTE);
    sim.charge(1);
    sim.at(T0 + 59 * SECOND);
    assert_eq!(sim.burst(3), 2);
    assert_eq!(
        sim.state,
        Some(State::FixedWindow {
            window_start: T0 + MINUTE,
            count: 3
        })
    );
}

#[test]
fn long_idle_starts_afresh() {
    let mut sim = Sim::new(three_per_minute(), T0);
    sim.burst(3);
    sim.advance(30 * YEAR + 7);
    assert_eq!(sim.remaining(), 3);
    assert_eq!(sim.burst(4), 3);
}

#[test]
fn windows_align_before_the_epoch_too() {
    let evaluation = Sim::new(three_per_minute(), -1).peek(Hits::Charge(1));
    assert_eq!(
        evaluation.next_state,
        State::FixedWindow {
            window_start: -MINUTE,
            count: 1
        }
    );
    assert_eq!(evaluation.committed.reset_after, 1);
}

#[test]
fn multiplied_units_make_longer_windows() {
    let quota = three_per_minute().with_multiplier(5);
    let mut sim = Sim::new(quota, T0 + 4 * MINUTE);
    sim.burst(3);
    assert_eq!(sim.charge(1).retry_after, MINUTE);
}
