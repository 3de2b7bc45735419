//! The hybrid store (`--store hybrid`): every instance decides from counters of its own and
//! reconciles them with Redis in the background, trading a stated error for decisions that
//! cost no round trip.
//!
//! # What is local
//!
//! Fixed and sliding windows (`core::arithmetic::hybrid::supports`: their counts add). A counter's local
//! view is the global state Redis gave at the last sync with this instance's unsent hits laid
//! over it (`core::arithmetic::hybrid::add_hits`); the core decides from it exactly as the memory store
//! does (`core::decision::charging::settle`, all or nothing). A request naming a bucket, a sliding log
//! or a refund is decided exactly, in Redis, whole (`RedisStore`): those states depend on the
//! order of every hit, so they do not add.
//!
//! # The sync
//!
//! A task (`sync.rs`) runs every `--hybrid-sync-ms` (100 ms): one script call
//! (`redis/lua/hybrid_sync.lua`) sends every counter's unsent hits, reads back every counter
//! used since the last sync, and registers this instance in a set of instances with a TTL;
//! how many synced recently (`instances`) divides what is left of each limit.
//!
//! # The budget, and exact decisions near the limit
//!
//! Between two syncs an instance admits on its own at most its budget,
//! `floor(share × remaining / instances)` hits of a counter (`--hybrid-local-share`, 0.01;
//! `core::arithmetic::hybrid::local_budget`). A request beyond it is decided exactly in Redis and asks for
//! a sync at once. A counter whose budget is 0 is decided exactly until its window ends
//! (refusals excepted: what the local view refuses, Redis refuses too, so those stay here). So
//! when a counter's global count reaches its limit, the hits Redis had not heard of are at most
//! every instance's budget, `share × limit` in all: the worst-case over-admission; docs/redis.md
//! ("Hybrid") derives it, with the under-admission (none beyond stale reads).
//!
//! # Per rule (`counting:`)
//!
//! A limit's `counting: exact | hybrid` chooses for its counter; unset, it is counted as
//! [`HybridOptions::default_counting`] says: `hybrid` under `--store hybrid`, `exact` under
//! `--store redis`, which builds this store too (its sync idles while no counter is local). A
//! request with any counter decided exactly is decided in Redis whole, so an exact limit never
//! admits more than Redis does.
//!
//! # Redis unreachable
//!
//! Windowed counters keep being decided here, without budget (the sync keeps what it could not
//! send and sends it when Redis answers), so no call fails; requests Redis must decide exactly
//! fail and get the limiter's failure policy, as with `--store redis`. An instance that dies
//! loses the hits it had not sent: at most one sync interval's.

mod entry;
mod sync;

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use self::entry::Entry;
pub use self::sync::run as run_sync;
use super::redis::{RedisStore, UnsupportedQuota};
use super::{Decided, HeldCounter, Store, StoreError};
use crate::core::arithmetic::algorithm::{Counting, Hits, Quota, State};
use crate::core::arithmetic::hybrid::{supports, window_end};
use crate::core::decision::charging::{settle, Charging, Settled};
use crate::core::decision::plan::Counter;
use crate::core::ground::time::{Clock, Micros};

/// The default interval between two syncs (`--hybrid-sync-ms`).
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// The default share of what is left of a limit that the instances may admit between two
/// syncs, all together (`--hybrid-local-share`): also the worst-case over-admission, as a share
/// of the limit.
pub const DEFAULT_LOCAL_SHARE: f64 = 0.01;

/// The shortest and longest sync intervals accepted.
pub const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(1);
pub const MAX_SYNC_INTERVAL: Duration = Duration::from_secs(60);

/// Enough shards that two cores rarely meet on one lock.
const SHARDS: usize = 64;

/// How the hybrid store counts.
#[derive(Debug, Clone, Copy)]
pub struct HybridOptions {
    pub sync_interval: Duration,
    /// In (0, 1]: see [`DEFAULT_LOCAL_SHARE`].
    pub local_share: f64,
    /// Counters held here at most; a request that needs one more is decided in Redis.
    pub max_keys: usize,
    /// How a limit without `counting:` is counted: [`Counting::Hybrid`] under `--store
    /// hybrid`, [`Counting::Exact`] under `--store redis`.
    pub default_counting: Counting,
}

