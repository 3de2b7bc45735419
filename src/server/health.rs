//! Readiness: one `Health` handle answers `grpc.health.v1` service `ratelimit` and HTTP
//! `/healthcheck`. Serving means: the rules are loaded, the store answers, and no SIGTERM has
//! been received.
//!
//! The service `""` (the server as a whole) stays SERVING while the process runs, as in
//! envoyproxy/ratelimit (grpc-go's default): it is the liveness answer, so a store outage or a
//! drain takes an instance out of rotation (`ratelimit`) without getting it restarted.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::engine::limiter::Limiter;
use crate::engine::shutdown::{Shutdown, ShutdownTrigger};
use crate::store::Store;

/// The gRPC health service that reports readiness (envoyproxy/ratelimit's name).
pub const READINESS_SERVICE: &str = "ratelimit";

/// How often the store is asked whether it is reachable.
const STORE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// A store that does not answer within this is unreachable for health.
const STORE_READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Cloneable readiness state shared by the listeners, the store poller and shutdown.
#[derive(Clone)]
pub struct Health {
    inner: Arc<HealthState>,
}

struct HealthState {
    config_loaded: AtomicBool,
    store_ready: AtomicBool,
    /// The store's last reading, whatever health made of it (`StoreGate`).
    store_reachable: AtomicBool,
    draining: AtomicBool,
    /// Bumped on every change, so the gRPC reporter can follow.
    changed: watch::Sender<()>,
}

impl Default for Health {
    /// Loaded and reachable: what a server started with a rule set and a working store is,
    /// until the store poller says otherwise.
    fn default() -> Self {
        let health = Self::not_ready();
        health.set_config_loaded();
        health.set_store_ready(true);
        health
    }
}

impl Health {
    /// Nothing ready yet.
    pub fn not_ready() -> Self {
        Self {
            inner: Arc::new(HealthState {
                config_loaded: AtomicBool::new(false),
                store_ready: AtomicBool::new(false),
                store_reachable: AtomicBool::new(true),
                draining: AtomicBool::new(false),
                changed: watch::Sender::new(()),
            }),
        }
    }

    /// Whether requests should be sent here.
    pub fn is_serving(&self) -> bool {
        self.inner.config_loaded.load(Ordering::Acquire)
            && self.inner.store_ready.load(Ordering::Acquire)
            && !self.inner.draining.load(Ordering::Acquire)
    }

    /// Whether the store answered its last readiness check (also while health keeps serving
    /// without it).
    pub fn store_reachable(&self) -> bool {
        self.inner.store_reachable.load(Ordering::Acquire)
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    pub fn set_config_loaded(&self) {
        self.set(&self.inner.config_loaded, true);
    }

    /// Whether the configuration in force counts as loaded: with the reference's
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, only one with a domain does.
    pub fn set_config_usable(&self, usable: bool) {
        self.set(&self.inner.config_loaded, usable);
    }

    /// Returns whether this changed the store's state.
    pub fn set_store_ready(&self, ready: bool) -> bool {
        self.set(&self.inner.store_ready, ready)
    }

    /// SIGTERM: not serving from now on.
    pub fn start_draining(&self) {
        self.set(&self.inner.draining, true);
    }

    fn set(&self, flag: &AtomicBool, value: bool) -> bool {
        let changed = flag.swap(value, Ordering::AcqRel) != value;
        if changed {
            self.inner.changed.send_replace(());
        }
        changed
    }

    pub(crate) fn serving_status(&self) -> ServingStatus {
        if self.is_serving() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        }
    }
}

/// Keeps the gRPC health status of `ratelimit` equal to `health` until shutdown.
pub async fn mirror_to_grpc(health: Health, reporter: HealthReporter, shutdown: Shutdown) {
    let mut changes = health.inner.changed.subscribe();
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        changes.mark_unchanged();
        reporter
            .set_service_status(READINESS_SERVICE, health.serving_status())
            .await;
        tokio::select! {
            () = &mut stop => {
                // Whoever still asks while calls in flight finish hears NOT_SERVING.
                reporter
                    .set_service_status(READINESS_SERVICE, ServingStatus::NotServing)
                    .await;
                return;
            }
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// What an unreachable store does to health.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreGate {
    /// NOT_SERVING while the store is unreachable (the reference's
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).
    NotServing,
    /// SERVING: calls get what the failure policy makes of the outage (`UNAVAILABLE` under
    /// `error`); `floodgate_store_up` says the store is down.
    #[default]
    KeepServing,
}

/// Asks the store whether it is reachable every second until shutdown; logs each change.
pub async fn poll_store<S: Store>(
    limiter: Arc<Limiter<S>>,
    health: Health,
    gate: StoreGate,
    shutdown: Shutdown,
) {
    // The last reading: 0 none yet, 1 reachable, 2 unreachable (logged on each change).
    let last = AtomicU8::new(0);
    crate::engine::shutdown::every(STORE_POLL_INTERVAL, shutdown, || async {
        let store = limiter.store();
        let ready = tokio::time::timeout(STORE_READY_TIMEOUT, store.ready())
            .await
            .unwrap_or(false);
        health.inner.store_reachable.store(ready, Ordering::Release);
        health.set_store_ready(ready || gate == StoreGate::KeepServing);
        let reading = if ready { 1 } else { 2 };
        if last.swap(reading, Ordering::Relaxed) == reading {
            return;
        }
        crate::telemetry::metrics::store_state(store.backend(), ready);
        match (ready, gate) {
            (true, _) => tracing::info!(store = store.backend(), "store reachable"),
            (false, StoreGate::NotServing) => {
                tracing::error!(store = store.backend(), "store unreachable: not serving");
            }
            (false, StoreGate::KeepServing) => tracing::error!(
                store = store.backend(),
                "store unreachable: still serving, calls get the failure policy's answer"
            ),
        }
    })
    .await;
}

/// Waits for the first shutdown signal (`signalled`), reports NOT_SERVING, keeps serving for
/// `drain` so load balancers stop sending, then fires `stop`: the listeners stop accepting and
/// calls in flight finish.
pub async fn drain_then_stop(
    signalled: Shutdown,
    health: Health,
    drain: Duration,
    stop: ShutdownTrigger,
) {
    signalled.fired().await;
    health.start_draining();
    if !drain.is_zero() {
        tracing::info!(
            drain_seconds = drain.as_secs_f64(),
            "not serving; draining before closing the listeners"
        );
        tokio::time::sleep(drain).await;
    }
    stop.fire();
}

/// `GET /healthcheck`: 200 `OK` when serving, else 500 with an empty body (envoyproxy/ratelimit).
pub fn healthcheck_routes(health: Health) -> Router {
    Router::new().route(
        "/healthcheck",
        get(move || {
            let serving = health.is_serving();
            async move {
                if serving {
                    (StatusCode::OK, "OK")
                } else {
                    (StatusCode::INTERNAL_SERVER_ERROR, "")
                }
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_needs_config_and_store_and_no_sigterm() {
        let health = Health::not_ready();
        assert!(!health.is_serving());
        health.set_config_loaded();
        assert!(!health.is_serving());
        assert!(health.set_store_ready(true));
        assert!(!health.set_store_ready(true), "no change, nothing to log");
        assert!(health.is_serving());
        health.start_draining();
        assert!(!health.is_serving());
        assert!(health.is_draining());
        assert!(Health::default().is_serving());
    }
}
