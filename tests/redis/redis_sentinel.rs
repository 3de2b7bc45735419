//! Redis Sentinel: a floodgate process finds the master through a sentinel
//! (`--redis-type sentinel`, envoyproxy/ratelimit's `REDIS_URL=mastername,host:port`), and when
//! the master is killed it follows the failover without a restart: the failure policy answers
//! while there is no master, then decisions resume on the promoted replica, which holds the
//! counters written before (replicated) and after.
//!
//! A manual failover (`SENTINEL FAILOVER`, the old master stays up as a replica) is followed
//! the same way.
//!
//! One master, one replica, one sentinel (quorum 1, the master is down after 1 s without an
//! answer). The waits are bounded and poll; nothing here asserts how long a step took.

use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate::store::redis::{RedisOptions, RedisStore, Topology};
use floodgate::store::StoreError;

use floodgate_testkit as common;
use floodgate_testkit::redis::{connect_to, scan_keys, RedisServer, SentinelServer};
use floodgate_testkit::rls;
use floodgate_testkit::Floodgate;

const MASTER: &str = "floodgate-master";

/// After this long without an answer the sentinel calls the master down.
const DOWN_AFTER_MS: u64 = 1000;

/// The longest a setup step (replication, discovery) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest from killing the master to decisions on the promoted replica.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

const RULES: &str = "domain: sentinel\n\
                     descriptors:\n\
                     \x20 - key: poll\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 100000, algorithm: fixed_window}\n\
                     \x20 - key: user\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 5, algorithm: fixed_window}\n";

/// Polls `condition` every 100 ms until it holds; panics with `what` after `timeout`.
async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {timeout:?}");
}

async fn replication_up(replica: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut replica.inspector().await)
        .await
        .unwrap_or_else(|error| panic!("INFO replication: {error}"));
    info.contains("master_link_status:up")
}

/// A master, its replica (replicating) and a sentinel that knows both.
async fn start_group() -> (RedisServer, RedisServer, SentinelServer) {
    let master = RedisServer::start();
    let master_port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]);
    wait_until(SETUP_TIMEOUT, "replica linked", || replication_up(&replica)).await;
    let sentinel = SentinelServer::start(MASTER, master.port(), DOWN_AFTER_MS);
    wait_until(SETUP_TIMEOUT, "sentinel knows the replica", || async {
        sentinel.healthy_replicas(MASTER).await >= 1
    })
    .await;
    (master, replica, sentinel)
}

/// floodgate finding the master through `sentinel`, with a generous deadline (debug builds on
/// a loaded 2-core machine).
fn start_floodgate(dir: &std::path::Path, sentinel: &SentinelServer) -> Floodgate {
    let sentinels = format!("{MASTER},127.0.0.1:{}", sentinel.port());
    Floodgate::start_with_rules(
        dir,
        "sentinel.yaml",
        RULES,
        &[
            "--store",
            "redis",
            "--redis-type",
            "sentinel",
            "--redis-url",
            &sentinels,
            "--redis-timeout-ms",
            "500",
        ],
    )
}

/// The counters on `master` (every key), once `replica` holds the same.
async fn written_and_replicated(master: &RedisServer, replica: &RedisServer) -> Vec<String> {
    let written = scan_keys(&mut master.inspector().await, "floodgate:*").await;
    wait_until(SETUP_TIMEOUT, "the counter reached the replica", || async {
        scan_keys(&mut replica.inspector().await, "floodgate:*").await == written
    })
    .await;
    written
}

/// What `ROLE` says `server` is: "master" or "slave"; empty while it cannot answer (a master
/// being demoted drops its connections, the one asking included).
async fn role(server: &RedisServer) -> String {
    let Ok(mut connection) = server.try_inspector().await else {
        return String::new();
    };
    redis::cmd("ROLE")
        .query_async::<Vec<redis::Value>>(&mut connection)
        .await
        .ok()
        .and_then(|role| role.first().cloned())
        .and_then(|first| redis::from_redis_value::<String>(first).ok())
        .unwrap_or_default()
}

