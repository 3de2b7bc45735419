//! The admin API's runtime overrides, against the real binary: the bearer token (and its
//! rotation), an override that lowers a rule's limit over gRPC (with `current_limit`,
//! `/rlconfig` and the metric showing it), listing, deleting, expiry on its own, surviving a
//! reload, the 400 answers, start-up errors, and, with Redis, an override set on one instance
//! applying on another and one the Redis scripts cannot count refused under `--store redis`
//! and `--store hybrid` alike.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::RateLimitResponse;
use floodgate_testkit as common;
use floodgate_testkit::ops::{self, descriptor, request, Server};
use floodgate_testkit::redis as redis_server;
use serde_json::Value;

use floodgate_testkit::http::{self, HttpResponse};

/// Within a second by contract (Redis polling, reload, expiry sweep); the rest is for a busy
/// test machine.
const LIVE_WITHIN: Duration = Duration::from_secs(5);

const TOKEN: &str = "s3cret-admin-token";

fn rules(with_api: bool, other_limit: u32) -> String {
    let api = if with_api {
        "  - key: api\n    rate_limit: {unit: hour, requests_per_unit: 100, name: api}\n"
    } else {
        ""
    };
    format!(
        "domain: shop\n\
         descriptors:\n\
         {api}\
         \x20 - key: two\n\
         \x20   rate_limits:\n\
         \x20     - {{unit: second, requests_per_unit: 10}}\n\
         \x20     - {{unit: hour, requests_per_unit: 1000}}\n\
         \x20 - key: free\n\
         \x20   rate_limit: {{unlimited: true}}\n\
         \x20 - key: other\n\
         \x20   rate_limit: {{unit: hour, requests_per_unit: {other_limit}}}\n"
    )
}

/// A floodgate with the admin API on, and its admin port.
struct Instance {
    server: Server,
    admin_port: u16,
}

