//! The embedded in-memory store: counters in a sharded hash map, one lock per shard. A request
//! locks only the shards its counters live in, in ascending order (so two requests can never
//! wait on each other in a cycle), evaluates, and charges all or none before unlocking.

use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::{Mutex, MutexGuard};
use siphasher::sip128::{Hasher128, SipHasher13};

use super::{Decided, Store, StoreError};
use crate::core::algorithm::{evaluate, Evaluation, Hits, State};
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
type SlotKey = u128;

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
    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

/// Counters in memory, bounded by `max_keys`.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hash_keys: (u64, u64),
    max_keys_per_shard: usize,
    clock: Arc<dyn Clock>,
}

impl MemoryStore {
    pub fn new(max_keys: usize, clock: Arc<dyn Clock>) -> Self {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        Self {
            shards,
            hash_keys: (rand::random(), rand::random()),
            max_keys_per_shard: max_keys.div_ceil(SHARDS).max(1),
            clock,
        }
    }

    /// Counters currently held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().slots.len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every expired counter; returns how many. One shard is locked at a time.
    pub fn sweep_expired(&self) -> usize {
        let now = self.clock.now();
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = shard.lock();
                let before = shard.slots.len();
                shard.slots.retain(|_, slot| slot.expires_at > now);
                before - shard.slots.len()
            })
            .sum()
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
            evaluations.push(evaluate(&counter.quota, stored, now, counter.hits));
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
        hasher.finish128().as_u128()
    }

    fn shard_of(&self, key: SlotKey) -> usize {
        ((key >> 64) as usize) % self.shards.len()
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
        if shard.slots.len() >= self.max_keys_per_shard {
            make_room(shard, now, self.max_keys_per_shard);
        }
        shard.slots.insert(key, Slot { state, expires_at });
    }
}

/// Frees one place in a full shard: expired counters first, else the one closest to expiry
/// among a few (it has the least budget left to forget). An evicted counter starts afresh.
fn make_room(shard: &mut Shard, now: Micros, max_keys: usize) {
    shard.slots.retain(|_, slot| slot.expires_at > now);
    if shard.slots.len() < max_keys {
        return;
    }
    let victim = shard
        .slots
        .iter()
        .take(EVICTION_SAMPLE)
        .min_by_key(|(_, slot)| slot.expires_at)
        .map(|(key, _)| *key);
    if let Some(victim) = victim {
        shard.slots.remove(&victim);
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
