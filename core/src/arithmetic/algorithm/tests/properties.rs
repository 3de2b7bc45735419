//! Properties over random traffic: random quotas, random clock moves (forward, and in some
//! properties backward), random hits. Each sequence is run like a store would: the state an
//! evaluation returns is kept when admitted (and, if the case says so, when rejected too).
//!
//! The bounds on admitted hits are checked exactly, with no tolerance:
//!   fixed window     ≤ L per epoch window (per stored window when the clock goes back)
//!   sliding log      ≤ L in any [a, a + W)
//!   sliding window   ≤ L per epoch window, ≤ 2L in any [a, a + W)
//!   gcra             ≤ C + ⌊Δ·L / W⌋ in any [a, a + Δ], also when the clock goes back
//! A clock that goes back can break the first three on real time (the sliding log forgets
//! entries it pruned at the later time); what holds instead is that going back never turns a
//! rejection into an admission, which is checked for every algorithm.

use proptest::prelude::*;

use super::*;
use crate::arithmetic::algorithm::{CheckRule, Overflow};

const CASES: u32 = 256;

#[derive(Debug, Clone, Copy)]
enum Advance {
    Stay,
    Micros(i64),
    /// k/32 of the window, ± a few µs (window edges).
    WindowFraction(i64, i64),
    /// k emission intervals W / L, ± a few µs.
    Emissions(i64, i64),
    Years(i64),
}

impl Advance {
    fn micros(self, quota: &Quota) -> Micros {
        let window = quota.window_micros();
        let interval = window / i64::from(quota.requests_per_unit.max(1));
        match self {
            Advance::Stay => 0,
            Advance::Micros(micros) => micros,
            Advance::WindowFraction(k, jitter) => {
                (window / 32).saturating_mul(k).saturating_add(jitter)
            }
            Advance::Emissions(k, jitter) => interval.saturating_mul(k).saturating_add(jitter),
            Advance::Years(years) => years * YEAR,
        }
    }
}

fn advance() -> impl Strategy<Value = Advance> {
    prop_oneof![
        3 => Just(Advance::Stay),
        2 => (-3i64..=3).prop_map(Advance::Micros),
        5 => (-12i64..=72, -2i64..=2).prop_map(|(k, j)| Advance::WindowFraction(k, j)),
        3 => (-2i64..=4, -2i64..=2).prop_map(|(k, j)| Advance::Emissions(k, j)),
        1 => (-1i64..=2).prop_map(Advance::Years),
    ]
}

fn charge_or_check() -> impl Strategy<Value = Hits> {
    prop_oneof![
        8 => Just(Hits::Charge(1)),
        3 => (0u64..=6).prop_map(Hits::Charge),
        2 => Just(Hits::PEEK),
        1 => Just(Hits::CheckOnly(CheckRule::WithinLimit)),
        1 => Just(Hits::Charge(u64::MAX)),
    ]
}

fn any_hits() -> impl Strategy<Value = Hits> {
    prop_oneof![
        6 => charge_or_check(),
        2 => (0u64..=6).prop_map(Hits::Refund),
        1 => Just(Hits::Refund(u64::MAX)),
    ]
}

fn small_quota() -> impl Strategy<Value = Quota> {
    (
        proptest::sample::select(Algorithm::ALL.to_vec()),
        prop_oneof![1 => Just(0u32), 8 => 1u32..=8],
        prop_oneof![Just(Unit::Second), Just(Unit::Minute)],
        1u32..=3,
        proptest::option::of(0u32..=8),
    )
        .prop_map(|(algorithm, limit, unit, multiplier, burst)| Quota {
            requests_per_unit: limit,
            unit,
            unit_multiplier: multiplier,
            algorithm,
            burst,
            calendar_months: false,
            overflow: Overflow::Refuse,
            counting: None,
            queue: None,
        })
}