/// The answer to one request: its code, or `None` when the failure policy (`error`) answered.
async fn decide(client: &mut rls::Client, key: &str, value: &str) -> Option<Code> {
    match rls::call(client, rls::request("sentinel", &[&[(key, value)]])).await {
        Ok(response) => Some(
            Code::try_from(response.overall_code)
                .unwrap_or_else(|error| panic!("bad code: {error}")),
        ),
        Err(status) if status.code() == tonic::Code::Unavailable => None,
        Err(status) => panic!("unexpected status: {status}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_a_failover_to_the_promoted_replica_without_restart() {
    let (mut master, replica, sentinel) = start_group().await;
    let dir = common::tempdir();
    let floodgate = start_floodgate(dir.path(), &sentinel);
    let mut client = rls::connect(&floodgate.grpc_url()).await;

    // Two of alice's five, on the first master, replicated before it dies.
    assert_eq!(decide(&mut client, "user", "alice").await, Some(Code::Ok));
    assert_eq!(decide(&mut client, "user", "alice").await, Some(Code::Ok));
    let written = written_and_replicated(&master, &replica).await;
    assert!(!written.is_empty(), "alice's counter is in Redis");

    master.kill();
    let killed = Instant::now();
    let mut policy_answers = 0;
    let deadline = Instant::now() + FAILOVER_TIMEOUT;
    loop {
        match decide(&mut client, "poll", "p").await {
            Some(code) => {
                assert_eq!(code, Code::Ok);
                break;
            }
            None => policy_answers += 1,
        }
        assert!(
            Instant::now() < deadline,
            "no decision {FAILOVER_TIMEOUT:?} after the master was killed; floodgate: {}\n\
             sentinel: {}",
            floodgate.process.log_text(),
            sentinel.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "decisions resumed {:?} after the kill; {policy_answers} answers from the failure \
         policy meanwhile",
        killed.elapsed()
    );
    assert!(
        policy_answers > 0,
        "right after the kill there is no master: the failure policy must have answered"
    );
    assert_eq!(
        sentinel.master_port(MASTER).await,
        Some(replica.port()),
        "the sentinel promoted the replica"
    );

    // alice's count went on from the replicated 2: three more, then over.
    for _ in 0..3 {
        assert_eq!(decide(&mut client, "user", "alice").await, Some(Code::Ok));
    }
    assert_eq!(
        decide(&mut client, "user", "alice").await,
        Some(Code::OverLimit)
    );
    let mut promoted = connect_to(replica.port()).await;
    let keys = scan_keys(&mut promoted, "floodgate:*").await;
    // What was written before the failover, and the poll counter written after it.
    assert!(written.iter().all(|key| keys.contains(key)), "{keys:?}");
    assert!(keys.len() > written.len(), "{keys:?}");
    let log = floodgate.process.log_text();
    assert!(
        log.contains("Redis master changed")
            && log.contains(&format!("127.0.0.1:{}", replica.port())),
        "the switch is logged with the new master: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_with_the_old_master_alive_is_followed() {
    let (master, replica, sentinel) = start_group().await;
    let dir = common::tempdir();
    let floodgate = start_floodgate(dir.path(), &sentinel);
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    assert_eq!(decide(&mut client, "poll", "before").await, Some(Code::Ok));
    let before = written_and_replicated(&master, &replica).await;

    // A manual failover: the old master stays up and becomes a replica (it drops its clients;
    // a write that still reached it would be refused with READONLY).
    let _: () = redis::cmd("SENTINEL")
        .arg("failover")
        .arg(MASTER)
        .query_async(&mut sentinel.connection().await)
        .await
        .unwrap_or_else(|error| panic!("SENTINEL FAILOVER: {error}"));
    // Until the old master is told to replicate, it still takes writes (and loses them when
    // it resynchronises): the test's decisions start once it is a replica.
    wait_until(FAILOVER_TIMEOUT, "the old master demoted", || async {
        role(&master).await == "slave" && sentinel.master_port(MASTER).await == Some(replica.port())
    })
    .await;
    let deadline = Instant::now() + FAILOVER_TIMEOUT;
    while decide(&mut client, "poll", "after").await.is_none() {
        assert!(
            Instant::now() < deadline,
            "no decision on the new master: {}",
            floodgate.process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let keys = scan_keys(&mut connect_to(replica.port()).await, "floodgate:*").await;
    assert!(
        before.iter().all(|key| keys.contains(key)) && keys.len() > before.len(),
        "the counters written before and after, on the new master: {keys:?}"
    );
    let log = floodgate.process.log_text();
    assert!(log.contains("Redis master changed"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_or_no_sentinel_is_refused_clearly() {
    let master = RedisServer::start();
    let sentinel = SentinelServer::start(MASTER, master.port(), DOWN_AFTER_MS);
    let refused = |options: RedisOptions| async move {
        match RedisStore::connect(&options).await {
            Ok(_) => panic!("connecting should have failed"),
            Err(StoreError::Unavailable { reason, .. }) => reason,
            Err(other) => panic!("expected Unavailable, got {other}"),
        }
    };
    let options = |url: String| RedisOptions {
        topology: Topology::Sentinel,
        ..RedisOptions::new(url)
    };

    let reason = refused(options(format!("nobody,127.0.0.1:{}", sentinel.port()))).await;
    assert!(
        reason.contains("does not know a master named \"nobody\"")
            && reason.contains(&format!("127.0.0.1:{}", sentinel.port())),
        "{reason}"
    );

    let silent = common::free_port();
    let reason = refused(options(format!("{MASTER},127.0.0.1:{silent}"))).await;
    assert!(
        reason.contains("cannot find the Redis master")
            && reason.contains(&format!("127.0.0.1:{silent}")),
        "{reason}"
    );

    // With one sentinel down, the other answers.
    let store = RedisStore::connect(&options(format!(
        "{MASTER},127.0.0.1:{silent},127.0.0.1:{}",
        sentinel.port()
    )))
    .await
    .unwrap_or_else(|error| panic!("one live sentinel is enough: {error}"));
    assert!(
        store
            .server()
            .contains(&format!("127.0.0.1:{}", master.port())),
        "{}",
        store.server()
    );
}
