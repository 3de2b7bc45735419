//! Priority classes on every algorithm: a class leaves its reserve to the classes above it,
//! classes are refused lowest first, the highest class can use the whole capacity, and the
//! retry time of a refused class is when its hit fits above its reserve.

use proptest::prelude::*;

use super::*;
use crate::arithmetic::algorithm::{evaluate_reserving, Share};

fn percent(value: u32) -> Share {
    Share::from_millionths(value * 10_000).unwrap_or(Share::FULL)
}

/// A quota of every algorithm whose capacity is 10 (leaky bucket: burst 9).
fn capacity_ten(algorithm: Algorithm) -> Quota {
    let quota = quota(algorithm, 10, Unit::Minute);
    match algorithm {
        Algorithm::TokenBucket => quota.with_burst(10),
        Algorithm::LeakyBucket => quota.with_burst(9),
        _ => quota,
    }
}

/// One shared counter hit by several classes, stored as a store would.
struct Shared {
    quota: Quota,
    state: Option<State>,
    now: Micros,
}

impl Shared {
    fn new(quota: Quota) -> Self {
        Self {
            quota,
            state: None,
            now: T0,
        }
    }

    fn hit(&mut self, share: Share, hits: Hits) -> Evaluation {
        let reserve = self.quota.reserve(share);
        let evaluation =
            evaluate_reserving(&self.quota, self.state.as_ref(), self.now, hits, reserve);
        if evaluation.admitted {
            self.state = Some(evaluation.next_state.clone());
        }
        evaluation
    }

    /// How many of `attempts` single hits of a class are admitted now.
    fn admitted(&mut self, share: Share, attempts: usize) -> usize {
        (0..attempts)
            .filter(|_| self.hit(share, Hits::Charge(1)).admitted)
            .count()
    }
}

#[test]
fn low_never_takes_the_last_half_and_critical_takes_the_rest() {
    for algorithm in Algorithm::ALL {
        let mut counter = Shared::new(capacity_ten(algorithm));
        assert_eq!(counter.admitted(percent(50), 20), 5, "{algorithm}: low");
        let refused = counter.hit(percent(50), Hits::Charge(1));
        assert!(!refused.admitted);
        assert_eq!(refused.uncommitted.remaining, 5, "{algorithm}: kept back");
        assert_eq!(counter.admitted(percent(80), 20), 3, "{algorithm}: normal");
        assert_eq!(
            counter.admitted(percent(100), 20),
            2,
            "{algorithm}: critical"
        );
        for share in [percent(50), percent(80), percent(100)] {
            assert!(!counter.hit(share, Hits::PEEK).admitted, "{algorithm}");
        }
    }
}

#[test]
fn under_mixed_load_low_is_shed_first_then_normal_then_critical() {
    for algorithm in Algorithm::ALL {
        let mut counter = Shared::new(capacity_ten(algorithm));
        let classes = [percent(50), percent(80), percent(100)];
        // Round after round, each class asks once; note the round each is first refused.
        let mut first_refused = [None; 3];
        for round in 0..10 {
            for (class, share) in classes.iter().enumerate() {
                if !counter.hit(*share, Hits::Charge(1)).admitted {
                    first_refused[class].get_or_insert(round);
                }
            }
        }
        let [low, normal, critical] = first_refused.map(|round| round.unwrap_or(usize::MAX));
        assert!(
            low < normal && normal < critical && critical < usize::MAX,
            "{algorithm}: {first_refused:?}"
        );
    }
}

#[test]
fn a_refused_class_retries_when_its_headroom_frees_not_when_the_counter_has_one_unit() {
    // Token bucket of 10 per minute: one unit refills every 6 s.
    let mut counter = Shared::new(capacity_ten(Algorithm::TokenBucket));
    assert_eq!(counter.admitted(percent(100), 10), 10);
    let critical = counter.hit(percent(100), Hits::Charge(1));
    let low = counter.hit(percent(50), Hits::Charge(1));
    assert_eq!(critical.retry_after, 6 * SECOND);
    // Low needs 1 unit above a reserve of 5: six units, 36 s.
    assert_eq!(low.retry_after, 36 * SECOND);
    counter.now += low.retry_after - 1;
    assert!(!counter.hit(percent(50), Hits::PEEK).admitted);
    counter.now += 1;
    assert!(counter.hit(percent(50), Hits::Charge(1)).admitted);
}

#[test]
fn hits_beyond_a_class_share_never_fit_and_wait_for_the_reset() {
    let mut counter = Shared::new(capacity_ten(Algorithm::SlidingLog));
    let six = counter.hit(percent(50), Hits::Charge(6));
    assert!(!six.admitted);
    assert_eq!(six.retry_after, six.uncommitted.reset_after.max(1));
    assert!(counter.hit(percent(100), Hits::Charge(6)).admitted);
}

