//! Bans in Redis (`src/store/redis/lua/ban.lua`) decide exactly as in memory
//! (`core::arithmetic::ban`): seeded random sequences of checks, strikes and lifts on a few
//! keys under a few policies, one request of several calls now and then (one key named twice
//! sees what its first call left), run against both stores with one manual clock that
//! sometimes jumps past a window, a ban or a record's memory; every outcome must be
//! identical, and the sequences must reach bans and their escalation.

use std::sync::Arc;

use floodgate::core::arithmetic::ban::{BanAction, BanPolicy};
use floodgate::core::decision::bans::{ban_key, BanCall};
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::RedisStore;
use floodgate::store::Store;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floodgate_testkit::redis::RedisServer;

const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;
const STEPS: usize = 800;
const SECOND: Micros = MICROS_PER_SECOND;

/// A ban record identity beside a counter identity, as the limiter builds it.
fn identity(counter: usize) -> Vec<u8> {
    let counter_key = floodgate::core::decision::key::lease_key("bans", "bans.ip", &[], &[])
        .into_iter()
        .chain(counter.to_le_bytes())
        .collect::<Vec<u8>>();
    ban_key(&counter_key)
}

fn random_policy(rng: &mut StdRng) -> BanPolicy {
    let ban_for = rng.random_range(1..=20) * SECOND;
    BanPolicy {
        after: rng.random_range(1..=4),
        within: rng.random_range(1..=30) * SECOND,
        ban_for,
        max: ban_for * rng.random_range(1..=8),
    }
}

fn random_request(rng: &mut StdRng, keys: &[(Vec<u8>, BanPolicy)]) -> Vec<BanCall> {
    let calls = if rng.random_bool(0.85) {
        1
    } else {
        rng.random_range(2..=3)
    };
    (0..calls)
        .map(|_| {
            let (key, policy) = &keys[rng.random_range(0..keys.len())];
            let action = match rng.random_range(0..20) {
                0 => BanAction::Lift,
                1..=6 => BanAction::Check,
                _ => BanAction::Strike,
            };
            BanCall {
                descriptor: 0,
                key: key.clone(),
                policy: *policy,
                action,
            }
        })
        .collect()
}

#[tokio::test]
async fn bans_in_redis_decide_as_in_memory() {
    let server = RedisServer::start();
    for seed in 1..=4_u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let clock = Arc::new(ManualClock::new(START + rng.random_range(0..SECOND)));
        let memory = MemoryStore::new(1_000_000, clock.clone());
        let options = server.options(Some(clock.clone() as Arc<dyn Clock>));
        let redis = RedisStore::connect(&options)
            .await
            .unwrap_or_else(|error| panic!("cannot connect the store: {error}"));
        let keys: Vec<(Vec<u8>, BanPolicy)> = (0..3)
            .map(|k| (identity(seed as usize * 10 + k), random_policy(&mut rng)))
            .collect();
        let (mut bans, mut escalated) = (0, 0);
        let mut levels = std::collections::HashMap::new();
        for step in 0..STEPS {
            let calls = random_request(&mut rng, &keys);
            let expected = memory.bans_now(&calls);
            let got = redis
                .bans(&calls)
                .await
                .unwrap_or_else(|error| panic!("seed {seed} step {step}: {error}"));
            assert_eq!(
                got, expected,
                "seed {seed} step {step}: redis (left) and memory (right) disagree on {calls:#?}"
            );
            // A ban starts when a strike raises the key's level; past the first, it escalates.
            for (call, outcome) in calls.iter().zip(&expected) {
                let before = levels.insert(call.key.clone(), outcome.level).unwrap_or(0);
                if call.action == BanAction::Strike && outcome.level > before {
                    bans += 1;
                    escalated += usize::from(before > 0);
                }
            }
            // Mostly small steps; sometimes far past any window, ban or memory.
            // Half seconds, so that steps land exactly on window and ban ends.
            let step_micros = if rng.random_bool(0.02) {
                rng.random_range(100..400) * SECOND
            } else if rng.random_bool(0.5) {
                rng.random_range(0..4) * SECOND / 2
            } else {
                rng.random_range(0..2 * SECOND)
            };
            clock.advance(step_micros);
        }
        assert!(
            bans >= 10 && escalated >= 3,
            "seed {seed}: {bans} bans, {escalated} escalated"
        );
    }
}
