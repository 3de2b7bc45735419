use super::*;

fn token_bucket(limit: u32, unit: Unit, burst: u32) -> Quota {
    quota(Algorithm::TokenBucket, limit, unit).with_burst(burst)
}

/// nginx `limit_req rate=… burst=… nodelay`.
fn leaky_bucket(limit: u32, unit: Unit, burst: u32) -> Quota {
    quota(Algorithm::LeakyBucket, limit, unit).with_burst(burst)
}

/// 7 per minute: one hit every 60 s / 7 = 8 571 428.57… µs.
fn seven_per_minute() -> Quota {
    quota(Algorithm::TokenBucket, 7, Unit::Minute)
}

const SEVENTH_OF_A_MINUTE_CEIL: Micros = 8_571_429;

#[test]
fn nginx_rate_10_per_second_burst_20_nodelay() {
    let mut sim = Sim::new(leaky_bucket(10, Unit::Second, 20), T0);
    assert_eq!(sim.burst(30), 21);
    sim.advance(SECOND);
    assert_eq!(sim.burst(11), 10);
}

#[test]
fn nginx_rate_30_per_minute_burst_2() {
    let mut sim = Sim::new(leaky_bucket(30, Unit::Minute, 2), T0);
    assert_eq!(sim.burst(6), 3);
}

#[test]
fn a_leaky_bucket_without_burst_admits_one_at_a_time() {
    let mut sim = Sim::new(quota(Algorithm::LeakyBucket, 10, Unit::Second), T0);
    assert_eq!(sim.burst(5), 1);
    assert_eq!(sim.peek(Hits::Charge(1)).retry_after, 100_000);
}

#[test]
fn a_token_bucket_holds_its_burst_and_refills_continuously() {
    let mut sim = Sim::new(token_bucket(10, Unit::Second, 20), T0);
    assert_eq!(sim.burst(21), 20);
    let empty = sim.peek(Hits::Charge(1));
    assert_eq!(empty.retry_after, 100_000);
    assert_eq!(empty.committed.reset_after, 2 * SECOND);
    sim.advance(150_000);
    // 1.5 tokens.
    assert_eq!(sim.remaining(), 1);
    assert!(sim.charge(1).admitted);
    let half_a_token = sim.charge(1);
    assert_rejected_unchanged(&sim, &half_a_token);
    assert_eq!(half_a_token.retry_after, 50_000);
}

#[test]
fn a_token_bucket_defaults_to_the_limit_as_capacity() {
    let mut sim = Sim::new(quota(Algorithm::TokenBucket, 10, Unit::Second), T0);
    assert_eq!(sim.burst(15), 10);
}

#[test]
fn three_per_minute_is_one_hit_every_twenty_seconds_exactly() {
    let mut sim = Sim::new(leaky_bucket(3, Unit::Minute, 0), T0);
    assert!(sim.charge(1).admitted);
    sim.advance(20 * SECOND - 1);
    let early = sim.peek(Hits::Charge(1));
    assert!(!early.admitted);
    assert_eq!(early.retry_after, 1);
    sim.advance(1);
    assert!(sim.charge(1).admitted);
    for _ in 0..1_000 {
        sim.advance(20 * SECOND);
        assert!(sim.charge(1).admitted);
    }
}

#[test]
fn seven_per_minute_refills_one_hit_per_seventh_of_a_minute() {
    let mut sim = Sim::new(seven_per_minute(), T0);
    assert_eq!(sim.burst(8), 7);
    assert_eq!(
        sim.peek(Hits::Charge(1)).retry_after,
        SEVENTH_OF_A_MINUTE_CEIL
    );
    sim.advance(SEVENTH_OF_A_MINUTE_CEIL - 1);
    assert!(!sim.peek(Hits::Charge(1)).admitted);
    sim.advance(1);
    assert!(sim.charge(1).admitted);
}

#[test]
fn after_idling_n_intervals_rounded_up_exactly_n_fit() {
    let three_sevenths_ceil = 25_714_286; // ⌈3 × 60 s / 7⌉
    let mut sim = Sim::new(seven_per_minute(), T0);
    sim.burst(7);
    sim.advance(three_sevenths_ceil - 1);
    assert_eq!(sim.remaining(), 2);
    sim.advance(1);
    assert_eq!(sim.remaining(), 3);
    assert_eq!(sim.burst(4), 3);
}

#[test]
fn the_state_keeps_the_fraction_of_a_micro() {
    let admitted = Sim::new(seven_per_minute(), T0).peek(Hits::Charge(1));
    // T0 + 60 s / 7 = T0 + 8 571 428 + 4/7 µs.
    assert_eq!(
        admitted.next_state,
        State::Gcra {
            tat: T0 + 8_571_428,
            tat_remainder: 4
        }
    );
    assert_eq!(admitted.committed.reset_after, SEVENTH_OF_A_MINUTE_CEIL);
    assert_eq!(admitted.expires_at, T0 + SEVENTH_OF_A_MINUTE_CEIL);
    assert_eq!(admitted.committed.remaining, 6);
}

#[test]
fn sustained_traffic_gets_exactly_the_rate() {
    // A request every second for a day: 7 at first, then one per 60/7 s.
    let mut sim = Sim::new(seven_per_minute(), T0);
    let mut admitted = 0;
    for _ in 0..=86_400 {
        admitted += usize::from(sim.charge(1).admitted);
        sim.advance(SECOND);
    }
    assert_eq!(admitted, 7 + 86_400 * 7 / 60);
}

