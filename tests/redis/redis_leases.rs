//! Concurrency rules' leases in Redis (`src/store/redis/lua/leases.lua`) decide exactly as in
//! memory (`core::arithmetic::lease`): seeded random sequences of acquires (an id holding slots already
//! takes another), releases of known and unknown ids, priority reserves and requests of several
//! calls run against both stores with one manual clock, which jumps past lease TTLs now and
//! then; every outcome must be identical. Then the properties themselves: N acquires with one
//! id hold N slots and N releases free them all, in memory, Redis and hybrid alike; a set
//! written by earlier versions (one member per id) reads as one slot per id; concurrent
//! acquires from many tasks never hold more than the limit; and a lease whose release is lost
//! frees after its TTL.

use std::sync::Arc;

use floodgate::core::arithmetic::lease::{LeaseAction, LeaseCall, LeaseOutcome};
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::store::hybrid::{HybridOptions, HybridStore};
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
    floodgate::core::decision::key::lease_key("leases", "leases.backend", &[], &[])
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

async fn one_call(store: &impl Store, call: LeaseCall) -> LeaseOutcome {
    match store.leases(&[call]).await {
        Ok(outcomes) => outcomes[0],
        Err(error) => panic!("lease call: {error}"),
    }
}

async fn acquire(store: &impl Store, key: &[u8], id: String, max: u32) -> LeaseOutcome {
    one_call(store, call(key, id, LeaseAction::Acquire, max, 0)).await
}

async fn release(store: &impl Store, key: &[u8], id: &str) -> LeaseOutcome {
    one_call(store, call(key, id.to_owned(), LeaseAction::Release, 1, 0)).await
}

/// `max` acquires with one id hold `max` slots and leave none for another; `max` releases of
/// it bring the count back to 0, and one more frees nothing.
async fn one_id_holds_a_slot_per_acquire(store: &impl Store, key: &[u8], max: u32) {
    for n in 1..=max {
        let again = acquire(store, key, "shared".into(), max).await;
        assert!(
            again.admitted && again.in_flight == n,
            "acquire {n}: {again:?}"
        );
    }
    assert!(!acquire(store, key, "shared".into(), max).await.admitted);
    assert!(!acquire(store, key, "other".into(), max).await.admitted);
    for n in (0..max).rev() {
        let freed = release(store, key, "shared").await;
        assert!(freed.released && freed.in_flight == n, "{freed:?}");
    }
    assert!(!release(store, key, "shared").await.released);
    assert_eq!(acquire(store, key, "other".into(), max).await.in_flight, 1);
}

#[tokio::test]
async fn one_id_holds_a_slot_per_acquire_in_every_store() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let (memory, redis) = stores(&server, &clock).await;
    one_id_holds_a_slot_per_acquire(&memory, &identity(4), 5).await;
    one_id_holds_a_slot_per_acquire(&redis, &identity(5), 5).await;
    let (_, for_hybrid) = stores(&server, &clock).await;
    let hybrid = HybridStore::new(for_hybrid, clock.clone(), false, HybridOptions::default())
        .unwrap_or_else(|error| panic!("hybrid store: {error}"));
    one_id_holds_a_slot_per_acquire(&hybrid, &identity(6), 5).await;
}

async fn members(inspector: &mut redis::aio::MultiplexedConnection) -> (String, Vec<String>) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("KEYS: {error}"));
    assert_eq!(keys.len(), 1, "one lease counter: {keys:?}");
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&keys[0])
        .arg(0)
        .arg(-1)
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("ZRANGE: {error}"));
    (keys[0].clone(), members)
}

/// An id's first slot is stored as earlier versions stored a lease (member = the id), its
/// further slots as `id NUL n`; a set those versions wrote reads as one slot per member, and
/// their leases are released as before.
#[tokio::test]
async fn slots_are_stored_so_that_earlier_versions_sets_read_as_one_slot_per_id() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let (_, redis) = stores(&server, &clock).await;
    let mut inspector = server.inspector().await;
    let key = identity(7);
    for _ in 0..3 {
        assert!(acquire(&redis, &key, "same".into(), 10).await.admitted);
    }
    let (stored, mut written) = members(&mut inspector).await;
    written.sort();
    assert_eq!(written, ["same", "same\u{0}2", "same\u{0}3"]);
    // Two leases as an earlier version wrote them, expiring with the others.
    for old in ["old-a", "old-b"] {
        let _: () = redis::cmd("ZADD")
            .arg(&stored)
            .arg(START + TTL)
            .arg(old)
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("ZADD: {error}"));
    }
    assert_eq!(acquire(&redis, &key, "new".into(), 10).await.in_flight, 6);
    let freed = release(&redis, &key, "old-a").await;
    assert!(freed.released && freed.in_flight == 5, "{freed:?}");
    assert!(!release(&redis, &key, "old-a").await.released);
    // Whichever slot of "same" is freed (the three expire together), the next acquire takes
    // its name again: the smallest free one.
    assert!(release(&redis, &key, "same").await.released);
    assert!(acquire(&redis, &key, "same".into(), 10).await.admitted);
    let (_, mut after) = members(&mut inspector).await;
    after.sort();
    assert_eq!(after, ["new", "old-b", "same", "same\u{0}2", "same\u{0}3"]);
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
            tokio::spawn(async move { acquire(&*redis, &key, format!("t{task}"), MAX).await })
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