fn start(dir: &Path, config: &Path, extra: &[&str]) -> Instance {
    let (admin, admin_port) = common::admin_api(dir, TOKEN);
    let config = config.display().to_string();
    let mut args = vec!["--config", config.as_str()];
    args.extend(admin.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let server = ops::start(&args, &[], dir);
    common::wait_for_port(admin_port, LIVE_WITHIN, "admin API");
    Instance { server, admin_port }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

impl Instance {
    fn admin(&self, method: &str, path: &str, token: Option<&str>, body: &str) -> HttpResponse {
        let authorization = token.map(|token| format!("Bearer {token}"));
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(authorization) = &authorization {
            headers.push(("Authorization", authorization.as_str()));
        }
        http::request(self.admin_port, method, path, &headers, body)
            .unwrap_or_else(|error| panic!("{method} {path}: {error}"))
    }

    fn post_override(&self, body: &Value) -> HttpResponse {
        self.admin("POST", "/v1/overrides", Some(TOKEN), &body.to_string())
    }

    fn list(&self) -> Vec<Value> {
        let response = self.admin("GET", "/v1/overrides", Some(TOKEN), "");
        assert_eq!(response.status, 200, "{}", response.body);
        json(&response)["overrides"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// One descriptor `key=value` in domain `shop`, charging one hit unless `check_only`.
    fn call(&self, key: &str, check_only: bool) -> RateLimitResponse {
        let hits = check_only.then_some(0);
        ops::runtime().block_on(async {
            let mut client = RateLimitServiceClient::connect(self.server.grpc_url())
                .await
                .unwrap_or_else(|error| panic!("connect: {error}"));
            client
                .should_rate_limit(request("shop", vec![descriptor(&[(key, "x")], hits)]))
                .await
                .unwrap_or_else(|status| panic!("call failed: {status:?}"))
                .into_inner()
        })
    }

    /// requests_per_unit of `current_limit` for `key` now (nothing charged).
    fn limit(&self, key: &str) -> Option<u32> {
        self.call(key, true)
            .statuses
            .first()
            .and_then(|status| status.current_limit.as_ref())
            .map(|limit| limit.requests_per_unit)
    }

    fn rlconfig(&self) -> String {
        http::get(self.server.debug_port, "/rlconfig", &[])
            .unwrap_or_else(|error| panic!("/rlconfig: {error}"))
            .body
    }

    fn metrics(&self) -> String {
        http::get(self.server.debug_port, "/metrics", &[])
            .unwrap_or_else(|error| panic!("/metrics: {error}"))
            .body
    }
}

fn json(response: &HttpResponse) -> Value {
    serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {:?}", response.body))
}

fn lower_api(to: u64, ttl: &str) -> Value {
    serde_json::json!({
        "domain": "shop",
        "rule": "shop.api",
        "requests_per_unit": to,
        "ttl": ttl,
        "reason": "incident 42: shed load",
    })
}

fn config_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = common::tempdir();
    let config = dir.path().join("rules.yaml");
    write(&config, &rules(true, 7));
    (dir, config)
}

#[test]
fn every_admin_request_needs_the_token_and_a_rotated_token_works_at_once() {
    let (dir, config) = config_dir();
    let instance = start(dir.path(), &config, &[]);
    let wrong = [None, Some("wrong"), Some(""), Some("s3cret-admin-toke")];
    for token in wrong {
        for (method, path) in [
            ("GET", "/v1/overrides"),
            ("POST", "/v1/overrides"),
            ("DELETE", "/v1/overrides/x"),
            ("GET", "/no/such/path"),
        ] {
            let response = instance.admin(method, path, token, "{}");
            assert_eq!(response.status, 401, "{method} {path} with {token:?}");
            assert_eq!(
                json(&response),
                serde_json::json!({"error": "unauthorized"})
            );
            assert_eq!(response.header("www-authenticate"), Some("Bearer"));
        }
    }
    let basic = http::request(
        instance.admin_port,
        "GET",
        "/v1/overrides",
        &[("Authorization", &format!("Basic {TOKEN}"))],
        "",
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(basic.status, 401);
    assert_eq!(instance.list(), Vec::<Value>::new());

    // Rotation: a new file content, no restart.
    let token_file = dir.path().join("admin-token");
    ops::write_atomically(&token_file, b"rotated-token\n");
    let old = instance.admin("GET", "/v1/overrides", Some(TOKEN), "");
    assert_eq!(old.status, 401);
    let new = instance.admin("GET", "/v1/overrides", Some("rotated-token"), "");
    assert_eq!(new.status, 200, "{}", new.body);
}

#[test]
fn an_override_lowers_a_limit_keeps_the_counter_and_is_listed_and_deleted() {
    let (dir, config) = config_dir();
    let instance = start(dir.path(), &config, &[]);
    let first = instance.call("api", false);
    assert_eq!(first.statuses[0].limit_remaining, 99);

    let created = instance.post_override(&lower_api(3, "10m"));
    assert_eq!(created.status, 201, "{}", created.body);
    let created = json(&created);
    let id = created["id"].as_str().unwrap_or_default().to_owned();
    assert!(!id.is_empty(), "{created}");
    assert_eq!(created["rule"], "shop.api");
    assert_eq!(created["requests_per_unit"], 3);
    assert_eq!(created["configured_requests_per_unit"], 100);
    assert_eq!(created["unit"], "HOUR");
    assert_eq!(created["status"], "active");

    // The counter goes on from 1 used: two more fit under 3, the third is over.
    let second = instance.call("api", false);
    assert_eq!(second.overall_code, Code::Ok as i32);
    let limit = second.statuses[0].current_limit.clone().unwrap_or_default();
    assert_eq!((limit.requests_per_unit, limit.name.as_str()), (3, "api"));
    assert_eq!(second.statuses[0].limit_remaining, 1);
    assert_eq!(instance.call("api", false).statuses[0].limit_remaining, 0);
    let over = instance.call("api", false);
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    // Other rules keep their limits.
    assert_eq!(instance.limit("other"), Some(7));

    let listed = instance.list();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], id.as_str());
    assert_eq!(listed[0]["reason"], "incident 42: shed load");
    let left = listed[0]["expires_in_seconds"].as_u64().unwrap_or_default();
    assert!((1..=600).contains(&left), "{left}");

    let rlconfig = instance.rlconfig();
    let api_line = rlconfig
        .lines()
        .find(|line| line.starts_with("shop.api:"))
        .unwrap_or_default();
    assert!(
        api_line.contains(&format!("effective 3/3600s by override {id}")),
        "{rlconfig}"
    );
    assert!(instance.metrics().contains(
        "floodgate_effective_limit{domain=\"shop\",rule=\"shop.api\",source=\"override\"} 3"
    ));

    let deleted = instance.admin("DELETE", &format!("/v1/overrides/{id}"), Some(TOKEN), "");
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    // The configured limit again, on the same counter (3 charged; the rejected call was not).
    let after = instance.call("api", false);
    assert_eq!(after.overall_code, Code::Ok as i32);
    assert_eq!(
        after.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit),
        Some(100)
    );
    assert_eq!(after.statuses[0].limit_remaining, 96);
    assert!(instance.list().is_empty());
    assert!(!instance.rlconfig().contains("effective"));
    assert!(!instance.metrics().contains("floodgate_effective_limit{"));
    let again = instance.admin("DELETE", &format!("/v1/overrides/{id}"), Some(TOKEN), "");
    assert_eq!(again.status, 404);
    assert!(json(&again)["error"]
        .as_str()
        .unwrap_or_default()
        .contains(&id));

    let log = instance.server.process.log_text();
    assert!(
        log.contains("override.set") && log.contains("override.deleted"),
        "{log}"
    );
    assert!(
        log.contains("127.0.0.1:"),
        "the audit log names the caller: {log}"
    );
}

#[test]
fn an_override_expires_on_its_own() {
    let (dir, config) = config_dir();
    let instance = start(dir.path(), &config, &[]);
    let created = instance.post_override(&lower_api(2, "1s"));
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(instance.limit("api"), Some(2));
    ops::wait_for(LIVE_WITHIN, "the configured limit back", || {
        instance.limit("api") == Some(100)
    });
    ops::wait_for(LIVE_WITHIN, "the expiry logged", || {
        instance
            .server
            .process
            .log_text()
            .contains("override.expired")
    });
    assert!(instance.list().is_empty());
}

#[test]
fn an_override_survives_reloads_and_waits_inactive_while_its_rule_is_gone() {
    let (dir, config) = config_dir();
    let instance = start(dir.path(), &config, &[]);
    let created = instance.post_override(&lower_api(4, "10m"));
    assert_eq!(created.status, 201, "{}", created.body);
    let id = json(&created)["id"].as_str().unwrap_or_default().to_owned();

    // Another rule changes.
    ops::write_atomically(&config, rules(true, 8).as_bytes());
    ops::wait_for(LIVE_WITHIN, "version 2", || {
        ops::reload_headers(instance.server.debug_port).is_some_and(|(version, _)| version == 2)
    });
    assert_eq!(instance.limit("other"), Some(8));
    assert_eq!(instance.limit("api"), Some(4));

    // The rule goes away: the override stays listed, inactive.
    ops::write_atomically(&config, rules(false, 8).as_bytes());
    ops::wait_for(LIVE_WITHIN, "version 3", || {
        ops::reload_headers(instance.server.debug_port).is_some_and(|(version, _)| version == 3)
    });
    let listed = instance.list();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        listed[0]["status"],
        "inactive: rule not in the current config"
    );
    assert!(instance.rlconfig().contains(&format!(
        "# override {id} of shop.api: inactive: rule not in the current config"
    )));
    assert_eq!(instance.limit("api"), None);

    // Back: the override applies again.
    ops::write_atomically(&config, rules(true, 8).as_bytes());
    ops::wait_for(LIVE_WITHIN, "version 4", || {
        ops::reload_headers(instance.server.debug_port).is_some_and(|(version, _)| version == 4)
    });
    assert_eq!(instance.limit("api"), Some(4));
    assert_eq!(instance.list()[0]["status"], "active");
}

