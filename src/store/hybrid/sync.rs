//! The hybrid store's sync: every interval (or at once when a budget ran out, at most ten
//! times an interval), every counter's unsent hits go to Redis in one call and the global
//! states come back (`RedisStore::sync_hits`). The engine runs [`run`] until shutdown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::HybridStore;
use crate::core::arithmetic::algorithm::Counting;
use crate::core::arithmetic::hybrid::{local_budget, window_end, window_start};
use crate::store::redis::SyncItem;

/// An instance counts as present for this many sync intervals after its last sync (at least
/// [`MIN_HORIZON`]): one that died still divides the budgets for that long, which only makes
/// them smaller.
const HORIZON_INTERVALS: u32 = 10;
const MIN_HORIZON: Duration = Duration::from_secs(1);

/// Syncs `store` every interval, and when a budget runs out, until `stop` resolves.
pub async fn run(store: &HybridStore, stop: impl std::future::Future<Output = ()>) {
    let interval = store.options.sync_interval;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let soonest = interval / 10;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = ticks.tick() => {}
            () = store.wake.notified() => {
                // A budget ran out: sync now, but no more often than this.
                tokio::time::sleep(soonest).await;
            }
        }
        if store.has_work() {
            store.sync_once().await;
        }
    }
    // What is unsent when the process stops goes out once more.
    if store.has_work() {
        store.sync_once().await;
    }
}

impl HybridStore {
    /// Whether a sync has anything to do. Under `--store hybrid`, always: it registers this
    /// instance among those that divide the budgets. Under `--store redis`, only while a
    /// counter is local (a `counting: hybrid` rule was used) or a sync awaits its retry, so an
    /// instance without such rules makes no call of its own.
    fn has_work(&self) -> bool {
        self.options.default_counting == Counting::Hybrid
            || !self.is_empty()
            || self.retrying.load(Ordering::Relaxed) != 0
    }

    /// How long an instance stays in the set of instances after its last sync.
    fn horizon(&self) -> Duration {
        (self.options.sync_interval * HORIZON_INTERVALS).max(MIN_HORIZON)
    }

    /// One sync: sends what is unsent, reads back what was used. Whether Redis answered. A sync
    /// that got no answer is sent again as it was, under its sequence number, before anything
    /// new: Redis may have applied it, and then adds nothing twice.
    pub async fn sync_once(&self) -> bool {
        let now = self.now();
        let retrying = self.retrying.load(Ordering::Relaxed);
        let sequence = if retrying != 0 {
            retrying
        } else {
            self.sequence.fetch_add(1, Ordering::Relaxed) + 1
        };
        let mut items: Vec<SyncItem> = Vec::new();
        // (shard, identity, how many items) in the order of `items`.
        let mut sent: Vec<(usize, Vec<u8>, usize)> = Vec::new();
        for (index, shard) in self.shards.iter().enumerate() {
            let mut guard = shard.lock();
            let before = guard.len();
            guard.retain(|_, entry| !entry.is_idle(now));
            self.held.fetch_sub(before - guard.len(), Ordering::Relaxed);
            for (identity, entry) in guard.iter_mut() {
                if retrying != 0 {
                    if !entry.in_flight.is_empty() {
                        let first = items.len();
                        items.extend(entry.in_flight.iter().map(|&(start, hits)| SyncItem {
                            key: entry.key.clone(),
                            quota: entry.quota.clone(),
                            window_start: start,
                            hits,
                        }));
                        sent.push((index, identity.clone(), items.len() - first));
                    }
                    continue;
                }
                if entry.touched {
                    entry.idle_syncs = 0;
                } else {
                    entry.idle_syncs = entry.idle_syncs.saturating_add(1);
                }
                if entry.idle_syncs >= 2 && entry.pending.is_empty() {
                    // Not read any more, so what it saw grows stale: its next decision is exact.
                    entry.known = false;
                    continue;
                }
                entry.touched = false;
                entry.in_flight = std::mem::take(&mut entry.pending);
                let first = items.len();
                for &(start, hits) in &entry.in_flight {
                    items.push(SyncItem {
                        key: entry.key.clone(),
                        quota: entry.quota.clone(),
                        window_start: start,
                        hits,
                    });
                }
                if entry.in_flight.is_empty() {
                    items.push(SyncItem {
                        key: entry.key.clone(),
                        quota: entry.quota.clone(),
                        window_start: window_start(&entry.quota, now),
                        hits: 0,
                    });
                }
                sent.push((index, identity.clone(), items.len() - first));
            }
        }
        let deadline = self.options.sync_interval.max(Duration::from_millis(250));
        let local_before = self.clock.now();
        let result = self
            .redis
            .sync_hits(&items, (self.instance, sequence), self.horizon(), deadline)
            .await;
        let local_after = self.clock.now();
        match result {
            Ok(reply) => {
                self.syncs.fetch_add(1, Ordering::Relaxed);
                self.retrying.store(0, Ordering::Relaxed);
                if self.follows_redis_time {
                    let local_mid = local_before + (local_after - local_before) / 2;
                    self.offset.store(reply.now - local_mid, Ordering::Relaxed);
                }
                let instances = reply.instances.max(1);
                self.instances.store(instances, Ordering::Relaxed);
                let now = self.now();
                let mut states = reply.states.into_iter();
                for (index, identity, count) in sent {
                    let state = states.by_ref().take(count).last().flatten();
                    let Some(shard) = self.shards.get(index) else {
                        continue;
                    };
                    let mut guard = shard.lock();
                    let Some(entry) = guard.get_mut(&identity) else {
                        continue;
                    };
                    entry.in_flight.clear();
                    entry.seen = state;
                    entry.known = true;
                    let budget = local_budget(
                        &entry.quota,
                        entry.seen.as_ref(),
                        now,
                        instances,
                        self.options.local_share,
                    );
                    entry.budget = Some((window_start(&entry.quota, now), budget));
                    if budget == 0 {
                        entry.exact_until = entry.exact_until.max(window_end(&entry.quota, now));
                    }
                }
                if !self.reachable.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        redis = %self.redis.server(),
                        "hybrid store: Redis answers again; unsent hits are counted there"
                    );
                }
                true
            }
            Err(error) => {
                self.failed_syncs.fetch_add(1, Ordering::Relaxed);
                // What it carried stays in flight (counted in the views) until sent again.
                self.retrying.store(sequence, Ordering::Relaxed);
                if self.reachable.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        redis = %self.redis.server(),
                        "hybrid store: cannot sync with Redis; deciding here and keeping the \
                         hits to send when it answers: {error}"
                    );
                }
                false
            }
        }
    }
}
