//! The metrics that hear of what the stores do: the store and telemetry layers do not know each
//! other, so the engine joins them here.

use std::sync::Arc;

use crate::store::memory::{EvictionObserver, MemoryStore};
use crate::store::Store;
use crate::telemetry::metrics::{self, EvictionSeries};

impl EvictionObserver for EvictionSeries {
    fn evicted(&self, counters: usize) {
        EvictionSeries::evicted(self, counters);
    }

    fn refused_full(&self) {
        EvictionSeries::refused_full(self);
    }
}

/// `store` with its evictions and refusals counted in the metrics (when metrics are on).
pub fn observed(store: MemoryStore) -> MemoryStore {
    let series = metrics::eviction_series(store.backend());
    store.observed_by(series.map(|series| Arc::new(series) as Arc<dyn EvictionObserver>))
}
