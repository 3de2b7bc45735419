//! MONTH limits in UTC calendar months (`--calendar-months`): worked examples at month ends of
//! every length (28, 29, 30 and 31 days) and at the turn of a year, against dates checked with
//! `date -u -d … +%s`.

use super::*;
use crate::ground::calendar::dates::*;

const DAY: Micros = 86_400 * SECOND;

fn monthly(algorithm: Algorithm, limit: u32) -> Quota {
    quota(algorithm, limit, Unit::Month).with_calendar_months(true)
}

#[test]
fn a_fixed_window_runs_out_at_the_end_of_january_and_is_whole_on_february_first() {
    let mut sim = Sim::new(monthly(Algorithm::FixedWindow, 3), FEB_2027 - 2 * SECOND);
    assert_eq!(sim.burst(3), 3);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.committed.reset_after, 2 * SECOND);
    assert_eq!(rejected.retry_after, 2 * SECOND);
    assert_eq!(rejected.expires_at, FEB_2027);
    assert_eq!(
        rejected.next_state,
        State::FixedWindow {
            window_start: JAN_2027,
            count: 3
        }
    );

    sim.at(FEB_2027 - 1);
    assert!(!sim.charge(1).admitted, "the last µs of January is January");
    sim.at(FEB_2027);
    let fresh = sim.charge(1);
    assert!(fresh.admitted);
    assert_eq!(fresh.committed.remaining, 2);
    // February 2027 has 28 days.
    assert_eq!(fresh.committed.reset_after, 28 * DAY);
    assert_eq!(fresh.expires_at, MAR_2027);
}

#[test]
fn every_month_length_resets_on_the_next_first() {
    for (first, next, days) in [
        (DEC_2026, JAN_2027, 31),
        (JAN_2027, FEB_2027, 31),
        (FEB_2027, MAR_2027, 28),
        (FEB_2028, MAR_2028, 29),
        (APR_2027, MAY_2027, 30),
    ] {
        assert_eq!(next - first, days * DAY);
        let quota = monthly(Algorithm::FixedWindow, 1);
        for now in [
            first,
            first + 1,
            first + DAY + 7 * SECOND,
            next - SECOND,
            next - 1,
        ] {
            let evaluation = evaluate(&quota, None, now, Hits::Charge(1));
            assert!(evaluation.admitted);
            assert_eq!(evaluation.committed.reset_after, next - now, "at {now}");
            assert_eq!(evaluation.expires_at, next);
            assert_eq!(
                evaluation.next_state,
                State::FixedWindow {
                    window_start: first,
                    count: 1
                }
            );
        }
    }
}

#[test]
fn december_turns_into_january_of_the_next_year() {
    let quota = monthly(Algorithm::FixedWindow, 1);
    let mut sim = Sim::new(quota, JAN_2027 - SECOND);
    assert!(sim.charge(1).admitted);
    assert_eq!(sim.peek(Hits::Charge(1)).retry_after, SECOND);
    sim.at(JAN_2027);
    let january = sim.charge(1);
    assert!(january.admitted);
    assert_eq!(january.committed.reset_after, 31 * DAY);
}

#[test]
fn without_calendar_months_a_month_is_thirty_epoch_aligned_days() {
    let thirty_days = quota(Algorithm::FixedWindow, 3, Unit::Month);
    // (2027-02-01 happens to be a 30-day boundary too: 695 × 30 days after the epoch.)
    let now = MAR_2028 - 2 * SECOND;
    let evaluation = evaluate(&thirty_days, None, now, Hits::Charge(1));
    let window = 30 * DAY;
    assert_eq!(evaluation.committed.reset_after, window - now % window);
    assert_eq!(evaluation.committed.reset_after, 2_246_402 * SECOND);
    let calendar = evaluate(
        &monthly(Algorithm::FixedWindow, 3),
        None,
        now,
        Hits::Charge(1),
    );
    assert_eq!(calendar.committed.reset_after, 2 * SECOND);
    // The flag on another unit changes nothing: only MONTH has calendar windows.
    let daily = quota(Algorithm::FixedWindow, 3, Unit::Day).with_calendar_months(true);
    assert!(!daily.calendar_months);
    assert_eq!(daily.tiling(), Tiling::Epoch { length: DAY });
}