#[test]
fn bad_overrides_get_400_saying_what_is_wrong() {
    let (dir, config) = config_dir();
    let instance = start(dir.path(), &config, &[]);
    let with = |change: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut body = lower_api(3, "10m");
        if let Some(fields) = body.as_object_mut() {
            change(fields);
        }
        body.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        ("not json".to_owned(), "the body is not JSON"),
        ("[1]".to_owned(), "the body must be a JSON object"),
        (
            with(&|f| {
                f.insert("domain".into(), "nope".into());
            }),
            "domain: \"nope\" is not in the current configuration (domains: shop)",
        ),
        (
            with(&|f| {
                f.insert("rule".into(), "shop.nope".into());
            }),
            "rule: no rule \"shop.nope\" in domain \"shop\"",
        ),
        (
            with(&|f| {
                f.remove("rule");
            }),
            "rule: missing",
        ),
        (
            with(&|f| {
                f.insert("ttl".into(), "0s".into());
            }),
            "ttl: an override must last at least 1 s",
        ),
        (
            with(&|f| {
                f.insert("ttl".into(), "25h".into());
            }),
            "ttl: at most 24h",
        ),
        (
            with(&|f| {
                f.remove("ttl");
            }),
            "ttl: missing",
        ),
        (
            with(&|f| {
                f.insert("reason".into(), " ".into());
            }),
            "reason: say why",
        ),
        (
            with(&|f| {
                f.insert("requests_per_unit".into(), (-1).into());
            }),
            "requests_per_unit: must be a whole number, 0 or more, not -1",
        ),
        (
            with(&|f| {
                f.insert("ttl_seconds".into(), 5.into());
            }),
            "ttl_seconds: unknown field",
        ),
        (
            with(&|f| {
                f.insert("rule".into(), "shop.two".into());
            }),
            "rule shop.two has 2 limits (SECOND, HOUR): say which with `unit`",
        ),
        (
            with(&|f| {
                f.insert("rule".into(), "shop.two".into());
                f.insert("unit".into(), "day".into());
            }),
            "none is per DAY",
        ),
        (
            with(&|f| {
                f.insert("unit".into(), "fortnight".into());
            }),
            "unit: \"fortnight\" is not one of SECOND",
        ),
        (
            with(&|f| {
                f.insert("rule".into(), "shop.free".into());
            }),
            "rule shop.free is unlimited",
        ),
        (
            with(&|f| {
                f.insert(
                    "descriptor".into(),
                    serde_json::json!([{"key": "api", "value": "x"}]),
                );
            }),
            "give one of them, not both",
        ),
    ];
    for (body, expected) in &cases {
        let response = instance.admin("POST", "/v1/overrides", Some(TOKEN), body);
        assert_eq!(response.status, 400, "{body}: {}", response.body);
        let message = json(&response)["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains(expected),
            "{body}: {message:?} lacks {expected:?}"
        );
    }
    assert!(instance.list().is_empty());

    // Descriptor entries find the rule; a unit picks one of several limits.
    let by_descriptor = instance.post_override(&serde_json::json!({
        "domain": "shop",
        "descriptor": [{"key": "two", "value": "anything"}],
        "unit": "hour",
        "requests_per_unit": 5,
        "ttl": 600,
        "reason": "test",
    }));
    assert_eq!(by_descriptor.status, 201, "{}", by_descriptor.body);
    assert_eq!(json(&by_descriptor)["rule"], "shop.two");
    let response = instance.call("two", true);
    let limits: Vec<u32> = response
        .statuses
        .iter()
        .filter_map(|status| status.current_limit.as_ref())
        .map(|limit| limit.requests_per_unit)
        .collect();
    // The deciding limit is shown: 5/hour now has less room than 10/second.
    assert_eq!(limits, [5]);
}

