//! The embedded in-memory store: counters in a sharded hash map, one lock per shard. A request
//! locks only the shards its counters live in, in ascending order (so two requests can never
//! wait on each other in a cycle), evaluates, and charges all or none before unlocking.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::{Mutex, MutexGuard};
use siphasher::sip128::{Hasher128, SipHasher13};

use super::{Decided, Store, StoreError};
use crate::core::algorithm::{evaluate_reserving, Evaluation, Hits, State};
use crate::core::plan::Counter;
use crate::core::response::CounterOutcome;
use crate::core::time::{Clock, Micros};
use crate::core::verdict::{request_over_limit, Vote};

/// Enough shards that two cores rarely meet on one lock, few enough to sweep quickly.
const SHARDS: usize = 128;

/// How many entries an eviction looks at to find the one closest to expiry.
const EVICTION_SAMPLE: usize = 16;

/// A counter's key inside the store: a keyed 128-bit hash of the counter identity. The key is
/// random per process, so nobody can craft descriptor values that share someone else's counter.
/// Two `u64` halves rather than a `u128`, whose 16-byte alignment would pad every table entry.
#[derive(Clone, Copy, PartialEq, Eq)]
struct SlotKey {
    high: u64,
    low: u64,
}

impl std::hash::Hash for SlotKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.low);
    }
}

struct Slot {
    state: State,
    expires_at: Micros,
}

#[derive(Default)]
struct Shard {
    slots: HashMap<SlotKey, Slot, PassThroughHash>,
}

/// The slot keys are already uniform hashes: hashing them again would only cost time.
#[derive(Clone, Copy, Default)]
struct PassThroughHash;

impl std::hash::BuildHasher for PassThroughHash {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

struct PassThroughHasher(u64);

impl std::hash::Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Counters in memory, bounded by `max_keys`.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hash_keys: (u64, u64),
    max_keys: usize,
    /// Counters held across all shards; touched only when a counter is added or dropped.
    held: AtomicUsize,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    pub fn new(max_keys: usize, clock: Arc<dyn Clock>) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        Self {
            shards,
            hash_keys: (rand::random(), rand::random()),
            max_keys: max_keys.max(1),
            held: AtomicUsize::new(0),
            clock,
        }
    }

    /// Counters currently held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Bytes the counter tables occupy (not counting sliding-log entries on the heap).
    pub fn table_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().slots.allocation_size())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every expired counter; returns how many. One shard is locked at a time, and other
    /// tasks run after each: a pass over a million counters takes 10–14 ms, which on a
    /// single-threaded runtime every call would otherwise wait for.
    pub async fn sweep_expired(&self) -> usize {
        let now = self.clock.now();
        let mut dropped = 0;
        for shard in self.shards.iter() {
            dropped += self.sweep_shard(shard, now);
            tokio::task::yield_now().await;
        }
        dropped
    }

    fn sweep_shard(&self, shard: &Mutex<Shard>, now: Micros) -> usize {
        let mut shard = shard.lock();
        let before = shard.slots.len();
        shard.slots.retain(|_, slot| slot.expires_at > now);
        let dropped = before - shard.slots.len();
        self.held.fetch_sub(dropped, Ordering::Relaxed);
        dropped
    }

    /// Decides synchronously; the `Store` impl wraps this.
    pub fn decide_now(&self, counters: &[Counter], global_shadow: bool) -> Decided {
        let now = self.clock.now();
        let keys: Vec<(SlotKey, usize)> = counters
            .iter()
            .map(|counter| {
                let key = self.slot_key(&counter.key);
                (key, self.shard_of(key))
            })
            .collect();
        let mut locked = self.lock_shards(&keys);

        let mut evaluations: Vec<Evaluation> = Vec::with_capacity(counters.len());
        for (index, (counter, (key, shard))) in counters.iter().zip(&keys).enumerate() {
            // A counter named twice in one request sees what the earlier mention would charge.
            let earlier = keys[..index]
                .iter()
                .zip(&evaluations)
                .rev()
                .find(|((other, _), evaluation)| other == key && evaluation.admitted)
                .map(|(_, evaluation)| &evaluation.next_state);
            let stored = earlier.or_else(|| {
                locked
                    .get(*shard)
                    .and_then(|guard| guard.slots.get(key))
                    .filter(|slot| slot.expires_at > now)
                    .map(|slot| &slot.state)
            });
            let reserve = counter.quota.reserve(counter.share);
            evaluations.push(evaluate_reserving(
                &counter.quota,
                stored,
                now,
                counter.hits,
                reserve,
            ));
        }

        let votes: Vec<Vote> = counters
            .iter()
            .zip(&evaluations)
            .map(|(counter, evaluation)| Vote {
                descriptor: counter.descriptor,
                role: counter.role,
                admitted: evaluation.admitted,
            })
            .collect();
        let over_limit = request_over_limit(&votes, global_shadow);

        let mut outcomes = Vec::with_capacity(counters.len());
        for ((counter, (key, shard)), evaluation) in counters.iter().zip(&keys).zip(evaluations) {
            let charge = !over_limit && evaluation.admitted && counter.hits != Hits::CheckOnly;
            let snapshot = if charge {
                evaluation.committed
            } else {
                evaluation.uncommitted
            };
            outcomes.push(CounterOutcome {
                admitted: evaluation.admitted,
                snapshot,
                retry_after: evaluation.retry_after,
            });
            if charge {
                if let Some(guard) = locked.get_mut(*shard) {
                    self.store_slot(
                        guard,
                        *key,
                        evaluation.next_state,
                        evaluation.expires_at,
                        now,
                    );
                }
            }
        }
        Decided {
            outcomes,
            over_limit,
        }
    }

    fn slot_key(&self, identity: &[u8]) -> SlotKey {
        let mut hasher = SipHasher13::new_with_keys(self.hash_keys.0, self.hash_keys.1);
        std::hash::Hasher::write(&mut hasher, identity);
        let hash = hasher.finish128();
        SlotKey {
            high: hash.h1,
            low: hash.h2,
        }
    }

    fn shard_of(&self, key: SlotKey) -> usize {
        (key.high as usize) % self.shards.len()
    }

    /// Locks each shard the request needs once, in ascending order. The result is indexed by
    /// shard number; shards not needed are `None`.
    fn lock_shards(&self, keys: &[(SlotKey, usize)]) -> LockedShards<'_> {
        let mut needed: Vec<usize> = keys.iter().map(|(_, shard)| *shard).collect();
        needed.sort_unstable();
        needed.dedup();
        let guards = needed
            .into_iter()
            .filter_map(|index| self.shards.get(index).map(|shard| (index, shard.lock())))
            .collect();
        LockedShards { guards }
    }

    fn store_slot(
        &self,
        shard: &mut Shard,
        key: SlotKey,
        state: State,
        expires_at: Micros,
        now: Micros,
    ) {
        if let Some(slot) = shard.slots.get_mut(&key) {
            *slot = Slot { state, expires_at };
            return;
        }
        if self.held.load(Ordering::Relaxed) >= self.max_keys {
            let dropped = make_room(shard, now);
            self.held.fetch_sub(dropped, Ordering::Relaxed);
        }
        shard.slots.insert(key, Slot { state, expires_at });
        self.held.fetch_add(1, Ordering::Relaxed);
    }
}

