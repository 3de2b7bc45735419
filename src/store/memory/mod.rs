//! The embedded in-memory store: counters in a sharded hash map, one lock per shard. A request
//! locks only the shards its counters live in, in ascending order (so two requests can never
//! wait on each other in a cycle), evaluates, and charges what the core settles (all or none by
//! default, `core::decision::charging`) before unlocking.
//!
//! `--max-keys` bounds the counters held. A request that needs more room first frees it
//! (`shard.rs` says in which order): in its own shards, then in the others, never forgetting an
//! exhausted counter, which would hand its budget back. A shard is locked out of order only
//! with `try_lock`, which never waits (the ascending order keeps every wait acyclic), or above
//! every shard the request holds. When nothing but exhausted counters is left, the request is
//! refused with [`StoreError::Full`], charging nothing, and the failure policy answers it.

mod bans;
mod held;
mod leases;
#[cfg(test)]
mod priority_answers;
mod shard;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use siphasher::sip128::{Hasher128, SipHasher13};
use smallvec::SmallVec;

use self::bans::BanTable;
use self::leases::LeaseTable;
use self::shard::{Freed, Shard, Slot, SlotKey};
use super::{Decided, HeldCounter, Store, StoreError};
use crate::core::arithmetic::ban::BanOutcome;
use crate::core::arithmetic::failure::LogPace;
use crate::core::arithmetic::lease::{LeaseCall, LeaseOutcome};
use crate::core::decision::bans::BanCall;
use crate::core::decision::charging::{settle, Charging};
use crate::core::decision::plan::Counter;
use crate::core::ground::time::{Clock, Micros};

/// Enough shards that two cores rarely meet on one lock, few enough to sweep quickly.
const SHARDS: usize = 128;

/// Counters a sweep looks at between two yields to the runtime: about 0.1 ms of work.
const SWEEP_SLICE: usize = 8_192;

/// What sweeping one shard did.
struct Swept {
    dropped: usize,
    /// The counters it held before: what the sweep had to look at.
    looked_at: usize,
}

/// At most one "full of exhausted counters" log line per this many milliseconds.
const FULL_LOG_INTERVAL_MS: u64 = 10_000;

const BACKEND: &str = "memory";

/// Counters in memory, bounded by `max_keys`.
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hash_keys: (u64, u64),
    max_keys: usize,
    /// Counters held across all shards; touched only when a counter is added or dropped.
    held: AtomicUsize,
    clock: Arc<dyn Clock>,
    /// Told of evictions and refusals (`None`: nobody listens, e.g. metrics are off).
    observer: Option<Arc<dyn EvictionObserver>>,
    /// Paces the log line of a store full of exhausted counters (it refuses every new one).
    full_log: Mutex<LogPace>,
    /// Which counters a request charges (`core::decision::charging`).
    charging: Charging,
    /// The concurrency rules' leases (`core::arithmetic::lease`).
    leases: LeaseTable,
    /// The ban records of `ban:` rules (`core::arithmetic::ban`).
    bans: BanTable,
}

