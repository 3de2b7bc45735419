//! Where Limitador-format counters live: fixed windows that start at their first touch, with
//! the holds of `Reserve` beside them (`core::arithmetic::held_window` decides; these stores
//! read, ask it, and write, atomically). [`memory`] keeps them in this process; the Redis twin
//! runs the same rules in one Lua script per call.

pub mod memory;

use async_trait::async_trait;

use crate::core::arithmetic::held_window::Admission;
use crate::store::StoreError;

/// One counter a call touches: its key (the limit and its variables' values), its limit and
/// its window, in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    pub key: String,
    pub max_value: u64,
    pub window: u64,
}

/// A reservation: `check_amount` decides admission, `hold_amount` is held (0: nothing kept),
/// for at most `ttl` microseconds.
#[derive(Debug, Clone, Copy)]
pub struct HoldRequest<'a> {
    pub id: &'a str,
    pub check_amount: u64,
    pub hold_amount: u64,
    pub ttl: u64,
}

/// A decision and, for each counter, how long its window still runs (a window that has not
/// started reads as a whole one), in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowsDecided {
    pub admission: Admission,
    pub window_ttls: Vec<u64>,
}

/// A live counter, as `GET /counters/{namespace}` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCounter {
    pub key: String,
    pub value: u64,
    /// Microseconds left in its window.
    pub ttl: u64,
}

/// A place that keeps Limitador-format counters and their holds.
#[async_trait]
pub trait HeldWindows: Send + Sync + 'static {
    /// Decides `delta` against `counters` together, holds ignored; `apply`: charges it to all
    /// of them when admitted.
    async fn check(
        &self,
        counters: &[CounterSpec],
        delta: u64,
        apply: bool,
    ) -> Result<WindowsDecided, StoreError>;

    /// Adds `delta` to every counter, unconditionally (Limitador's `Report`).
    async fn add(&self, counters: &[CounterSpec], delta: u64) -> Result<(), StoreError>;

    /// Decides a reservation against `counters` together, counting the holds still live, and
    /// keeps the hold on each of them when admitted.
    async fn reserve(
        &self,
        counters: &[CounterSpec],
        hold: HoldRequest<'_>,
    ) -> Result<WindowsDecided, StoreError>;

    /// Removes the hold `id` from every counter; whether any whose window still runs held it.
    async fn release(&self, counters: &[CounterSpec], id: &str) -> Result<bool, StoreError>;

    /// The counters whose key starts with `prefix` and whose window still runs.
    async fn live_counters(&self, prefix: &str) -> Result<Vec<LiveCounter>, StoreError>;
}
