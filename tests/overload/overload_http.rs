//! Self-protection of the HTTP decision endpoints (`/json`, `/check`, `/check/<profile>`): they
//! share gRPC's `--max-in-flight` budget, and a call beyond it gets `--overload-answer` at once,
//! in the endpoint's terms, counted in `floodgate_overload_rejections_total{reason="in_flight"}`.
//! Calls are made slow by pausing Redis (SIGSTOP) under a long `--redis-timeout-ms`: they hold
//! their permits until Redis is resumed. Answers and counts only, no latency is asserted.

use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;

use floodgate_testkit as common;
use floodgate_testkit::http::{self, HttpResponse};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls;
use floodgate_testkit::Floodgate;

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 1000000}
check_profiles:
  by_user:
    descriptors:
      - entries:
          - {key: user, header: X-User}
"#;

/// Two descriptors, so an undecided answer is seen to carry one status per descriptor.
const JSON_REQUEST: &str = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"j1"}]},{"entries":[{"key":"user","value":"j2"}]}]}"#;

/// How long the test waits for the slow calls to be in flight before it fails.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

fn start(dir: &Path, extra: &[&str]) -> Floodgate {
    Floodgate::start_with_rules(dir, "rules.yaml", RULES, extra)
}

fn check(server: &Floodgate, user: &str) -> HttpResponse {
    let descriptor = format!("user={user}");
    http::get(
        server.http_port,
        "/check",
        &[
            ("X-RateLimit-Domain", "shop"),
            ("X-RateLimit-Descriptor", &descriptor),
        ],
    )
    .unwrap_or_else(|error| panic!("/check: {error}"))
}

fn check_profile(server: &Floodgate, user: &str) -> HttpResponse {
    http::get(server.http_port, "/check/by_user", &[("X-User", user)])
        .unwrap_or_else(|error| panic!("/check/by_user: {error}"))
}

fn json(server: &Floodgate) -> HttpResponse {
    http::request(server.http_port, "POST", "/json", &[], JSON_REQUEST)
        .unwrap_or_else(|error| panic!("/json: {error}"))
}

fn json_body(response: &HttpResponse) -> serde_json::Value {
    serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("/json answered {response:?}: {error}"))
}

fn in_flight_rejections(server: &Floodgate) -> f64 {
    scrape(server.debug_port).value(
        "floodgate_overload_rejections_total",
        &[("reason", "in_flight")],
    )
}

/// A rule's series are made at its first decision: none yet counts as 0.
fn allowed(server: &Floodgate) -> f64 {
    scrape(server.debug_port)
        .get(
            "floodgate_requests_allowed_total",
            &[("domain", "shop"), ("rule", "shop.user")],
        )
        .unwrap_or(0.0)
}

