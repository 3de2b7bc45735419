//! Limitador-format counters in this process: one map under one lock, so every call reads,
//! decides and writes its counters as one step (holds must be counted and added without a
//! concurrent reservation slipping between, as Limitador's `admission_lock` ensures).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{CounterSpec, HeldWindows, HoldRequest, LiveCounter, WindowsDecided};
use crate::core::arithmetic::held_window::{self, Hold, Reading, Window};
use crate::store::StoreError;

/// Microseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock, in microseconds since the Unix epoch.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64)
    })
}

#[derive(Debug, Default)]
struct Entry {
    window: Window,
    holds: Vec<Hold>,
}

impl Entry {
    /// Adds to the window; a closed window's holds were all dead, so a new one starts
    /// without them.
    fn add(&mut self, delta: u64, window: u64, now: u64) {
        if self.window.expires_at <= now {
            self.holds.clear();
        }
        self.window.add(delta, window, now);
    }

    fn is_dead_at(&self, now: u64) -> bool {
        self.window.expires_at <= now && held_window::outstanding(&self.holds, now) == 0
    }
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    /// The size after the last sweep: the next sweep waits until the map has doubled, so
    /// forgetting closed windows costs O(1) per insert over time.
    swept_at: usize,
}

/// The memory store of Limitador-format counters.
pub struct MemoryHeldWindows {
    entries: Mutex<Entries>,
    clock: Clock,
}

impl Default for MemoryHeldWindows {
    fn default() -> Self {
        Self::with_clock(system_clock())
    }
}

impl MemoryHeldWindows {
    pub fn with_clock(clock: Clock) -> Self {
        Self {
            entries: Mutex::new(Entries::default()),
            clock,
        }
    }

    fn check_now(&self, counters: &[CounterSpec], delta: u64, apply: bool) -> WindowsDecided {
        let now = (self.clock)();
        let mut entries = self.entries.lock();
        let readings: Vec<Reading> = counters
            .iter()
            .map(|counter| {
                let window = entries
                    .map
                    .get(&counter.key)
                    .map(|entry| entry.window)
                    .unwrap_or_default();
                reading(counter, window, 0, now)
            })
            .collect();
        let admission = held_window::check(&readings, delta, apply);
        if apply && admission.admitted() {
            for counter in counters {
                entry(&mut entries, &counter.key, now).add(delta, counter.window, now);
            }
        }
        decided(admission, &readings)
    }

    fn reserve_now(&self, counters: &[CounterSpec], hold: HoldRequest<'_>) -> WindowsDecided {
        let now = (self.clock)();
        let mut entries = self.entries.lock();
        let readings: Vec<Reading> = counters
            .iter()
            .map(|counter| {
                // A reservation starts the window it holds against, as a zero-delta update.
                let entry = entry(&mut entries, &counter.key, now);
                entry.add(0, counter.window, now);
                let outstanding = held_window::outstanding(&entry.holds, now);
                reading(counter, entry.window, outstanding, now)
            })
            .collect();
        let admission = held_window::reserve(&readings, hold.check_amount, hold.hold_amount);
        if admission.admitted() && hold.hold_amount > 0 {
            for (counter, reading) in counters.iter().zip(&readings) {
                let entry = entry(&mut entries, &counter.key, now);
                entry.holds.retain(|held| held.is_live_at(now));
                entry.holds.push(Hold {
                    id: hold.id.to_owned(),
                    amount: hold.hold_amount,
                    expires_at: held_window::hold_expiry(now, hold.ttl, reading.window_ttl),
                });
            }
        }
        decided(admission, &readings)
    }
}

/// The entry of `key`, made when missing; the map is swept of dead entries when it has
/// doubled since the last sweep.
fn entry<'a>(entries: &'a mut Entries, key: &str, now: u64) -> &'a mut Entry {
    if !entries.map.contains_key(key) && entries.map.len() >= entries.swept_at.max(1024) * 2 {
        entries.map.retain(|_, entry| !entry.is_dead_at(now));
        entries.swept_at = entries.map.len();
    }
    entries.map.entry(key.to_owned()).or_default()
}

