//! The background tasks of a serving process, each until the shutdown signal: expired
//! counters swept from memory, expired overrides forgotten and the effective-limit metric kept
//! current.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::limiter::Limiter;
use crate::engine::overrides;
use crate::engine::shutdown::{self, Shutdown};
use crate::store::hybrid::HybridStore;
use crate::store::memory::MemoryStore;
use crate::store::Store;

/// How often expired counters are dropped from memory.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// How often expired overrides are dropped (and logged) and the metric refreshed. Decisions
/// do not wait for it: an override stops applying at its expiry instant.
pub const MAINTAIN_INTERVAL: Duration = Duration::from_millis(250);

/// Until `shutdown`: logs and forgets expired overrides, and keeps `floodgate_effective_limit`
/// in step with the adjustments and the rules in force (a reload may add or drop a rule).
pub async fn maintain_adjustments<S: Store>(limiter: Arc<Limiter<S>>, shutdown: Shutdown) {
    shutdown::every(MAINTAIN_INTERVAL, shutdown, || {
        let adjustments = limiter.adjustments();
        for record in adjustments.remove_expired() {
            overrides::audit::expired(&record);
        }
        adjustments.publish_metrics(&limiter.rules());
        std::future::ready(())
    })
    .await;
}

/// The counters `failure_policy: local` made while Redis was down expire like the memory
/// store's.
pub async fn sweep_local_fallback<S: Store>(limiter: Arc<Limiter<S>>, shutdown: Shutdown) {
    shutdown::every(SWEEP_INTERVAL, shutdown, || async {
        if let Some(fallback) = limiter.local_fallback() {
            let dropped = fallback.sweep_expired().await;
            if dropped > 0 {
                tracing::debug!(dropped, "expired local fallback counters dropped");
            }
        }
    })
    .await;
}

/// The hybrid store's syncs with Redis (`store::hybrid`), until shutdown, and a last one then.
pub async fn sync_hybrid(limiter: Arc<Limiter<HybridStore>>, shutdown: Shutdown) {
    crate::store::hybrid::run_sync(limiter.store(), shutdown.fired()).await;
}

pub async fn sweep_memory(limiter: Arc<Limiter<MemoryStore>>, shutdown: Shutdown) {
    shutdown::every(SWEEP_INTERVAL, shutdown, || async {
        let dropped = limiter.store().sweep_expired().await;
        if dropped > 0 {
            tracing::debug!(dropped, "expired counters dropped");
        }
    })
    .await;
}
