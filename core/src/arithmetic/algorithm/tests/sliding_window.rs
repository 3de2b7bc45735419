use super::*;

fn ten_per_minute() -> Quota {
    quota(Algorithm::SlidingWindow, 10, Unit::Minute)
}

/// A counter whose window [T0, T0 + 1 min) admitted 10 hits.
fn full_first_window() -> Sim {
    let mut sim = Sim::new(ten_per_minute(), T0 + 10 * SECOND);
    assert_eq!(sim.burst(10), 10);
    sim
}

#[test]
fn the_first_window_counts_like_a_fixed_window() {
    let mut sim = full_first_window();
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    // Next window: 10 × (1 − elapsed/60 s) + 1 ≤ 10 from elapsed = 6 s.
    assert_eq!(rejected.retry_after, 56 * SECOND);
    assert_eq!(rejected.committed.reset_after, 50 * SECOND + MINUTE);
    assert_eq!(rejected.expires_at, T0 + 2 * MINUTE);
}

#[test]
fn the_retry_time_is_the_first_micro_that_fits() {
    let mut sim = full_first_window();
    sim.at(T0 + 66 * SECOND - 1);
    assert!(!sim.peek(Hits::Charge(1)).admitted);
    assert_eq!(sim.peek(Hits::Charge(1)).retry_after, 1);
    sim.advance(1);
    assert!(sim.charge(1).admitted);
}

#[test]
fn the_previous_window_weighs_by_its_overlap() {
    let mut sim = full_first_window();
    sim.at(T0 + 75 * SECOND);
    // 10 × 0.75 = 7.5 → 2 more fit.
    assert_eq!(sim.remaining(), 2);
    assert_eq!(sim.burst(3), 2);
    let rejected = sim.peek(Hits::Charge(1));
    // 10 × (1 − e/60 s) + 2 + 1 ≤ 10 from e = 18 s.
    assert_eq!(rejected.retry_after, 3 * SECOND);
    assert_eq!(rejected.committed.reset_after, 45 * SECOND + MINUTE);
}

#[test]
fn last_micro_of_a_window_and_first_of_the_next() {
    let mut sim = Sim::new(ten_per_minute(), T0 + MINUTE - 1);
    assert_eq!(sim.burst(10), 10);
    sim.advance(1);
    let first = sim.charge(1);
    assert!(!first.admitted);
    assert_eq!(first.committed.remaining, 0);
    // Only the previous window holds hits now.
    assert_eq!(first.committed.reset_after, MINUTE);
    assert_eq!(first.retry_after, 6 * SECOND);
}

#[test]
fn two_windows_later_everything_is_forgotten() {
    let mut sim = full_first_window();
    sim.at(T0 + 2 * MINUTE);
    let check = sim.peek(Hits::PEEK);
    assert_eq!(check.committed.remaining, 10);
    assert_eq!(check.committed.reset_after, 0);
}

#[test]
fn a_multi_hit_charge_is_all_or_nothing() {
    let mut sim = full_first_window();
    sim.at(T0 + 75 * SECOND);
    let rejected = sim.charge(3);
    assert_rejected_unchanged(&sim, &rejected);
    assert!(sim.charge(2).admitted);
}

#[test]
fn check_only_takes_nothing() {
    let mut sim = full_first_window();
    sim.at(T0 + 90 * SECOND);
    let check = sim.hit(Hits::PEEK);
    assert!(check.admitted);
    assert_eq!(check.committed.remaining, 5);
    assert_eq!(sim.remaining(), 5);
}

#[test]
fn refunds_take_from_the_current_window_first_and_stop_at_fresh() {
    let mut sim = full_first_window();
    sim.at(T0 + 90 * SECOND);
    assert!(sim.charge(5).admitted);
    let refund = sim.hit(Hits::Refund(7));
    assert_eq!(
        refund.next_state,
        State::SlidingWindow {
            window_start: T0 + MINUTE,
            previous: 8,
            current: 0
        }
    );
    assert_eq!(refund.committed.remaining, 6);
    let everything = sim.hit(Hits::Refund(u64::MAX));
    assert_eq!(everything.committed.remaining, 10);
    assert_eq!(everything.committed.reset_after, 0);
}

#[test]
fn a_zero_limit_admits_nothing() {
    let mut sim = Sim::new(quota(Algorithm::SlidingWindow, 0, Unit::Second), T0);
    let rejected = sim.charge(1);
    assert!(!rejected.admitted);
    assert_eq!(rejected.committed.remaining, 0);
    assert!(rejected.retry_after >= 1);
}

#[test]
fn hits_beyond_the_limit_report_the_full_reset() {
    let mut sim = full_first_window();
    sim.at(T0 + 75 * SECOND);
    let rejected = sim.charge(u64::MAX);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 45 * SECOND);
    let fresh = Sim::new(ten_per_minute(), T0).peek(Hits::Charge(11));
    assert_eq!(fresh.retry_after, 1);
}

#[test]
fn the_clock_going_back_gives_no_free_capacity() {
    let mut sim = Sim::new(ten_per_minute(), T0 + 65 * SECOND);
    assert_eq!(sim.burst(10), 10);
    sim.at(T0 + 30 * SECOND);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    // The later window is kept and nothing of it decays before it starts.
    assert_eq!(rejected.retry_after, 96 * SECOND);
    assert_eq!(rejected.committed.reset_after, 150 * SECOND);
}

#[test]
fn the_clock_going_back_within_a_window_decays_less() {
    let mut sim = full_first_window();
    sim.at(T0 + 90 * SECOND);
    assert!(sim.charge(5).admitted);
    sim.at(T0 + 61 * SECOND);
    assert!(!sim.charge(1).admitted);
}

#[test]
fn long_idle_starts_afresh() {
    let mut sim = full_first_window();
    sim.advance(40 * YEAR + 3);
    assert_eq!(sim.remaining(), 10);
    assert_eq!(sim.burst(11), 10);
}

#[test]
fn a_quiet_previous_window_lets_the_limit_through() {
    let mut sim = Sim::new(ten_per_minute(), T0 + 59 * SECOND);
    sim.charge(1);
    sim.at(T0 + 61 * SECOND);
    // 1 × 59/60 ≈ 0.98 → 9 fit.
    assert_eq!(sim.remaining(), 9);
    assert_eq!(sim.burst(10), 9);
}
