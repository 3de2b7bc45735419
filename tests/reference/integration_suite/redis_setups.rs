//! The reference's store setups, each running the basic sequence (`basic_sequence.rs`) row by
//! row as its Go test does: `TestBasicConfig` (one Redis, a per-second Redis, a local cache, a
//! key prefix, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), `TestBasicAuthConfig` (a password),
//! `TestBasicTLSConfig` (TLS, with a client certificate), `TestBasicAuthConfigWithRedisCluster`,
//! `TestBasicAuthConfigWithRedisSentinel`; and the same sequence on the memory store.
//!
//! Like the Go tests, the Redis servers of one test are shared by its rows, and each row starts
//! its own floodgate. floodgate does not read `LOCAL_CACHE_SIZE_IN_BYTES`: its rows must answer
//! the same and floodgate says at start that it ignores it. The per-second rows
//! (`REDIS_PERSECOND=true`) start as `ratelimit`, whose counters are the reference's, and each
//! has a per-second Redis of its setup's kind (a password, TLS, a cluster, a sentinel), as the
//! Go tests' `REDIS_PERSECOND_*` settings name one: the SECOND limit of the sequence (`basic`
//! key1) is counted there and nowhere else (`fixed_cache_impl.go` lines 173-186), which each
//! such row asserts. The rows without a per-second Redis and with a local cache start
//! `floodgate serve` (its own counters, its own charging); `TestBasicConfig` also holds its
//! refusal of `REDIS_PERSECOND=true`, which its counters could not honour.

use std::collections::BTreeSet;

use floodgate::core::decision::charging::Charging;
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

/// The Redis servers of one test whose keys the per-second rows inspect: the main store's and
/// the per-second store's (one server, or a cluster's nodes).
pub struct Stores<'s> {
    pub main: Vec<&'s RedisServer>,
    pub per_second: Vec<&'s RedisServer>,
}

impl Stores<'_> {
    /// The keys under `pattern` on `servers` (`redis-cli --scan`, with their password).
    fn keys(servers: &[&RedisServer], pattern: &str) -> BTreeSet<String> {
        servers
            .iter()
            .flat_map(|server| {
                let text = server
                    .query_text(&["--scan", "--pattern", pattern])
                    .unwrap_or_else(|| panic!("SCAN on port {} failed", server.port()));
                text.lines()
                    .map(str::trim)
                    .filter(|key| !key.is_empty())
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The calls of `command` (`INFO commandstats`, lower case) `servers` have run so far.
    fn calls(servers: &[&RedisServer], command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        servers
            .iter()
            .map(|server| {
                let info = server
                    .query_text(&["INFO", "commandstats"])
                    .unwrap_or_else(|| panic!("INFO on port {} failed", server.port()));
                info.lines()
                    .find_map(|line| line.trim().strip_prefix(prefix.as_str()))
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|calls| calls.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    }
}

impl Row {
    /// Whether the row names a per-second Redis (`REDIS_PERSECOND=true`).
    fn per_second(&self) -> bool {
        self.env
            .iter()
            .any(|(name, value)| name == "REDIS_PERSECOND" && value == "true")
    }

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
                // `floodgate serve` where its own counters can do what the row asks.
                entry: if local_cache && !with_per_second {
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
                refused: None,
            });
        }
    }
    rows
}

/// Runs each row: a floodgate from the fixtures `basic.yaml` and `another.yaml`, the basic
/// sequence, and the reference variables it ignores said once each at start.
pub async fn run_rows(test: &str, rows: &[Row]) {
    run_rows_on(test, rows, None).await;
}

/// [`run_rows`], each per-second row's SECOND counter looked for in `stores`: the one SECOND
/// call of the sequence (`basic` key1) is the one `INCRBY` the per-second Redis runs, no new
/// key of it appears in the main Redis, and the per-second Redis holds nothing but such keys
/// (the reference's, `basic_key1_foo_<second>`; each lives a second plus the expiry jitter, so
/// it may be gone by the end of the row).
pub async fn run_rows_on(test: &str, rows: &[Row], stores: Option<&Stores<'_>>) {
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
        let second_keys = format!("basic_{}_foo_*", row.keys.key("key1"));
        let checked = stores.filter(|_| row.per_second());
        let before = checked.map(|stores| {
            (
                Stores::keys(&stores.main, &second_keys),
                Stores::calls(&stores.per_second, "incrby"),
            )
        });
        let server = start(row.entry, &tree, &row.name, &env);
        basic_sequence::run(&server, row.keys, row.charging(), &context).await;
        let log = server.process.log_text();
        for variable in &row.ignored {
            let said = format!("{variable} is set, but floodgate does not support it");
            assert_eq!(log.matches(&said).count(), 1, "{context}: {said}\n{log}");
        }
        if let (Some(stores), Some(before)) = (checked, before) {
            assert_second_keys_in_the_per_second_redis(stores, &second_keys, before, &context);
        }
    }
}

