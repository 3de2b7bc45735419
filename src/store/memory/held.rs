//! One counter shown or forgotten at an operator's request (`Store::held`, `Store::reset`):
//! rare calls, each locking one shard at a time.

use std::sync::atomic::Ordering;

use super::MemoryStore;
use crate::core::decision::plan::Counter;
use crate::store::HeldCounter;

impl MemoryStore {
    /// What the store holds for each of `counters`, expired states left out.
    pub fn held_now(&self, counters: &[Counter]) -> Vec<Option<HeldCounter>> {
        let now = self.clock.now();
        counters
            .iter()
            .map(|counter| {
                let key = self.slot_key(&counter.key);
                let shard = self.shards.get(self.shard_of(key))?.lock();
                shard
                    .get(&key)
                    .filter(|slot| slot.expires_at > now)
                    .map(|slot| HeldCounter {
                        state: slot.state.clone(),
                        expires_at: slot.expires_at,
                    })
            })
            .collect()
    }

    /// Forgets `counters`: how many were held (expired ones included).
    pub fn reset_now(&self, counters: &[Counter]) -> usize {
        let mut removed = 0;
        for counter in counters {
            let key = self.slot_key(&counter.key);
            let Some(shard) = self.shards.get(self.shard_of(key)) else {
                continue;
            };
            if shard.lock().remove(&key) {
                self.held.fetch_sub(1, Ordering::Relaxed);
                removed += 1;
            }
        }
        removed
    }
}
