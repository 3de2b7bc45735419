//! The process started as `ratelimit` (envoyproxy/ratelimit's door) keeps fixed windows under
//! the reference's Redis keys, with `CACHE_KEY_PREFIX` and the per-second Redis of
//! `REDIS_PERSECOND`; `floodgate serve` keeps its own unless told, and neither counts anywhere
//! but where it was asked. Keys as `src/limiter/cache_key.go` lines 62-82 write them
//! (`redis_reference_keys.rs` holds the rest of the citations).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::redis::{scan_keys, RedisServer};
use floodgate_testkit::Running;
use floodgate_testkit::{ratelimit_command, rls, serve_command, subdir, tempdir, wait_for_port};

const RULES: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 100}
";

/// `dir/config/config.yaml` (the reference's layout under `RUNTIME_ROOT=dir`).
fn reference_layout(dir: &Path) {
    let config = subdir(dir, "config");
    std::fs::write(config.join("config.yaml"), RULES)
        .unwrap_or_else(|error| panic!("write config: {error}"));
}

/// The `ratelimit` door on `redis` with `env`, ready.
fn start_door(dir: &Path, redis: &RedisServer, env: &[(&str, &str)]) -> (Running, u16) {
    reference_layout(dir);
    let (mut command, (grpc, _, _)) = ratelimit_command(dir);
    command
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", format!("127.0.0.1:{}", redis.port()))
        .env("LOG_LEVEL", "info")
        .env_remove("BACKEND_TYPE")
        .env_remove("FLOODGATE_STORE")
        .envs(env.iter().copied());
    let server = Running::spawn("ratelimit", &mut command, dir);
    wait_for_port(grpc, Duration::from_secs(10), "ratelimit");
    (server, grpc)
}

/// One call for `entries` with `hits`: the code.
async fn call(grpc: u16, entries: &[(&str, &str)], hits: u32) -> Code {
    let mut client = rls::connect(&format!("http://127.0.0.1:{grpc}")).await;
    let mut request = rls::request("edge", &[entries]);
    request.hits_addend = hits;
    let response = rls::call(&mut client, request)
        .await
        .unwrap_or_else(|status| panic!("call: {status}"));
    Code::try_from(response.overall_code).unwrap_or_else(|_| panic!("{response:?}"))
}

fn unix_now() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
}

/// The reference's key of `client=<value>` in the hour of `now` (`cache_key.go` line 82:
/// `(now/3600)*3600`).
fn hourly_key(prefix: &str, value: &str, now: i64) -> String {
    format!("{prefix}edge_client_{value}_{}", now - now % 3_600)
}

/// Started as `ratelimit`, charging every descriptor as the reference does, counts live under
/// `CACHE_KEY_PREFIX` + the reference's key, and a reference pod's count (its `INCRBY` and
/// `EXPIRE`, `fixed_cache_impl.go` lines 35-38) is floodgate's count.
#[tokio::test]
async fn the_ratelimit_door_counts_under_the_references_keys() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let mut inspector = redis.inspector().await;
    let env = [
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("CACHE_KEY_PREFIX", "team-a_"),
    ];
    let (server, grpc) = start_door(dir.path(), &redis, &env);
    let log = server.log_once_it_says("connected to Redis", Duration::from_secs(10));
    assert!(log.contains("envoyproxy/ratelimit's Redis keys"), "{log}");
    let before = unix_now();
    // A reference pod spent one of ada's two this hour.
    let (count,): (i64,) = redis::pipe()
        .cmd("INCRBY")
        .arg(hourly_key("team-a_", "ada", before))
        .arg(1)
        .cmd("EXPIRE")
        .arg(hourly_key("team-a_", "ada", before))
        .arg(3_600)
        .ignore()
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("the reference pod's pipeline: {error}"));
    assert_eq!(count, 1);
    let first = call(grpc, &[("client", "ada")], 1).await;
    let second = call(grpc, &[("client", "ada")], 1).await;
    let after = unix_now();
    if before - before % 3_600 != after - after % 3_600 {
        return; // The hour turned: the reference pod's hit is in the previous window.
    }
    assert_eq!((first, second), (Code::Ok, Code::OverLimit));
    assert_eq!(
        scan_keys(&mut inspector, "*").await,
        [hourly_key("team-a_", "ada", before)]
    );
}

/// Started as `ratelimit` with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`, the counts
/// live under the reference's keys too, counted in its two round trips: a request whose
/// second descriptor goes over leaves the first as it was (`fixed_cache_impl.go` lines
/// 44-72), and nothing at start says that reference pods count apart.
#[tokio::test]
async fn stop_increment_at_the_door_counts_under_the_references_keys() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let mut inspector = redis.inspector().await;
    let (server, grpc) = start_door(
        dir.path(),
        &redis,
        &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
    );
    let log = server.log_once_it_says("connected to Redis", Duration::from_secs(10));
    assert!(log.contains("envoyproxy/ratelimit's Redis keys"), "{log}");
    assert!(!log.contains("count apart"), "{log}");
    let before = unix_now();
    assert_eq!(call(grpc, &[("client", "ada")], 2).await, Code::Ok);
    let both = rls::request("edge", &[&[("client", "ada")], &[("client", "bo")]]);
    let mut both = both;
    both.hits_addend = 1;
    let mut client = rls::connect(&format!("http://127.0.0.1:{grpc}")).await;
    let response = rls::call(&mut client, both)
        .await
        .unwrap_or_else(|status| panic!("call: {status}"));
    let after = unix_now();
    if before - before % 3_600 != after - after % 3_600 {
        return; // The hour turned between the calls.
    }
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    let mut keys = scan_keys(&mut inspector, "*").await;
    keys.sort();
    let (ada, bo) = (hourly_key("", "ada", before), hourly_key("", "bo", before));
    assert_eq!(keys, [ada.clone(), bo.clone()]);
    let count = |key: String| {
        let mut inspector = inspector.clone();
        async move {
            let count: i64 = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut inspector)
                .await
                .unwrap_or_else(|error| panic!("GET {key}: {error}"));
            count
        }
    };
    assert_eq!(count(ada).await, 3, "over: counted");
    assert_eq!(count(bo).await, 0, "held back: INCRBY 0");
}

