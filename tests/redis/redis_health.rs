//! Health while Redis is unreachable, as envoyproxy/ratelimit reports it: only with the
//! reference's `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` does `/healthcheck` fail within about a
//! second of Redis stopping (and recover once it answers). Otherwise the instance stays in
//! rotation under every failure policy: calls get the policy's answer (503 under `error`) and
//! `floodgate_store_up` says the store is down.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::http::{get, request};
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{subdir, tempdir, Floodgate};

const JSON_REQUEST: &str =
    r#"{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}"#;

const RULES: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 100}
";

/// Long enough for a debug build, short enough that a paused Redis is noticed at once.
const REDIS_TIMEOUT_MS: &str = "300";

fn healthcheck(port: u16) -> u16 {
    get(port, "/healthcheck", &[]).map_or(0, |response| response.status)
}

/// Whether `/healthcheck` answers `status` within `within` (polled every 50 ms).
fn health_becomes(port: u16, status: u16, within: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if healthcheck(port) == status {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn store_up(port: u16) -> String {
    let metrics = get(port, "/metrics", &[])
        .map(|response| response.body)
        .unwrap_or_default();
    metrics
        .lines()
        .find(|line| line.starts_with("floodgate_store_up{backend=\"redis\"}"))
        .unwrap_or_default()
        .to_owned()
}

fn start(redis: &RedisServer, dir: &Path, policy: &str, env: &[(&str, &str)]) -> Floodgate {
    let config = dir.join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let url = redis.url();
    let flags = [
        "--store",
        "redis",
        "--redis-url",
        &url,
        "--redis-timeout-ms",
        REDIS_TIMEOUT_MS,
        "--redis-failure-policy",
        policy,
    ];
    let floodgate = Floodgate::start_with_env(&config, &flags, env, dir);
    assert!(
        health_becomes(floodgate.http_port, 200, Duration::from_secs(10)),
        "serving once Redis answers"
    );
    floodgate
}

/// Whether the metric says the store is down within `within` (polled every 50 ms): health has
/// read the store at least once since it stopped answering.
fn store_down_within(port: u16, within: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if store_up(port).ends_with(" 0") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[test]
fn under_the_error_policy_an_unreachable_redis_fails_calls_and_health_stays_serving() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let floodgate = start(&redis, dir.path(), "error", &[]);
    redis.pause();
    let noticed = store_down_within(floodgate.debug_port, Duration::from_secs(5));
    // Polled again meanwhile: one more reading of the store at least.
    std::thread::sleep(Duration::from_millis(1_500));
    let status = healthcheck(floodgate.http_port);
    let call = request(floodgate.http_port, "POST", "/json", &[], JSON_REQUEST)
        .map_or(0, |response| response.status);
    redis.resume();
    assert!(noticed, "floodgate_store_up still 1 with Redis paused");
    // As envoyproxy/ratelimit: only REDIS_HEALTH_CHECK_ACTIVE_CONNECTION ties health to Redis,
    // so a Redis outage does not get every pod restarted by a liveness probe on /healthcheck.
    assert_eq!(
        status, 200,
        "health follows Redis without the reference's switch"
    );
    assert_eq!(call, 503, "under `error` a call fails while Redis is down");
}

#[test]
fn under_fail_open_health_stays_serving_and_the_metric_says_the_store_is_down() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let open = start(&redis, &subdir(dir.path(), "open"), "fail_open", &[]);
    let asked = start(
        &redis,
        &subdir(dir.path(), "asked"),
        "fail_open",
        &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")],
    );
    redis.pause();
    // The reference's switch: the same policy, but health follows the connection.
    let asked_failed = health_becomes(asked.http_port, 500, Duration::from_secs(5));
    // By then the other instance has polled Redis several times too.
    let open_status = healthcheck(open.http_port);
    let open_store = store_up(open.debug_port);
    let open_page = get(open.debug_port, "/rlconfig", &[])
        .map(|page| page.body)
        .unwrap_or_default();
    redis.resume();
    assert!(
        asked_failed,
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: health still OK"
    );
    assert_eq!(
        open_status, 200,
        "fail_open answers calls: stay in rotation"
    );
    assert!(open_store.ends_with(" 0"), "{open_store}");
    assert!(
        open_page.contains("# store redis unreachable"),
        "{open_page}"
    );
}
