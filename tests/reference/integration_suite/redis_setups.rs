//! The reference's store setups, each running the basic sequence (`basic_sequence.rs`) row by
//! row as its Go test does: `TestBasicConfig` (one Redis, a per-second Redis, a local cache, a
//! key prefix, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), `TestBasicAuthConfig` (a password),
//! `TestBasicTLSConfig` (TLS, with a client certificate), `TestBasicAuthConfigWithRedisCluster`,
//! `TestBasicAuthConfigWithRedisSentinel`; and the same sequence on the memory store.
//!
//! Like the Go tests, the Redis servers of one test are shared by its rows, and each row starts
//! its own floodgate. floodgate does not read `LOCAL_CACHE_SIZE_IN_BYTES`: its rows must answer
//! the same and floodgate says at start that it ignores it. The per-second rows
//! (`REDIS_PERSECOND=true`) start `floodgate serve`, whose counters are floodgate's own, in one
//! Redis: it refuses to start rather than count SECOND limits elsewhere than asked (the
//! per-second Redis serves envoyproxy/ratelimit's counters, `--redis-counters reference`:
//! tests/redis/redis_reference_door.rs), so the per-second Redis stays empty.

use floodgate::core::charging::Charging;
use floodgate_testkit::free_port;
use floodgate_testkit::redis::{RedisCluster, RedisServer, SentinelServer};
use floodgate_testkit::testca::TestCa;

use super::basic_sequence::{self, Keys};
use crate::harness::{spawn, start, write, Entry, RuntimeTree};

/// The reference's password in its Redis test setups.
pub const PASSWORD: &str = "password123";

/// One row of a Go test: its name, how floodgate is started, which fixture keys it uses, its
/// environment, and the reference variables floodgate must say it ignores.
pub struct Row {
    pub name: String,
    pub entry: Entry,
    pub keys: Keys,
    pub env: Vec<(String, String)>,
    pub ignored: Vec<&'static str>,
    /// The row must refuse to start, its log saying this.
    pub refused: Option<&'static str>,
}

impl Row {
    /// How the row's floodgate charges: the reference's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
    /// when set, else its door's default (every descriptor started as `ratelimit`, as the
    /// reference; all or nothing for `floodgate serve`).
    pub fn charging(&self) -> Charging {
        let stop = self
            .env
            .iter()
            .find(|(name, _)| name == "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
            .map(|(_, value)| value.as_str());
        match (stop, self.entry) {
            (Some("true"), _) => Charging::AllOrRefused,
            (Some("false"), _) | (None, Entry::Ratelimit) => Charging::EveryDescriptor,
            (Some(other), _) => panic!(
                "{}: STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT={other}",
                self.name
            ),
            (None, Entry::Serve) => Charging::AllOrNothing,
        }
    }
}

pub fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// The four rows most of the reference's Go tests run, named as its `t.Run`s are
/// (`WithoutPerSecondRedis{suffix}`, `WithPerSecondRedis{suffix}`, each without and with a local
/// cache): `store` is the row's Redis, `per_second` what the per-second rows add.
pub fn four_rows(
    suffix: &str,
    store: &[(String, String)],
    per_second: &[(String, String)],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for local_cache in [false, true] {
        for with_per_second in [false, true] {
            let mut env = store.to_vec();
            let mut ignored = Vec::new();
            if with_per_second {
                env.push(("REDIS_PERSECOND".to_owned(), "true".to_owned()));
                env.extend_from_slice(per_second);
            }
            if local_cache {
                env.push(("LOCAL_CACHE_SIZE_IN_BYTES".to_owned(), "1000".to_owned()));
                ignored.push("LOCAL_CACHE_SIZE_IN_BYTES");
            }
            let name = format!(
                "{}PerSecondRedis{suffix}{}",
                if with_per_second { "With" } else { "Without" },
                if local_cache { "WithLocalCache" } else { "" }
            );
            rows.push(Row {
                name,
                // Both ways to start it, alternating.
                entry: if with_per_second {
                    Entry::Serve
                } else {
                    Entry::Ratelimit
                },
                keys: if local_cache {
                    Keys::Local
                } else {
                    Keys::Plain
                },
                env,
                ignored,
                refused: with_per_second
                    .then_some("REDIS_PERSECOND=true: floodgate's own counters"),
            });
        }
    }
    rows
}

/// Runs each row: a floodgate from the fixtures `basic.yaml` and `another.yaml`, the basic
/// sequence, and the reference variables it ignores said once each at start.
pub async fn run_rows(test: &str, rows: &[Row]) {
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    for row in rows {
        let context = format!("{test}/{}", row.name);
        let env: Vec<(&str, &str)> = row
            .env
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        if let Some(said) = row.refused {
            let mut process = spawn(row.entry, &tree, &row.name, &env);
            let log = process.log_of_a_refused_start(std::time::Duration::from_secs(20));
            assert!(log.contains(said), "{context}: {said}\n{log}");
            continue;
        }
        let server = start(row.entry, &tree, &row.name, &env);
        basic_sequence::run(&server, row.keys, row.charging(), &context).await;
        let log = server.process.log_text();
        for variable in &row.ignored {
            let said = format!("{variable} is set, but floodgate does not support it");
            assert_eq!(log.matches(&said).count(), 1, "{context}: {said}\n{log}");
        }
    }
}

/// The keys a Redis holds (`DBSIZE`).
fn key_count(server: &RedisServer) -> u64 {
    server
        .query_text(&["DBSIZE"])
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| panic!("DBSIZE on port {} failed", server.port()))
}

