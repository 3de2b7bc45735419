//! One descriptor's counters shown and reset through the admin API and `floodgate counters`,
//! against the real binary, in memory, in Redis and in the hybrid store: what each algorithm
//! stores after some hits, how a request of one hit would find it, a reset that gives the
//! budget back (and is audited), bans that start after repeated refusals and a reset lifts,
//! and the 400 answers that say what to send.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit as common;
use floodgate_testkit::http::{self, HttpResponse};
use floodgate_testkit::ops::{self, descriptor, request, Server};
use floodgate_testkit::redis as redis_server;
use floodgate_testkit::status::{rule, status_json};
use serde_json::Value;

const TOKEN: &str = "counters-admin-token";

const RULES: &str = "domain: shop\n\
                     descriptors:\n\
                     \x20 - key: fixed\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 5}\n\
                     \x20 - key: sliding\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_window}\n\
                     \x20 - key: log\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}\n\
                     \x20 - key: bucket\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket}\n\
                     \x20 - key: banned\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 1}\n\
                     \x20   ban: {after: 2, within: 1m, for: 2h}\n\
                     \x20 - key: free\n\
                     \x20   rate_limit: {unlimited: true}\n";

struct Instance {
    server: Server,
    admin_port: u16,
    token_file: std::path::PathBuf,
}

