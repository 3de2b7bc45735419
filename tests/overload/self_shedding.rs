//! `--shed-above` in the limiter: with the store held (as a slow Redis holds it), calls pile
//! up in the limiter, and past the threshold a new call is decided with probability
//! threshold / depth, lower priority classes first; a shed call gets the overload answer at
//! once and never reaches the store. Counts, not timings; the draws are random, so the bounds
//! are set where a miss would take odds below 2^-40.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use floodgate::core::arithmetic::lease::{LeaseCall, LeaseOutcome};
use floodgate::core::decision::overload::{OverloadAnswer, OVERLOADED_HEADER};
use floodgate::core::decision::plan::Counter;
use floodgate::core::decision::response::Response;
use floodgate::core::decision::status::Code;
use floodgate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
use floodgate::core::policy::config::load_text;
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::request::{Descriptor, Request};
use floodgate::engine::limiter::{LimitError, Limiter, LimiterSettings};
use floodgate::engine::self_shedding::SelfShedding;
use floodgate::store::memory::MemoryStore;
use floodgate::store::{Decided, Store, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const RULES: &str = r#"
domain: shop
descriptors:
  - key: pool
    value: checkout
    rate_limit: {unit: hour, requests_per_unit: 1000000}
    priority:
      key: priority
      classes: {critical: 100%, low: 25%}
      default: low
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000}
"#;

/// The value that makes the gated store hold a call.
const HELD: &str = "held-at-the-gate";

/// The memory store behind a gate the test opens: a decision for a descriptor valued [`HELD`]
/// waits there, as behind a slow Redis, so the call stays in the limiter; others pass.
struct GatedStore {
    inner: MemoryStore,
    open: watch::Receiver<bool>,
    arrived: Arc<AtomicUsize>,
}

impl Store for GatedStore {
    async fn decide(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        let holds = counters.iter().any(|counter| {
            counter
                .key
                .windows(HELD.len())
                .any(|at| at == HELD.as_bytes())
        });
        if holds {
            let mut open = self.open.clone();
            // The sender lives as long as the test; if it went, decide anyway.
            let _ = open.wait_for(|open| *open).await;
        }
        self.inner.decide(counters, global_shadow).await
    }

    async fn leases(&self, calls: &[LeaseCall]) -> Result<Vec<LeaseOutcome>, StoreError> {
        self.inner.leases(calls).await
    }

    fn backend(&self) -> &'static str {
        "gated"
    }
}

struct Held {
    limiter: Arc<Limiter<GatedStore>>,
    gate: watch::Sender<bool>,
    arrived: Arc<AtomicUsize>,
}

fn held(shedding: SelfShedding) -> Held {
    let rules = load_text("shop.yaml", RULES)
        .unwrap_or_else(|errors| panic!("test rules do not load: {errors}"));
    let clock = Arc::new(ManualClock::new(1_796_083_210 * MICROS_PER_SECOND));
    let (gate, open) = watch::channel(false);
    let arrived = Arc::new(AtomicUsize::new(0));
    let store = GatedStore {
        inner: MemoryStore::new(1000, clock),
        open,
        arrived: Arc::clone(&arrived),
    };
    let settings = LimiterSettings {
        shedding: Some(shedding),
        ..LimiterSettings::default()
    };
    Held {
        limiter: Arc::new(Limiter::new(rules, store, settings)),
        gate,
        arrived,
    }
}

fn request(entries: &[(&str, &str)]) -> Request {
    Request {
        domain: "shop".to_owned(),
        descriptors: vec![Descriptor {
            entries: entries
                .iter()
                .map(|(key, value)| Entry::new(*key, *value))
                .collect(),
            ..Descriptor::default()
        }],
        hits_addend: 0,
    }
}

type Call = JoinHandle<Result<Response, LimitError>>;

/// What became of one call sent while the gate is shut.
enum Fate {
    /// Answered at once, without reaching the store: shed.
    Shed(Result<Response, LimitError>),
    /// Waiting in the store: decided.
    Held(Call),
}