#[test]
fn refunds_ignore_the_reserve() {
    for algorithm in Algorithm::ALL {
        let mut counter = Shared::new(capacity_ten(algorithm));
        counter.admitted(percent(100), 10);
        let state = counter.state.clone();
        let plain = evaluate(&counter.quota, state.as_ref(), T0, Hits::Refund(3));
        let low = counter.hit(percent(50), Hits::Refund(3));
        assert_eq!(low, plain, "{algorithm}");
    }
}

fn share() -> impl Strategy<Value = Share> {
    prop_oneof![
        2 => Just(Share::FULL),
        2 => (1u32..=100).prop_map(percent),
        1 => (1u32..=1_000_000).prop_map(|m| Share::from_millionths(m).unwrap_or(Share::FULL)),
    ]
}

fn small_quota() -> impl Strategy<Value = Quota> {
    (
        proptest::sample::select(Algorithm::ALL.to_vec()),
        1u32..=12,
        prop_oneof![Just(Unit::Second), Just(Unit::Minute)],
        proptest::option::of(1u32..=12),
    )
        .prop_map(|(algorithm, limit, unit, burst)| {
            let quota = quota(algorithm, limit, unit);
            match burst {
                Some(burst) if algorithm.accepts_burst() => quota.with_burst(burst),
                _ => quota,
            }
        })
}

fn hits() -> impl Strategy<Value = Hits> {
    prop_oneof![
        8 => Just(Hits::Charge(1)),
        3 => (1u64..=4).prop_map(Hits::Charge),
        2 => Just(Hits::PEEK),
        1 => (1u64..=3).prop_map(Hits::Refund),
    ]
}

/// 0 to 5 windows ahead in small steps, so windows turn and buckets refill.
fn step(quota: &Quota, fraction: i64) -> Micros {
    quota.window_micros() / 16 * fraction
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Whatever the mix of classes and the traffic before, at every instant: a class admits
    /// only hits that leave its reserve, a class with a larger share admits whatever a smaller
    /// one admits, and a refused hit fits at its retry time and not a µs before.
    #[test]
    fn classes_keep_their_reserves_and_shed_in_order(
        quota in small_quota(),
        steps in prop::collection::vec((0i64..=6, share(), hits()), 1..40),
        probe in share(),
    ) {
        let mut counter = Shared::new(quota.clone());
        for (fraction, class, hits) in steps {
            counter.now += step(&quota, fraction);
            let reserve = quota.reserve(class);
            let before = counter.state.clone();
            let evaluation = counter.hit(class, hits);

            if let (Hits::Charge(_), true) = (hits, evaluation.admitted) {
                // The sliding window compares in doubles; its remaining is floored from
                // another sum, which may land one below at the boundary.
                let slack = u64::from(quota.algorithm == Algorithm::SlidingWindow);
                prop_assert!(
                    evaluation.committed.remaining + slack >= reserve,
                    "left {} of a reserve of {reserve}", evaluation.committed.remaining
                );
            }

            let (low, high) = if probe <= class { (probe, class) } else { (class, probe) };
            let ask = |share: Share| {
                evaluate_reserving(&quota, before.as_ref(), counter.now, hits, quota.reserve(share))
            };
            if ask(low).admitted {
                prop_assert!(ask(high).admitted, "{low} admitted but {high} refused");
            }

            if let (Hits::Charge(n), false) = (hits, evaluation.admitted) {
                if n.saturating_add(reserve) <= quota.capacity() {
                    let at = counter.now + evaluation.retry_after;
                    let fits = |now: Micros| {
                        evaluate_reserving(&quota, before.as_ref(), now, hits, reserve).admitted
                    };
                    prop_assert!(fits(at), "not admitted at its retry time");
                    prop_assert!(!fits(at - 1), "admitted a µs before its retry time");
                }
            }
        }
    }

    /// Traffic of one class alone never uses its reserve: the counter never reports less than
    /// the reserve remaining (exactly, for the integer algorithms).
    #[test]
    fn one_class_alone_never_touches_its_reserve(
        quota in small_quota(),
        class in share(),
        steps in prop::collection::vec((0i64..=6, hits()), 1..40),
    ) {
        prop_assume!(quota.algorithm != Algorithm::SlidingWindow);
        let reserve = quota.reserve(class);
        let mut counter = Shared::new(quota.clone());
        for (fraction, hits) in steps {
            counter.now += step(&quota, fraction);
            let evaluation = counter.hit(class, hits);
            prop_assert!(evaluation.committed.remaining >= reserve);
            prop_assert!(evaluation.uncommitted.remaining >= reserve);
        }
    }
}