/// Who hears of the counters the store had to forget, and of the requests it refused because
/// only exhausted counters were left to forget (the metrics; wired by whoever builds the store).
pub trait EvictionObserver: Send + Sync {
    /// `counters` live counters forgotten to make room.
    fn evicted(&self, counters: usize);
    /// A request refused because only exhausted counters were left to forget.
    fn refused_full(&self);
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
            observer: None,
            full_log: Mutex::new(LogPace::new(FULL_LOG_INTERVAL_MS)),
            charging: Charging::AllOrNothing,
            leases: LeaseTable::default(),
            bans: BanTable::default(),
        }
    }

    /// The store, charging requests as `charging` says (all or nothing unless told).
    pub fn charging(mut self, charging: Charging) -> Self {
        self.charging = charging;
        self
    }

    /// The store, telling `observer` of its evictions and refusals.
    pub fn observed_by(mut self, observer: Option<Arc<dyn EvictionObserver>>) -> Self {
        self.observer = observer;
        self
    }

    /// Counters currently held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Bytes the counter tables occupy (not counting sliding-log entries on the heap).
    pub fn table_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().allocation_size())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every expired counter; returns how many. One shard is locked at a time, and other
    /// tasks run once [`SWEEP_SLICE`] counters have been looked at since they last did: a pass
    /// over a million counters takes 10–14 ms, which on a single-threaded runtime every call
    /// would otherwise wait for, while yielding after every shard of a small table woke the
    /// runtime 128 times a second for nothing (half of an idle floodgate's CPU).
    pub async fn sweep_expired(&self) -> usize {
        let now = self.clock.now();
        let mut dropped = 0;
        let mut looked_at = 0;
        for shard in self.shards.iter() {
            let swept = self.sweep_shard(shard, now);
            dropped += swept.dropped;
            looked_at += swept.looked_at;
            if looked_at >= SWEEP_SLICE {
                looked_at = 0;
                tokio::task::yield_now().await;
            }
        }
        dropped + self.leases.sweep(now) + self.bans.sweep(now)
    }

    /// Lease counters held (concurrency rules), expired ones included until swept.
    pub fn lease_counters(&self) -> usize {
        self.leases.len()
    }

    /// Decides ban calls synchronously; the `Store` impl wraps this.
    pub fn bans_now(&self, calls: &[BanCall]) -> Vec<BanOutcome> {
        if calls.is_empty() {
            return Vec::new();
        }
        self.bans.decide(calls, self.clock.now(), self.max_keys)
    }

    /// Decides lease calls synchronously; the `Store` impl wraps this.
    pub fn leases_now(&self, calls: &[LeaseCall]) -> Result<Vec<LeaseOutcome>, StoreError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        self.leases.decide(calls, self.clock.now(), self.max_keys)
    }

    fn sweep_shard(&self, shard: &Mutex<Shard>, now: Micros) -> Swept {
        let mut shard = shard.lock();
        let looked_at = shard.len();
        let dropped = shard.drop_expired(now);
        self.held.fetch_sub(dropped, Ordering::Relaxed);
        Swept { dropped, looked_at }
    }

    /// Decides synchronously; the `Store` impl wraps this. [`StoreError::Full`] when the
    /// request needs a new counter and every counter held is exhausted: nothing is charged.
    pub fn decide_now(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        let now = self.clock.now();
        let keys: SmallVec<[(SlotKey, usize); 4]> = counters
            .iter()
            .map(|counter| {
                let key = self.slot_key(&counter.key);
                (key, self.shard_of(key))
            })
            .collect();
        let mut locked = self.lock_shards(&keys);

        let settled = settle(counters, self.charging, global_shadow, now, |index| {
            let (key, shard) = keys.get(index)?;
            locked
                .get(*shard)
                .and_then(|guard| guard.get(key))
                .filter(|slot| slot.expires_at > now)
                .map(|slot| &slot.state)
        });

        let new_keys = self.new_keys(&locked, &keys, settled.kept.iter().copied());
        if !new_keys.is_empty() {
            self.make_room_for(&mut locked, &keys, new_keys.len(), now)?;
        }

        let outcomes = settled.outcomes().collect();
        let over_limit = settled.over_limit;
        let kept = settled.kept.iter().copied();
        for ((key, shard), (evaluation, kept)) in
            keys.iter().zip(settled.evaluations.into_iter().zip(kept))
        {
            if !kept {
                continue;
            }
            if let Some(guard) = locked.get_mut(*shard) {
                let slot = Slot::new(
                    evaluation.next_state,
                    evaluation.expires_at,
                    evaluation.fullness,
                    now,
                );
                if guard.put(*key, slot) {
                    self.held.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(Decided {
            outcomes,
            over_limit,
        })
    }

    /// The distinct keys that the charges (one flag per key) add to the store, when it is so
    /// full that they need room; empty otherwise, which costs the usual request one comparison.
    fn new_keys(
        &self,
        locked: &LockedShards<'_>,
        keys: &[(SlotKey, usize)],
        charges: impl Iterator<Item = bool> + Clone,
    ) -> Vec<SlotKey> {
        let charged = charges.clone().filter(|charge| *charge).count();
        if self.held.load(Ordering::Relaxed) + charged <= self.max_keys {
            return Vec::new();
        }
        let mut new_keys: Vec<SlotKey> = Vec::new();
        for ((key, shard), charge) in keys.iter().zip(charges) {
            // An expired slot is overwritten in place: only a missing one adds a counter.
            let held = locked
                .get(*shard)
                .is_some_and(|guard| guard.get(key).is_some());
            if charge && !held && !new_keys.contains(key) {
                new_keys.push(*key);
            }
        }
        new_keys
    }

    /// Frees places until `needed` more fit under `max_keys`, keeping the request's own
    /// counters; [`StoreError::Full`] when only exhausted counters are left to free.
    fn make_room_for(
        &self,
        locked: &mut LockedShards<'_>,
        keys: &[(SlotKey, usize)],
        needed: usize,
        now: Micros,
    ) -> Result<(), StoreError> {
        let keep: Vec<SlotKey> = keys.iter().map(|(key, _)| *key).collect();
        while self.held.load(Ordering::Relaxed) + needed > self.max_keys {
            if self.free_a_place(locked, &keep, now) == 0 {
                self.refuse_full();
                return Err(StoreError::Full {
                    max_keys: self.max_keys,
                });
            }
        }
        Ok(())
    }

    /// Frees what one shard can: the request's own shards first, then every other one. How
    /// many counters were dropped (0: only exhausted counters, or the request's, are left).
    fn free_a_place(&self, locked: &mut LockedShards<'_>, keep: &[SlotKey], now: Micros) -> usize {
        for (_, guard) in locked.guards.iter_mut() {
            let freed = self.free_in(guard, keep, now);
            if freed > 0 {
                return freed;
            }
        }
        let highest = locked.guards.last().map_or(0, |(index, _)| *index);
        for index in (highest + 1..SHARDS).chain(0..highest) {
            if locked.position(index).is_some() {
                continue;
            }
            let Some(shard) = self.shards.get(index) else {
                continue;
            };
            // Above every shard held the ascending order allows a wait; below, it does not (a
            // request holding that shard may be waiting for one of ours). A shard busy now is
            // skipped: the request is then refused although it might have had room.
            let guard = if index > highest {
                Some(shard.lock())
            } else {
                shard.try_lock()
            };
            if let Some(mut guard) = guard {
                let freed = self.free_in(&mut guard, keep, now);
                if freed > 0 {
                    return freed;
                }
            }
        }
        0
    }

    fn free_in(&self, shard: &mut Shard, keep: &[SlotKey], now: Micros) -> usize {
        if !shard.may_free(now) {
            return 0;
        }
        let freed: Freed = shard.make_room(now, keep);
        self.held.fetch_sub(freed.total(), Ordering::Relaxed);
        if freed.evicted > 0 {
            if let Some(observer) = &self.observer {
                observer.evicted(freed.evicted);
            }
        }
        freed.total()
    }

    /// Counts a request refused by a store full of exhausted counters, and says so in the log
    /// now and then.
    fn refuse_full(&self) {
        if let Some(observer) = &self.observer {
            observer.refused_full();
        }
        let now_ms = u64::try_from(self.clock.now() / 1_000).unwrap_or(0);
        if let Some(suppressed) = self.full_log.lock().allow(now_ms) {
            tracing::warn!(
                held = self.len(),
                max_keys = self.max_keys,
                suppressed,
                "the memory store holds only exhausted counters: requests that need a new one are \
                 answered by the failure policy until some expire or regain room; raise --max-keys"
            );
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
        // The shard numbers sorted, then their guards; both on the stack for the usual few.
        let mut needed: SmallVec<[usize; 4]> = keys.iter().map(|(_, shard)| *shard).collect();
        needed.sort_unstable();
        needed.dedup();
        let guards = needed
            .into_iter()
            .filter_map(|index| self.shards.get(index).map(|shard| (index, shard.lock())))
            .collect();
        LockedShards { guards }
    }
}

/// The shards one request holds, in ascending order of their index.
struct LockedShards<'a> {
    guards: SmallVec<[(usize, MutexGuard<'a, Shard>); 4]>,
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
        self.decide_now(counters, global_shadow)
    }

    async fn leases(&self, calls: &[LeaseCall]) -> Result<Vec<LeaseOutcome>, StoreError> {
        self.leases_now(calls)
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    async fn held(&self, counters: &[Counter]) -> Result<Vec<Option<HeldCounter>>, StoreError> {
        Ok(self.held_now(counters))
    }

    async fn reset(&self, counters: &[Counter]) -> Result<usize, StoreError> {
        Ok(self.reset_now(counters))
    }

    async fn bans(&self, calls: &[BanCall]) -> Result<Vec<BanOutcome>, StoreError> {
        Ok(self.bans_now(calls))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arithmetic::algorithm::{Algorithm, Hits, Quota, Share};
    use crate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
    use crate::core::ground::unit::Unit;
    use crate::core::ground::verdict::Role;

    const START: Micros = 1_796_083_200 * MICROS_PER_SECOND;

    fn fixed(limit: u32, unit: Unit) -> Quota {
        Quota::new(limit, unit).with_algorithm(Algorithm::FixedWindow)
    }

    /// A quota of `algorithm` whose capacity is `limit` (a leaky bucket's is its burst + 1).
    fn with_capacity(algorithm: Algorithm, limit: u32) -> Quota {
        let quota = Quota::new(limit, Unit::Minute).with_algorithm(algorithm);
        match algorithm {
            Algorithm::LeakyBucket => quota.with_burst(limit - 1),
            _ => quota,
        }
    }

    fn counter_of(quota: &Quota, descriptor: usize, key: &str, hits: Hits) -> Counter {
        Counter {
            descriptor,
            key: key.as_bytes().to_vec(),
            quota: quota.clone(),
            hits,
            role: Role::Enforced,
            share: Share::FULL,
        }
    }

    fn counter(descriptor: usize, key: &str, limit: u32, hits: Hits) -> Counter {
        counter_of(&fixed(limit, Unit::Minute), descriptor, key, hits)
    }

    fn store(max_keys: usize) -> (MemoryStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(START));
        (MemoryStore::new(max_keys, clock.clone()), clock)
    }

    fn decide(store: &MemoryStore, counters: &[Counter]) -> Decided {
        store
            .decide_now(counters, false)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// Charges once each of `count` counters `prefix0`, `prefix1`… of `limit` a minute.
    fn charge_each(store: &MemoryStore, prefix: &str, count: usize, limit: u32) {
        for key in 0..count {
            decide(
                store,
                &[counter(
                    0,
                    &format!("{prefix}{key}"),
                    limit,
                    Hits::Charge(1),
                )],
            );
        }
    }

    fn remaining(store: &MemoryStore, quota: &Quota, key: &str) -> u64 {
        decide(store, &[counter_of(quota, 0, key, Hits::PEEK)]).outcomes[0]
            .snapshot
            .remaining
    }

    fn shard_of_key(store: &MemoryStore, key: &str) -> usize {
        store.shard_of(store.slot_key(key.as_bytes()))
    }

    /// `count` keys starting with `prefix` whose counters all live in one shard.
    fn keys_in_one_shard(store: &MemoryStore, prefix: &str, count: usize) -> Vec<String> {
        keys_in_one_shard_where(store, prefix, count, |_| true)
    }

    /// `count` keys starting with `prefix` whose counters all live in one shard `wanted` accepts.
    fn keys_in_one_shard_where(
        store: &MemoryStore,
        prefix: &str,
        count: usize,
        wanted: impl Fn(usize) -> bool,
    ) -> Vec<String> {
        let mut by_shard: Vec<Vec<String>> = vec![Vec::new(); SHARDS];
        for index in 0..SEARCH_LIMIT {
            let key = format!("{prefix}{index}");
            let shard = shard_of_key(store, &key);
            if !wanted(shard) {
                continue;
            }
            let group = &mut by_shard[shard];
            group.push(key);
            if group.len() == count {
                return std::mem::take(group);
            }
        }
        panic!("no {count} keys {prefix}… in one wanted shard among {SEARCH_LIMIT}")
    }

    /// How many keys a search tries before it gives up (the hash keys are random: a search
    /// that could never succeed must fail, not hang).
    const SEARCH_LIMIT: usize = 1_000_000;

    /// A key starting with `prefix` in a shard `wanted` accepts.
    fn key_where(store: &MemoryStore, prefix: &str, wanted: impl Fn(usize) -> bool) -> String {
        (0..SEARCH_LIMIT)
            .map(|index| format!("{prefix}{index}"))
            .find(|key| wanted(shard_of_key(store, key)))
            .unwrap_or_else(|| panic!("no key {prefix}… in a wanted shard among {SEARCH_LIMIT}"))
    }

    #[test]
    fn a_rejected_request_charges_nothing() {
        let (store, _) = store(100);
        let exhausted = counter(0, "a", 1, Hits::Charge(1));
        assert!(!decide(&store, std::slice::from_ref(&exhausted)).over_limit);
        let fresh = counter(1, "b", 5, Hits::Charge(1));
        for _ in 0..3 {
            let decided = decide(&store, &[fresh.clone(), exhausted.clone()]);
            assert!(decided.over_limit);
            assert_eq!(decided.outcomes[0].snapshot.remaining, 5);
        }
        let alone = decide(&store, &[fresh]);
        assert_eq!(alone.outcomes[0].snapshot.remaining, 4);
    }

    #[test]
    fn every_descriptor_charges_the_fresh_one_and_counts_the_refused_hit() {
        let (store, _) = store(100);
        let store = store.charging(Charging::EveryDescriptor);
        let exhausted = counter(0, "a", 1, Hits::Charge(1));
        assert!(!decide(&store, std::slice::from_ref(&exhausted)).over_limit);
        let fresh = counter(1, "b", 5, Hits::Charge(1));
        for charged in 1..=3 {
            let decided = decide(&store, &[fresh.clone(), exhausted.clone()]);
            assert!(decided.over_limit);
            assert!(decided.outcomes.iter().all(|outcome| outcome.charged));
            assert_eq!(decided.outcomes[0].snapshot.remaining, 5 - charged);
        }
        // "a" counted 1 + 3 hits: 3 given back still leave it full.
        let refund = counter(0, "a", 1, Hits::Refund(3));
        decide(&store, std::slice::from_ref(&refund));
        assert!(decide(&store, &[exhausted]).over_limit);
    }

    #[test]
    fn a_counter_named_twice_is_charged_twice() {
        let (store, _) = store(100);
        let once = counter(0, "same", 1, Hits::Charge(1));
        let twice = counter(1, "same", 1, Hits::Charge(1));
        let decided = decide(&store, &[once.clone(), twice]);
        assert!(
            decided.over_limit,
            "the second mention sees the first one's charge"
        );
        assert_eq!(decide(&store, &[once]).outcomes[0].snapshot.remaining, 0);
    }

    #[test]
    fn global_shadow_charges_what_admitted() {
        let (store, _) = store(100);
        let small = counter(0, "s", 1, Hits::Charge(1));
        let big = counter(1, "b", 10, Hits::Charge(1));
        decide(&store, std::slice::from_ref(&small));
        let decided = store
            .decide_now(&[small, big.clone()], true)
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(!decided.over_limit);
        assert!(!decided.outcomes[0].admitted);
        assert_eq!(decided.outcomes[1].snapshot.remaining, 9);
    }

    #[test]
    fn memory_stays_within_max_keys() {
        let (store, _) = store(1_000);
        charge_each(&store, "k", 5_000, 3);
        assert_eq!(store.len(), 1_000);
        let held: usize = store.shards.iter().map(|s| s.lock().len()).sum();
        assert_eq!(held, store.len());
    }

    #[test]
    fn an_exhausted_counter_survives_a_flood_of_unique_keys() {
        for algorithm in Algorithm::ALL {
            let (store, _) = store(100);
            let victim = counter_of(&with_capacity(algorithm, 2), 0, "victim", Hits::Charge(1));
            while !decide(&store, std::slice::from_ref(&victim)).over_limit {}
            let flood = with_capacity(algorithm, 3);
            for key in 0..5_000 {
                let decided = decide(
                    &store,
                    &[counter_of(&flood, 0, &format!("f{key}"), Hits::Charge(1))],
                );
                assert!(!decided.over_limit, "{algorithm}");
            }
            assert!(store.len() <= 100, "{algorithm}: {} held", store.len());
            assert!(
                decide(&store, std::slice::from_ref(&victim)).over_limit,
                "{algorithm}: the victim's counter was forgotten"
            );
        }
    }

    #[test]
    fn the_least_used_counter_is_forgotten_first() {
        let (store, _) = store(3);
        let quota = fixed(10, Unit::Minute);
        let keys = keys_in_one_shard(&store, "k", 4);
        for (key, hits) in keys.iter().zip([9, 1, 5]) {
            decide(&store, &[counter_of(&quota, 0, key, Hits::Charge(hits))]);
        }
        decide(&store, &[counter_of(&quota, 0, &keys[3], Hits::Charge(1))]);
        assert_eq!(store.len(), 3);
        assert_eq!(remaining(&store, &quota, &keys[0]), 1);
        assert_eq!(
            remaining(&store, &quota, &keys[1]),
            10,
            "the least used went"
        );
        assert_eq!(remaining(&store, &quota, &keys[2]), 5);
    }

    #[test]
    fn the_nearest_expiry_breaks_a_tie() {
        let (store, _) = store(2);
        let keys = keys_in_one_shard(&store, "t", 3);
        let per_minute = fixed(2, Unit::Minute);
        let per_hour = fixed(2, Unit::Hour);
        decide(
            &store,
            &[counter_of(&per_hour, 0, &keys[0], Hits::Charge(1))],
        );
        decide(
            &store,
            &[counter_of(&per_minute, 0, &keys[1], Hits::Charge(1))],
        );
        decide(
            &store,
            &[counter_of(&per_hour, 0, &keys[2], Hits::Charge(1))],
        );
        assert_eq!(remaining(&store, &per_hour, &keys[0]), 1);
        assert_eq!(
            remaining(&store, &per_minute, &keys[1]),
            2,
            "the one expiring first went"
        );
    }

    #[test]
    fn a_store_full_of_exhausted_counters_refuses_new_ones_and_stores_nothing() {
        let (store, clock) = store(10);
        charge_each(&store, "e", 10, 1);
        let new = [
            counter(0, "n1", 5, Hits::Charge(1)),
            counter(1, "n2", 5, Hits::Charge(1)),
        ];
        assert_eq!(
            store.decide_now(&new, false),
            Err(StoreError::Full { max_keys: 10 })
        );
        assert_eq!(store.len(), 10);
        assert_eq!(remaining(&store, &fixed(5, Unit::Minute), "n1"), 5);
        // The counters held still decide.
        assert!(decide(&store, &[counter(0, "e3", 1, Hits::Charge(1))]).over_limit);

        clock.advance(60 * MICROS_PER_SECOND);
        assert!(
            !decide(&store, &new).over_limit,
            "expired counters make room"
        );
    }

    #[test]
    fn an_exhausted_counter_is_forgotten_once_it_has_room_again() {
        let (store, clock) = store(1);
        let bucket = with_capacity(Algorithm::TokenBucket, 2);
        let victim = counter_of(&bucket, 0, "victim", Hits::Charge(2));
        assert!(!decide(&store, std::slice::from_ref(&victim)).over_limit);
        let newcomer = counter_of(&bucket, 0, "new", Hits::Charge(1));
        assert_eq!(
            store.decide_now(std::slice::from_ref(&newcomer), false),
            Err(StoreError::Full { max_keys: 1 })
        );
        // One token back after 30 s: the victim has room, and may go.
        clock.advance(29 * MICROS_PER_SECOND);
        assert!(store
            .decide_now(std::slice::from_ref(&newcomer), false)
            .is_err());
        clock.advance(MICROS_PER_SECOND);
        assert!(!decide(&store, &[newcomer]).over_limit);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn room_is_made_in_another_shard_when_the_own_holds_only_exhausted_counters() {
        // The other shard above the request's (locked in order) and below it (tried).
        for other_is_higher in [true, false] {
            let (store, _) = store(2);
            // A shard with another above it (or below it): the hash keys are random.
            let has_other = |shard: usize| {
                if other_is_higher {
                    shard + 1 < SHARDS
                } else {
                    shard > 0
                }
            };
            let prefix = if other_is_higher { "h" } else { "l" };
            let pair = keys_in_one_shard_where(&store, prefix, 2, has_other);
            let own = shard_of_key(&store, &pair[0]);
            let roomy = key_where(&store, "r", |shard| {
                shard != own && (shard > own) == other_is_higher
            });
            let victim = counter(0, &pair[0], 1, Hits::Charge(1));
            decide(&store, std::slice::from_ref(&victim));
            decide(&store, &[counter(0, &roomy, 5, Hits::Charge(1))]);
            decide(&store, &[counter(0, &pair[1], 5, Hits::Charge(1))]);
            assert_eq!(store.len(), 2);
            assert!(decide(&store, &[victim]).over_limit, "the victim stays");
            assert_eq!(remaining(&store, &fixed(5, Unit::Minute), &roomy), 5);
        }
    }

    #[test]
    fn requests_making_room_at_once_on_many_threads_all_finish() {
        let (store, _) = store(64);
        let store = Arc::new(store);
        charge_each(&store, "e", 32, 1);
        let threads: Vec<_> = (0..4)
            .map(|thread| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for round in 0..2_000 {
                        let counters: Vec<Counter> = (0..3)
                            .map(|n| {
                                counter(n, &format!("t{thread}-{round}-{n}"), 5, Hits::Charge(1))
                            })
                            .collect();
                        match store.decide_now(&counters, false) {
                            Ok(_) | Err(StoreError::Full { .. }) => {}
                            Err(other) => panic!("{other}"),
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|_| panic!("a deciding thread panicked"));
        }
        assert!(store.len() <= 64 + 4 * 3, "{} held", store.len());
        for key in 0..32 {
            let exhausted = counter(0, &format!("e{key}"), 1, Hits::Charge(1));
            assert!(
                decide(&store, &[exhausted]).over_limit,
                "e{key} was forgotten"
            );
        }
    }

    #[tokio::test]
    async fn expired_counters_are_swept_and_forgotten() {
        let (store, clock) = store(100);
        let c = counter(0, "x", 1, Hits::Charge(1));
        decide(&store, std::slice::from_ref(&c));
        assert!(decide(&store, std::slice::from_ref(&c)).over_limit);
        clock.advance(60 * MICROS_PER_SECOND);
        assert_eq!(store.sweep_expired().await, 1);
        assert!(store.is_empty());
        assert!(!decide(&store, &[c]).over_limit);
    }

    /// Expires `counters` counters, then sweeps them while another task on the same (single)
    /// thread counts its turns; how many turns it got during the sweep.
    async fn turns_during_a_sweep_of(counters: usize) -> usize {
        let (store, clock) = store(counters);
        charge_each(&store, "k", counters, 3);
        clock.advance(60 * MICROS_PER_SECOND);
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
        assert_eq!(store.sweep_expired().await, counters);
        ticker.abort();
        assert!(store.is_empty());
        turns.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_sweep_of_many_counters_lets_other_tasks_run_along_the_way() {
        let turns = turns_during_a_sweep_of(3 * SWEEP_SLICE + 1_000).await;
        assert!(
            turns >= 3,
            "other tasks ran {turns} times while {} counters were swept",
            3 * SWEEP_SLICE + 1_000
        );
    }

    #[tokio::test]
    async fn a_sweep_of_a_small_table_does_not_wake_the_runtime_for_each_shard() {
        let turns = turns_during_a_sweep_of(5_000).await;
        assert!(
            turns <= 1,
            "other tasks ran {turns} times while 5,000 counters were swept: the sweep yielded \
             for work it did not do"
        );
    }

    #[test]
    fn check_only_never_stores() {
        let (store, _) = store(100);
        let check = counter(0, "c", 2, Hits::PEEK);
        assert!(!decide(&store, &[check]).over_limit);
        assert!(store.is_empty());
    }
}