impl Default for HybridOptions {
    fn default() -> Self {
        Self {
            sync_interval: DEFAULT_SYNC_INTERVAL,
            local_share: DEFAULT_LOCAL_SHARE,
            max_keys: 1_000_000,
            default_counting: Counting::Hybrid,
        }
    }
}

/// Options that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidHybridOptions {
    #[error(
        "--hybrid-local-share (FLOODGATE_HYBRID_LOCAL_SHARE) must be above 0 and at most 1, \
         not {0}: it is the share of what is left of a limit the instances admit between syncs"
    )]
    Share(f64),
    #[error("--hybrid-sync-ms (FLOODGATE_HYBRID_SYNC_MS) must be 1 to 60000 ms, not {0} ms")]
    Interval(u128),
}

impl HybridOptions {
    pub fn check(&self) -> Result<(), InvalidHybridOptions> {
        if !(self.local_share > 0.0 && self.local_share <= 1.0) {
            return Err(InvalidHybridOptions::Share(self.local_share));
        }
        if self.sync_interval < MIN_SYNC_INTERVAL || self.sync_interval > MAX_SYNC_INTERVAL {
            return Err(InvalidHybridOptions::Interval(
                self.sync_interval.as_millis(),
            ));
        }
        Ok(())
    }
}

/// What the store has done, for tests and benchmarks (also in the log at debug level).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HybridCounts {
    /// Requests decided here.
    pub local: u64,
    /// Requests decided exactly in Redis.
    pub exact: u64,
    /// Sync calls that Redis answered, and those that failed.
    pub syncs: u64,
    pub failed_syncs: u64,
}

/// The counters of one shard, by identity (`Counter::key`).
type Shard = HashMap<Vec<u8>, Entry>;

/// Counters decided here and reconciled with Redis in the background.
pub struct HybridStore {
    redis: RedisStore,
    /// Local time; the decisions add `offset` to it.
    clock: Arc<dyn Clock>,
    /// Redis time − local time (µs), as measured at the last sync; 0 under a test clock.
    offset: AtomicI64,
    follows_redis_time: bool,
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    held: AtomicUsize,
    options: HybridOptions,
    /// This instance in the set of instances (never 0).
    instance: u64,
    /// Instances that synced recently, at the last sync (at least 1).
    instances: AtomicU64,
    /// Whether the last sync reached Redis.
    reachable: AtomicBool,
    /// The last sync's sequence number; and the one to send again (0: none), whose answer
    /// never came.
    sequence: AtomicU64,
    retrying: AtomicU64,
    /// Asks the sync task for a sync now (a budget ran out).
    wake: tokio::sync::Notify,
    local: AtomicU64,
    exact: AtomicU64,
    syncs: AtomicU64,
    failed_syncs: AtomicU64,
}

/// What deciding here came to.
enum Here {
    Decided(Decided),
    /// Redis must decide (a counter beyond its budget, or decided exactly until its window
    /// ends, or no room for one more counter).
    Exact,
}

impl HybridStore {
    /// The store over `redis`, on local time from `clock` (the system clock: aligned to Redis
    /// time at every sync; a test clock, shared with `redis`, is used as it is).
    pub fn new(
        redis: RedisStore,
        clock: Arc<dyn Clock>,
        follows_redis_time: bool,
        options: HybridOptions,
    ) -> Result<Self, InvalidHybridOptions> {
        options.check()?;
        Ok(Self {
            redis,
            clock,
            offset: AtomicI64::new(0),
            follows_redis_time,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            held: AtomicUsize::new(0),
            options,
            instance: rand::random::<u64>().max(1),
            instances: AtomicU64::new(1),
            reachable: AtomicBool::new(true),
            sequence: AtomicU64::new(0),
            retrying: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            local: AtomicU64::new(0),
            exact: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            failed_syncs: AtomicU64::new(0),
        })
    }

    /// The Redis store beneath (exact decisions, shared values).
    pub fn redis(&self) -> &RedisStore {
        &self.redis
    }

    pub fn options(&self) -> &HybridOptions {
        &self.options
    }