/// Any quota, MONTH limits with calendar months too (any number of them).
fn wide_quota() -> impl Strategy<Value = Quota> {
    (
        proptest::sample::select(Algorithm::ALL.to_vec()),
        prop_oneof![Just(0u32), 1u32..=20, Just(u32::MAX), any::<u32>()],
        proptest::sample::select(Unit::ALL.to_vec()),
        prop_oneof![Just(0u32), 1u32..=3, Just(u32::MAX), any::<u32>()],
        proptest::option::of(prop_oneof![0u32..=20, Just(u32::MAX)]),
        any::<bool>(),
    )
        .prop_map(
            |(algorithm, limit, unit, multiplier, burst, calendar)| Quota {
                requests_per_unit: limit,
                unit,
                unit_multiplier: multiplier,
                algorithm,
                burst,
                calendar_months: calendar && unit == Unit::Month,
                overflow: Overflow::Refuse,
                counting: None,
                queue: None,
            },
        )
}

/// A small MONTH limit of fixed or sliding windows in calendar months (1 to 3 of them).
fn calendar_quota() -> impl Strategy<Value = Quota> {
    (
        prop_oneof![Just(Algorithm::FixedWindow), Just(Algorithm::SlidingWindow)],
        prop_oneof![1 => Just(0u32), 8 => 1u32..=8],
        1u32..=3,
    )
        .prop_map(|(algorithm, limit, multiplier)| {
            Quota::new(limit, Unit::Month)
                .with_algorithm(algorithm)
                .with_multiplier(multiplier)
                .with_calendar_months(true)
        })
}

/// Near the end of a month of every length, and of a year: Feb 2027 (28 days), Feb 2028 (29),
/// April 2027 (30), January 2027 (31), December 2026.
fn month_end_start() -> impl Strategy<Value = Micros> {
    use crate::ground::calendar::dates::{FEB_2027, JAN_2027, MAR_2027, MAR_2028, MAY_2027};
    let next_firsts = [MAR_2027, MAR_2028, MAY_2027, FEB_2027, JAN_2027];
    (
        proptest::sample::select(next_firsts.to_vec()),
        -2 * 3_600 * SECOND..SECOND,
    )
        .prop_map(|(first, offset)| first + offset)
}