pub fn address(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config_on_the_memory_store() {
    let rows: Vec<Row> = [Entry::Serve, Entry::Ratelimit]
        .into_iter()
        .map(|entry| Row {
            name: format!("Memory{entry:?}"),
            entry,
            keys: Keys::Plain,
            env: owned(&[("BACKEND_TYPE", "memory")]),
            ignored: Vec::new(),
            refused: None,
        })
        .collect();
    run_rows("BasicConfigMemory", &rows).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config() {
    let redis = RedisServer::start();
    let per_second_redis = RedisServer::start();
    let store = owned(&[("REDIS_URL", &address(redis.port()))]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_URL", &address(per_second_redis.port())),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
    ]);
    let mut rows = four_rows("", &store, &per_second);
    let mut prefixed = store.clone();
    prefixed.push(("CACHE_KEY_PREFIX".to_owned(), "prefix:".to_owned()));
    rows.push(Row {
        name: "WithoutPerSecondRedisWithCachePrefix".to_owned(),
        entry: Entry::Ratelimit,
        keys: Keys::Plain,
        env: prefixed,
        ignored: Vec::new(),
        refused: None,
    });
    let mut stopping = store.clone();
    stopping.push((
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT".to_owned(),
        "true".to_owned(),
    ));
    for mut row in four_rows("", &stopping, &per_second) {
        let joint = if row.keys == Keys::Local {
            "And"
        } else {
            "With"
        };
        row.name = format!(
            "{}{joint}stopCacheKeyIncrementWhenOverlimitConfig",
            row.name
        );
        rows.push(row);
    }
    run_rows("TestBasicConfig", &rows).await;

    let prefixed_keys = redis.query_text(&["--scan", "--pattern", "prefix:*"]);
    assert!(
        prefixed_keys.is_some_and(|keys| !keys.trim().is_empty()),
        "CACHE_KEY_PREFIX: no key under prefix: in Redis"
    );
    assert_eq!(
        key_count(&per_second_redis),
        0,
        "floodgate serve refuses REDIS_PERSECOND: nothing is counted in REDIS_PERSECOND_URL's Redis"
    );
    assert!(key_count(&redis) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config() {
    let redis = RedisServer::start_with_password(PASSWORD, &[]);
    let per_second_redis = RedisServer::start_with_password(PASSWORD, &[]);
    let store = owned(&[
        ("REDIS_URL", &address(redis.port())),
        ("REDIS_AUTH", PASSWORD),
    ]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_URL", &address(per_second_redis.port())),
        ("REDIS_PERSECOND_AUTH", PASSWORD),
    ]);
    run_rows(
        "TestBasicAuthConfig",
        &four_rows("Auth", &store, &per_second),
    )
    .await;
    assert_eq!(key_count(&per_second_redis), 0);
    assert!(key_count(&redis) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_tls_config() {
    // The reference reaches stunnel with a certificate it adds to the system's trust store;
    // here the CA the test makes is given as REDIS_TLS_CACERT.
    let dir = floodgate_testkit::tempdir();
    let ca = TestCa::new("reference suite redis CA");
    let (server, client) = (ca.server(), ca.client("ratelimit"));
    let path = |name: &str| dir.path().join(name).display().to_string();
    for (name, text) in [
        ("ca.pem", ca.pem()),
        ("server.pem", server.cert),
        ("server.key", server.key),
        ("client.pem", client.cert),
        ("client.key", client.key),
    ] {
        write(&dir.path().join(name), &text);
    }
    let tls_redis = |verify_clients: &str| {
        RedisServer::start_tls(&[
            "--tls-cert-file",
            &path("server.pem"),
            "--tls-key-file",
            &path("server.key"),
            "--tls-ca-cert-file",
            &path("ca.pem"),
            "--tls-auth-clients",
            verify_clients,
            "--requirepass",
            PASSWORD,
        ])
    };
    let (redis, tls_port) = tls_redis("no");
    let store = owned(&[
        ("REDIS_URL", &address(tls_port)),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", &path("ca.pem")),
        ("REDIS_AUTH", PASSWORD),
    ]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_URL", &address(free_port())),
        ("REDIS_PERSECOND_AUTH", PASSWORD),
        ("REDIS_PERSECOND_TLS", "true"),
    ]);
    let mut rows = four_rows("TLS", &store, &per_second);

    // WithoutPerSecondRedisTLSWithClientCert: a Redis that verifies the client's certificate.
    let (verifying_redis, verifying_port) = tls_redis("yes");
    rows.push(Row {
        name: "WithoutPerSecondRedisTLSWithClientCert".to_owned(),
        entry: Entry::Ratelimit,
        keys: Keys::Plain,
        env: owned(&[
            ("REDIS_URL", &address(verifying_port)),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", &path("ca.pem")),
            ("REDIS_TLS_CLIENT_CERT", &path("client.pem")),
            ("REDIS_TLS_CLIENT_KEY", &path("client.key")),
            ("REDIS_AUTH", PASSWORD),
            ("REDIS_PERSECOND_TLS", "true"),
            ("REDIS_PERSECOND_AUTH", PASSWORD),
        ]),
        ignored: Vec::new(),
        refused: None,
    });
    run_rows("TestBasicTLSConfig", &rows).await;
    assert!(key_count(&redis) > 0);
    assert!(key_count(&verifying_redis) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config_with_redis_cluster() {
    let cluster = RedisCluster::start_with_password(3, PASSWORD);
    let store = owned(&[
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", &cluster.seeds()),
        ("REDIS_AUTH", PASSWORD),
        ("REDIS_PIPELINE_WINDOW", "150us"),
    ]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_TYPE", "cluster"),
        ("REDIS_PERSECOND_URL", &address(free_port())),
        ("REDIS_PERSECOND_AUTH", PASSWORD),
        ("REDIS_PERSECOND_PIPELINE_WINDOW", "150us"),
    ]);
    let mut rows = four_rows("Auth", &store, &per_second);
    for row in &mut rows {
        row.ignored.push("REDIS_PIPELINE_WINDOW");
    }
    run_rows("TestBasicAuthConfigWithRedisCluster", &rows).await;
    let keys: u64 = cluster.nodes.iter().map(key_count).sum();
    assert!(keys > 0, "no counter in the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config_with_redis_sentinel() {
    let master = RedisServer::start_with_password(PASSWORD, &[]);
    let sentinel =
        SentinelServer::start_with_auth("mymaster", master.port(), 5_000, Some(PASSWORD));
    let store = owned(&[
        ("REDIS_TYPE", "sentinel"),
        (
            "REDIS_URL",
            &format!("mymaster,{}", address(sentinel.port())),
        ),
        ("REDIS_AUTH", PASSWORD),
    ]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_TYPE", "sentinel"),
        (
            "REDIS_PERSECOND_URL",
            &format!("mymaster,{}", address(free_port())),
        ),
        ("REDIS_PERSECOND_AUTH", PASSWORD),
    ]);
    run_rows(
        "TestBasicAuthConfigWithRedisSentinel",
        &four_rows("Auth", &store, &per_second),
    )
    .await;
    assert!(key_count(&master) > 0, "no counter on the master");
}
