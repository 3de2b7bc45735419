//! Health while Redis is unreachable, as envoyproxy/ratelimit reports it: under the failure
//! policy `error` (every call fails) or with the reference's
//! `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`, `/healthcheck` fails within about a second of Redis
//! stopping and recovers once it answers; under `fail_open` the policy answers calls, so the
//! instance stays in rotation and `floodgate_store_up` says the store is down.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::http::get;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{subdir, tempdir, Floodgate};

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

#[test]
fn under_the_error_policy_an_unreachable_redis_fails_health_until_it_answers_again() {
    let dir = tempdir();
    let redis = RedisServer::start();
    let floodgate = start(&redis, dir.path(), "error", &[]);
    redis.pause();
    let failed = health_becomes(floodgate.http_port, 500, Duration::from_secs(5));
    let down = store_up(floodgate.debug_port);
    redis.resume();
    assert!(failed, "health still OK with Redis paused");
    assert!(down.ends_with(" 0"), "{down}");
    assert!(
        health_becomes(floodgate.http_port, 200, Duration::from_secs(5)),
        "health back once Redis answers"
    );
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
