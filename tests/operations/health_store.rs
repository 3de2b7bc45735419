//! Health follows the store when asked (`StoreGate::NotServing`, which the reference's
//! `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true` selects): a store that says it is not ready makes
//! grpc.health.v1 and `/healthcheck` report not serving, and serving again once it is back. In
//! process, with a store whose readiness the test sets.

use floodgate_testkit as common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::core::decision::plan::Counter;
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::engine::shutdown;
use floodgate::server::health::{Health, StoreGate};
use floodgate::server::{serve_with, HttpSettings, Listeners, Operations};
use floodgate::store::{Decided, Store, StoreError};
use tokio::net::TcpListener;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A store that is reachable when the test says so.
struct SwitchableStore {
    ready: Arc<AtomicBool>,
}

impl Store for SwitchableStore {
    async fn decide(&self, _: &[Counter], _: bool) -> Result<Decided, StoreError> {
        Err(StoreError::Unavailable {
            backend: "switchable",
            reason: "a test store".to_owned(),
        })
    }

    async fn leases(
        &self,
        _: &[floodgate::core::arithmetic::lease::LeaseCall],
    ) -> Result<Vec<floodgate::core::arithmetic::lease::LeaseOutcome>, StoreError> {
        Err(StoreError::Unavailable {
            backend: "switchable",
            reason: "a test store".to_owned(),
        })
    }

    fn backend(&self) -> &'static str {
        "switchable"
    }

    async fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|error| panic!("bind: {error}"))
}

async fn grpc_status(client: &mut HealthClient<tonic::transport::Channel>) -> ServingStatus {
    let response = client
        .check(HealthCheckRequest {
            service: "ratelimit".to_owned(),
        })
        .await
        .unwrap_or_else(|status| panic!("health check: {status:?}"));
    ServingStatus::try_from(response.into_inner().status).unwrap_or(ServingStatus::Unknown)
}

async fn http_status(port: u16) -> u16 {
    tokio::task::spawn_blocking(move || {
        common::http::get(port, "/healthcheck", &[]).map_or(0, |response| response.status)
    })
    .await
    .unwrap_or(0)
}

/// Waits (bounded) until both health surfaces say `serving`.
async fn wait_for_health(
    client: &mut HealthClient<tonic::transport::Channel>,
    http_port: u16,
    serving: bool,
) {
    let (grpc_wanted, http_wanted) = if serving {
        (ServingStatus::Serving, 200)
    } else {
        (ServingStatus::NotServing, 500)
    };
    for _ in 0..100 {
        if grpc_status(client).await == grpc_wanted && http_status(http_port).await == http_wanted {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("health did not become serving={serving} within 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_store() {
    let source = SourceFile {
        name: "h.yaml".to_owned(),
        text: "domain: h\n".to_owned(),
    };
    let rules =
        load(&[source], &LoadOptions::default()).unwrap_or_else(|errors| panic!("rules: {errors}"));
    let ready = Arc::new(AtomicBool::new(false));
    let store = SwitchableStore {
        ready: Arc::clone(&ready),
    };
    let limiter = Arc::new(Limiter::new(rules, store, LimiterSettings::default()));
    let (grpc, http) = (bind().await, bind().await);
    let grpc_port = grpc
        .local_addr()
        .map(|addr| addr.port())
        .unwrap_or_default();
    let http_port = http
        .local_addr()
        .map(|addr| addr.port())
        .unwrap_or_default();
    let listeners = Listeners {
        grpc,
        http,
        debug: bind().await,
        debug_pages: None,
    };
    let health = Health::not_ready();
    health.set_config_loaded();
    let operations = Operations {
        health,
        store_gate: StoreGate::NotServing,
        ..Operations::default()
    };
    let (trigger, shutdown) = shutdown::channel();
    let server = tokio::spawn(serve_with(
        limiter,
        listeners,
        HttpSettings::default(),
        shutdown,
        operations,
    ));
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{grpc_port}"))
        .unwrap_or_else(|error| panic!("url: {error}"))
        .connect()
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
    let mut client = HealthClient::new(channel);

    wait_for_health(&mut client, http_port, false).await;
    ready.store(true, Ordering::SeqCst);
    wait_for_health(&mut client, http_port, true).await;
    ready.store(false, Ordering::SeqCst);
    wait_for_health(&mut client, http_port, false).await;

    trigger.fire();
    let stopped = tokio::time::timeout(Duration::from_secs(5), server).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
}