fn assert_second_keys_in_the_per_second_redis(
    stores: &Stores<'_>,
    second_keys: &str,
    (main_before, increments_before): (BTreeSet<String>, u64),
    context: &str,
) {
    let main_after = Stores::keys(&stores.main, second_keys);
    assert!(
        main_after.is_subset(&main_before),
        "{context}: a SECOND key in the main Redis: {main_after:?}"
    );
    assert_eq!(
        Stores::calls(&stores.per_second, "incrby") - increments_before,
        1,
        "{context}: the SECOND limit's INCRBY, and nothing else, in the per-second Redis"
    );
    let every = Stores::keys(&stores.per_second, "*");
    assert!(
        every.iter().all(|key| key.starts_with("basic_key1_")),
        "{context}: only SECOND keys belong in the per-second Redis: {every:?}"
    );
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
    // `floodgate serve` keeps its own counters, in one Redis: it refuses a per-second one.
    let mut serving = store.clone();
    serving.push(("REDIS_PERSECOND".to_owned(), "true".to_owned()));
    serving.extend_from_slice(&per_second);
    rows.push(Row {
        name: "WithPerSecondRedisAsFloodgateServe".to_owned(),
        entry: Entry::Serve,
        keys: Keys::Plain,
        env: serving,
        ignored: Vec::new(),
        refused: Some("REDIS_PERSECOND=true: floodgate's own counters"),
    });
    let stores = Stores {
        main: vec![&redis],
        per_second: vec![&per_second_redis],
    };
    run_rows_on("TestBasicConfig", &rows, Some(&stores)).await;

    let prefixed_keys = redis.query_text(&["--scan", "--pattern", "prefix:*"]);
    assert!(
        prefixed_keys.is_some_and(|keys| !keys.trim().is_empty()),
        "CACHE_KEY_PREFIX: no key under prefix: in Redis"
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
    let stores = Stores {
        main: vec![&redis],
        per_second: vec![&per_second_redis],
    };
    run_rows_on(
        "TestBasicAuthConfig",
        &four_rows("Auth", &store, &per_second),
        Some(&stores),
    )
    .await;
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
    let (per_second_redis, per_second_tls_port) = tls_redis("no");
    let store = owned(&[
        ("REDIS_URL", &address(tls_port)),
        ("REDIS_TLS", "true"),
        ("REDIS_TLS_CACERT", &path("ca.pem")),
        ("REDIS_AUTH", PASSWORD),
    ]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_URL", &address(per_second_tls_port)),
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
    let stores = Stores {
        main: vec![&redis],
        per_second: vec![&per_second_redis],
    };
    run_rows_on("TestBasicTLSConfig", &rows, Some(&stores)).await;
    assert!(key_count(&redis) > 0);
    assert!(key_count(&verifying_redis) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config_with_redis_cluster() {
    let cluster = RedisCluster::start_with_password(3, PASSWORD);
    let per_second_cluster = RedisCluster::start_with_password(3, PASSWORD);
    let store = owned(&[
        ("REDIS_TYPE", "cluster"),
        ("REDIS_URL", &cluster.seeds()),
        ("REDIS_AUTH", PASSWORD),
        ("REDIS_PIPELINE_WINDOW", "150us"),
    ]);
    let per_second = owned(&[
        ("REDIS_PERSECOND_TYPE", "cluster"),
        ("REDIS_PERSECOND_URL", &per_second_cluster.seeds()),
        ("REDIS_PERSECOND_AUTH", PASSWORD),
        ("REDIS_PERSECOND_PIPELINE_WINDOW", "150us"),
    ]);
    let mut rows = four_rows("Auth", &store, &per_second);
    for row in &mut rows {
        row.ignored.push("REDIS_PIPELINE_WINDOW");
        if row.per_second() {
            row.ignored.push("REDIS_PERSECOND_PIPELINE_WINDOW");
        }
    }
    let stores = Stores {
        main: cluster.nodes.iter().collect(),
        per_second: per_second_cluster.nodes.iter().collect(),
    };
    run_rows_on("TestBasicAuthConfigWithRedisCluster", &rows, Some(&stores)).await;
    let keys: u64 = cluster.nodes.iter().map(key_count).sum();
    assert!(keys > 0, "no counter in the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_config_with_redis_sentinel() {
    let master = RedisServer::start_with_password(PASSWORD, &[]);
    let sentinel =
        SentinelServer::start_with_auth("mymaster", master.port(), 5_000, Some(PASSWORD));
    let per_second_master = RedisServer::start_with_password(PASSWORD, &[]);
    let per_second_sentinel = SentinelServer::start_with_auth(
        "mymaster",
        per_second_master.port(),
        5_000,
        Some(PASSWORD),
    );
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
            &format!("mymaster,{}", address(per_second_sentinel.port())),
        ),
        ("REDIS_PERSECOND_AUTH", PASSWORD),
    ]);
    let stores = Stores {
        main: vec![&master],
        per_second: vec![&per_second_master],
    };
    run_rows_on(
        "TestBasicAuthConfigWithRedisSentinel",
        &four_rows("Auth", &store, &per_second),
        Some(&stores),
    )
    .await;
    assert!(key_count(&master) > 0, "no counter on the master");
}
