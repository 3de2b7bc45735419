//! `--redis-pool-size N` (envoyproxy/ratelimit's `REDIS_POOL_SIZE`): the store opens N sockets
//! to the server and calls take them in turn.

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::RedisStore;
use floodgate::store::{Store, StoreError};

use floodgate_testkit::redis::{counter, identity, RedisServer};

const POOL_SIZE: usize = 3;

#[tokio::test]
async fn decisions_take_the_sockets_of_the_pool_in_turn() {
    let server = RedisServer::start();
    let mut options = server.options(None);
    options.pool_size = POOL_SIZE;
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect: {error}"));
    let quota = Quota::new(100, Unit::Minute).with_algorithm(Algorithm::FixedWindow);
    let key = identity("pool", "user", "alice", 0, &quota);
    for _ in 0..2 * POOL_SIZE {
        let counters = [counter(0, &key, &quota, Hits::Charge(1), Role::Enforced)];
        let decided = store
            .decide(&counters, false)
            .await
            .unwrap_or_else(|error| panic!("decide failed: {error}"));
        assert!(!decided.over_limit);
    }
    // Each socket ran EVALSHA last; the inspector's own connection ran CLIENT LIST.
    let deciding: Vec<String> = server
        .client_list()
        .await
        .into_iter()
        .filter(|line| line.contains("cmd=evalsha"))
        .collect();
    assert_eq!(deciding.len(), POOL_SIZE, "{deciding:#?}");
}

#[tokio::test]
async fn a_pool_of_no_sockets_is_refused() {
    let server = RedisServer::start();
    let mut options = server.options(None);
    options.pool_size = 0;
    match RedisStore::connect(&options).await {
        Ok(_) => panic!("a pool of no sockets should be refused"),
        Err(StoreError::Misconfigured { reason, .. }) => {
            assert!(reason.contains("--redis-pool-size"), "{reason}")
        }
        Err(other) => panic!("expected Misconfigured, got {other}"),
    }
}
