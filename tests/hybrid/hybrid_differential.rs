//! Where the hybrid store must decide exactly as the exact store, it does: two hybrid stores
//! on one Redis, on one test clock, take turns at random requests (fixed and sliding windows,
//! several counters, a counter named twice, shadow roles, hits of 1 to 3), each syncing before
//! and after its decision: a sync interval shrunk to nothing. Every decision must be the
//! memory store's, whether it was made locally or, beyond the local budget, exactly in Redis.
//! With syncs between decisions only every few steps, every refusal must be what the exact
//! store decides on everything the hybrid stores admitted (a local refusal needs the global
//! count to refuse: no under-admission).

use std::sync::Arc;

use std::collections::HashMap;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota, State};
use floodgate::core::arithmetic::hybrid::{add_hits, window_start};
use floodgate::core::decision::charging::{settle, Charging};
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::hybrid::{HybridOptions, HybridStore};
use floodgate::store::memory::MemoryStore;
use floodgate::store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floodgate_testkit::redis::{counter, RedisServer};

const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;
const SEEDS: u64 = 4;
const STEPS: usize = 300;

fn slots() -> Vec<(Vec<u8>, Quota)> {
    let quotas = [
        Quota::new(12, Unit::Second).with_algorithm(Algorithm::FixedWindow),
        Quota::new(30, Unit::Minute).with_algorithm(Algorithm::FixedWindow),
        Quota::new(9, Unit::Second).with_algorithm(Algorithm::SlidingWindow),
        Quota::new(40, Unit::Minute).with_algorithm(Algorithm::SlidingWindow),
    ];
    quotas
        .into_iter()
        .enumerate()
        .map(|(index, quota)| (format!("d\u{0}slot{index}").into_bytes(), quota))
        .collect()
}

fn random_request(rng: &mut StdRng, slots: &[(Vec<u8>, Quota)]) -> Vec<Counter> {
    let count = rng.random_range(1..=3);
    (0..count)
        .map(|descriptor| {
            let (key, quota) = &slots[rng.random_range(0..slots.len())];
            let hits = match rng.random_range(0..10) {
                0 => Hits::PEEK,
                _ => Hits::Charge(rng.random_range(1..=3)),
            };
            let role = if rng.random_range(0..10) == 0 {
                Role::Shadow
            } else {
                Role::Enforced
            };
            counter(descriptor, key, quota, hits, role)
        })
        .collect()
}

async fn hybrid(server: &RedisServer, clock: &Arc<ManualClock>, prefix: &str) -> HybridStore {
    hybrid_store(
        server,
        clock,
        prefix,
        HybridOptions {
            local_share: 1.0,
            ..HybridOptions::default()
        },
    )
    .await
}

/// A hybrid store on `server` under `prefix`, on the test clock `clock` (shared with Redis).
pub(super) async fn hybrid_store(
    server: &RedisServer,
    clock: &Arc<ManualClock>,
    prefix: &str,
    hybrid: HybridOptions,
) -> HybridStore {
    let mut options = server.options(Some(clock.clone() as Arc<dyn Clock>));
    options.key_prefix = prefix.to_owned();
    let redis = floodgate::store::redis::RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect: {error}"));
    HybridStore::new(redis, clock.clone(), false, hybrid).unwrap_or_else(|error| panic!("{error}"))
}

/// `sync_every`: both stores sync around every decision (1), or every few steps.
async fn run(sync_every: usize) {
    let server = RedisServer::start();
    let slots = slots();
    for seed in 0..SEEDS {
        let clock = Arc::new(ManualClock::new(START + seed as i64 * 104_729));
        let prefix = format!("seed{seed}:{sync_every}:");
        let stores = [
            hybrid(&server, &clock, &prefix).await,
            hybrid(&server, &clock, &prefix).await,
        ];
        for store in &stores {
            store.sync_once().await;
        }
        let memory = MemoryStore::new(1_000_000, clock.clone());
        // Everything the hybrid stores admitted, counted without limits.
        let mut admitted: HashMap<Vec<u8>, State> = HashMap::new();
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut local_before, mut exact_before) = (0, 0);
        for step in 0..STEPS {
            let store = &stores[rng.random_range(0..2)];
            let request = random_request(&mut rng, &slots);
            let shadow = rng.random_range(0..20) == 0;
            if sync_every == 1 || step % sync_every == 0 {
                store.sync_once().await;
            }
            let hybrid = store
                .decide(&request, shadow)
                .await
                .unwrap_or_else(|error| panic!("seed {seed} step {step}: {error}"));
            let exact = memory
                .decide_now(&request, shadow)
                .unwrap_or_else(|error| panic!("seed {seed} step {step}: {error}"));
            if sync_every == 1 {
                store.sync_once().await;
                assert_eq!(
                    hybrid, exact,
                    "seed {seed} step {step}: {request:?} decided otherwise"
                );
            } else if hybrid.over_limit {
                let now = clock.now();
                let states: Vec<Option<State>> = request
                    .iter()
                    .map(|counter| admitted.get(&counter.key).cloned())
                    .collect();
                let truth = settle(&request, Charging::AllOrNothing, shadow, now, |index| {
                    states.get(index).and_then(Option::as_ref)
                });
                assert!(
                    truth.over_limit,
                    "seed {seed} step {step}: refused {request:?}, which the exact store admits \
                     on what was admitted ({states:?})"
                );
            }
            let now = clock.now();
            for (counter, outcome) in request.iter().zip(&hybrid.outcomes) {
                if let (Hits::Charge(hits), true) = (counter.hits, outcome.charged) {
                    let state = add_hits(
                        &counter.quota,
                        admitted.get(&counter.key),
                        window_start(&counter.quota, now),
                        hits,
                    );
                    if let Some(state) = state {
                        admitted.insert(counter.key.clone(), state);
                    }
                }
            }
            clock.advance(rng.random_range(0..400_000));
        }
        for store in &stores {
            let counts = store.counts();
            local_before += counts.local;
            exact_before += counts.exact;
        }
        // Both ways of deciding were taken.
        assert!(
            local_before > 0 && (sync_every > 1 || exact_before > 0),
            "seed {seed}: {local_before} local and {exact_before} exact decisions"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syncing_around_every_decision_decides_as_the_exact_store() {
    run(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_refusal_is_an_exact_refusal() {
    run(5).await;
}