    /// What the store has done since it started.
    pub fn counts(&self) -> HybridCounts {
        HybridCounts {
            local: self.local.load(Ordering::Relaxed),
            exact: self.exact.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            failed_syncs: self.failed_syncs.load(Ordering::Relaxed),
        }
    }

    /// Counters held here now.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Now, on Redis's clock as of the last sync.
    fn now(&self) -> Micros {
        self.clock
            .now()
            .saturating_add(self.offset.load(Ordering::Relaxed))
    }

    fn shard_of(&self, identity: &[u8]) -> usize {
        (self.hasher.hash_one(identity) as usize) % SHARDS
    }

    /// Locks each shard `counters` need once, in ascending order (no two requests can wait on
    /// each other in a cycle).
    fn lock_shards(&self, counters: &[Counter]) -> Vec<(usize, MutexGuard<'_, Shard>)> {
        let mut needed: Vec<usize> = counters
            .iter()
            .map(|counter| self.shard_of(&counter.key))
            .collect();
        needed.sort_unstable();
        needed.dedup();
        needed
            .into_iter()
            .filter_map(|index| self.shards.get(index).map(|shard| (index, shard.lock())))
            .collect()
    }

    /// Decides `counters` from the local views; `budgeted`: within each counter's budget and
    /// outside exact mode, else [`Here::Exact`].
    fn decide_here(&self, counters: &[Counter], global_shadow: bool, budgeted: bool) -> Here {
        let now = self.now();
        let mut locked = LockedShards {
            store: self,
            guards: self.lock_shards(counters),
        };
        let Some(Views { views, exact }) = self.read_views(&mut locked, counters, budgeted, now)
        else {
            return Here::Exact;
        };
        let settled = settle(
            counters,
            Charging::AllOrNothing,
            global_shadow,
            now,
            |index| views.get(index).and_then(Option::as_ref),
        );
        if settled.over_limit {
            // The views count no more than Redis and the other instances do: what they refuse,
            // an exact decision refuses too, so refusals need no Redis (and charge nothing).
            return Here::Decided(Decided {
                outcomes: settled.outcomes().collect(),
                over_limit: true,
            });
        }
        let charges = kept_charges(counters, &settled);
        if exact && !charges.is_empty() {
            return Here::Exact;
        }
        if budgeted {
            match self.check_budgets(&mut locked, &charges, now) {
                Budgets::Admit => {}
                Budgets::Missing => return Here::Exact,
                Budgets::Exhausted => {
                    drop(locked);
                    self.wake.notify_one();
                    return Here::Exact;
                }
            }
        }
        for &(identity, start, hits) in &charges {
            if let Some(entry) = locked.entry(identity) {
                entry.add_pending(start, hits);
            }
        }
        Here::Decided(Decided {
            outcomes: settled.outcomes().collect(),
            over_limit: settled.over_limit,
        })
    }

    /// Each counter's local view, its entry made when it is new here (the quota a reload
    /// changed taken on); `None` when Redis must decide: no room for one more counter, or,
    /// `budgeted`, a counter whose global state is unknown here.
    fn read_views(
        &self,
        locked: &mut LockedShards<'_>,
        counters: &[Counter],
        budgeted: bool,
        now: Micros,
    ) -> Option<Views> {
        let mut views: Vec<Option<State>> = Vec::with_capacity(counters.len());
        // Whether a counter is near its limit: an admission needs Redis.
        let mut exact = false;
        for counter in counters {
            let shard = locked.shard(&counter.key)?;
            let entry = match shard.get_mut(counter.key.as_slice()) {
                Some(entry) => entry,
                None => {
                    if self.held.load(Ordering::Relaxed) >= self.options.max_keys {
                        return None;
                    }
                    self.held.fetch_add(1, Ordering::Relaxed);
                    shard.entry(counter.key.clone()).or_insert_with(|| {
                        Entry::new(counter.quota.clone(), self.redis.key_of(counter))
                    })
                }
            };
            entry.follow_quota(&counter.quota);
            entry.touched = true;
            if budgeted && !entry.known {
                // New here, or not read for a while: what Redis holds is unknown here.
                return None;
            }
            exact = exact || (budgeted && entry.exact_until > now);
            views.push(entry.view());
        }
        Some(Views { views, exact })
    }