#[test]
fn a_missing_or_empty_token_file_stops_the_start_with_a_clear_error() {
    let (dir, config) = config_dir();
    let empty = dir.path().join("empty-token");
    write(&empty, "\n  \n");
    for (file, expected) in [
        (
            dir.path().join("missing-token"),
            "cannot read the admin token file",
        ),
        (empty, "holds no token"),
    ] {
        let output = run_briefly(&[
            "serve",
            "--config",
            &config.display().to_string(),
            "--admin-token-file",
            &file.display().to_string(),
            "--admin-addr",
            &format!("127.0.0.1:{}", common::free_port()),
            "--grpc-addr",
            &format!("127.0.0.1:{}", common::free_port()),
            "--http-addr",
            &format!("127.0.0.1:{}", common::free_port()),
            "--metrics-addr",
            &format!("127.0.0.1:{}", common::free_port()),
        ]);
        assert!(output.contains(expected), "{output}");
    }
}

/// Runs floodgate expecting it to exit on its own within 10 s; its stderr and stdout.
fn run_briefly(args: &[&str]) -> String {
    let dir = common::tempdir();
    let mut command = Command::new(common::floodgate_bin());
    command.args(args);
    let mut process = common::Running::spawn("floodgate", &mut command, dir.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = process.log_text();
        if log.contains("admin API:") {
            // Give it a moment to exit, then make sure it did not keep serving.
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                process.terminate(Duration::from_secs(5)).is_some(),
                "floodgate did not stop"
            );
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "no start-up error within 10 s: {log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn with_redis_an_override_set_on_one_instance_applies_on_the_other() {
    an_override_set_on_one_instance_applies_on_the_other("redis");
}

#[test]
fn with_hybrid_an_override_set_on_one_instance_applies_on_the_other() {
    an_override_set_on_one_instance_applies_on_the_other("hybrid");
}

/// A daily token bucket: an override of 100 million a day makes a bucket the Redis scripts
/// cannot count exactly (capacity × requests_per_unit past 2^53).
const DAILY_BUCKET: &str = "domain: shop\n\
                            descriptors:\n\
                            \x20 - key: daily\n\
                            \x20   rate_limit: {unit: day, requests_per_unit: 1000, algorithm: token_bucket}\n";

#[test]
fn an_override_the_redis_scripts_cannot_decide_is_refused_by_every_store_that_runs_them() {
    let redis = redis_server::RedisServer::start();
    let url = redis.url();
    let prefix = format!("admin-test-uncountable-{}:", std::process::id());
    let huge = serde_json::json!({
        "domain": "shop",
        "rule": "shop.daily",
        "requests_per_unit": 100_000_000_u64,
        "ttl": "10m",
        "reason": "incident 42",
    });
    for store in ["memory", "redis", "hybrid"] {
        let dir = common::tempdir();
        let config = dir.path().join("rules.yaml");
        write(&config, DAILY_BUCKET);
        let mut extra = vec!["--store", store];
        if store != "memory" {
            extra.extend(["--redis-url", &url, "--redis-prefix", &prefix]);
        }
        let instance = start(dir.path(), &config, &extra);
        let response = instance.post_override(&huge);
        if store == "memory" {
            assert_eq!(response.status, 201, "{store}: {}", response.body);
            continue;
        }
        assert_eq!(response.status, 400, "{store}: {}", response.body);
        let message = json(&response)["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("requests_per_unit: the Redis store cannot decide this limit"),
            "{store}: {message}"
        );
        assert!(instance.list().is_empty(), "{store}");
    }
}

/// Two instances of `--store STORE` on one Redis.
fn an_override_set_on_one_instance_applies_on_the_other(store: &str) {
    let redis = redis_server::RedisServer::start();
    let (dir, config) = config_dir();
    let url = redis.url();
    let prefix = format!("admin-test-{}:", std::process::id());
    let extra = [
        "--store",
        store,
        "--redis-url",
        &url,
        "--redis-prefix",
        &prefix,
    ];
    let first_dir = dir.path().join("a");
    let second_dir = dir.path().join("b");
    for sub in [&first_dir, &second_dir] {
        std::fs::create_dir_all(sub).unwrap_or_else(|error| panic!("mkdir: {error}"));
    }
    let first = start(&first_dir, &config, &extra);
    let second = start(&second_dir, &config, &extra);
    assert_eq!(second.limit("api"), Some(100));

    let created = first.post_override(&lower_api(5, "10m"));
    assert_eq!(created.status, 201, "{}", created.body);
    let id = json(&created)["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(first.limit("api"), Some(5));
    ops::wait_for(LIVE_WITHIN, "the override on the second instance", || {
        second.limit("api") == Some(5)
    });
    let listed = second.list();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], id.as_str());

    // Deleted on the second, gone from the first.
    let deleted = second.admin("DELETE", &format!("/v1/overrides/{id}"), Some(TOKEN), "");
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    ops::wait_for(
        LIVE_WITHIN,
        "the configured limit on the first instance",
        || first.limit("api") == Some(100),
    );
    assert!(first.list().is_empty());
}