/// Where a sequence starts: anywhere within an hour after T0, so windows fall anywhere.
fn start() -> impl Strategy<Value = Micros> {
    (0i64..3_600 * SECOND).prop_map(|offset| T0 + offset)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Clock {
    Forward,
    BackAndForth,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Store {
    Admitted,
    Everything,
}

/// One evaluated request and the state it was evaluated against.
#[derive(Debug)]
struct Request {
    now: Micros,
    hits: Hits,
    before: Option<State>,
    evaluation: Evaluation,
}

impl Request {
    fn admitted_charge(&self) -> Option<u64> {
        match self.hits {
            Hits::Charge(n) if self.evaluation.admitted => Some(n),
            _ => None,
        }
    }
}

fn run(
    quota: &Quota,
    start: Micros,
    steps: &[(Advance, Hits)],
    clock: Clock,
    store: Store,
) -> Vec<Request> {
    let mut now = start;
    let mut state: Option<State> = None;
    let mut requests = Vec::with_capacity(steps.len());
    for &(advance, hits) in steps {
        let delta = advance.micros(quota);
        now = now.saturating_add(match clock {
            Clock::Forward => delta.max(0),
            Clock::BackAndForth => delta,
        });
        let evaluation = evaluate(quota, state.as_ref(), now, hits);
        let before = state.take();
        state = if evaluation.admitted || store == Store::Everything {
            Some(evaluation.next_state.clone())
        } else {
            before.clone()
        };
        requests.push(Request {
            now,
            hits,
            before,
            evaluation,
        });
    }
    requests
}

fn window_start(now: Micros, window: Micros) -> Micros {
    now - now.rem_euclid(window)
}

fn admitted_in(requests: &[Request], from: Micros, until_excluded: Micros) -> u64 {
    requests
        .iter()
        .filter(|request| (from..until_excluded).contains(&request.now))
        .filter_map(Request::admitted_charge)
        .sum()
}

/// At most L admitted in each window (epoch-aligned, or calendar months).
fn assert_per_window(quota: &Quota, requests: &[Request]) {
    for request in requests {
        let span = quota.tiling().holding(request.now);
        let admitted = admitted_in(requests, span.start, span.end);
        assert!(
            admitted <= u64::from(quota.requests_per_unit),
            "{admitted} admitted in the window {span:?}"
        );
    }
}

/// The shortest a window can be: W, or 28 days a calendar month.
fn shortest_window(quota: &Quota) -> Micros {
    match quota.tiling() {
        Tiling::Epoch { length } => length,
        Tiling::CalendarMonths { months } => 28 * 86_400 * SECOND * i64::from(months),
    }
}

/// At most `bound` admitted in any [a, a + W), W the shortest window.
fn assert_per_sliding_window(quota: &Quota, requests: &[Request], bound: u64) {
    let window = shortest_window(quota);
    for request in requests {
        let admitted = admitted_in(requests, request.now, request.now + window);
        assert!(
            admitted <= bound,
            "{admitted} admitted in the window from {}",
            request.now
        );
    }
}

fn assert_gcra_rate(quota: &Quota, requests: &[Request]) {
    let capacity = i128::from(quota.capacity());
    let limit = i128::from(quota.requests_per_unit);
    let window = i128::from(quota.window_micros());
    for from in requests {
        for until in requests.iter().filter(|r| r.now >= from.now) {
            let admitted = i128::from(admitted_in(requests, from.now, until.now + 1));
            let span = i128::from(until.now - from.now);
            let bound = if limit == 0 || capacity == 0 {
                0
            } else {
                capacity + span * limit / window
            };
            assert!(
                admitted <= bound,
                "{admitted} admitted in [{}, {}], bound {bound}",
                from.now,
                until.now
            );
        }
    }
}

/// Each window a fixed-window state counted in (the later one, when the clock went back).
fn assert_per_stored_window(quota: &Quota, requests: &[Request]) {
    let mut counted: std::collections::HashMap<Micros, u64> = Default::default();
    for request in requests {
        if let (Some(n), State::FixedWindow { window_start, .. }) =
            (request.admitted_charge(), &request.evaluation.next_state)
        {
            assert!(*window_start >= window_start_of(quota, request.now));
            let total = counted.entry(*window_start).or_default();
            *total += n;
            assert!(*total <= u64::from(quota.requests_per_unit));
        }
    }
}

fn window_start_of(quota: &Quota, now: Micros) -> Micros {
    quota.tiling().holding(now).start
}

fn assert_bounded_by_definition(quota: &Quota, requests: &[Request]) {
    let limit = u64::from(quota.requests_per_unit);
    match quota.algorithm {
        Algorithm::FixedWindow => assert_per_window(quota, requests),
        Algorithm::SlidingLog => assert_per_sliding_window(quota, requests, limit),
        Algorithm::SlidingWindow => {
            assert_per_window(quota, requests);
            assert_per_sliding_window(quota, requests, 2 * limit);
        }
        Algorithm::TokenBucket | Algorithm::LeakyBucket => assert_gcra_rate(quota, requests),
    }
}

fn assert_well_formed(quota: &Quota, request: &Request) {
    let evaluation = &request.evaluation;
    let capacity = quota.capacity();
    assert!(evaluation.committed.remaining <= capacity);
    assert!(evaluation.uncommitted.remaining <= capacity);
    assert!(evaluation.committed.reset_after >= 0);
    assert!(evaluation.uncommitted.reset_after >= 0);
    assert_eq!(evaluation.admitted, evaluation.retry_after == 0);
    assert!(evaluation.retry_after >= 0);

    let before = request.before.as_ref();
    let check = evaluate(quota, before, request.now, Hits::PEEK);
    let one = evaluate(quota, before, request.now, Hits::Charge(1));
    assert_eq!(check.admitted, one.admitted);
    assert_eq!(check.committed, check.uncommitted);
    // The reference's check is never stricter than floodgate's, and takes nothing either.
    let within = evaluate(
        quota,
        before,
        request.now,
        Hits::CheckOnly(CheckRule::WithinLimit),
    );
    assert!(within.admitted || !check.admitted);
    assert_eq!(within.next_state, check.next_state);
    assert_eq!(within.committed, within.uncommitted);
    assert_eq!(evaluation.uncommitted, check.uncommitted);
    match request.hits {
        Hits::Refund(_) => assert!(evaluation.admitted),
        Hits::CheckOnly(_) => {}
        Hits::Charge(_) if evaluation.admitted => {}
        Hits::Charge(_) => assert_changes_nothing(quota, request, &check),
    }
}

/// A rejected charge leaves the counter as it was: same state as a check, and the stored
/// `next_state` answers every later question as the state before did.
fn assert_changes_nothing(quota: &Quota, request: &Request, check: &Evaluation) {
    let evaluation = &request.evaluation;
    assert_eq!(evaluation.next_state, check.next_state);
    assert_eq!(evaluation.committed, evaluation.uncommitted);
    assert_eq!(evaluation.expires_at, check.expires_at);
    for probe in [Hits::Charge(1), Hits::Charge(2), Hits::PEEK] {
        let from_before = evaluate(quota, request.before.as_ref(), request.now, probe);
        let from_next = evaluate(quota, Some(&evaluation.next_state), request.now, probe);
        assert_eq!(from_before, from_next, "{probe:?}");
    }
}

/// From `expires_at` on, the stored state means the same as no state at all.
fn assert_expires(quota: &Quota, request: &Request) {
    let evaluation = &request.evaluation;
    for at in [evaluation.expires_at, evaluation.expires_at + 7 * SECOND] {
        let at = at.max(request.now);
        for probe in [Hits::Charge(1), Hits::PEEK, Hits::Refund(1)] {
            let stored = evaluate(quota, Some(&evaluation.next_state), at, probe);
            let fresh = evaluate(quota, None, at, probe);
            assert_eq!(stored, fresh, "at {at} for {probe:?}");
        }
    }
}

fn assert_refunds_stop_at_fresh(quota: &Quota, request: &Request) {
    let next = Some(&request.evaluation.next_state);
    let refund = evaluate(quota, next, request.now, Hits::Refund(u64::MAX));
    let fresh = evaluate(quota, None, request.now, Hits::PEEK);
    assert_eq!(refund.committed.remaining, fresh.uncommitted.remaining);
}

/// A rejection stays a rejection when the clock then goes back.
fn assert_no_capacity_in_the_past(quota: &Quota, request: &Request) {
    if request.evaluation.admitted {
        return;
    }
    let window = quota.window_micros();
    for back in [1, window / 3, window, 3 * window + 1] {
        let earlier = request.now - back;
        let with_before = evaluate(quota, request.before.as_ref(), earlier, request.hits);
        let with_next = evaluate(
            quota,
            Some(&request.evaluation.next_state),
            earlier,
            request.hits,
        );
        assert!(!with_before.admitted, "{back} µs back, state before");
        assert!(!with_next.admitted, "{back} µs back, next state");
    }
}

fn fits_at_all(quota: &Quota, hits: u64) -> bool {
    let capacity = quota.capacity();
    let open = quota.requests_per_unit > 0 && capacity > 0;
    open && hits <= capacity
}

/// A rejected charge that can ever fit fits once `retry_after` has passed (with no other
/// traffic), and — for the exact algorithms — not a µs earlier.
fn assert_retry_after_is_exact(quota: &Quota, request: &Request) {
    let Hits::Charge(n) = request.hits else {
        return;
    };
    if request.evaluation.admitted || !fits_at_all(quota, n) {
        return;
    }
    let state = Some(&request.evaluation.next_state);
    let retry_at = request.now + request.evaluation.retry_after;
    assert!(evaluate(quota, state, retry_at, request.hits).admitted);
    assert!(!evaluate(quota, state, retry_at - 1, request.hits).admitted);
}

/// How full a stored counter says it is, against what the counter answers: exhausted exactly
/// while one hit does not fit, `exhausted_for` the first µs at which it does, `used` the share of
/// the capacity its snapshot reports; and with no traffic it only empties, so a store may keep
/// the answer until the counter is charged again.
fn assert_fullness_is_exact(quota: &Quota, request: &Request) {
    let measured = request.evaluation.fullness;
    let state = Some(&request.evaluation.next_state);
    let now = request.now;
    assert_eq!(measured, fullness(quota, state, now));
    let one_fits = evaluate(quota, state, now, Hits::Charge(1)).admitted;
    assert_eq!(measured.is_exhausted(), !one_fits, "{measured:?}");

    let remaining = evaluate(quota, state, now, Hits::PEEK)
        .uncommitted
        .remaining;
    let capacity = quota.capacity();
    let used = ((capacity - remaining) * u64::from(Fullness::ALL_USED))
        .checked_div(capacity)
        .map_or(Fullness::ALL_USED, |share| {
            u16::try_from(share).unwrap_or(Fullness::ALL_USED)
        });
    assert_eq!(measured.used, used, "{remaining} of {capacity} left");

    if let Some(exhausted_for) = measured.exhausted_for {
        assert!(exhausted_for >= 1);
        if fits_at_all(quota, 1) {
            let room_at = now + exhausted_for;
            assert!(evaluate(quota, state, room_at, Hits::Charge(1)).admitted);
            assert!(!evaluate(quota, state, room_at - 1, Hits::Charge(1)).admitted);
        }
    }
    let window = quota.window_micros();
    for later in [1, window / 7, window / 2, window, 2 * window + 1] {
        let then = fullness(quota, state, now + later);
        assert!(
            then.used <= measured.used,
            "{later} µs later: {then:?} after {measured:?}"
        );
        if !measured.is_exhausted() {
            assert!(!then.is_exhausted(), "{later} µs later: {then:?}");
        }
    }
}

proptest! {
    // Failures print their minimal input; nothing is written outside this directory.
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_traffic_gives_well_formed_evaluations(
        quota in wide_quota(),
        start in prop_oneof![start(), Just(0i64), Just(-T0)],
        steps in prop::collection::vec((advance(), any_hits()), 1..48),
        store_everything in any::<bool>(),
    ) {
        let store = if store_everything { Store::Everything } else { Store::Admitted };
        for request in run(&quota, start, &steps, Clock::BackAndForth, store) {
            assert_well_formed(&quota, &request);
        }
    }

    #[test]
    fn state_expires_and_refunds_stop_at_fresh(
        quota in small_quota(),
        start in start(),
        steps in prop::collection::vec((advance(), any_hits()), 1..48),
    ) {
        for request in run(&quota, start, &steps, Clock::BackAndForth, Store::Admitted) {
            assert_expires(&quota, &request);
            assert_refunds_stop_at_fresh(&quota, &request);
        }
    }

    #[test]
    fn admitted_hits_stay_within_the_definition(
        quota in small_quota(),
        start in start(),
        steps in prop::collection::vec((advance(), charge_or_check()), 1..48),
        store_everything in any::<bool>(),
    ) {
        let store = if store_everything { Store::Everything } else { Store::Admitted };
        let requests = run(&quota, start, &steps, Clock::Forward, store);
        assert_bounded_by_definition(&quota, &requests);
    }

    #[test]
    fn gcra_and_fixed_windows_stay_bounded_when_the_clock_goes_back(
        quota in small_quota(),
        start in start(),
        steps in prop::collection::vec((advance(), charge_or_check()), 1..48),
        store_everything in any::<bool>(),
    ) {
        let store = if store_everything { Store::Everything } else { Store::Admitted };
        let requests = run(&quota, start, &steps, Clock::BackAndForth, store);
        match quota.algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket => assert_gcra_rate(&quota, &requests),
            Algorithm::FixedWindow => assert_per_stored_window(&quota, &requests),
            Algorithm::SlidingWindow | Algorithm::SlidingLog => {}
        }
    }

    #[test]
    fn the_clock_going_back_never_frees_capacity(
        quota in small_quota(),
        start in start(),
        steps in prop::collection::vec((advance(), any_hits()), 1..48),
    ) {
        for request in run(&quota, start, &steps, Clock::BackAndForth, Store::Admitted) {
            assert_no_capacity_in_the_past(&quota, &request);
        }
    }

    #[test]
    fn retry_after_points_at_the_first_micro_that_fits(
        quota in small_quota(),
        start in start(),
        steps in prop::collection::vec((advance(), charge_or_check()), 1..48),
    ) {
        for request in run(&quota, start, &steps, Clock::Forward, Store::Admitted) {
            assert_retry_after_is_exact(&quota, &request);
        }
    }

    #[test]
    fn fullness_says_exactly_how_full_and_until_when(
        quota in small_quota(),
        start in start(),
        steps in prop::collection::vec((advance(), any_hits()), 1..48),
    ) {
        for request in run(&quota, start, &steps, Clock::Forward, Store::Admitted) {
            assert_fullness_is_exact(&quota, &request);
        }
    }

    /// Calendar months, around month ends of every length: the same properties as for epoch
    /// windows (the steps are fractions of a 30-day month, so they cross ends of all lengths).
    #[test]
    fn calendar_months_keep_every_property(
        quota in calendar_quota(),
        start in month_end_start(),
        steps in prop::collection::vec((advance(), any_hits()), 1..48),
        store_everything in any::<bool>(),
    ) {
        let store = if store_everything { Store::Everything } else { Store::Admitted };
        for request in run(&quota, start, &steps, Clock::BackAndForth, store) {
            assert_well_formed(&quota, &request);
            assert_expires(&quota, &request);
            assert_refunds_stop_at_fresh(&quota, &request);
            assert_no_capacity_in_the_past(&quota, &request);
        }
        for request in run(&quota, start, &steps, Clock::Forward, Store::Admitted) {
            assert_retry_after_is_exact(&quota, &request);
            assert_fullness_is_exact(&quota, &request);
        }
        let charges: Vec<(Advance, Hits)> = steps
            .iter()
            .map(|&(advance, hits)| match hits {
                Hits::Refund(_) => (advance, Hits::PEEK),
                other => (advance, other),
            })
            .collect();
        let forward = run(&quota, start, &charges, Clock::Forward, store);
        assert_bounded_by_definition(&quota, &forward);
        if quota.algorithm == Algorithm::FixedWindow {
            let back_and_forth = run(&quota, start, &charges, Clock::BackAndForth, store);
            assert_per_stored_window(&quota, &back_and_forth);
        }
    }
}

/// A sliding window counter with `previous` and `current` given as percentages of the limit.
fn sliding_window_at(quota: &Quota, previous: u64, current: u64, progress: f64) -> (State, Micros) {
    let window = quota.window_micros();
    let limit = u64::from(quota.requests_per_unit);
    let start = window_start(T0, window);
    let state = State::SlidingWindow {
        window_start: start,
        previous: u32::try_from(limit * previous / 100).unwrap_or(u32::MAX),
        current: u32::try_from(limit * current / 100).unwrap_or(u32::MAX),
    };
    (state, start + (progress * window as f64) as Micros)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The float estimate cannot resolve 1 µs in windows of decades; up to a year it can.
    #[test]
    fn sliding_window_retry_is_exact_for_large_limits_and_long_windows(
        limit in prop_oneof![1u32..=20, 1u32..=10_000, 1u32..=4_000_000],
        unit in proptest::sample::select(Unit::ALL.to_vec()),
        previous in 0u64..=200,
        current in 0u64..=100,
        progress in 0.0f64..1.0,
        hits in 1u64..=5,
    ) {
        let quota = quota(Algorithm::SlidingWindow, limit, unit);
        let (state, now) = sliding_window_at(&quota, previous, current, progress);
        let evaluation = evaluate(&quota, Some(&state), now, Hits::Charge(hits));
        let request = Request { now, hits: Hits::Charge(hits), before: Some(state), evaluation };
        assert_retry_after_is_exact(&quota, &request);
    }
}