    /// Whether this instance's budgets admit `charges` (a counter charged twice in one window
    /// counts both against its budget); a budget found at 0 puts its counter in exact mode
    /// until its window ends.
    fn check_budgets(
        &self,
        locked: &mut LockedShards<'_>,
        charges: &[Charge<'_>],
        now: Micros,
    ) -> Budgets {
        let instances = self.instances.load(Ordering::Relaxed);
        for (at, &(identity, start, _)) in charges.iter().enumerate() {
            let same_window =
                |(other, other_start, _): &&Charge<'_>| *other == identity && *other_start == start;
            if charges.iter().take(at).any(|charge| same_window(&charge)) {
                continue; // counted with its first mention
            }
            let wanted: u64 = charges
                .iter()
                .filter(same_window)
                .map(|(_, _, hits)| *hits)
                .sum();
            let Some(entry) = locked.entry(identity) else {
                return Budgets::Missing;
            };
            let budget = entry.budget_at(now, instances, self.options.local_share);
            if budget == 0 {
                entry.exact_until = entry.exact_until.max(window_end(&entry.quota, now));
            }
            if entry.unsynced_in(start).saturating_add(wanted) > budget {
                return Budgets::Exhausted;
            }
        }
        Budgets::Admit
    }

    /// Decides in Redis; while Redis fails, windowed counters are decided here after all.
    async fn decide_exactly(
        &self,
        counters: &[Counter],
        global_shadow: bool,
        all_local: bool,
    ) -> Result<Decided, StoreError> {
        if all_local && !self.reachable.load(Ordering::Relaxed) {
            return self.decide_unbudgeted(counters, global_shadow);
        }
        match self.redis.decide(counters, global_shadow).await {
            Ok(decided) => {
                self.exact.fetch_add(1, Ordering::Relaxed);
                Ok(decided)
            }
            Err(_) if all_local => self.decide_unbudgeted(counters, global_shadow),
            Err(error) => Err(error),
        }
    }

    fn decide_unbudgeted(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        match self.decide_here(counters, global_shadow, false) {
            Here::Decided(decided) => {
                self.local.fetch_add(1, Ordering::Relaxed);
                Ok(decided)
            }
            Here::Exact => Err(StoreError::Unavailable {
                backend: self.backend(),
                reason: format!(
                    "Redis at {} is unreachable and this instance holds --max-keys {} counters \
                     already",
                    self.redis.server(),
                    self.options.max_keys
                ),
            }),
        }
    }
}

/// The shards one request needs, locked (`HybridStore::lock_shards`), and its counters'
/// entries among them.
struct LockedShards<'s> {
    store: &'s HybridStore,
    guards: Vec<(usize, MutexGuard<'s, Shard>)>,
}

impl LockedShards<'_> {
    /// The shard of the counter `identity`, if it is among the locked ones.
    fn shard(&mut self, identity: &[u8]) -> Option<&mut Shard> {
        let wanted = self.store.shard_of(identity);
        self.guards
            .iter_mut()
            .find(|(index, _)| *index == wanted)
            .map(|(_, guard)| &mut **guard)
    }

    fn entry(&mut self, identity: &[u8]) -> Option<&mut Entry> {
        self.shard(identity)?.get_mut(identity)
    }
}

/// The counters' local views, in request order, and whether any of them is decided exactly now.
struct Views {
    views: Vec<Option<State>>,
    exact: bool,
}

/// A kept charge: the counter's identity, the start of its window, the hits.
type Charge<'c> = (&'c [u8], Micros, u64);

/// What a request's charges come to against this instance's budgets.
enum Budgets {
    Admit,
    /// A budget would be exceeded: Redis decides, and a sync is due now.
    Exhausted,
    /// A charged counter is not held here (the shards stay locked, so never expected).
    Missing,
}