/// Frees at least one place when the store is full (the shard may be empty: then the store holds
/// one counter more than `max_keys`, at most one per shard): this shard's expired counters first, else
/// the one closest to expiry among a few (it has the least budget left to forget; it starts
/// afresh if it comes back). Returns how many counters were dropped.
fn make_room(shard: &mut Shard, now: Micros) -> usize {
    let before = shard.slots.len();
    shard.slots.retain(|_, slot| slot.expires_at > now);
    if shard.slots.len() < before {
        return before - shard.slots.len();
    }
    let victim = shard
        .slots
        .iter()
        .take(EVICTION_SAMPLE)
        .min_by_key(|(_, slot)| slot.expires_at)
        .map(|(key, _)| *key);
    match victim {
        Some(victim) => usize::from(shard.slots.remove(&victim).is_some()),
        None => 0,
    }
}

struct LockedShards<'a> {
    guards: Vec<(usize, MutexGuard<'a, Shard>)>,
}

impl LockedShards<'_> {
    fn position(&self, shard: usize) -> Option<usize> {
        self.guards
            .binary_search_by_key(&shard, |(index, _)| *index)
            .ok()
    }

    fn get(&self, shard: usize) -> Option<&Shard> {
        self.position(shard)
            .and_then(|at| self.guards.get(at))
            .map(|(_, guard)| &**guard)
    }

    fn get_mut(&mut self, shard: usize) -> Option<&mut Shard> {
        self.position(shard)
            .and_then(|at| self.guards.get_mut(at))
            .map(|(_, guard)| &mut **guard)
    }
}

