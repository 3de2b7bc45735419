//! `algorithms`: each algorithm's arithmetic (`core::arithmetic::algorithm`) under random quotas, clocks
//! and hits, the evaluations run as a store runs them: the next state kept when a charge is
//! admitted (and, recording refused hits, when it is not), and sometimes forgotten once it
//! expired.
//!
//! Must hold at every step (debug assertions and overflow checks on, as `cargo afl` builds):
//! no panic; both snapshots' `remaining` within the capacity and `reset_after` ≥ 0; a refund
//! is admitted; an admitted charge fits the capacity and has no retry, a refusal a retry ≥ 1;
//! `fullness` says exhausted exactly when a check of the next state at the same instant is
//! refused; and past `expires_at` the next state decides as no state.
//!
//! Over a sequence whose clock never goes back and that refunds nothing, the admitted hits
//! keep their algorithm's bound, exactly:
//!   fixed window     ≤ L per window
//!   sliding window   ≤ L per window, ≤ 2L in any [a, a + W)
//!   sliding log      ≤ L in any [a, a + W)
//!   token, leaky     ≤ C + ⌊Δ·L / W⌋ in any [a, a + Δ]

use floodgate::core::arithmetic::algorithm::{
    evaluate_counter, Algorithm, CheckRule, Evaluation, Hits, Quota, Refused, Share, State,
};
use floodgate::core::ground::time::{Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;

use crate::input::Input;

const MAX_STEPS: usize = 64;

/// The clock stays within ±2^60 µs (36 000 years) of the epoch: far past any real clock, and
/// far enough from `i64::MAX` that the end of time (where every sum saturates) is not tested.
const CLOCK_RANGE: Micros = 1 << 60;

/// 2025-11-24: realistic clocks start here.
const NOW: Micros = 1_764_000_000 * MICROS_PER_SECOND;

pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let quota = quota(&mut input);
    let refused = input.pick(&[Refused::TakeNothing, Refused::Recorded]);
    let share = share(&mut input);
    let reserve = quota.reserve(share);
    let mut now = start(&mut input);
    let mut state: Option<State> = None;
    let mut admitted: Vec<(Micros, u64)> = Vec::new();
    let (mut monotonic, mut refunds) = (true, false);
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        let step = step(&mut input, &quota);
        monotonic &= step >= 0;
        now = now.saturating_add(step).clamp(-CLOCK_RANGE, CLOCK_RANGE);
        let hits = hits(&mut input);
        refunds |= matches!(hits, Hits::Refund(_));
        let forget = input.bool();
        let evaluation = evaluate_counter(&quota, state.as_ref(), now, (hits, reserve), refused);
        check_step(&quota, now, hits, &evaluation);
        if let (true, Hits::Charge(n)) = (evaluation.admitted, hits) {
            admitted.push((now, n));
        }
        let keep = evaluation.admitted || refused == Refused::Recorded;
        if keep && !hits.is_check() {
            state = Some(evaluation.next_state.clone());
        }
        if forget && now > evaluation.expires_at {
            state = None;
        }
    }
    if monotonic && !refunds {
        check_bounds(&quota, &admitted);
    }
}

fn quota(input: &mut Input) -> Quota {
    let algorithm = input.pick(&Algorithm::ALL);
    let unit = input.pick(&Unit::ALL);
    let limit = match input.u8() % 4 {
        0 => input.u32(),
        1 => 0,
        _ => u32::from(input.u8() % 16),
    };
    let multiplier = match input.u8() % 4 {
        0 => input.u32(),
        _ => u32::from(input.u8() % 4),
    };
    let mut quota = Quota::new(limit, unit)
        .with_algorithm(algorithm)
        .with_multiplier(multiplier)
        .with_calendar_months(input.bool());
    if algorithm == Algorithm::SlidingLog {
        // The configuration refuses more (`SLIDING_LOG_MAX_LIMIT`): its memory grows with it.
        quota.requests_per_unit %= 64;
    }
    if algorithm.accepts_burst() {
        quota.burst = match input.u8() % 4 {
            0 => None,
            1 => Some(input.u32()),
            _ => Some(u32::from(input.u8() % 16)),
        };
    }
    quota
}

fn share(input: &mut Input) -> Share {
    match input.u8() % 4 {
        0 => Share::from_millionths(input.u32() % 1_000_001).unwrap_or(Share::FULL),
        1 => Share::from_millionths(500_000).unwrap_or(Share::FULL),
        _ => Share::FULL,
    }
}

fn start(input: &mut Input) -> Micros {
    match input.u8() % 4 {
        // Anywhere within ±2^60 µs of the epoch.
        0 => (input.u64() >> 3) as i64 - CLOCK_RANGE,
        1 => i64::from(input.u32()),
        _ => NOW + i64::from(input.u32()),
    }
}

/// How far the clock moves: not at all, a few µs either way, fractions of the window, emission
/// intervals (W / L), or anything.
fn step(input: &mut Input, quota: &Quota) -> Micros {
    let window = quota.window_micros();
    let interval = window / i64::from(quota.requests_per_unit.max(1));
    let jitter = i64::from(input.u8() % 5) - 2;
    match input.u8() % 8 {
        0 | 1 => 0,
        2 => jitter,
        3 | 4 => (window / 32)
            .saturating_mul(i64::from(input.u8() % 80))
            .saturating_add(jitter),
        5 => interval
            .saturating_mul(i64::from(input.u8() % 8))
            .saturating_add(jitter),
        6 => -(window / 32).saturating_mul(i64::from(input.u8() % 16)),
        _ => i64::from(input.u32() as i32),
    }
}

