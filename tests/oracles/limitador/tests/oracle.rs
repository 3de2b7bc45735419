//! The oracle of Limitador's limits: limitador 0.14 itself (its `RateLimiter` on its memory
//! storage) and floodgate's `engine::limitador` on its memory store, driven by the same random
//! sequences of check, check-and-report, report, reserve and commit against the same limits
//! file, must give the same answers: limited or not, each counter's remaining budget, the
//! amount held, and whether a commit released its hold.
//!
//! Every window and hold outlasts a run (an hour, ten minutes), so the two wall clocks never
//! disagree about an expiry; expiry is `core::arithmetic::held_window`'s and the memory store's
//! tests' business, on a manual clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floodgate::core::arithmetic::held_window::HoldBounds;
use floodgate::engine::limitador::expression::Bindings;
use floodgate::engine::limitador::{limits_file, Answer, Limitador};
use floodgate::store::held_windows::memory::MemoryHeldWindows;
use limitador::limit::{Context, Limit, Namespace};
use limitador::reservation::{ReservationId, ReservationLimits};
use limitador::{RateLimiter, RateLimiterBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const LIMITS: &str = r#"
- namespace: ns
  max_value: 40
  seconds: 3600
  name: per-user
  conditions: []
  variables:
  - descriptors[0].user
- namespace: ns
  max_value: 90
  seconds: 3600
  name: small-model
  conditions:
  - "descriptors[0].model == 'small'"
  variables: []
- namespace: ns
  max_value: 25
  seconds: 3600
  name: small-model-per-user
  conditions:
  - "descriptors[0].model == 'small'"
  variables:
  - descriptors[0].user
"#;

const SEEDS: u64 = 24;
const STEPS: usize = 120;
const HOLD_TTL: Duration = Duration::from_secs(600);
const MAX_FRACTION: f64 = 0.75;

fn oracle() -> RateLimiter {
    let limits: Vec<Limit> = serde_yaml::from_str(LIMITS)
        .unwrap_or_else(|error| panic!("limitador cannot read the limits: {error}"));
    let limiter = RateLimiterBuilder::new(10_000)
        .reservation_limits(ReservationLimits {
            max_fraction: MAX_FRACTION,
            max_ttl: Duration::from_secs(60 * 60),
        })
        .build();
    limiter
        .configure_with(limits)
        .unwrap_or_else(|error| panic!("limitador cannot take the limits: {error}"));
    limiter
}

fn floodgate() -> Limitador {
    let limits = limits_file::parse(LIMITS, "limits.yaml")
        .unwrap_or_else(|error| panic!("floodgate cannot read the limits: {error}"));
    let bounds = HoldBounds {
        max_fraction: MAX_FRACTION,
        max_ttl: 60 * 60 * 1_000_000,
    };
    Limitador::new(limits, Arc::new(MemoryHeldWindows::default()), bounds)
}

fn descriptor(rng: &mut StdRng) -> HashMap<String, String> {
    let user = ["ann", "bob", "cy"][rng.random_range(0..3)];
    let model = ["small", "large"][rng.random_range(0..2)];
    HashMap::from([
        ("user".to_owned(), user.to_owned()),
        ("model".to_owned(), model.to_owned()),
    ])
}

fn context(descriptor: &HashMap<String, String>) -> Context<'static> {
    let mut context = Context::default();
    context.list_binding("descriptors".to_owned(), vec![descriptor.clone()]);
    context
}

/// Limited, and each counter's remaining budget by limit name (sorted: Limitador's counters
/// come in no particular order).
fn ours(answer: &Answer) -> (bool, Vec<(String, u64)>) {
    let mut remaining: Vec<(String, u64)> = answer
        .counters
        .iter()
        .map(|counter| {
            (
                counter.limit.name.clone().unwrap_or_default(),
                counter.remaining,
            )
        })
        .collect();
    remaining.sort();
    (answer.limited, remaining)
}

fn theirs(limited: bool, counters: &[limitador::counter::Counter]) -> (bool, Vec<(String, u64)>) {
    let mut remaining: Vec<(String, u64)> = counters
        .iter()
        .map(|counter| {
            let name = counter.limit().name().unwrap_or_default().to_owned();
            (name, counter.remaining().unwrap_or(counter.max_value()))
        })
        .collect();
    remaining.sort();
    (limited, remaining)
}