/// Sends one call and lets it run until it is answered or waits in the store (the runtime is
/// single-threaded: nothing else moves meanwhile).
async fn send(held: &Held, request: Request) -> Fate {
    let before = held.arrived.load(Ordering::SeqCst);
    let limiter = Arc::clone(&held.limiter);
    let call: Call = tokio::spawn(async move { limiter.decide(&request).await });
    loop {
        tokio::task::yield_now().await;
        if held.arrived.load(Ordering::SeqCst) > before {
            return Fate::Held(call);
        }
        if call.is_finished() {
            let answer = call
                .await
                .unwrap_or_else(|error| panic!("the call panicked: {error}"));
            return Fate::Shed(answer);
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"))
}

async fn release(held: &Held, calls: Vec<Call>) {
    let _ = held.gate.send(true);
    for call in calls {
        let answer = call
            .await
            .unwrap_or_else(|error| panic!("the call panicked: {error}"))
            .unwrap_or_else(|error| panic!("a held call was not decided: {error}"));
        assert_eq!(answer.overall_code, Code::Ok, "a held call was decided OK");
    }
}

#[test]
fn past_the_threshold_calls_are_shed_with_the_unavailable_answer_and_never_reach_the_store() {
    runtime().block_on(async {
        let held = held(SelfShedding {
            above: 1,
            answer: OverloadAnswer::Unavailable,
        });
        let mut waiting = Vec::new();
        let mut shed = 0;
        for sent in 0..200 {
            match send(&held, request(&[("user", HELD)])).await {
                Fate::Held(call) => waiting.push(call),
                Fate::Shed(answer) => {
                    assert!(sent > 0, "the first call is at the threshold, never shed");
                    assert!(
                        matches!(answer, Err(LimitError::Overloaded)),
                        "a shed call gets --overload-answer unavailable: {answer:?}"
                    );
                    shed += 1;
                }
            }
        }
        // Survival 1 / depth: about 20 of 200 survive (each one deepens the queue).
        assert!(shed >= 120, "{shed} of 200 shed");
        assert!(waiting.len() >= 2, "{} survived", waiting.len());
        assert_eq!(held.arrived.load(Ordering::SeqCst), waiting.len());
        release(&held, waiting).await;
    });
}

#[test]
fn the_lower_class_is_shed_first_and_gets_the_overloaded_answer() {
    runtime().block_on(async {
        let held = held(SelfShedding {
            above: 4,
            answer: OverloadAnswer::OverLimit,
        });
        // Up to the threshold nothing is shed; past it, holders are sent until 7 wait.
        let mut waiting = Vec::new();
        let mut sent = 0;
        while waiting.len() < 7 {
            sent += 1;
            match send(&held, request(&[("user", HELD)])).await {
                Fate::Held(call) => waiting.push(call),
                Fate::Shed(answer) => assert!(sent > 4, "shed at the threshold: {answer:?}"),
            }
            assert!(sent < 10_000, "holders are shed with probability below 1");
        }
        // Each probe arrives at depth 8 and, decided, passes the gate: the depth stays 8.
        // critical (threshold 4) survives 4 / 8, low (25 %: threshold 1) 1 / 8.
        let (mut critical_decided, mut low_decided) = (0, 0);
        for _ in 0..400 {
            for class in ["critical", "low"] {
                let answer = held
                    .limiter
                    .decide(&request(&[("pool", "checkout"), ("priority", class)]))
                    .await
                    .unwrap_or_else(|error| panic!("not answered: {error}"));
                let shed = answer
                    .response_headers
                    .iter()
                    .any(|(name, value)| name == OVERLOADED_HEADER && value == "true");
                if shed {
                    assert_eq!(answer.overall_code, Code::OverLimit);
                    assert!(answer
                        .response_headers
                        .iter()
                        .any(|(name, value)| name == "retry-after" && value == "1"));
                } else {
                    assert_eq!(answer.overall_code, Code::Ok, "{answer:?}");
                    if class == "critical" {
                        critical_decided += 1;
                    } else {
                        low_decided += 1;
                    }
                }
            }
        }
        // Expected 200 ± 10 and 50 ± 6.6 (one standard deviation): bounds at 6 of them.
        assert!(
            (140..=260).contains(&critical_decided),
            "critical: {critical_decided} of 400 decided, expected about 200"
        );
        assert!(
            (11..=90).contains(&low_decided),
            "low: {low_decided} of 400 decided, expected about 50"
        );
        assert_eq!(
            held.arrived.load(Ordering::SeqCst),
            waiting.len() + critical_decided + low_decided,
            "the holders and the decided probes reached the store"
        );
        release(&held, waiting).await;
    });
}

#[test]
fn once_the_store_answers_the_depth_falls_and_nothing_is_shed() {
    runtime().block_on(async {
        let held = held(SelfShedding {
            above: 1,
            answer: OverloadAnswer::OverLimit,
        });
        let _ = held.gate.send(true);
        // One at a time: each call is alone in the limiter, at the threshold.
        for _ in 0..100 {
            let answer = held
                .limiter
                .decide(&request(&[("user", "u")]))
                .await
                .unwrap_or_else(|error| panic!("not decided: {error}"));
            assert_eq!(answer.overall_code, Code::Ok);
            assert!(answer.response_headers.is_empty(), "{answer:?}");
        }
        assert_eq!(held.arrived.load(Ordering::SeqCst), 100);
    });
}
