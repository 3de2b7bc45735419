//! Connecting: `redis://` URLs with a password, an ACL user and a database number, bare
//! `host:port` with envoyproxy/ratelimit-style auth, and errors that name the server but
//! never the credentials.

use std::time::Duration;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::{RedisOptions, RedisStore};
use floodgate::store::{Store, StoreError};

use floodgate_testkit::redis::{connect_url, counter, free_port, identity, RedisServer};

const ADMIN_PASSWORD: &str = "admin-Secret-4711";
const USER_PASSWORD: &str = "floodgate-Pa55-0815";

/// What the store needs: connecting (PING, SELECT), the script (SCRIPT LOAD, EVALSHA) and what
/// the script runs. Keep in step with the ACL advice in the module docs. (The client's CLIENT
/// SETINFO may be refused: it only names the library.)
const LEAST_COMMANDS: &[&str] = &[
    "+ping",
    "+select",
    "+script|load",
    "+evalsha",
    "+time",
    "+get",
    "+set",
    "+hget",
    "+hmget",
    "+hset",
    "+hdel",
    "+pexpire",
    "+unlink",
];

/// A server with a default-user password and an ACL user `limiter` with the least it needs.
async fn server_with_acl() -> RedisServer {
    let server = RedisServer::start_with(&["--requirepass", ADMIN_PASSWORD]);
    let mut admin = admin_connection(&server, 0).await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limiter")
        .arg("on")
        .arg(format!(">{USER_PASSWORD}"))
        .arg("resetkeys")
        .arg("~floodgate:*")
        .arg("nocommands")
        .arg(LEAST_COMMANDS)
        .query_async(&mut admin)
        .await
        .unwrap_or_else(|error| panic!("ACL SETUSER failed: {error}"));
    server
}

/// A connection to database `db` as the default user.
async fn admin_connection(server: &RedisServer, db: u8) -> redis::aio::MultiplexedConnection {
    let url = format!("redis://:{ADMIN_PASSWORD}@127.0.0.1:{}/{db}", server.port());
    connect_url(&url, "connect as admin").await
}

async fn keys_in_db(server: &RedisServer, db: u8) -> i64 {
    let mut admin = admin_connection(server, db).await;
    redis::cmd("DBSIZE")
        .query_async(&mut admin)
        .await
        .unwrap_or_else(|error| panic!("DBSIZE failed: {error}"))
}

/// Touches every kind of key and write the script does: a string and a log, charged, then
/// refunded until empty (deleted); on Redis time.
async fn decide_once(store: &RedisStore) {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingLog] {
        let quota = Quota::new(5, Unit::Minute).with_algorithm(algorithm);
        let key = identity("auth", "user", algorithm.name(), 0, &quota);
        for hits in [Hits::Charge(1), Hits::Refund(1)] {
            let counters = [counter(0, &key, &quota, hits, Role::Enforced)];
            let decided = store
                .decide(&counters, false)
                .await
                .unwrap_or_else(|error| panic!("decide failed: {error}"));
            assert!(!decided.over_limit);
        }
    }
}

/// Why Redis could not be reached (retried at start).
fn refused(result: Result<RedisStore, StoreError>) -> String {
    match result {
        Ok(_) => panic!("the connection should have been refused"),
        Err(StoreError::Unavailable { reason, .. }) => reason,
        Err(other) => panic!("expected Unavailable, got {other}"),
    }
}

/// Why the settings cannot work (said at start, never retried).
fn misconfigured(result: Result<RedisStore, StoreError>) -> String {
    match result {
        Ok(_) => panic!("the connection should have been refused"),
        Err(StoreError::Misconfigured { reason, .. }) => reason,
        Err(other) => panic!("expected Misconfigured, got {other}"),
    }
}

#[tokio::test]
async fn an_acl_user_with_a_database_number_connects_and_writes_there() {
    let server = server_with_acl().await;
    let url = format!(
        "redis://limiter:{USER_PASSWORD}@127.0.0.1:{}/3",
        server.port()
    );
    let store = RedisStore::connect(&RedisOptions::new(url))
        .await
        .unwrap_or_else(|error| panic!("cannot connect: {error}"));
    assert_eq!(store.server(), format!("127.0.0.1:{}/3", server.port()));
    decide_once(&store).await;
    // The fixed window keeps its (now empty) window; the emptied log was deleted.
    assert_eq!(keys_in_db(&server, 3).await, 1);
    assert_eq!(keys_in_db(&server, 0).await, 0);
}

#[tokio::test]
async fn a_bare_address_with_reference_style_auth_connects() {
    let server = server_with_acl().await;
    let mut options = RedisOptions::new(format!("127.0.0.1:{}", server.port()));
    options.auth = Some(ADMIN_PASSWORD.to_owned());
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect with a password: {error}"));
    decide_once(&store).await;

    options.auth = Some(format!("limiter:{USER_PASSWORD}"));
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect as an ACL user: {error}"));
    decide_once(&store).await;
}

#[tokio::test]
async fn wrong_credentials_are_refused_without_showing_them() {
    let server = server_with_acl().await;
    let wrong = "not-the-Pa55word";
    let url = format!("redis://limiter:{wrong}@127.0.0.1:{}/2", server.port());
    let reason = misconfigured(RedisStore::connect(&RedisOptions::new(url)).await);
    assert!(
        reason.contains(&format!("127.0.0.1:{}/2", server.port())),
        "{reason}"
    );
    assert!(
        !reason.contains(wrong) && !reason.contains("limiter:"),
        "{reason}"
    );

    // No credentials at all against a server that needs them.
    let reason = misconfigured(RedisStore::connect(&RedisOptions::new(server.url())).await);
    assert!(
        reason.contains(&format!("127.0.0.1:{}", server.port())),
        "{reason}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_credentials() {
    let port = free_port();
    let mut options = RedisOptions::new(format!(
        "redis://limiter:{USER_PASSWORD}@127.0.0.1:{port}/1"
    ));
    options.connect_timeout = Duration::from_millis(300);
    let reason = refused(RedisStore::connect(&options).await);
    assert!(reason.contains(&format!("127.0.0.1:{port}/1")), "{reason}");
    assert!(!reason.contains(USER_PASSWORD), "{reason}");
    assert!(!format!("{options:?}").contains(USER_PASSWORD));
}

#[tokio::test]
async fn bad_options_are_refused_before_connecting() {
    let mut options = RedisOptions::new("redis://127.0.0.1:1/0");
    options.key_prefix = "bad{prefix".to_owned();
    let reason = misconfigured(RedisStore::connect(&options).await);
    assert!(reason.contains("prefix"), "{reason}");

    let mut options = RedisOptions::new("redis://127.0.0.1:1/0");
    options.timeout = Duration::ZERO;
    let reason = misconfigured(RedisStore::connect(&options).await);
    assert!(reason.contains("timeout"), "{reason}");
}