fn failed<T>(error: impl std::fmt::Display) -> T {
    panic!("call failed: {error}")
}

/// The holds both sides made, paired: (floodgate's id, limitador's id, descriptor).
type Holds = Vec<(String, ReservationId, HashMap<String, String>)>;

async fn step(
    rng: &mut StdRng,
    oracle: &RateLimiter,
    floodgate: &Limitador,
    holds: &mut Holds,
) -> String {
    let namespace = Namespace::from("ns");
    let descriptor = descriptor(rng);
    let bindings = || Bindings::descriptors(vec![descriptor.clone()]);
    let amount = rng.random_range(1..=6u64);
    match rng.random_range(0..5) {
        0 | 1 => {
            let apply = rng.random_bool(0.7);
            let ours = floodgate
                .check("ns", bindings(), amount, apply)
                .await
                .unwrap_or_else(failed);
            let ctx = context(&descriptor);
            let result = if apply {
                oracle.check_rate_limited_and_update(&namespace, &ctx, amount)
            } else {
                oracle.is_rate_limited(&namespace, &ctx, amount)
            }
            .unwrap_or_else(failed);
            assert_eq!(
                self::ours(&ours),
                theirs(result.limited, &result.counters),
                "check {amount} (applied: {apply}) of {descriptor:?}"
            );
            format!(
                "check {}",
                if ours.limited { "limited" } else { "admitted" }
            )
        }
        2 => {
            floodgate
                .report("ns", bindings(), amount)
                .await
                .unwrap_or_else(failed);
            oracle
                .update_counters(&namespace, &context(&descriptor), amount)
                .unwrap_or_else(failed);
            format!("report {amount}")
        }
        3 => {
            // Now and then 0, which Limitador admits without holding anything.
            let amount = if rng.random_bool(0.1) { 0 } else { amount * 2 };
            let ours = floodgate
                .reserve("ns", bindings(), amount, Some(HOLD_TTL))
                .await
                .unwrap_or_else(failed);
            let result = oracle
                .reserve(&namespace, &context(&descriptor), amount, Some(HOLD_TTL))
                .unwrap_or_else(failed);
            assert_eq!(
                self::ours(&ours),
                theirs(result.limited, &result.counters),
                "reserve {amount} of {descriptor:?}"
            );
            assert_eq!(ours.held, result.amount, "the amount held for {amount}");
            assert_eq!(
                ours.reservation_id.is_some(),
                result.reservation_id.is_some()
            );
            if let (Some(our_id), Some(their_id)) = (ours.reservation_id, result.reservation_id) {
                holds.push((our_id, their_id, descriptor.clone()));
            }
            format!(
                "reserve {}",
                if ours.limited { "refused" } else { "admitted" }
            )
        }
        _ => {
            if holds.is_empty() {
                return "no hold to commit".to_owned();
            }
            let (our_id, their_id, held_for) = holds.swap_remove(rng.random_range(0..holds.len()));
            let actual = rng.random_range(0..=8u64);
            let ours = floodgate
                .commit(
                    "ns",
                    Bindings::descriptors(vec![held_for.clone()]),
                    Some(&our_id),
                    actual,
                )
                .await
                .unwrap_or_else(failed);
            let result = oracle
                .commit_reservation(&namespace, &context(&held_for), Some(&their_id), actual)
                .unwrap_or_else(failed);
            assert_eq!(ours, result.reservation_released, "commit {actual}");
            format!("commit {}", if ours { "released" } else { "not released" })
        }
    }
}

#[tokio::test]
async fn floodgate_answers_as_limitador_0_14_on_random_sequences() {
    let mut outcomes = std::collections::BTreeSet::new();
    for seed in 0..SEEDS {
        let mut rng = StdRng::seed_from_u64(seed);
        let (oracle, floodgate) = (oracle(), floodgate());
        let mut holds = Holds::new();
        for _ in 0..STEPS {
            outcomes.insert(step(&mut rng, &oracle, &floodgate, &mut holds).await);
        }
    }
    // The sequences reached every answer, so each was compared.
    for outcome in [
        "check admitted",
        "check limited",
        "reserve admitted",
        "reserve refused",
        "commit released",
    ] {
        assert!(outcomes.contains(outcome), "no {outcome:?} in {outcomes:?}");
    }
}
