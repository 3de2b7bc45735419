//! A Redis that stops answering makes decisions fail with `Unavailable` within the deadline
//! (plus a scheduling margin), never hang; the store recovers once Redis answers again.

#[path = "common/redis.rs"]
mod redis_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::core::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::plan::Counter;
use floodgate::core::unit::Unit;
use floodgate::core::verdict::Role;
use floodgate::store::redis::{RedisStore, DEFAULT_TIMEOUT};
use floodgate::store::{Store, StoreError};

use redis_support::{counter, identity, RedisServer};

/// Room for a busy 2-core machine to wake the timer up.
const MARGIN: Duration = Duration::from_millis(250);

fn one_counter() -> Vec<Counter> {
    let quota = Quota::new(100, Unit::Minute).with_algorithm(Algorithm::SlidingWindow);
    let key = identity("timeout", "user", "u", 0, &quota);
    vec![counter(0, &key, &quota, Hits::Charge(1), Role::Enforced)]
}

async fn store_with_default_timeout(server: &RedisServer) -> Arc<RedisStore> {
    let mut options = server.options(None);
    options.timeout = DEFAULT_TIMEOUT;
    // The deadline alone: the circuit breaker would answer later calls without asking Redis
    // (tests/redis_failure.rs covers it).
    options.breaker_threshold = 0;
    Arc::new(
        RedisStore::connect(&options)
            .await
            .unwrap_or_else(|error| panic!("cannot connect: {error}")),
    )
}

/// Decides concurrently `calls` times; every call must fail as Unavailable within the bound.
async fn all_fail_in_time(store: &Arc<RedisStore>, calls: usize) {
    let tasks: Vec<_> = (0..calls)
        .map(|_| {
            let store = Arc::clone(store);
            tokio::spawn(async move {
                let started = Instant::now();
                let result = store.decide(&one_counter(), false).await;
                (result, started.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (result, elapsed) = task
            .await
            .unwrap_or_else(|error| panic!("task failed: {error}"));
        match result {
            Err(StoreError::Unavailable { backend, reason }) => {
                assert_eq!(backend, "redis");
                assert!(reason.contains("did not answer"), "{reason}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        assert!(elapsed < DEFAULT_TIMEOUT + MARGIN, "took {elapsed:?}");
    }
}

async fn recovers(store: &RedisStore) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.decide(&one_counter(), false).await.is_err() {
        assert!(Instant::now() < deadline, "no recovery within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_times_out_and_recovers() {
    let server = RedisServer::start();
    let store = store_with_default_timeout(&server).await;
    assert!(store.decide(&one_counter(), false).await.is_ok());

    server.pause();
    all_fail_in_time(&store, 20).await;
    // Calls keep failing fast while it stays stopped, queued ones included.
    all_fail_in_time(&store, 20).await;
    server.resume();
    recovers(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_redis_times_out() {
    let server = RedisServer::start();
    let store = store_with_default_timeout(&server).await;
    assert!(store.decide(&one_counter(), false).await.is_ok());

    let mut inspector = server.inspector().await;
    let sleeping = tokio::spawn(async move {
        let _: Result<(), redis::RedisError> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.5")
            .query_async(&mut inspector)
            .await;
    });
    // Let DEBUG SLEEP reach the server first.
    tokio::time::sleep(Duration::from_millis(50)).await;
    all_fail_in_time(&store, 10).await;
    let _ = sleeping.await;
    recovers(&store).await;
}

#[tokio::test]
async fn connecting_to_a_stopped_redis_fails_within_the_connect_timeout() {
    let server = RedisServer::start();
    server.pause();
    let mut options = server.options(None);
    options.connect_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = RedisStore::connect(&options).await;
    let elapsed = started.elapsed();
    server.resume();
    let Err(StoreError::Unavailable { reason, .. }) = result else {
        panic!("connecting to a stopped Redis must fail");
    };
    assert!(
        reason.contains(&format!("127.0.0.1:{}", server.port())),
        "{reason}"
    );
    assert!(
        elapsed < options.connect_timeout + MARGIN,
        "took {elapsed:?}"
    );
}