/// Every charge `settled` keeps, in request order.
fn kept_charges<'c>(counters: &'c [Counter], settled: &Settled) -> Vec<Charge<'c>> {
    counters
        .iter()
        .zip(settled.evaluations.iter().zip(&settled.kept))
        .filter_map(|(counter, (evaluation, &kept))| match counter.hits {
            Hits::Charge(hits) if kept => Some((
                counter.key.as_slice(),
                window_of(&evaluation.next_state)?,
                hits,
            )),
            _ => None,
        })
        .collect()
}

/// Where the window of a windowed state starts.
fn window_of(state: &State) -> Option<Micros> {
    match state {
        State::FixedWindow { window_start, .. } | State::SlidingWindow { window_start, .. } => {
            Some(*window_start)
        }
        _ => None,
    }
}

impl HybridStore {
    /// Whether every counter of the request can be decided here: a window, not a refund, and
    /// counted hybrid (written, or by default).
    fn all_local(&self, counters: &[Counter]) -> bool {
        !counters.is_empty()
            && counters.iter().all(|counter| {
                supports(counter.quota.algorithm)
                    && !matches!(counter.hits, Hits::Refund(_))
                    && counter
                        .quota
                        .counting
                        .unwrap_or(self.options.default_counting)
                        == Counting::Hybrid
            })
    }
}

impl Store for HybridStore {
    async fn decide(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> Result<Decided, StoreError> {
        if !self.all_local(counters) {
            return self.decide_exactly(counters, global_shadow, false).await;
        }
        match self.decide_here(counters, global_shadow, true) {
            Here::Decided(decided) => {
                self.local.fetch_add(1, Ordering::Relaxed);
                Ok(decided)
            }
            Here::Exact => self.decide_exactly(counters, global_shadow, true).await,
        }
    }

    /// In flight is a count every instance must agree on at once: decided in Redis, always.
    async fn leases(
        &self,
        calls: &[crate::core::arithmetic::lease::LeaseCall],
    ) -> Result<Vec<crate::core::arithmetic::lease::LeaseOutcome>, StoreError> {
        self.redis.leases(calls).await
    }

    /// `hybrid`, or `redis` when it serves `--store redis` (whose rules are exact unless
    /// they say `counting: hybrid`).
    fn backend(&self) -> &'static str {
        match self.options.default_counting {
            Counting::Hybrid => "hybrid",
            Counting::Exact => "redis",
        }
    }

    /// Exact rules are decided by the Redis scripts, whatever the default counting.
    fn check_quota(&self, quota: &Quota) -> Result<(), UnsupportedQuota> {
        self.redis.check_quota(quota)
    }

    async fn ready(&self) -> bool {
        self.redis.ready().await
    }

    /// What Redis holds: the count every instance shares (this instance's unsent hits are
    /// not in it until the next sync).
    async fn held(&self, counters: &[Counter]) -> Result<Vec<Option<HeldCounter>>, StoreError> {
        self.redis.held(counters).await
    }

    /// Bans are decided in Redis, where every instance sees them.
    async fn bans(
        &self,
        calls: &[crate::core::decision::bans::BanCall],
    ) -> Result<Vec<crate::core::arithmetic::ban::BanOutcome>, StoreError> {
        self.redis.bans(calls).await
    }

    /// Redis's answer: this instance's view may lag it by a sync interval.
    async fn look(&self, counters: &[Counter]) -> Result<Decided, StoreError> {
        self.redis.decide(counters, false).await
    }

    /// Forgets the counters here (with their unsent hits) and in Redis. Other instances keep
    /// their views until a sync reads the counter back from Redis, and still send the hits
    /// they had not sent.
    async fn reset(&self, counters: &[Counter]) -> Result<usize, StoreError> {
        for counter in counters {
            let Some(shard) = self.shards.get(self.shard_of(&counter.key)) else {
                continue;
            };
            if shard.lock().remove(&counter.key).is_some() {
                self.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.redis.reset(counters).await
    }
}

impl crate::store::RlqsPeers for HybridStore {
    async fn exchange_demands(
        &self,
        instance: u64,
        items: &[crate::store::DemandItem<'_>],
        terms: crate::store::ExchangeTerms,
    ) -> Result<Vec<Vec<Option<f64>>>, StoreError> {
        self.redis().exchange_demands(instance, items, terms).await
    }
}