impl Store for MemoryStore {
    async fn decide(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        Ok(self.decide_now(counters, global_shadow))
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::algorithm::{Algorithm, Quota, Share};
    use crate::core::time::{ManualClock, MICROS_PER_SECOND};
    use crate::core::unit::Unit;
    use crate::core::verdict::Role;

    const START: Micros = 1_796_083_200 * MICROS_PER_SECOND;

    fn counter(descriptor: usize, key: &str, limit: u32, hits: Hits) -> Counter {
        Counter {
            descriptor,
            key: key.as_bytes().to_vec(),
            quota: Quota::new(limit, Unit::Minute).with_algorithm(Algorithm::FixedWindow),
            hits,
            role: Role::Enforced,
            share: Share::FULL,
        }
    }

    fn store(max_keys: usize) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(START));
        (MemoryStore::new(max_keys, clock.clone()), clock)
    }

    #[test]
    fn a_rejected_request_charges_nothing() {
        let (store, _) = store(100);
        let exhausted = counter(0, "a", 1, Hits::Charge(1));
        assert!(
            !store
                .decide_now(std::slice::from_ref(&exhausted), false)
                .over_limit
        );
        let fresh = counter(1, "b", 5, Hits::Charge(1));
        for _ in 0..3 {
            let decided = store.decide_now(&[fresh.clone(), exhausted.clone()], false);
            assert!(decided.over_limit);
            assert_eq!(decided.outcomes[0].snapshot.remaining, 5);
        }
        let alone = store.decide_now(&[fresh], false);
        assert_eq!(alone.outcomes[0].snapshot.remaining, 4);
    }

    #[test]
    fn a_counter_named_twice_is_charged_twice() {
        let (store, _) = store(100);
        let once = counter(0, "same", 1, Hits::Charge(1));
        let twice = counter(1, "same", 1, Hits::Charge(1));
        let decided = store.decide_now(&[once.clone(), twice], false);
        assert!(
            decided.over_limit,
            "the second mention sees the first one's charge"
        );
        assert_eq!(
            store.decide_now(&[once], false).outcomes[0]
                .snapshot
                .remaining,
            0
        );
    }

    #[test]
    fn global_shadow_charges_what_admitted() {
        let (store, _) = store(100);
        let small = counter(0, "s", 1, Hits::Charge(1));
        let big = counter(1, "b", 10, Hits::Charge(1));
        store.decide_now(std::slice::from_ref(&small), false);
        let decided = store.decide_now(&[small, big.clone()], true);
        assert!(!decided.over_limit);
        assert!(!decided.outcomes[0].admitted);
        assert_eq!(decided.outcomes[1].snapshot.remaining, 9);
    }

    #[test]
    fn memory_stays_within_max_keys() {
        let (store, _) = store(1_000);
        for key in 0..5_000 {
            store.decide_now(&[counter(0, &format!("k{key}"), 3, Hits::Charge(1))], false);
        }
        // A new counter whose shard is empty has nobody to evict there (other shards are not
        // locked), so the bound can be passed by at most one counter per shard.
        assert!(
            store.len() <= 1_000 + SHARDS,
            "{} counters held",
            store.len()
        );
        let held: usize = store.shards.iter().map(|s| s.lock().slots.len()).sum();
        assert_eq!(held, store.len());
    }

    #[tokio::test]
    async fn expired_counters_are_swept_and_forgotten() {
        let (store, clock) = store(100);
        let c = counter(0, "x", 1, Hits::Charge(1));
        store.decide_now(std::slice::from_ref(&c), false);
        assert!(store.decide_now(std::slice::from_ref(&c), false).over_limit);
        clock.advance(60 * MICROS_PER_SECOND);
        assert_eq!(store.sweep_expired().await, 1);
        assert!(store.is_empty());
        assert!(!store.decide_now(&[c], false).over_limit);
    }

    #[tokio::test]
    async fn a_sweep_lets_other_tasks_run_between_shards() {
        let (store, clock) = store(10_000);
        for key in 0..5_000 {
            store.decide_now(&[counter(0, &format!("k{key}"), 3, Hits::Charge(1))], false);
        }
        clock.advance(60 * MICROS_PER_SECOND);
        // A call arriving on the same (single) thread during the sweep: it runs between shards.
        let turns = Arc::new(AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let turns = Arc::clone(&turns);
            async move {
                loop {
                    turns.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            }
        });
        assert_eq!(store.sweep_expired().await, 5_000);
        ticker.abort();
        assert!(store.is_empty());
        assert!(
            turns.load(Ordering::Relaxed) >= SHARDS - 1,
            "other tasks ran {} times during a sweep of {SHARDS} shards",
            turns.load(Ordering::Relaxed)
        );
    }

    #[test]
    fn check_only_never_stores() {
        let (store, _) = store(100);
        let check = counter(0, "c", 2, Hits::CheckOnly);
        assert!(!store.decide_now(&[check], false).over_limit);
        assert!(store.is_empty());
    }
}
