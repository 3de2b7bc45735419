//! A batching lane's own socket (`src/store/redis/own_socket.rs`) stays in step with Redis: the
//! reply of a call given up at its deadline is still owed, and must be read and dropped before
//! the next call's, never taken for it; and a socket closed under it is made again at the next
//! call. Over a unix socket the lanes have sockets of their own too.

use std::time::Duration;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::RedisStore;
use floodgate::store::{Store, StoreError};

use floodgate_testkit::redis::{counter, identity, RedisServer};

const LIMIT: u32 = 100;

fn one_charge(user: &str) -> Vec<Counter> {
    let quota = Quota::new(LIMIT, Unit::Hour).with_algorithm(Algorithm::FixedWindow);
    let key = identity("own-socket", "user", user, 0, &quota);
    vec![counter(0, &key, &quota, Hits::Charge(1), Role::Enforced)]
}

async fn store(server: &RedisServer) -> RedisStore {
    let mut options = server.options(None);
    options.timeout = Duration::from_millis(100);
    // The lanes with sockets of their own.
    options.batch_max = 64;
    // Every call reaches Redis: the breaker would answer some without asking.
    options.breaker_threshold = 0;
    RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect: {error}"))
}

async fn remaining(store: &RedisStore, user: &str) -> u64 {
    let decided = store
        .decide(&one_charge(user), false)
        .await
        .unwrap_or_else(|error| panic!("decide failed: {error}"));
    match decided.outcomes.first() {
        Some(outcome) => outcome.snapshot.remaining,
        None => panic!("no outcome: {decided:?}"),
    }
}

/// Blocks the server for `seconds` from another connection, and returns once it is blocked.
async fn block_redis(server: &RedisServer, seconds: &str) -> tokio::task::JoinHandle<()> {
    let mut inspector = server.inspector().await;
    let seconds = seconds.to_owned();
    let sleeping = tokio::spawn(async move {
        let _: Result<(), redis::RedisError> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query_async(&mut inspector)
            .await;
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    sleeping
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_calls_reply_is_never_taken_for_the_next_calls() {
    let server = RedisServer::start();
    let store = store(&server).await;
    assert_eq!(remaining(&store, "alice").await, u64::from(LIMIT) - 1);

    // Written before Redis blocks for longer than the deadline: the call is given up, but
    // Redis still runs it once it wakes, and its reply comes after all.
    let sleeping = block_redis(&server, "0.4").await;
    match store.decide(&one_charge("alice"), false).await {
        Err(StoreError::Unavailable { reason, .. }) => {
            assert!(reason.contains("did not answer"), "{reason}")
        }
        other => panic!("a call to a blocked Redis should be late, got {other:?}"),
    }
    let _ = sleeping.await;

    // Three charges in all: the late one counted, and this answer is this call's own (the late
    // call's reply said 98).
    assert_eq!(remaining(&store, "alice").await, u64::from(LIMIT) - 3);
    // And the socket stays in step for a counter of its own.
    assert_eq!(remaining(&store, "bob").await, u64::from(LIMIT) - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_closed_by_redis_is_made_again_at_the_next_call() {
    let server = RedisServer::start();
    let store = store(&server).await;
    assert_eq!(remaining(&store, "carol").await, u64::from(LIMIT) - 1);

    let mut inspector = server.inspector().await;
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("CLIENT KILL: {error}"));
    assert!(killed >= 1, "no socket to kill");

    // The first call may find the socket closed (and fail); the next makes a new one.
    let _ = store.decide(&one_charge("carol"), false).await;
    let after = remaining(&store, "carol").await;
    assert!(
        after == u64::from(LIMIT) - 2 || after == u64::from(LIMIT) - 3,
        "the counter after the socket was made again: {after}"
    );
}

/// The server's clients but the one asking, one line each.
async fn other_clients(server: &RedisServer) -> Vec<String> {
    let mut clients = server.client_list().await;
    clients.retain(|line| !line.contains("cmd=client"));
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_unix_socket_the_lane_decides_on_a_socket_of_its_own() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let path = dir.path().join("redis.sock");
    let path_text = path.to_string_lossy().into_owned();
    let server = RedisServer::start_with(&["--unixsocket", &path_text, "--unixsocketperm", "700"]);
    let mut options = server.options(None);
    options.url = format!("unix://{path_text}");
    options.batch_max = 64;
    options.pool_size = 1;
    options.breaker_threshold = 0;
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect over {path_text}: {error}"));
    let before = other_clients(&server).await;
    assert_eq!(remaining(&store, "dave").await, u64::from(LIMIT) - 1);
    assert_eq!(remaining(&store, "dave").await, u64::from(LIMIT) - 2);

    // The pool's socket, and the lane's own, opened at its first decision; both on the unix
    // socket (Redis names such a client's address after the socket's path).
    let after = other_clients(&server).await;
    assert_eq!(
        after.len(),
        before.len() + 1,
        "before: {before:#?}\nafter: {after:#?}"
    );
    let deciding: Vec<&String> = after
        .iter()
        .filter(|line| line.contains("cmd=evalsha"))
        .collect();
    assert_eq!(deciding.len(), 1, "{after:#?}");
    assert!(
        deciding[0].contains(&format!("laddr={path_text}")),
        "{deciding:#?}"
    );
}