/// Started as `ratelimit` with floodgate's all or nothing, which the reference's keys cannot
/// hold (they are never rolled back), the counters stay floodgate's own, and the start says
/// that reference pods count apart.
#[tokio::test]
async fn all_or_nothing_at_the_door_keeps_floodgates_keys_and_says_so() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let mut inspector = redis.inspector().await;
    let (server, grpc) = start_door(
        dir.path(),
        &redis,
        &[("FLOODGATE_CHARGE", "all-or-nothing")],
    );
    let log = server.log_once_it_says("count apart", Duration::from_secs(10));
    assert!(log.contains("count apart"), "{log}");
    assert_eq!(call(grpc, &[("client", "ada")], 1).await, Code::Ok);
    let keys = scan_keys(&mut inspector, "*").await;
    assert!(
        keys.len() == 1 && keys[0].starts_with("floodgate:{edge}:"),
        "{keys:?}"
    );
}

/// `REDIS_PERSECOND=true` at the door: SECOND limits count in the per-second Redis
/// (`fixed_cache_impl.go` lines 173-186), the others in the main one.
#[tokio::test]
async fn the_per_second_redis_gets_the_second_limits() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let per_second = RedisServer::start();
    let url = format!("127.0.0.1:{}", per_second.port());
    let env = [
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", url.as_str()),
    ];
    let (_server, grpc) = start_door(dir.path(), &redis, &env);
    let mut per_second_inspector = per_second.inspector().await;
    let mut inspector = redis.inspector().await;
    // The per-second key lives a second; a reference pod's count there shows in the answer.
    let mut answered = None;
    for _ in 0..3 {
        let now = unix_now();
        let key = format!("edge_burst_b_{now}");
        let _: () = redis::pipe()
            .cmd("INCRBY")
            .arg(&key)
            .arg(100)
            .ignore()
            .cmd("EXPIRE")
            .arg(&key)
            .arg(5)
            .ignore()
            .query_async(&mut per_second_inspector)
            .await
            .unwrap_or_else(|error| panic!("the reference pod's pipeline: {error}"));
        let code = call(grpc, &[("burst", "b")], 1).await;
        if unix_now() == now {
            answered = Some(code);
            break;
        }
    }
    assert_eq!(
        answered,
        Some(Code::OverLimit),
        "100 + 1 past a limit of 100"
    );
    assert_eq!(call(grpc, &[("client", "ada")], 1).await, Code::Ok);
    let keys = scan_keys(&mut inspector, "*").await;
    assert!(
        keys.len() == 1 && keys[0].starts_with("edge_client_ada_"),
        "only the HOUR key in the main Redis: {keys:?}"
    );
}

/// A per-second Redis asked for where floodgate's own counters are kept (`floodgate serve`'s
/// default) would not be used: the start is refused, with what to do.
#[test]
fn a_per_second_redis_floodgates_counters_cannot_use_is_refused() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let config = dir.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let (mut command, _) = serve_command();
    command
        .args(["--store", "redis", "--config"])
        .arg(&config)
        .env("REDIS_URL", redis.url())
        .env("REDIS_PERSECOND", "true");
    let mut server = Running::spawn("floodgate", &mut command, dir.path());
    let log = server.log_of_a_refused_start(Duration::from_secs(10));
    assert!(
        log.contains("REDIS_PERSECOND=true") && log.contains("--redis-counters reference"),
        "{log}"
    );
}

/// `floodgate serve` opts in with `--redis-counters reference`.
#[tokio::test]
async fn floodgate_serve_opts_in_to_the_references_keys() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let mut inspector = redis.inspector().await;
    let config = dir.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let (mut command, (grpc, _, _)) = serve_command();
    command
        .args(["--store", "redis", "--charge", "every-descriptor"])
        .args(["--redis-counters", "reference", "--config"])
        .arg(&config)
        .env("REDIS_URL", redis.url())
        .env_remove("CACHE_KEY_PREFIX");
    let _server = Running::spawn("floodgate", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "floodgate");
    let before = unix_now();
    assert_eq!(call(grpc, &[("client", "bo")], 1).await, Code::Ok);
    let after = unix_now();
    let keys = scan_keys(&mut inspector, "*").await;
    assert!(
        keys == [hourly_key("", "bo", before)] || keys == [hourly_key("", "bo", after)],
        "{keys:?}"
    );
}