#[test]
fn a_multi_hit_charge_is_all_or_nothing() {
    let mut sim = Sim::new(token_bucket(10, Unit::Second, 20), T0);
    assert!(sim.charge(15).admitted);
    let rejected = sim.charge(6);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 100_000);
    assert!(sim.charge(5).admitted);
}

#[test]
fn check_only_takes_nothing() {
    let mut sim = Sim::new(token_bucket(10, Unit::Second, 20), T0);
    sim.charge(19);
    let check = sim.hit(Hits::PEEK);
    assert!(check.admitted);
    assert_eq!(check.committed.remaining, 1);
    sim.charge(1);
    let full = sim.hit(Hits::PEEK);
    assert!(!full.admitted);
    assert_eq!(full.retry_after, 100_000);
}

#[test]
fn refunds_give_back_whole_hits_never_beyond_a_fresh_bucket() {
    let mut sim = Sim::new(seven_per_minute(), T0);
    sim.burst(7);
    let refund = sim.hit(Hits::Refund(2));
    assert_eq!(refund.committed.remaining, 2);
    assert_eq!(sim.burst(3), 2);
    let everything = sim.hit(Hits::Refund(u64::MAX));
    assert_eq!(everything.committed.remaining, 7);
    assert_eq!(everything.committed.reset_after, 0);
    assert_eq!(
        everything.next_state,
        State::Gcra {
            tat: T0,
            tat_remainder: 0
        }
    );
}

#[test]
fn no_rate_or_no_capacity_admits_nothing() {
    for quota in [
        token_bucket(0, Unit::Second, 5),
        token_bucket(10, Unit::Second, 0),
        quota(Algorithm::LeakyBucket, 0, Unit::Minute),
    ] {
        let mut sim = Sim::new(quota.clone(), T0);
        let rejected = sim.charge(1);
        assert!(!rejected.admitted, "{quota:?}");
        assert_eq!(rejected.retry_after, quota.window_micros());
        assert_eq!(rejected.committed.remaining, 0);
        assert!(!sim.peek(Hits::PEEK).admitted);
        assert!(sim.hit(Hits::Refund(3)).admitted);
    }
}

#[test]
fn hits_beyond_the_capacity_report_the_full_reset() {
    let mut sim = Sim::new(token_bucket(10, Unit::Second, 20), T0);
    assert_eq!(sim.peek(Hits::Charge(21)).retry_after, 1);
    sim.charge(5);
    let rejected = sim.charge(u64::MAX);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 500_000);
}

#[test]
fn the_clock_going_back_gives_no_free_capacity() {
    let mut sim = Sim::new(token_bucket(10, Unit::Second, 20), T0 + 10 * SECOND);
    sim.burst(20);
    sim.at(T0);
    let rejected = sim.charge(1);
    assert_rejected_unchanged(&sim, &rejected);
    assert_eq!(rejected.retry_after, 10 * SECOND + 100_000);
    assert_eq!(rejected.committed.reset_after, 12 * SECOND);
}

#[test]
fn long_idle_starts_afresh() {
    let mut sim = Sim::new(leaky_bucket(10, Unit::Second, 20), T0);
    sim.burst(21);
    sim.advance(50 * YEAR);
    assert_eq!(sim.remaining(), 21);
    assert_eq!(sim.peek(Hits::PEEK).committed.reset_after, 0);
}

#[test]
fn a_remainder_from_a_higher_limit_still_counts() {
    let mut sim = Sim::new(token_bucket(10, Unit::Second, 20), T0);
    sim.state = Some(State::Gcra {
        tat: T0 + 1_800_000,
        tat_remainder: u32::MAX,
    });
    // 1.8 s ahead plus 429 496 729.5 µs of remainder: the bucket stays full.
    assert_eq!(sim.remaining(), 0);
    assert!(!sim.charge(1).admitted);
}

#[test]
fn extreme_quotas_do_not_overflow() {
    let quota = leaky_bucket(u32::MAX, Unit::Year, u32::MAX).with_multiplier(u32::MAX);
    let mut sim = Sim::new(quota, T0);
    assert!(sim.charge(u64::from(u32::MAX) + 1).admitted);
    assert!(!sim.charge(1).admitted);
    assert!(!sim.charge(u64::MAX).admitted);
    assert!(sim.hit(Hits::Refund(u64::MAX)).admitted);
    assert_eq!(sim.remaining(), u64::from(u32::MAX) + 1);
}

/// Found by the `algorithms` fuzz target: a bucket that takes longer to drain than an i64 of
/// µs reaches (here 6 hits of 100 000 years each, from 2023) kept a saturated arrival time that
/// held less debt than was charged, so a full bucket had room again at once. It now holds what
/// drains in 2^62 µs: one hit.
#[test]
fn a_bucket_that_drains_past_the_last_micro_holds_what_drains_before() {
    let quota = leaky_bucket(1, Unit::Year, 5).with_multiplier(100_000);
    let mut sim = Sim::new(quota, T0);
    assert_eq!(sim.burst(6), 1);
    let check = sim.peek(Hits::PEEK);
    assert!(!check.admitted, "{check:?}");
    assert_eq!(check.retry_after, 100_000 * YEAR);
    sim.advance(1_000 * YEAR);
    assert_eq!(sim.burst(3), 0);
    sim.advance(99_000 * YEAR);
    assert_eq!(sim.burst(3), 1);
}
