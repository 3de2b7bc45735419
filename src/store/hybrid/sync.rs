//! The hybrid store's sync: every interval (or at once when a budget ran out, at most ten
//! times an interval), every counter's unsent hits go to Redis in one call and the global
//! states come back (`RedisStore::sync_hits`). The engine runs [`run`] until shutdown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::entry::Entry;
use super::HybridStore;
use crate::core::arithmetic::algorithm::Counting;
use crate::core::arithmetic::hybrid::window_start;
use crate::core::ground::time::Micros;
use crate::store::redis::{SyncItem, SyncReply};
use crate::store::StoreError;

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
        let outgoing = self.gather(now, retrying != 0);
        let deadline = self.options.sync_interval.max(Duration::from_millis(250));
        let local_before = self.clock.now();
        let result = self
            .redis
            .sync_hits(
                &outgoing.items,
                (self.instance, sequence),
                self.horizon(),
                deadline,
            )
            .await;
        let local_after = self.clock.now();
        match result {
            Ok(reply) => {
                self.answered(reply, outgoing.sent, (local_before, local_after));
                true
            }
            Err(error) => {
                self.unanswered(sequence, &error);
                false
            }
        }
    }

    /// What this sync sends, idle counters forgotten first: with `resend`, exactly what the
    /// unanswered sync carried; else every counter's pending hits, or a read of its window.
    fn gather(&self, now: Micros, resend: bool) -> Outgoing {
        let mut outgoing = Outgoing::default();
        for (index, shard) in self.shards.iter().enumerate() {
            let mut guard = shard.lock();
            let before = guard.len();
            guard.retain(|_, entry| !entry.is_idle(now));
            self.held.fetch_sub(before - guard.len(), Ordering::Relaxed);
            for (identity, entry) in guard.iter_mut() {
                let first = outgoing.items.len();
                let included = if resend {
                    add_in_flight(entry, &mut outgoing.items)
                } else {
                    send_pending(entry, now, &mut outgoing.items)
                };
                if included {
                    let count = outgoing.items.len() - first;
                    outgoing.sent.push((index, identity.clone(), count));
                }
            }
        }
        outgoing
    }

    /// Redis answered: its clock, the number of instances and every counter's global state
    /// are taken in. `measured`: the local clock before and after the call.
    fn answered(&self, reply: SyncReply, sent: Vec<Sent>, measured: (Micros, Micros)) {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.retrying.store(0, Ordering::Relaxed);
        if self.follows_redis_time {
            let (local_before, local_after) = measured;
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
            if let Some(entry) = guard.get_mut(&identity) {
                entry.synced(state, now, instances, self.options.local_share);
            }
        }
        if !self.reachable.swap(true, Ordering::Relaxed) {
            tracing::info!(
                redis = %self.redis.server(),
                "hybrid store: Redis answers again; unsent hits are counted there"
            );
        }
    }

    /// Redis did not answer: the sync is to be sent again as it was.
    fn unanswered(&self, sequence: u64, error: &StoreError) {
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
    }
}

/// A counter a sync carries items of: (shard, identity, how many items), in item order.
type Sent = (usize, Vec<u8>, usize);

/// What one sync sends.
#[derive(Default)]
struct Outgoing {
    items: Vec<SyncItem>,
    sent: Vec<Sent>,
}

/// Adds the hits `entry` has in flight (on a resend: what the sync that got no answer
/// carried, unchanged): whether it has any.
fn add_in_flight(entry: &Entry, items: &mut Vec<SyncItem>) -> bool {
    if entry.in_flight.is_empty() {
        return false;
    }
    items.extend(
        entry
            .in_flight
            .iter()
            .map(|&(start, hits)| sync_item(entry, start, hits)),
    );
    true
}

/// Moves `entry`'s pending hits in flight and adds them (nothing pending: a read of the window
/// holding `now`); a counter untouched for two syncs with nothing to send is not read any
/// more. Whether it is in this sync.
fn send_pending(entry: &mut Entry, now: Micros, items: &mut Vec<SyncItem>) -> bool {
    if entry.touched {
        entry.idle_syncs = 0;
    } else {
        entry.idle_syncs = entry.idle_syncs.saturating_add(1);
    }
    if entry.idle_syncs >= 2 && entry.pending.is_empty() {
        // Not read any more, so what it saw grows stale: its next decision is exact.
        entry.known = false;
        return false;
    }
    entry.touched = false;
    entry.in_flight = std::mem::take(&mut entry.pending);
    if !add_in_flight(entry, items) {
        items.push(sync_item(entry, window_start(&entry.quota, now), 0));
    }
    true
}

fn sync_item(entry: &Entry, window_start: Micros, hits: u64) -> SyncItem {
    SyncItem {
        key: entry.key.clone(),
        quota: entry.quota.clone(),
        window_start,
        hits,
    }
}