fn reading(counter: &CounterSpec, window: Window, outstanding: u64, now: u64) -> Reading {
    // A closed (or never started) window reads as a fresh one: a whole window ahead.
    let window_ttl = match window.ttl_at(now) {
        0 => counter.window,
        ttl => ttl,
    };
    Reading {
        max_value: counter.max_value,
        value: window.value_at(now),
        outstanding,
        window_ttl,
    }
}

fn decided(admission: held_window::Admission, readings: &[Reading]) -> WindowsDecided {
    WindowsDecided {
        admission,
        window_ttls: readings.iter().map(|reading| reading.window_ttl).collect(),
    }
}

#[async_trait]
impl HeldWindows for MemoryHeldWindows {
    async fn check(
        &self,
        counters: &[CounterSpec],
        delta: u64,
        apply: bool,
    ) -> Result<WindowsDecided, StoreError> {
        Ok(self.check_now(counters, delta, apply))
    }

    async fn add(&self, counters: &[CounterSpec], delta: u64) -> Result<(), StoreError> {
        let now = (self.clock)();
        let mut entries = self.entries.lock();
        for counter in counters {
            entry(&mut entries, &counter.key, now).add(delta, counter.window, now);
        }
        Ok(())
    }

    async fn reserve(
        &self,
        counters: &[CounterSpec],
        hold: HoldRequest<'_>,
    ) -> Result<WindowsDecided, StoreError> {
        Ok(self.reserve_now(counters, hold))
    }

    async fn release(&self, counters: &[CounterSpec], id: &str) -> Result<bool, StoreError> {
        let now = (self.clock)();
        let mut entries = self.entries.lock();
        let mut released = false;
        for counter in counters {
            if let Some(entry) = entries.map.get_mut(&counter.key) {
                let before = entry.holds.len();
                entry.holds.retain(|held| held.id != id);
                // A hold on a closed window is gone, as Limitador's registry forgets it.
                released |= entry.holds.len() != before && entry.window.expires_at > now;
            }
        }
        Ok(released)
    }

    async fn live_counters(&self, prefix: &str) -> Result<Vec<LiveCounter>, StoreError> {
        let now = (self.clock)();
        let entries = self.entries.lock();
        Ok(entries
            .map
            .iter()
            .filter(|(key, entry)| key.starts_with(prefix) && entry.window.expires_at > now)
            .map(|(key, entry)| LiveCounter {
                key: key.clone(),
                value: entry.window.value,
                ttl: entry.window.ttl_at(now),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn counter(key: &str, max_value: u64) -> CounterSpec {
        CounterSpec {
            key: key.to_owned(),
            max_value,
            window: 60_000_000,
        }
    }

    fn hold(id: &str, amount: u64, ttl: u64) -> HoldRequest<'_> {
        HoldRequest {
            id,
            check_amount: amount,
            hold_amount: amount,
            ttl,
        }
    }

    #[tokio::test]
    async fn holds_are_counted_until_released_or_expired() {
        let now = Arc::new(AtomicU64::new(1_000_000));
        let clock_now = Arc::clone(&now);
        let store =
            MemoryHeldWindows::with_clock(Arc::new(move || clock_now.load(Ordering::SeqCst)));
        let counters = [counter("a", 10)];
        let first = store.reserve(&counters, hold("one", 6, 5_000_000)).await;
        assert!(first.is_ok_and(|decided| decided.admission.admitted()));
        let second = store.reserve(&counters, hold("two", 6, 5_000_000)).await;
        assert!(second.is_ok_and(|decided| !decided.admission.admitted()));
        assert!(store.release(&counters, "one").await.unwrap_or(false));
        assert!(store.add(&counters, 2).await.is_ok());
        let third = store.reserve(&counters, hold("three", 8, 5_000_000)).await;
        assert!(third.is_ok_and(|decided| decided.admission.admitted()));
        // The hold of "three" expires: it no longer costs anything.
        now.fetch_add(5_000_000, Ordering::SeqCst);
        let fourth = store.reserve(&counters, hold("four", 8, 5_000_000)).await;
        assert!(fourth.is_ok_and(|decided| decided.admission.admitted()));
    }
}