fn start(dir: &Path, extra: &[&str]) -> Instance {
    let config = dir.join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let (admin, admin_port) = common::admin_api(dir, TOKEN);
    let config = config.display().to_string();
    let mut args = vec!["--config", config.as_str()];
    args.extend(admin.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let server = ops::start(&args, &[], dir);
    common::wait_for_port(admin_port, Duration::from_secs(5), "admin API");
    Instance {
        server,
        admin_port,
        token_file: dir.join("admin-token"),
    }
}

impl Instance {
    fn post(&self, path: &str, body: &str) -> HttpResponse {
        let authorization = format!("Bearer {TOKEN}");
        let headers = [
            ("Content-Type", "application/json"),
            ("Authorization", authorization.as_str()),
        ];
        http::request(self.admin_port, "POST", path, &headers, body)
            .unwrap_or_else(|error| panic!("POST {path}: {error}"))
    }

    /// The one counter of descriptor `key=value`, as `/v1/counters/get` shows it.
    fn counter(&self, key: &str, value: &str) -> Value {
        let response = self.post("/v1/counters/get", &body(key, value));
        assert_eq!(response.status, 200, "{}", response.body);
        let answer = json(&response);
        let counters = answer["counters"].as_array().cloned().unwrap_or_default();
        assert_eq!(counters.len(), 1, "{answer}");
        counters[0].clone()
    }

    /// Charges `hits` calls of one hit to `key=value`: their codes.
    fn charge(&self, key: &str, value: &str, hits: usize) -> Vec<Code> {
        ops::runtime().block_on(async {
            let mut client = RateLimitServiceClient::connect(self.server.grpc_url())
                .await
                .unwrap_or_else(|error| panic!("connect: {error}"));
            let mut codes = Vec::new();
            for _ in 0..hits {
                let answer = client
                    .should_rate_limit(request("shop", vec![descriptor(&[(key, value)], None)]))
                    .await
                    .unwrap_or_else(|status| panic!("call failed: {status:?}"))
                    .into_inner();
                codes.push(answer.overall_code());
            }
            codes
        })
    }

    /// One call of one hit to `key=value`: its code and the descriptor's wait in seconds.
    fn wait(&self, key: &str, value: &str) -> (Code, u64) {
        ops::runtime().block_on(async {
            let mut client = RateLimitServiceClient::connect(self.server.grpc_url())
                .await
                .unwrap_or_else(|error| panic!("connect: {error}"));
            let answer = client
                .should_rate_limit(request("shop", vec![descriptor(&[(key, value)], None)]))
                .await
                .unwrap_or_else(|status| panic!("call failed: {status:?}"))
                .into_inner();
            let wait = answer
                .statuses
                .first()
                .and_then(|status| status.duration_until_reset)
                .map_or(0, |duration| u64::try_from(duration.seconds).unwrap_or(0));
            (answer.overall_code(), wait)
        })
    }

    /// `floodgate counters ACTION --domain shop key=value`: exit code, stdout, stderr.
    fn cli(&self, action: &str, descriptor: &str) -> (Option<i32>, String, String) {
        let output = Command::new(common::floodgate_bin())
            .args([
                "counters",
                action,
                "--admin-addr",
                &format!("127.0.0.1:{}", self.admin_port),
                "--admin-token-file",
                &self.token_file.display().to_string(),
                "--domain",
                "shop",
                descriptor,
            ])
            .output()
            .unwrap_or_else(|error| panic!("run floodgate counters: {error}"));
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

fn body(key: &str, value: &str) -> String {
    serde_json::json!({ "domain": "shop", "descriptor": [{ "key": key, "value": value }] })
        .to_string()
}

fn json(response: &HttpResponse) -> Value {
    serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {:?}", response.body))
}

/// What each algorithm stores after 3 hits of 5, then 5 of 5, and a reset.
fn counters_are_shown_and_reset(extra: &[&str]) {
    let dir = common::tempdir();
    let instance = start(dir.path(), extra);
    let fresh = instance.counter("fixed", "never-seen");
    assert!(fresh.get("stored").is_none(), "{fresh}");
    assert_eq!(fresh["remaining"], 5, "{fresh}");

    for key in ["fixed", "sliding", "log", "bucket"] {
        assert_eq!(instance.charge(key, "10.0.0.7", 3), [Code::Ok; 3], "{key}");
        let counter = instance.counter(key, "10.0.0.7");
        assert_eq!(counter["rule"], format!("shop.{key}"), "{counter}");
        assert_eq!(counter["remaining"], 2, "{key}: {counter}");
        assert_eq!(counter["one_more_fits"], true, "{key}: {counter}");
        let stored = &counter["stored"];
        match key {
            "fixed" => assert_eq!(stored["count"], 3, "{counter}"),
            "sliding" => assert_eq!(stored["current"], 3, "{counter}"),
            "log" => assert_eq!(stored["hits"], 3, "{counter}"),
            _ => assert!(stored["arrival_time_unix_us"].is_i64(), "{counter}"),
        }
        assert!(stored["expires_at_unix_us"].is_i64(), "{counter}");
    }
    // Exhausted: one more would not fit, and the retry is said.
    assert_eq!(
        instance.charge("fixed", "10.0.0.7", 3).last(),
        Some(&Code::OverLimit)
    );
    let full = instance.counter("fixed", "10.0.0.7");
    assert_eq!(
        (full["remaining"].as_u64(), full["one_more_fits"].as_bool()),
        (Some(0), Some(false)),
        "{full}"
    );
    assert!(
        full["retry_after_seconds"].as_f64().unwrap_or(0.0) > 0.0,
        "{full}"
    );

    // Reset through the API: the budget is back at once, and the reset is in the audit log.
    let reset = instance.post("/v1/counters/reset", &body("fixed", "10.0.0.7"));
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(json(&reset)["reset"], 1, "{}", reset.body);
    let after = instance.counter("fixed", "10.0.0.7");
    assert!(
        after.get("stored").is_none() && after["remaining"] == 5,
        "{after}"
    );
    assert_eq!(instance.charge("fixed", "10.0.0.7", 1), [Code::Ok]);
    let log = instance.server.process.log_text();
    assert!(
        log.contains("counters.reset") && log.contains("fixed=10.0.0.7"),
        "{log}"
    );

    // The same through the command line.
    let (code, out, err) = instance.cli("get", "bucket=10.0.0.7");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\"arrival_time_unix_us\""), "{out}");
    let (code, out, err) = instance.cli("reset", "bucket=10.0.0.7");
    assert_eq!(
        (code, out.contains("\"reset\": 1")),
        (Some(0), true),
        "{out}{err}"
    );
    assert_eq!(instance.counter("bucket", "10.0.0.7")["remaining"], 5);
}

/// Refused twice within a minute, a key is banned for two hours: refused with that wait
/// (longer than its window's), shown by `get` and on the status page (`--heavy-hitters`),
/// lifted by `reset`.
fn a_ban_starts_shows_and_is_lifted_by_a_reset(extra: &[&str]) {
    let dir = common::tempdir();
    let mut flags = vec!["--heavy-hitters"];
    flags.extend_from_slice(extra);
    let instance = start(dir.path(), &flags);
    let ip = "192.0.2.9";
    assert_eq!(instance.wait("banned", ip).0, Code::Ok);
    let (code, wait) = instance.wait("banned", ip);
    assert!(
        code == Code::OverLimit && wait <= 3_600,
        "first refusal: {code:?} {wait}s"
    );
    let (code, wait) = instance.wait("banned", ip);
    assert!(
        code == Code::OverLimit && wait > 7_000,
        "the ban: {code:?} {wait}s"
    );
    let shown = instance.post("/v1/counters/get", &body("banned", ip));
    assert_eq!(json(&shown)["ban"]["banned"], true, "{}", shown.body);
    assert_eq!(json(&shown)["ban"]["level"], 1, "{}", shown.body);
    // Another key of the rule is not banned.
    assert_eq!(instance.wait("banned", "192.0.2.10").0, Code::Ok);
    let listed = banned_on_the_page(&instance);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["level"], 1, "{listed:?}");
    assert!(
        listed[0]["ends_in_seconds"].as_f64().unwrap_or(0.0) > 7_000.0,
        "{listed:?}"
    );
    // The rule does not say `heavy_hitters: raw`: the value shows hashed.
    assert!(
        listed[0]["value"]
            .as_str()
            .is_some_and(|v| v.starts_with('#')),
        "{listed:?}"
    );

    let reset = instance.post("/v1/counters/reset", &body("banned", ip));
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(instance.wait("banned", ip).0, Code::Ok);
    let shown = instance.post("/v1/counters/get", &body("banned", ip));
    assert_eq!(json(&shown)["ban"]["banned"], false, "{}", shown.body);
    assert_eq!(banned_on_the_page(&instance), Vec::<Value>::new());
}

