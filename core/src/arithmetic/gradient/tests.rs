use proptest::prelude::*;

use super::*;
use crate::arithmetic::aimd::{self, Control, SignalSource, SignalUnit, DEFAULT_INTERVAL};

const SERVICE: Micros = 100_000;

fn settings(min: u32, max: u32, slo_ms: f64) -> AdaptiveSettings {
    AdaptiveSettings {
        min,
        max,
        interval: DEFAULT_INTERVAL,
        slo_ms,
        signal_unit: SignalUnit::Milliseconds,
        signal: SignalSource::Leases,
        errors: None,
        control: Control::Gradient { probe_every: 30 },
    }
}

/// A backend of `pool` workers, each busy `SERVICE` per request, behind more clients than
/// any limit: `limit` leases in flight, each held SERVICE × max(1, limit / pool) (Little's
/// law for a closed loop), as many released as the pool serves in a second.
fn backend(pool: u32, limit: u32) -> LeaseSample {
    let held = SERVICE * i64::from(limit.max(pool)) / i64::from(pool);
    LeaseSample {
        count: pool * 10,
        median: held,
        p95: held + held / 20,
        trimmed_mean: held,
        peak_in_flight: limit,
    }
}

/// Steps `intervals` times against `backend(pool, …)`; the limits after each step.
fn run(
    gradient: &mut Gradient,
    settings: &AdaptiveSettings,
    start: u32,
    pool: u32,
    intervals: usize,
) -> Vec<u32> {
    let mut limit = start;
    let mut limits = Vec::new();
    for _ in 0..intervals {
        limit = gradient.step(settings, limit, &backend(pool, limit)).limit;
        limits.push(limit);
    }
    limits
}

#[test]
fn the_first_steps_probe_at_min_then_go_back() {
    let settings = settings(2, 100, 1000.0);
    let mut gradient = Gradient::new(30);
    let first = gradient.step(&settings, 10, &LeaseSample::default());
    assert_eq!(
        (first.limit, first.change),
        (2, Change::Decrease),
        "{}",
        first.why
    );
    assert!(gradient.probing());
    let draining = gradient.step(&settings, 2, &backend(8, 10));
    assert_eq!((draining.limit, draining.change), (2, Change::Hold));
    let measured = gradient.step(&settings, 2, &backend(8, 2));
    assert_eq!(measured.limit, 10, "{}", measured.why);
    assert_eq!(gradient.base(), Some(SERVICE));
    assert!(!gradient.probing());
}

#[test]
fn a_probe_with_too_few_releases_measures_on_then_gives_up() {
    let settings = settings(2, 100, 1000.0);
    let mut gradient = Gradient::new(30);
    gradient.step(&settings, 10, &LeaseSample::default());
    gradient.step(&settings, 2, &LeaseSample::default());
    let few = LeaseSample {
        count: MIN_PROBE_SAMPLES - 1,
        ..backend(8, 2)
    };
    for _ in 1..MAX_PROBE_INTERVALS {
        assert_eq!(gradient.step(&settings, 2, &few).limit, 2);
    }
    let gave_up = gradient.step(&settings, 2, &few);
    assert_eq!(gave_up.limit, 10);
    assert!(gave_up.why.starts_with("probe gave up"), "{}", gave_up.why);
    assert_eq!(gradient.base(), None);
    // No base: the next step probes again.
    assert_eq!(gradient.step(&settings, 10, &backend(8, 10)).limit, 2);
}

#[test]
fn the_limit_settles_near_the_pool_and_follows_when_it_grows() {
    let settings = settings(2, 200, 300.0);
    let mut gradient = Gradient::new(1000);
    let limits = run(&mut gradient, &settings, 4, 8, 40);
    for limit in &limits[20..] {
        assert!((8..=10).contains(limit), "{limits:?}");
    }
    let grown = run(&mut gradient, &settings, limits[39], 16, 40);
    for limit in &grown[20..] {
        assert!((16..=20).contains(limit), "{grown:?}");
    }
    let shrunk = run(&mut gradient, &settings, grown[39], 4, 20);
    for limit in &shrunk[10..] {
        assert!((4..=5).contains(limit), "{shrunk:?}");
    }
}

#[test]
fn aimd_on_the_p95_settles_where_the_queue_reaches_the_slo_instead() {
    // The reason concurrency rules default to the gradient: with the SLO at 3× the service
    // time, AIMD lets the queue upstream grow until the p95 passes 0.7 × the SLO, where it
    // stops growing: twice the pool or more in flight, each lease waiting a service time.
    let settings = AdaptiveSettings {
        control: Control::Aimd,
        ..settings(2, 200, 300.0)
    };
    let mut limit = 8;
    for _ in 0..200 {
        let p95 = backend(8, limit).p95 as f64 / 1000.0;
        limit = aimd::step(&settings, limit, &Ok(p95), &Err(String::new())).limit;
    }
    assert!((16..=23).contains(&limit), "{limit}");
}

#[test]
fn probes_come_back_every_probe_every_intervals() {
    let settings = settings(2, 200, 1000.0);
    let mut gradient = Gradient::new(10);
    let limits = run(&mut gradient, &settings, 8, 8, 60);
    let probes = limits.windows(2).filter(|w| w[0] > 2 && w[1] == 2).count();
    // The first probe at once, then one each 10 steering intervals and 3 probe intervals.
    assert!((4..=5).contains(&probes), "{probes}: {limits:?}");
}

