//! Concurrency rules' leases in Redis (`src/store/redis/lua/leases.lua`) decide exactly as in
//! memory (`core::lease`): seeded random sequences of acquires, repeated acquires, releases of
//! known and unknown ids, priority reserves and requests of several calls run against both
//! stores with one manual clock, which jumps past lease TTLs now and then; every outcome must
//! be identical. Then the properties themselves on Redis: concurrent acquires from many tasks
//! never hold more than the limit, and a lease whose release is lost frees after its TTL.

use std::sync::Arc;

use floodgate::core::lease::{LeaseAction, LeaseCall, LeaseOutcome};
use floodgate::core::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::RedisStore;
use floodgate::store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floodgate_testkit::redis::{command_calls, RedisServer};

const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;
const STEPS: usize = 600;
const TTL: Micros = 5 * MICROS_PER_SECOND;

/// A lease counter identity as the plan builds it (domain and rule path first, as every
/// identity, so the Redis key carries the domain's tag).
fn identity(counter: usize) -> Vec<u8> {
    floodgate::core::key::lease_key("leases", "leases.backend", &[], &[])
        .into_iter()
        .chain(counter.to_le_bytes())
        .collect()
}

fn call(key: &[u8], id: String, action: LeaseAction, max: u32, reserve: u32) -> LeaseCall {
    LeaseCall {
        descriptor: 0,
        key: key.to_vec(),
        lease_id: id,
        action,
        max_in_flight: max,
        reserve,
        lease_ttl: TTL,
        shed_above: 0,
        draw: 0,
    }
}

async fn stores(server: &RedisServer, clock: &Arc<ManualClock>) -> (MemoryStore, RedisStore) {
    let memory = MemoryStore::new(1_000_000, clock.clone());
    let options = server.options(Some(clock.clone() as Arc<dyn Clock>));
    let redis = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect the store: {error}"));
    (memory, redis)
}

fn random_request(rng: &mut StdRng, keys: &[Vec<u8>], maxes: &[u32]) -> Vec<LeaseCall> {
    let calls = if rng.random_bool(0.85) {
        1
    } else {
        rng.random_range(2..=3)
    };
    (0..calls)
        .map(|_| {
            let counter = rng.random_range(0..keys.len());
            let max = maxes[counter];
            // Few ids, so acquires repeat and releases find their lease (or an unknown one).
            let id = format!("r{}", rng.random_range(0..(max * 2 + 2)));
            let action = if rng.random_bool(0.55) {
                LeaseAction::Acquire
            } else {
                LeaseAction::Release
            };
            let reserve = if rng.random_bool(0.25) {
                rng.random_range(0..=max)
            } else {
                0
            };
            // Shedding on a third of the calls, with draws from the whole range (its edges
            // too), so both sides must agree on every survival.
            let shed_above = if rng.random_bool(0.35) {
                rng.random_range(1..max.max(2))
            } else {
                0
            };
            let draw = match rng.random_range(0..10) {
                0 => 0,
                1 => u32::MAX,
                _ => rng.random(),
            };
            LeaseCall {
                shed_above,
                draw,
                ..call(&keys[counter], id, action, max, reserve)
            }
        })
        .collect()
}

#[tokio::test]
async fn leases_in_redis_decide_as_in_memory() {
    let server = RedisServer::start();
    for seed in 1..=4_u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let clock = Arc::new(ManualClock::new(
            START + rng.random_range(0..MICROS_PER_SECOND),
        ));
        let (memory, redis) = stores(&server, &clock).await;
        let keys: Vec<Vec<u8>> = (0..3).map(|k| identity(seed as usize * 10 + k)).collect();
        let maxes: Vec<u32> = (0..3).map(|_| rng.random_range(1..=6)).collect();
        let mut refused = 0;
        let mut released = 0;
        let mut shed = 0;
        for step in 0..STEPS {
            let calls = random_request(&mut rng, &keys, &maxes);
            let expected = memory
                .leases_now(&calls)
                .unwrap_or_else(|error| panic!("seed {seed} step {step}: {error}"));
            let got = redis
                .leases(&calls)
                .await
                .unwrap_or_else(|error| panic!("seed {seed} step {step}: {error}"));
            assert_eq!(
                got, expected,
                "seed {seed} step {step}: redis (left) and memory (right) disagree on {calls:#?}"
            );
            refused += expected.iter().filter(|o| !o.admitted).count();
            released += expected.iter().filter(|o| o.released).count();
            shed += expected.iter().filter(|o| o.shed).count();
            // Mostly small steps; sometimes past every lease's TTL.
            let step_micros = if rng.random_bool(0.03) {
                TTL + rng.random_range(0..MICROS_PER_SECOND)
            } else {
                rng.random_range(0..TTL / 20)
            };
            clock.advance(step_micros);
        }
        // The sequences must reach every branch, or the comparison shows little.
        assert!(
            refused > 20 && released > 20 && shed > 3,
            "seed {seed}: {refused} refused, {released} released, {shed} shed"
        );
    }
}

async fn acquire(store: &RedisStore, key: &[u8], id: String, max: u32) -> LeaseOutcome {
    let calls = [call(key, id, LeaseAction::Acquire, max, 0)];
    match store.leases(&calls).await {
        Ok(outcomes) => outcomes[0],
        Err(error) => panic!("acquire: {error}"),
    }
}

#[tokio::test]
async fn concurrent_acquires_never_hold_more_than_the_limit() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let (_, redis) = stores(&server, &clock).await;
    let redis = Arc::new(redis);
    let key = identity(1);
    const MAX: u32 = 7;
    let tasks: Vec<_> = (0..200)
        .map(|task| {
            let (redis, key) = (Arc::clone(&redis), key.clone());
            tokio::spawn(async move { acquire(&redis, &key, format!("t{task}"), MAX).await })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        let outcome = task.await.unwrap_or_else(|error| panic!("task: {error}"));
        assert!(outcome.in_flight <= MAX, "{outcome:?}");
        admitted += usize::from(outcome.admitted);
    }
    assert_eq!(admitted, MAX as usize);
}

#[tokio::test]
async fn a_lease_whose_release_is_lost_frees_after_its_ttl() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let (_, redis) = stores(&server, &clock).await;
    let key = identity(2);
    assert!(acquire(&redis, &key, "lost".into(), 1).await.admitted);
    clock.advance(TTL - 1);
    let refused = acquire(&redis, &key, "next".into(), 1).await;
    assert!(!refused.admitted);
    assert_eq!(refused.retry_after, 1);
    clock.advance(1);
    let after = acquire(&redis, &key, "next".into(), 1).await;
    assert!(after.admitted);
    assert_eq!(after.in_flight, 1);
}

/// Lease calls name the script by its hash (`EVALSHA`): its text crosses the wire, and Redis
/// hashes it, once per server, not per call; a Redis that lost its scripts (a restart, `SCRIPT
/// FLUSH`) gets the text again and answers the same call.
#[tokio::test]
async fn lease_calls_send_the_script_once() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let (_, redis) = stores(&server, &clock).await;
    let mut inspector = server.inspector().await;
    let key = identity(3);
    for task in 0..5 {
        assert!(acquire(&redis, &key, format!("t{task}"), 10).await.admitted);
    }
    assert_eq!(command_calls(&mut inspector, "eval").await, 0);
    assert!(command_calls(&mut inspector, "evalsha").await >= 5);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("SCRIPT FLUSH: {error}"));
    let after = acquire(&redis, &key, "after-flush".into(), 10).await;
    assert!(after.admitted);
    assert_eq!(after.in_flight, 6);
    assert_eq!(command_calls(&mut inspector, "eval").await, 0);
}