/// Waits until `calls` calls are being decided (`floodgate_calls_in_flight`).
fn wait_for_calls_in_flight(server: &Floodgate, calls: f64) {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let now = scrape(server.debug_port).value("floodgate_calls_in_flight", &[]);
        if now == calls {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} calls in flight after {SETTLE_TIMEOUT:?}, expected {calls}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_overloaded_rejection(response: &HttpResponse, what: &str) {
    assert_eq!(response.status, 403, "{what}: {response:?}");
    assert_eq!(response.body, "OVER_LIMIT\n", "{what}");
    assert_eq!(response.header("retry-after"), Some("1"), "{what}");
    assert_eq!(
        response.header("x-floodgate-overloaded"),
        Some("true"),
        "{what}"
    );
}

/// Two slow calls, one gRPC and one `/check`, hold a bound of 2: every further call, HTTP or
/// gRPC, gets the over_limit overload answer while they are still waiting for Redis; once Redis
/// is back, both slow calls are decided.
#[test]
fn calls_beyond_a_bound_held_by_slow_calls_are_answered_at_once() {
    let redis = RedisServer::start();
    let dir = common::tempdir();
    let url = redis.url();
    let server = start(
        dir.path(),
        &[
            "--store",
            "redis",
            "--redis-url",
            &url,
            // Longer than the test holds Redis paused, so the slow calls wait instead of failing.
            "--redis-timeout-ms",
            "30000",
            "--max-in-flight",
            "2",
            "--overload-answer",
            "over_limit",
        ],
    );
    // Connected and the script loaded before Redis stops answering.
    assert_eq!(check(&server, "warm").status, 200);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"));
    let mut client = runtime.block_on(rls::connect(&server.grpc_url()));

    redis.pause();
    let slow_grpc = {
        let mut client = client.clone();
        runtime.spawn(async move {
            rls::call(&mut client, rls::request("shop", &[&[("user", "slow")]])).await
        })
    };
    let slow_http: JoinHandle<HttpResponse> = {
        let port = server.http_port;
        std::thread::spawn(move || {
            http::get(
                port,
                "/check",
                &[
                    ("X-RateLimit-Domain", "shop"),
                    ("X-RateLimit-Descriptor", "user=slow"),
                ],
            )
            .unwrap_or_else(|error| panic!("slow /check: {error}"))
        })
    };
    wait_for_calls_in_flight(&server, 2.0);

    assert_overloaded_rejection(&check(&server, "extra"), "/check");
    assert_overloaded_rejection(&check_profile(&server, "extra"), "/check/by_user");
    let shed_json = json(&server);
    assert_eq!(shed_json.status, 429, "{shed_json:?}");
    let body = json_body(&shed_json);
    assert_eq!(body["overallCode"], "OVER_LIMIT", "{body}");
    let statuses = body["statuses"].as_array().cloned().unwrap_or_default();
    assert_eq!(statuses.len(), 2, "{body}");
    assert!(
        statuses
            .iter()
            .all(|status| status.get("currentLimit").is_none()),
        "{body}"
    );
    assert!(
        body["responseHeadersToAdd"]
            .as_array()
            .is_some_and(|headers| headers.iter().any(|header| header["key"]
                == "x-floodgate-overloaded"
                && header["value"] == "true")),
        "{body}"
    );
    let shed_grpc = runtime
        .block_on(rls::call(
            &mut client,
            rls::request("shop", &[&[("user", "extra")]]),
        ))
        .unwrap_or_else(|status| panic!("extra gRPC call: {status}"));
    assert_eq!(shed_grpc.overall_code, Code::OverLimit as i32);
    assert!(
        !slow_http.is_finished() && !slow_grpc.is_finished(),
        "a slow call finished while Redis was paused: the bound was not held by them"
    );

    redis.resume();
    let slow_http = slow_http
        .join()
        .unwrap_or_else(|_| panic!("the slow /check panicked"));
    assert_eq!(slow_http.status, 200, "{slow_http:?}");
    assert!(
        slow_http
            .header("ratelimit-policy")
            .is_some_and(|policy| policy.contains("per_user")),
        "the slow /check was decided: {slow_http:?}"
    );
    let slow_grpc = runtime
        .block_on(slow_grpc)
        .unwrap_or_else(|error| panic!("slow gRPC task: {error}"))
        .unwrap_or_else(|status| panic!("slow gRPC call: {status}"));
    assert_eq!(slow_grpc.overall_code, Code::Ok as i32);
    assert!(slow_grpc.statuses[0].current_limit.is_some(), "decided");
    assert_eq!(in_flight_rejections(&server), 4.0);
}

#[test]
fn the_ok_overload_answer_allows_on_every_http_endpoint_without_deciding() {
    let dir = common::tempdir();
    // 0 in flight: every call is beyond the bound, deterministically.
    let server = start(
        dir.path(),
        &["--max-in-flight", "0", "--overload-answer", "ok"],
    );
    for (what, response) in [
        ("/check", check(&server, "a")),
        ("/check/by_user", check_profile(&server, "a")),
    ] {
        assert_eq!(response.status, 200, "{what}: {response:?}");
        assert_eq!(response.body, "OK\n", "{what}");
        assert_eq!(response.header("retry-after"), None, "{what}");
    }
    let response = json(&server);
    assert_eq!(response.status, 200, "{response:?}");
    let body = json_body(&response);
    assert_eq!(body["overallCode"], "OK", "{body}");
    let statuses = body["statuses"].as_array().cloned().unwrap_or_default();
    assert_eq!(statuses.len(), 2, "{body}");
    assert!(
        statuses
            .iter()
            .all(|status| status["code"] == "OK" && status.get("currentLimit").is_none()),
        "{body}"
    );
    assert_eq!(in_flight_rejections(&server), 3.0);
    assert_eq!(allowed(&server), 0.0, "nothing was decided");
}

/// The default answer, unavailable, is a 503: nginx's `error_page` for 5xx then applies the
/// location's failure policy. Liveness is not bounded.
#[test]
fn the_unavailable_overload_answer_is_503_and_healthcheck_is_not_bounded() {
    let dir = common::tempdir();
    let server = start(dir.path(), &["--max-in-flight", "0"]);
    for (what, response) in [
        ("/check", check(&server, "a")),
        ("/check/by_user", check_profile(&server, "a")),
        ("/json", json(&server)),
    ] {
        assert_eq!(response.status, 503, "{what}: {response:?}");
        assert!(response.body.contains("overloaded"), "{what}: {response:?}");
    }
    assert_eq!(in_flight_rejections(&server), 3.0);
    let health = http::get(server.http_port, "/healthcheck", &[])
        .unwrap_or_else(|error| panic!("/healthcheck: {error}"));
    assert_eq!(health.status, 200, "{health:?}");
}
