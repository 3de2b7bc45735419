//! A Redis that stops answering makes decisions fail with `Unavailable` within the deadline
//! (plus a scheduling margin), never hang; the store recovers once Redis answers again. And
//! the deadline is `--redis-timeout-ms`, whatever its value: a pause shorter than it is waited
//! out, not cut short by a timeout of the redis crate's own. Requests waiting to share a script
//! call (`--redis-batch-max`) keep each its own deadline, their wait included.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::proto::rate_limit_response::Code;
use floodgate::store::redis::{RedisStore, DEFAULT_TIMEOUT};
use floodgate::store::{Store, StoreError};

use floodgate_testkit as common;
use floodgate_testkit::redis::{counter, identity, RedisServer, BATCH_MAXES};
use floodgate_testkit::rls;
use floodgate_testkit::Floodgate;

/// Room for a busy 2-core machine to wake the timer up.
const MARGIN: Duration = Duration::from_millis(250);

fn one_counter() -> Vec<Counter> {
    let quota = Quota::new(100, Unit::Minute).with_algorithm(Algorithm::SlidingWindow);
    let key = identity("timeout", "user", "u", 0, &quota);
    vec![counter(0, &key, &quota, Hits::Charge(1), Role::Enforced)]
}

async fn store_with_default_timeout(server: &RedisServer, batch_max: usize) -> Arc<RedisStore> {
    let mut options = server.options(None);
    options.timeout = DEFAULT_TIMEOUT;
    options.batch_max = batch_max;
    // The deadline alone: the circuit breaker would answer later calls without asking Redis
    // (tests/redis_failure/redis_failure.rs covers it).
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
    for batch_max in BATCH_MAXES {
        let server = RedisServer::start();
        let store = store_with_default_timeout(&server, batch_max).await;
        assert!(store.decide(&one_counter(), false).await.is_ok());

        server.pause();
        all_fail_in_time(&store, 20).await;
        // Calls keep failing fast while it stays stopped, queued ones included.
        all_fail_in_time(&store, 20).await;
        server.resume();
        recovers(&store).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_redis_times_out() {
    for batch_max in BATCH_MAXES {
        a_busy_redis_times_out_with(batch_max).await;
    }
}

async fn a_busy_redis_times_out_with(batch_max: usize) {
    let server = RedisServer::start();
    let store = store_with_default_timeout(&server, batch_max).await;
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

/// How long Redis is held paused while calls wait on it.
const PAUSE: Duration = Duration::from_secs(1);
/// Calls sent during the pause, spread over its first half so that each still waits for it.
const PAUSED_CALLS: usize = 10;
const PAUSED_CALL_SPACING: Duration = Duration::from_millis(50);

const PAUSE_RULES: &str = "domain: pause\n\
                           descriptors:\n\
                           \x20 - key: user\n\
                           \x20   rate_limit: {unit: hour, requests_per_unit: 1000000}\n";

/// floodgate on `redis` with `--redis-timeout-ms timeout_ms`; Redis paused for [`PAUSE`] while
/// [`PAUSED_CALLS`] gRPC calls are sent. What each call got: its code, or the gRPC error.
async fn calls_during_a_pause(
    redis: &RedisServer,
    timeout_ms: &str,
) -> Vec<Result<Code, tonic::Code>> {
    let dir = common::tempdir();
    let url = redis.url();
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "pause.yaml",
        PAUSE_RULES,
        &[
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--redis-timeout-ms",
            timeout_ms,
        ],
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let warm = rls::call(&mut client, rls::request("pause", &[&[("user", "warm")]])).await;
    assert!(warm.is_ok(), "before the pause: {warm:?}");

    redis.pause();
    let paused_at = Instant::now();
    let mut calls = Vec::with_capacity(PAUSED_CALLS);
    for index in 0..PAUSED_CALLS {
        let mut client = client.clone();
        let user = format!("u{index}");
        calls.push(tokio::spawn(async move {
            let answer = rls::call(&mut client, rls::request("pause", &[&[("user", &user)]])).await;
            answer
                .map(|response| response.overall_code())
                .map_err(|status| status.code())
        }));
        tokio::time::sleep(PAUSED_CALL_SPACING).await;
    }
    tokio::time::sleep(PAUSE.saturating_sub(paused_at.elapsed())).await;
    redis.resume();

    let mut answers = Vec::with_capacity(PAUSED_CALLS);
    for call in calls {
        answers.push(
            call.await
                .unwrap_or_else(|error| panic!("call task: {error}")),
        );
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_shorter_than_the_timeout_flag_is_waited_out() {
    let redis = RedisServer::start();
    // Above the redis crate's own 500 ms response timeout, which used to cut every call first.
    let patient = calls_during_a_pause(&redis, "2000").await;
    assert!(
        patient.iter().all(|answer| *answer == Ok(Code::Ok)),
        "--redis-timeout-ms 2000, Redis paused for {PAUSE:?}: {patient:?}"
    );
    // The same pause outlasts a shorter deadline: the calls fail, so the one above could too.
    let impatient = calls_during_a_pause(&redis, "300").await;
    assert!(
        impatient
            .iter()
            .all(|answer| *answer == Err(tonic::Code::Unavailable)),
        "--redis-timeout-ms 300, Redis paused for {PAUSE:?}: {impatient:?}"
    );
}

/// Every socket of a pool, and a command beside the decisions asked for a shorter deadline,
/// wait as long as the call timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_sockets_and_side_commands_wait_out_a_pause() {
    let server = RedisServer::start();
    let mut options = server.options(None);
    options.timeout = Duration::from_secs(2);
    options.pool_size = 3;
    let store = Arc::new(
        RedisStore::connect(&options)
            .await
            .unwrap_or_else(|error| panic!("cannot connect: {error}")),
    );
    assert!(store.decide(&one_counter(), false).await.is_ok());

    server.pause();
    let decisions: Vec<_> = (0..6)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.decide(&one_counter(), false).await })
        })
        .collect();
    let side = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .command::<String>(&redis::cmd("PING"), Duration::from_millis(10))
                .await
        })
    };
    tokio::time::sleep(PAUSE).await;
    server.resume();
    for decision in decisions {
        let decided = decision
            .await
            .unwrap_or_else(|error| panic!("task failed: {error}"));
        assert!(decided.is_ok(), "{decided:?}");
    }
    let pong = side
        .await
        .unwrap_or_else(|error| panic!("task failed: {error}"));
    assert_eq!(pong, Ok("PONG".to_owned()));
}
