//! The sync script (`hybrid_sync.lua`) adds hits as `core::arithmetic::hybrid::add_hits` does: random
//! sequences of (window, hits) items for fixed and sliding windows (epoch windows and calendar
//! months), hits of the current window, of the one before and of older ones, on a test clock
//! that moves through window edges; every state the script returns, and every state it keeps,
//! must be the core's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floodgate::core::arithmetic::algorithm::{Algorithm, Quota, State};
use floodgate::core::arithmetic::hybrid::add_hits;
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::store::redis::SyncItem;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floodgate_testkit::redis::RedisServer;

const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;
const SEEDS: u64 = 4;
const STEPS: usize = 150;

/// When a state stops meaning anything (what the script's TTL and `load_state` go by).
fn expires_at(quota: &Quota, state: &State) -> Micros {
    let tiling = quota.tiling();
    match state {
        State::FixedWindow { window_start, .. } => tiling.holding(*window_start).end,
        State::SlidingWindow { window_start, .. } => {
            tiling.after(tiling.holding(*window_start)).end
        }
        _ => Micros::MIN,
    }
}

fn quotas() -> Vec<Quota> {
    vec![
        Quota::new(50, Unit::Second).with_algorithm(Algorithm::FixedWindow),
        Quota::new(50, Unit::Second)
            .with_algorithm(Algorithm::SlidingWindow)
            .with_multiplier(3),
        Quota::new(7, Unit::Minute).with_algorithm(Algorithm::SlidingWindow),
        Quota::new(9, Unit::Month)
            .with_algorithm(Algorithm::FixedWindow)
            .with_calendar_months(true),
        Quota::new(9, Unit::Month)
            .with_algorithm(Algorithm::SlidingWindow)
            .with_calendar_months(true),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sync_script_adds_hits_as_the_core_does() {
    let server = RedisServer::start();
    for seed in 0..SEEDS {
        let clock = Arc::new(ManualClock::new(START + seed as i64 * 7_919));
        let store = server.store(Some(clock.clone() as Arc<dyn Clock>)).await;
        let quotas = quotas();
        let keys: Vec<String> = (0..quotas.len())
            .map(|index| format!("floodgate:{{sync{seed}}}:{index}"))
            .collect();
        let mut model: HashMap<usize, State> = HashMap::new();
        let mut rng = StdRng::seed_from_u64(seed);
        for step in 0..STEPS {
            let now = clock.now();
            let count = rng.random_range(0..=4);
            let mut items = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..count {
                let index = rng.random_range(0..quotas.len());
                let quota = &quotas[index];
                let tiling = quota.tiling();
                let here = tiling.holding(now);
                let window = match rng.random_range(0..6) {
                    0 => tiling.before(here),
                    1 => tiling.before(tiling.before(here)),
                    _ => here,
                };
                let hits = match rng.random_range(0..5) {
                    0 => 0,
                    1 => u64::from(u32::MAX) - 1,
                    _ => rng.random_range(1..20),
                };
                let live = model
                    .get(&index)
                    .filter(|state| expires_at(quota, state) > now)
                    .cloned();
                let after = add_hits(quota, live.as_ref(), window.start, hits);
                match &after {
                    Some(state) => {
                        model.insert(index, state.clone());
                    }
                    None => {
                        model.remove(&index);
                    }
                }
                expected.push(after);
                items.push(SyncItem {
                    key: keys[index].clone(),
                    quota: quota.clone(),
                    window_start: window.start,
                    hits,
                });
            }
            let reply = store
                .sync_hits(
                    &items,
                    (0, 0),
                    Duration::from_secs(1),
                    Duration::from_secs(2),
                )
                .await
                .unwrap_or_else(|error| panic!("seed {seed} step {step}: sync failed: {error}"));
            assert_eq!(
                reply.now, now,
                "seed {seed} step {step}: the test clock's now"
            );
            assert_eq!(
                reply.states, expected,
                "seed {seed} step {step}: items {items:?}"
            );
            // Mostly small steps, now and then past a window or a month edge.
            let step_by = match rng.random_range(0..10) {
                0 => 40 * 86_400 * MICROS_PER_SECOND,
                1..=3 => rng.random_range(1..3 * MICROS_PER_SECOND),
                _ => rng.random_range(0..200_000),
            };
            clock.advance(step_by);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_set_of_instances_forgets_those_that_stopped_syncing() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let store = server.store(Some(clock.clone() as Arc<dyn Clock>)).await;
    let horizon = Duration::from_secs(1);
    let deadline = Duration::from_secs(2);
    let sync = |instance: u64| store.sync_hits(&[], (instance, 0), horizon, deadline);
    assert_eq!(sync(11).await.map(|reply| reply.instances), Ok(1));
    assert_eq!(sync(12).await.map(|reply| reply.instances), Ok(2));
    assert_eq!(sync(12).await.map(|reply| reply.instances), Ok(2));
    // A read without an instance registers nobody.
    assert_eq!(sync(0).await.map(|reply| reply.instances), Ok(2));
    clock.advance(600_000);
    assert_eq!(sync(13).await.map(|reply| reply.instances), Ok(3));
    // 11 and 12 last synced 1.1 s ago: gone.
    clock.advance(500_000);
    assert_eq!(sync(13).await.map(|reply| reply.instances), Ok(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_sent_again_adds_its_hits_once() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(START));
    let store = server.store(Some(clock.clone() as Arc<dyn Clock>)).await;
    let quota = Quota::new(100, Unit::Minute).with_algorithm(Algorithm::FixedWindow);
    let start = quota.tiling().holding(START).start;
    let items = [SyncItem {
        key: "floodgate:{again}:k".to_owned(),
        quota: quota.clone(),
        window_start: start,
        hits: 5,
    }];
    let (horizon, deadline) = (Duration::from_secs(1), Duration::from_secs(2));
    let count = |reply: floodgate::store::redis::SyncReply| match reply.states.first() {
        Some(Some(State::FixedWindow { count, .. })) => *count,
        other => panic!("unexpected state {other:?}"),
    };
    let sync = |sequence: u64| store.sync_hits(&items, (7, sequence), horizon, deadline);
    assert_eq!(sync(1).await.map(count), Ok(5));
    // The answer to sync 1 was lost: it comes again, and adds nothing.
    assert_eq!(sync(1).await.map(count), Ok(5));
    assert_eq!(sync(2).await.map(count), Ok(10));
    // Another instance's numbers are its own.
    let other = store
        .sync_hits(&items, (8, 1), horizon, deadline)
        .await
        .map(count);
    assert_eq!(other, Ok(15));
}

/// On a Cluster a sync is one call per slot group: every counter's hits land on the node that
/// owns it, a sync sent again adds nothing in any slot, and each slot counts the instances
/// that sync there (an instance takes the largest count of its groups).
#[test]
fn a_sync_on_a_cluster_is_one_call_per_slot_group() {
    let cluster = floodgate_testkit::redis::RedisCluster::start(3);
    floodgate_testkit::runtime().block_on(async {
        let clock = Arc::new(ManualClock::new(START));
        let store = floodgate::store::redis::RedisStore::connect(
            &cluster.options(Some(clock.clone() as Arc<dyn Clock>)),
        )
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
        // Tags whose slots belong to more than one node, so the groups really are apart.
        let keys: Vec<String> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|tag| format!("floodgate:{{{tag}}}:k"))
            .collect();
        let owners: std::collections::BTreeSet<usize> = keys
            .iter()
            .map(|key| cluster.owner_of(cluster.slot_of(key)))
            .collect();
        assert!(owners.len() > 1, "every key on one node: {owners:?}");
        let quota = Quota::new(100, Unit::Minute).with_algorithm(Algorithm::FixedWindow);
        let start = quota.tiling().holding(START).start;
        let items: Vec<SyncItem> = keys
            .iter()
            .enumerate()
            .map(|(index, key)| SyncItem {
                key: key.clone(),
                quota: quota.clone(),
                window_start: start,
                hits: index as u64 + 1,
            })
            .collect();
        let counts = |reply: &floodgate::store::redis::SyncReply| -> Vec<u64> {
            reply
                .states
                .iter()
                .map(|state| match state {
                    Some(State::FixedWindow { count, .. }) => *count,
                    other => panic!("unexpected state {other:?}"),
                })
                .collect()
        };
        let first = synced(&store, &items, (7, 1)).await;
        assert_eq!(counts(&first), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(first.instances, 1);
        assert_eq!(first.now, START);
        // Its answer was lost: sent again, it adds nothing anywhere.
        let again = synced(&store, &items, (7, 1)).await;
        assert_eq!(counts(&again), vec![1, 2, 3, 4, 5, 6]);
        // Another instance syncs the first key's slot only: 7 sees it there, and takes it.
        let other = synced(&store, &items[..1], (8, 1)).await;
        assert_eq!((counts(&other), other.instances), (vec![2], 2));
        let next = synced(&store, &items, (7, 2)).await;
        assert_eq!(counts(&next), vec![3, 4, 6, 8, 10, 12]);
        assert_eq!(next.instances, 2);
        // Every counter lives on the node that owns its slot, beside its slot's bookkeeping.
        for (node, keys) in cluster
            .keys_per_node("floodgate:*")
            .await
            .into_iter()
            .enumerate()
        {
            for key in keys {
                assert_eq!(cluster.owner_of(cluster.slot_of(&key)), node, "{key}");
            }
        }
        // A sync with nothing to send still answers, from the `hybrid` tag's slot.
        let empty = synced(&store, &[], (9, 1)).await;
        assert_eq!((empty.states.len(), empty.instances), (0, 1));
    });
}

/// `store`'s sync of `items` under `numbering` (instance, sequence), which must succeed.
async fn synced(
    store: &floodgate::store::redis::RedisStore,
    items: &[SyncItem],
    numbering: (u64, u64),
) -> floodgate::store::redis::SyncReply {
    store
        .sync_hits(
            items,
            numbering,
            Duration::from_secs(1),
            Duration::from_secs(2),
        )
        .await
        .unwrap_or_else(|error| panic!("sync: {error}"))
}
