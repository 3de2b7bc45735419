//! Limitador-format counters in Redis (`src/store/redis/lua/held_window.lua`) decide exactly
//! as in memory (`store::held_windows::memory`, on `core::arithmetic::held_window`): seeded
//! random sequences of checks (applied or not), adds, reservations and releases over a few
//! counters of one namespace, on one manual clock that now and then jumps past holds' expiries
//! and windows' ends; every answer must be identical, and so must the counters each lists as
//! live (Limitador's `GET /counters`, a `SCAN` in Redis). And reservations racing from many tasks
//! never hold more than the limit together, in either store.

use std::sync::Arc;

use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::store::held_windows::memory::MemoryHeldWindows;
use floodgate::store::held_windows::{CounterSpec, HeldWindows, HoldRequest, LiveCounter};
use floodgate::store::redis::RedisStore;
use floodgate_testkit::redis::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;
const SEEDS: u64 = 6;
const STEPS: usize = 250;

fn counters() -> Vec<CounterSpec> {
    [(10, 20), (25, 60), (6, 5)]
        .iter()
        .enumerate()
        .map(|(index, (max_value, seconds))| CounterSpec {
            key: format!("[\"ns\",{seconds},[],[],{{\"c\":\"{index}\"}}]"),
            max_value: *max_value,
            window: seconds * 1_000_000,
        })
        .collect()
}

/// A non-empty subset of the counters, in a random order.
fn some(rng: &mut StdRng, all: &[CounterSpec]) -> Vec<CounterSpec> {
    let mut chosen: Vec<CounterSpec> = all
        .iter()
        .filter(|_| rng.random_bool(0.6))
        .cloned()
        .collect();
    if chosen.is_empty() {
        chosen.push(all[rng.random_range(0..all.len())].clone());
    }
    if rng.random_bool(0.5) {
        chosen.reverse();
    }
    chosen
}

async fn step(
    rng: &mut StdRng,
    (memory, redis): (&MemoryHeldWindows, &RedisStore),
    ids: &mut Vec<String>,
    serial: usize,
) -> String {
    let counters = some(rng, &counters());
    let amount = rng.random_range(0..=7u64);
    let failed =
        |error: floodgate::store::StoreError| -> ! { panic!("store call failed: {error}") };
    match rng.random_range(0..4) {
        0 => {
            let apply = rng.random_bool(0.6);
            let ours = memory
                .check(&counters, amount, apply)
                .await
                .unwrap_or_else(|e| failed(e));
            let theirs = redis
                .check(&counters, amount, apply)
                .await
                .unwrap_or_else(|e| failed(e));
            assert_eq!(
                ours, theirs,
                "check {amount} (applied: {apply}) on {counters:?}"
            );
            format!("check {}", ours.admission.admitted())
        }
        1 => {
            memory
                .add(&counters, amount)
                .await
                .unwrap_or_else(|e| failed(e));
            redis
                .add(&counters, amount)
                .await
                .unwrap_or_else(|e| failed(e));
            "add".to_owned()
        }
        2 => {
            let id = format!("hold-{serial}");
            let hold = HoldRequest {
                id: &id,
                check_amount: amount + 1,
                hold_amount: rng.random_range(0..=amount + 1),
                ttl: rng.random_range(1..=30u64) * 1_000_000,
            };
            let ours = memory
                .reserve(&counters, hold)
                .await
                .unwrap_or_else(|e| failed(e));
            let theirs = redis
                .reserve(&counters, hold)
                .await
                .unwrap_or_else(|e| failed(e));
            assert_eq!(ours, theirs, "reserve {hold:?} on {counters:?}");
            ids.push(id);
            format!("reserve {}", ours.admission.admitted())
        }
        _ => {
            let id = if ids.is_empty() || rng.random_bool(0.1) {
                "unknown".to_owned()
            } else {
                ids.swap_remove(rng.random_range(0..ids.len()))
            };
            let ours = memory
                .release(&counters, &id)
                .await
                .unwrap_or_else(|e| failed(e));
            let theirs = redis
                .release(&counters, &id)
                .await
                .unwrap_or_else(|e| failed(e));
            assert_eq!(ours, theirs, "release {id} on {counters:?}");
            format!("release {ours}")
        }
    }
}

/// The live counters of namespace `ns` `store` lists, in key order.
async fn listed(store: &dyn HeldWindows) -> Vec<LiveCounter> {
    let mut listed = store
        .live_counters("[\"ns\",")
        .await
        .unwrap_or_else(|error| panic!("listing failed: {error}"));
    listed.sort_by(|a, b| a.key.cmp(&b.key));
    listed
}

#[tokio::test]
async fn redis_decides_limitador_format_counters_as_memory_does() {
    let server = RedisServer::start();
    let mut outcomes = std::collections::BTreeSet::new();
    for seed in 0..SEEDS {
        let clock = Arc::new(ManualClock::new(
            START + seed as Micros * 3_600 * MICROS_PER_SECOND,
        ));
        let clock_now = Arc::clone(&clock);
        let memory = MemoryHeldWindows::with_clock(Arc::new(move || {
            u64::try_from(clock_now.now()).unwrap_or_default()
        }));
        let redis = server.store(Some(clock.clone() as Arc<dyn Clock>)).await;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut ids = Vec::new();
        for serial in 0..STEPS {
            outcomes.insert(step(&mut rng, (&memory, &redis), &mut ids, serial).await);
            if serial % 25 == 0 {
                let live = listed(&memory).await;
                assert_eq!(
                    live,
                    listed(&redis).await,
                    "the live counters at step {serial}"
                );
                outcomes.insert(format!("listed {}", live.len().min(1)));
            }
            if rng.random_bool(0.08) {
                clock.advance(rng.random_range(1..=25) * MICROS_PER_SECOND);
            }
        }
    }
    for outcome in [
        "check true",
        "check false",
        "reserve true",
        "reserve false",
        "release true",
        "release false",
        "listed 1",
    ] {
        assert!(outcomes.contains(outcome), "no {outcome:?} in {outcomes:?}");
    }
}

/// Reservations racing from many tasks never hold more than the limit together, in memory and
/// in Redis alike: each store reads, decides and writes a call's counters as one step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reservations_never_hold_more_than_the_limit() {
    let server = RedisServer::start();
    let redis: Arc<dyn HeldWindows> = Arc::new(server.store(None).await);
    let memory: Arc<dyn HeldWindows> = Arc::new(MemoryHeldWindows::default());
    for (name, store) in [("memory", memory), ("redis", redis)] {
        let counter = vec![CounterSpec {
            key: format!("[\"race\",60,[],[],{{\"store\":\"{name}\"}}]"),
            max_value: 100,
            window: 60_000_000,
        }];
        let tasks: Vec<_> = (0..40)
            .map(|task| {
                let (store, counter) = (Arc::clone(&store), counter.clone());
                tokio::spawn(async move {
                    let id = format!("task-{task}");
                    let hold = HoldRequest {
                        id: &id,
                        check_amount: 7,
                        hold_amount: 7,
                        ttl: 30_000_000,
                    };
                    let decided = store.reserve(&counter, hold).await;
                    decided.is_ok_and(|decided| decided.admission.admitted())
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += u64::from(task.await.unwrap_or(false));
        }
        assert_eq!(
            admitted * 7,
            98,
            "{name}: 14 holds of 7 fit in 100, no more"
        );
    }
}