#[test]
fn a_p95_above_the_slo_lowers_the_limit_whatever_the_gradient() {
    let settings = settings(2, 200, 150.0);
    let mut gradient = Gradient::new(1000);
    run(&mut gradient, &settings, 8, 8, 3);
    let slow = LeaseSample {
        count: 50,
        median: SERVICE,
        p95: 200_000,
        trimmed_mean: SERVICE,
        peak_in_flight: 20,
    };
    let step = gradient.step(&settings, 20, &slow);
    assert_eq!((step.limit, step.change), (18, Change::Decrease));
    assert_eq!(step.why, "p95 200ms > slo 150ms");
    assert_eq!(gradient.step(&settings, 2, &slow).limit, 2);
}

#[test]
fn an_idle_rule_does_not_grow_and_a_quiet_interval_holds() {
    let settings = settings(2, 200, 1000.0);
    let mut gradient = Gradient::new(1000);
    run(&mut gradient, &settings, 8, 8, 3);
    let idle = LeaseSample {
        peak_in_flight: 3,
        ..backend(64, 10)
    };
    let step = gradient.step(&settings, 10, &idle);
    assert_eq!(
        (step.limit, step.change),
        (10, Change::Hold),
        "{}",
        step.why
    );
    assert!(step.why.contains("no room sought"), "{}", step.why);
    let nothing = gradient.step(&settings, 10, &LeaseSample::default());
    assert_eq!((nothing.limit, nothing.change), (10, Change::Hold));
}

#[test]
fn one_step_takes_at_most_a_quarter_off() {
    let settings = settings(2, 200, 100_000.0);
    let mut gradient = Gradient::new(1000);
    run(&mut gradient, &settings, 8, 8, 3);
    let queued = LeaseSample {
        count: 50,
        median: SERVICE * 100,
        p95: SERVICE * 100,
        trimmed_mean: SERVICE * 100,
        peak_in_flight: 100,
    };
    // Three quarters of 100, plus the headroom of a busy rule.
    assert_eq!(gradient.step(&settings, 100, &queued).limit, 78);
}

/// A pool that hands a free worker to whoever asks first: of 11 leases over 8 workers most
/// are served at once (the median is the service time) and a few wait long. The mean still
/// says 11/8 × the service time (Little's law), so the limit comes down to the pool.
#[test]
fn a_queue_the_median_hides_is_steered_by_the_mean() {
    let settings = settings(2, 200, 100_000.0);
    let mut gradient = Gradient::new(1000);
    run(&mut gradient, &settings, 8, 8, 3);
    let unfair = LeaseSample {
        count: 40,
        median: SERVICE,
        p95: SERVICE * 4,
        trimmed_mean: SERVICE * 11 / 8,
        peak_in_flight: 11,
    };
    let step = gradient.step(&settings, 11, &unfair);
    assert_eq!(
        (step.limit, step.change),
        (9, Change::Decrease),
        "{}",
        step.why
    );
    assert!(step.why.starts_with("mean 138ms"), "{}", step.why);
}

#[test]
fn samples_take_the_median_the_95th_percentile_and_the_trimmed_mean() {
    let mut held: Vec<Micros> = (1..=100).rev().collect();
    let sample = LeaseSample::of(&mut held, 7);
    assert_eq!(
        (
            sample.count,
            sample.median,
            sample.p95,
            sample.trimmed_mean,
            sample.peak_in_flight
        ),
        // The mean of 1..=95: the slowest 5 left out.
        (100, 50, 95, 48, 7)
    );
    let mut stalled: Vec<Micros> = [vec![250; 19], vec![60_000]].concat();
    assert_eq!(LeaseSample::of(&mut stalled, 1).trimmed_mean, 250);
    assert_eq!(LeaseSample::of(&mut [], 0), LeaseSample::default());
    assert_eq!(LeaseSample::of(&mut [42], 1).p95, 42);
}

#[test]
fn headroom_grows_with_the_square_root() {
    let room: Vec<u32> = [1, 8, 15, 16, 100, 10_000].map(headroom).to_vec();
    assert_eq!(room, vec![1, 1, 1, 1, 3, 33]);
}

fn sample() -> impl Strategy<Value = LeaseSample> {
    (0u32..500, 0i64..10_000_000, 0i64..10_000_000, 0u32..20_000).prop_map(
        |(count, median, extra, peak_in_flight)| LeaseSample {
            count,
            median,
            p95: median + extra,
            trimmed_mean: median + extra / 2,
            peak_in_flight,
        },
    )
}

proptest! {
    #[test]
    fn every_step_stays_within_the_bounds(
        min in 1u32..100,
        span in 0u32..10_000,
        start in any::<u32>(),
        samples in proptest::collection::vec(sample(), 1..80),
        probe_every in 0u32..20,
    ) {
        let max = min.saturating_add(span);
        let settings = settings(min, max, 250.0);
        let mut gradient = Gradient::new(probe_every);
        let mut limit = start;
        for sample in &samples {
            let step = gradient.step(&settings, limit, sample);
            prop_assert!(step.limit >= min && step.limit <= max, "{step:?}");
            let from = limit.clamp(min, max);
            match step.change {
                Change::Decrease => prop_assert!(step.limit < from),
                Change::Increase => prop_assert!(step.limit > from),
                Change::Hold => prop_assert_eq!(step.limit, from),
            }
            limit = step.limit;
        }
    }
}