fn hits(input: &mut Input) -> Hits {
    match input.u8() % 16 {
        0..=6 => Hits::Charge(1),
        7..=9 => Hits::Charge(u64::from(input.u8() % 8)),
        10 => Hits::Charge(input.u64()),
        11 => Hits::PEEK,
        12 => Hits::CheckOnly(CheckRule::WithinLimit),
        13 | 14 => Hits::Refund(u64::from(input.u8() % 8)),
        _ => Hits::Refund(input.u64()),
    }
}

fn check_step(quota: &Quota, now: Micros, hits: Hits, evaluation: &Evaluation) {
    let capacity = quota.capacity();
    let what = || format!("{quota:?} at {now} with {hits:?}: {evaluation:?}");
    for snapshot in [&evaluation.committed, &evaluation.uncommitted] {
        assert!(
            snapshot.remaining <= capacity,
            "remaining over capacity {capacity}: {}",
            what()
        );
        assert!(
            snapshot.reset_after >= 0,
            "negative reset_after: {}",
            what()
        );
    }
    match hits {
        Hits::Refund(_) => assert!(evaluation.admitted, "a refused refund: {}", what()),
        Hits::Charge(n) if evaluation.admitted => {
            assert!(
                n <= capacity,
                "admitted beyond the capacity {capacity}: {}",
                what()
            );
        }
        _ => {}
    }
    if evaluation.admitted {
        assert_eq!(
            evaluation.retry_after,
            0,
            "admitted with a retry: {}",
            what()
        );
    } else {
        assert!(
            evaluation.retry_after >= 1,
            "refused without a retry: {}",
            what()
        );
    }
    let next = Some(&evaluation.next_state);
    let check = check_at(quota, next, now);
    assert_eq!(
        evaluation.fullness.exhausted_for.is_some(),
        !check.admitted,
        "fullness disagrees with a check of the next state ({check:?}): {}",
        what()
    );
    if let Some(exhausted_for) = evaluation.fullness.exhausted_for {
        assert!(
            exhausted_for >= 1,
            "exhausted for {exhausted_for}: {}",
            what()
        );
    }
    let after = evaluation.expires_at.saturating_add(1);
    if after > now && after < Micros::MAX / 4 {
        let (kept, fresh) = (check_at(quota, next, after), check_at(quota, None, after));
        assert_eq!(
            (kept.admitted, kept.committed, kept.retry_after),
            (fresh.admitted, fresh.committed, fresh.retry_after),
            "past expires_at ({after}) the state still counts: {}",
            what()
        );
    }
}

/// Whether one more hit fits `state` at `now`, with no reserve.
fn check_at(quota: &Quota, state: Option<&State>, now: Micros) -> Evaluation {
    evaluate_counter(quota, state, now, (Hits::PEEK, 0), Refused::TakeNothing)
}

/// The bounds on admitted hits (see the module's doc), over `(when, hits)` in time order.
fn check_bounds(quota: &Quota, admitted: &[(Micros, u64)]) {
    let limit = u128::from(quota.requests_per_unit);
    let window = i128::from(quota.window_micros());
    let sum = |from: usize, keep: &dyn Fn(Micros) -> bool| -> u128 {
        admitted[from..]
            .iter()
            .filter(|(when, _)| keep(*when))
            .map(|&(_, n)| u128::from(n))
            .sum()
    };
    for (i, &(first, _)) in admitted.iter().enumerate() {
        let what = || format!("{quota:?}, admitted {admitted:?}, from #{i}");
        let within = |span: i128| move |when: Micros| i128::from(when) - i128::from(first) < span;
        match quota.algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                let span = quota.tiling().holding(first);
                let in_window = sum(i, &|when| when < span.end);
                assert!(in_window <= limit, "{in_window} in one window: {}", what());
                if quota.algorithm == Algorithm::SlidingWindow && !quota.calendar_months {
                    let sliding = sum(i, &within(window));
                    assert!(sliding <= 2 * limit, "{sliding} within W: {}", what());
                }
            }
            Algorithm::SlidingLog => {
                let sliding = sum(i, &within(window));
                assert!(sliding <= limit, "{sliding} within W: {}", what());
            }
            Algorithm::TokenBucket | Algorithm::LeakyBucket => {
                let capacity = u128::from(quota.capacity());
                for (j, &(last, _)) in admitted.iter().enumerate().skip(i) {
                    let elapsed = u128::try_from(i128::from(last) - i128::from(first)).unwrap_or(0);
                    let refill =
                        elapsed.saturating_mul(limit) / u128::try_from(window.max(1)).unwrap_or(1);
                    let taken: u128 = admitted[i..=j].iter().map(|&(_, n)| u128::from(n)).sum();
                    assert!(
                        taken <= capacity + refill,
                        "{taken} in {elapsed} µs (to #{j}), over {capacity} + {refill}: {}",
                        what()
                    );
                }
            }
        }
    }
}