#[test]
fn several_months_are_quarters_or_years() {
    let quarterly = monthly(Algorithm::FixedWindow, 2).with_multiplier(3);
    let evaluation = evaluate(&quarterly, None, FEB_2027 + 5 * DAY, Hits::Charge(1));
    assert_eq!(evaluation.expires_at, APR_2027);
    assert_eq!(
        evaluation.next_state,
        State::FixedWindow {
            window_start: JAN_2027,
            count: 1
        }
    );
    let yearly = monthly(Algorithm::FixedWindow, 2).with_multiplier(12);
    let evaluation = evaluate(&yearly, None, MAR_2028 - 1, Hits::Charge(1));
    // 2028 is a leap year: from 2028-01-01 to 2029-01-01 is 366 days.
    assert_eq!(evaluation.expires_at, JAN_2028 + 366 * DAY);
}

#[test]
fn the_clock_going_back_keeps_the_later_month_and_its_end() {
    let quota = monthly(Algorithm::FixedWindow, 2);
    let mut sim = Sim::new(quota, FEB_2027 + SECOND);
    assert_eq!(sim.burst(2), 2);
    sim.at(FEB_2027 - 10 * SECOND);
    let back = sim.charge(1);
    assert!(!back.admitted);
    // Still February's counter, so it turns at March 1st.
    assert_eq!(
        back.committed.reset_after,
        MAR_2027 - (FEB_2027 - 10 * SECOND)
    );
}

#[test]
fn a_sliding_window_weighs_the_previous_month_by_the_share_of_this_month_to_come() {
    let quota = monthly(Algorithm::SlidingWindow, 10);
    let mut sim = Sim::new(quota, FEB_2027 - DAY);
    assert_eq!(sim.burst(8), 8);
    // At February 1st, January's 8 count in full: no free capacity at the boundary, though
    // January is longer than February.
    sim.at(FEB_2027);
    assert_eq!(sim.remaining(), 2);
    // Halfway through February (14 of 28 days), half of January's hits still count.
    sim.at(FEB_2027 + 14 * DAY);
    assert_eq!(sim.remaining(), 6);
    let charged = sim.charge(6);
    assert!(charged.admitted);
    // The rest of February, then the whole of March (31 days) for February's own hits.
    assert_eq!(charged.committed.reset_after, 14 * DAY + 31 * DAY);
    assert_eq!(charged.expires_at, APR_2027);
    // February is full: one more fits when January's 8 have decayed to 7 weighted hits...
    let rejected = sim.charge(1);
    assert!(!rejected.admitted);
    // 8 · (28 d − t) / 28 d ≤ 3 once t ≥ 28 d − 3 · 28 d / 8 = 17.5 days into February.
    let at = FEB_2027 + 17 * DAY + DAY / 2;
    assert_eq!(rejected.retry_after, at - sim.now);
    sim.at(at - 1);
    assert!(!sim.peek(Hits::Charge(1)).admitted);
    sim.at(at);
    assert!(sim.peek(Hits::Charge(1)).admitted);
}

#[test]
fn a_sliding_window_carries_only_the_month_right_before() {
    let quota = monthly(Algorithm::SlidingWindow, 4);
    let mut sim = Sim::new(quota, JAN_2027 + DAY);
    assert_eq!(sim.burst(4), 4);
    sim.at(FEB_2027);
    assert_eq!(sim.remaining(), 0, "January counts in full on February 1st");
    // By March 1st January is two months back: forgotten (February had no hits).
    sim.at(MAR_2027);
    assert_eq!(sim.remaining(), 4);
    // A full February's hits decay over March's 31 days.
    let mut sim = Sim::new(monthly(Algorithm::SlidingWindow, 4), FEB_2027 + DAY);
    assert_eq!(sim.burst(4), 4);
    let rejected = sim.at(MAR_2027).peek(Hits::Charge(4));
    assert_eq!(rejected.retry_after, 31 * DAY);
}

#[test]
fn rate_algorithms_keep_thirty_days_under_calendar_months() {
    for algorithm in [
        Algorithm::SlidingLog,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ] {
        let calendar = monthly(algorithm, 5);
        let plain = quota(algorithm, 5, Unit::Month);
        assert_eq!(calendar.tiling(), plain.tiling());
        let mut with = Sim::new(calendar, FEB_2027 - SECOND);
        let mut without = Sim::new(plain, FEB_2027 - SECOND);
        for step in [0, 1, SECOND, DAY, 3 * DAY, 40 * DAY] {
            with.advance(step);
            without.advance(step);
            assert_eq!(
                with.charge(2),
                without.charge(2),
                "{algorithm} after {step} µs"
            );
        }
    }
}