/// The values the `banned` rule bans, as `/status.json` lists them.
fn banned_on_the_page(instance: &Instance) -> Vec<Value> {
    let status = status_json(instance.server.debug_port);
    rule(&status, "shop.banned")["banned"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no list of banned values: {status}"))
}

#[test]
fn in_memory_counters_are_shown_and_reset() {
    counters_are_shown_and_reset(&[]);
}

#[test]
fn in_memory_a_ban_starts_shows_and_is_lifted_by_a_reset() {
    a_ban_starts_shows_and_is_lifted_by_a_reset(&[]);
}

#[test]
fn in_redis_a_ban_starts_shows_and_is_lifted_by_a_reset() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    a_ban_starts_shows_and_is_lifted_by_a_reset(&["--store", "redis", "--redis-url", &url]);
}

#[test]
fn in_the_hybrid_store_a_ban_starts_shows_and_is_lifted_by_a_reset() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    a_ban_starts_shows_and_is_lifted_by_a_reset(&["--store", "hybrid", "--redis-url", &url]);
}

#[test]
fn in_redis_counters_are_shown_and_reset() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    counters_are_shown_and_reset(&["--store", "redis", "--redis-url", &url]);
}

#[test]
fn in_the_hybrid_store_counters_are_shown_and_reset() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    counters_are_shown_and_reset(&["--store", "hybrid", "--redis-url", &url]);
}

#[test]
fn bad_counter_requests_get_400_saying_what_to_send() {
    let dir = common::tempdir();
    let instance = start(dir.path(), &[]);
    for (request, expected) in [
        ("not json", "send an object like"),
        (
            "{\"descriptor\": [{\"key\": \"fixed\"}]}",
            "domain: missing",
        ),
        ("{\"domain\": \"shop\"}", "descriptor: missing"),
        (
            "{\"domain\": \"shop\", \"descriptor\": [{\"value\": \"x\"}]}",
            "descriptor[0].key",
        ),
        (
            "{\"domain\": \"nope\", \"descriptor\": [{\"key\": \"fixed\"}]}",
            "domains: shop",
        ),
        (
            "{\"domain\": \"shop\", \"descriptor\": [{\"key\": \"other\"}]}",
            "matches no rule",
        ),
        (
            "{\"domain\": \"shop\", \"descriptor\": [{\"key\": \"free\"}]}",
            "unlimited rule",
        ),
    ] {
        for path in ["/v1/counters/get", "/v1/counters/reset"] {
            let response = instance.post(path, request);
            assert_eq!(response.status, 400, "{path} {request}: {}", response.body);
            let message = json(&response)["error"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(message.contains(expected), "{path} {request}: {message}");
        }
    }
    let (code, _, err) = instance.cli("get", "=x");
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("every entry needs a key"), "{err}");
}
