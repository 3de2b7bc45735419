//! Usage charged after the response, through the real Envoy 1.40 with the guide's bootstrap
//! (`deploy/envoy/token-usage.yaml`) and rules (`deploy/envoy/token-usage-rules/`): a check
//! before each request, the tokens the response used reported at stream end
//! (`apply_on_stream_done`, `hits_addend` from the upstream's `x-tokens-used` header). With
//! `overflow: owe` AI Gateway's sequence holds on a limit of 100 tokens a day, in memory and in
//! Redis: 20 tokens → 200, 10 000 → 200, then 1 → 429. Without it the 10 000 are refused and
//! not counted, so the third request passes: what the setting is for.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::envoy::{deploy_bootstrap, Envoy};
use floodgate_testkit::http::{get, request, HttpResponse};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{repo_file, wait_for_port, Floodgate};

/// How long a stream-end report may take to reach floodgate (it is fire and forget).
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);

fn guide_rules() -> String {
    let path = repo_file("deploy/envoy/token-usage-rules/llm.yaml");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

fn start_envoy(rls_port: u16, dir: &Path) -> Envoy {
    let (bootstrap, listeners) = deploy_bootstrap("deploy/envoy/token-usage.yaml", rls_port);
    Envoy::start(&bootstrap, "token-usage.yaml", dir, &listeners)
}

/// A completion for `user` that uses `tokens`.
fn complete(envoy: &Envoy, user: &str, tokens: u64) -> HttpResponse {
    get(
        envoy.port,
        "/",
        &[("x-user", user), ("x-tokens", &tokens.to_string())],
    )
    .unwrap_or_else(|error| panic!("request through envoy failed: {error}"))
}

/// What floodgate has left for `user`, asked without charging (a descriptor's hits_addend 0),
/// and whether it is over.
fn left_for(floodgate: &Floodgate, user: &str) -> (u64, bool) {
    let body = format!(
        r#"{{"domain":"llm","descriptors":[{{"entries":[{{"key":"user","value":"{user}"}}],"hitsAddend":0}}]}}"#
    );
    let response = request(floodgate.http_port, "POST", "/json", &[], &body)
        .unwrap_or_else(|error| panic!("POST /json failed: {error}"));
    let json: serde_json::Value = serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("/json answered {response:?}: {error}"));
    let status = &json["statuses"][0];
    let remaining = status["limitRemaining"].as_u64().unwrap_or(0);
    (remaining, json["overallCode"] == "OVER_LIMIT")
}

/// Waits until floodgate shows `expected` for `user`: the stream-end report has been counted.
fn wait_for_left(floodgate: &Floodgate, user: &str, expected: (u64, bool)) {
    let started = Instant::now();
    loop {
        let left = left_for(floodgate, user);
        if left == expected {
            return;
        }
        assert!(
            started.elapsed() < REPORT_TIMEOUT,
            "after {REPORT_TIMEOUT:?} floodgate shows {left:?} for {user}, not {expected:?}\n\
             floodgate log:\n{}",
            floodgate.process.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Descriptors of the token rule floodgate refused so far.
fn refused_reports(floodgate: &Floodgate) -> f64 {
    scrape(floodgate.debug_port).value(
        "floodgate_requests_rejected_total",
        &[
            ("domain", "llm"),
            ("rule", "llm.user"),
            ("reason", "limit"),
            ("class", ""),
        ],
    )
}

/// AI Gateway's sequence through Envoy on floodgate started with `rules` and `flags`: the
/// status of the third request.
fn third_request_after_an_overshoot(rules: &str, flags: &[&str]) -> (u16, Floodgate) {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start_with_rules(dir.path(), "llm.yaml", rules, flags);
    wait_for_port(
        floodgate.http_port,
        Duration::from_secs(10),
        "floodgate HTTP",
    );
    let envoy = start_envoy(floodgate.grpc_port, dir.path());

    let first = complete(&envoy, "alice", 20);
    assert_eq!(first.status, 200, "{first:?}");
    wait_for_left(&floodgate, "alice", (80, false));

    let second = complete(&envoy, "alice", 10_000);
    assert_eq!(
        second.status, 200,
        "80 tokens are left before it: {second:?}"
    );
    let third_status = if rules.contains("overflow: owe") {
        wait_for_left(&floodgate, "alice", (0, true));
        let third = complete(&envoy, "alice", 1);
        assert_eq!(
            third.header("x-ratelimit-remaining"),
            Some("0"),
            "{third:?}"
        );
        third.status
    } else {
        // Refused and not counted: the count does not move, so wait for the report's
        // refusal to be counted instead.
        let started = Instant::now();
        while refused_reports(&floodgate) < 1.0 {
            assert!(
                started.elapsed() < REPORT_TIMEOUT,
                "the 10 000-token report never reached floodgate\nfloodgate log:\n{}",
                floodgate.process.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(left_for(&floodgate, "alice"), (80, false));
        complete(&envoy, "alice", 1).status
    };
    // Another user's budget is untouched by alice's debt.
    assert_eq!(complete(&envoy, "bob", 1).status, 200);
    (third_status, floodgate)
}

#[test]
fn an_owed_overshoot_refuses_the_next_request_in_memory() {
    let (status, _floodgate) = third_request_after_an_overshoot(&guide_rules(), &[]);
    assert_eq!(status, 429);
}

#[test]
fn an_owed_overshoot_refuses_the_next_request_in_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (status, _floodgate) = third_request_after_an_overshoot(
        &guide_rules(),
        &["--store", "redis", "--redis-url", &url],
    );
    assert_eq!(status, 429);
}

#[test]
fn without_owing_the_overshoot_is_refused_and_not_counted() {
    let rules = guide_rules().replace("overflow: owe", "overflow: refuse");
    let (status, _floodgate) = third_request_after_an_overshoot(&rules, &[]);
    assert_eq!(status, 200, "the 10 000 tokens were never counted");
}
