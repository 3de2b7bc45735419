//! envoyproxy/ratelimit's `integration-test/scripts/*.sh`, ported as behaviour: each script's
//! requests through a real Envoy 1.40 (`tests/reference/scripts_proxy.yaml`, modelled on the
//! reference's `examples/envoy/proxy.yaml`) to floodgate started as the reference's
//! docker-compose starts it (`/bin/ratelimit`, its environment, the rules of
//! `tests/reference/fixtures/examples/` under `RUNTIME_ROOT/ratelimit/config`), and the answers
//! the scripts check: 200, or 429 ("Too Many Requests"), and a header or a stat.
//!
//! The scripts that wait 60 s for a per-minute window to refill do not wait: floodgate runs on a
//! clock the test moves (libfaketime, `floodgate_testkit::faketime`), which starts a few seconds
//! into a minute, so that no window turns over by itself during a script, and is moved a minute
//! on where the script sleeps. That clock is why the compose's Redis is floodgate's memory store
//! here (`BACKEND_TYPE=memory`): with Redis, "now" is Redis `TIME`, and redis-server cannot run
//! under libfaketime; the integration suite shows both stores answering its sequences alike.
//! Each script gets its own stack, as each assumes fresh counters for its descriptors.

use std::time::{Duration, Instant};

use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::faketime::MovableClock;
use floodgate_testkit::free_port;
use floodgate_testkit::http::{get, HttpResponse};

use crate::harness::{counted, fixture_text, start, Entry, Reference, RuntimeTree};

/// The body of the reference's mock upstream (`examples/envoy/mock.yaml`, port 9999).
const UPSTREAM_BODY: &str = "Hello World from Service 1";

/// The body of its second upstream (port 10001), the multiservice cluster's `service_2`.
const SERVICE_2_BODY: &str = "Hello World from Service 2";

/// Where the clock starts in its minute: room for every script before the minute turns.
const START_SECOND: u64 = 3;

/// The reference's docker-compose stack: ratelimit, on a clock of its own, and Envoy.
struct Stack {
    clock: MovableClock,
    reference: Reference,
    envoy: Envoy,
    _tree: RuntimeTree,
}

impl Stack {
    fn start(script: &str) -> Stack {
        let examples =
            |name: &str| fixture_text(&format!("tests/reference/fixtures/examples/{name}"));
        let tree = RuntimeTree::with_rules(&[
            ("example.yaml", examples("example.yaml")),
            ("config.yaml", examples("config.yaml")),
        ]);
        let clock = MovableClock::at_second_of_minute(&tree.log_dir("clock"), START_SECOND);
        let clock_env = clock.env();
        // The ratelimit service of integration-test/docker-compose-integration-test.yml, its
        // REDIS_SOCKET_TYPE=tcp and REDIS_URL=redis:6379 replaced by the memory store.
        let mut env = vec![
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", "9125"),
            ("LOG_LEVEL", "debug"),
            ("BACKEND_TYPE", "memory"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RESPONSE_DYNAMIC_METADATA", "true"),
        ];
        env.extend(
            clock_env
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        );
        let reference = start(Entry::Ratelimit, &tree, script, &env);
        let envoy = start_envoy(reference.grpc_port, &tree.log_dir("envoy"));
        Stack {
            clock,
            reference,
            envoy,
            _tree: tree,
        }
    }

    /// `curl http://envoy-proxy:8888{path}` with `headers`.
    fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        get(self.envoy.port, path, headers)
            .unwrap_or_else(|error| panic!("GET {path} through Envoy: {error}"))
    }

    /// The script's `curl -f` succeeding: the upstream's 200.
    fn assert_ok(&self, path: &str, headers: &[(&str, &str)], step: &str) -> HttpResponse {
        self.assert_served_by(path, headers, UPSTREAM_BODY, step)
    }

    /// The script's `curl -f … | grep "{body}"` succeeding: a 200 from the upstream whose
    /// body is `body`.
    fn assert_served_by(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
        step: &str,
    ) -> HttpResponse {
        let response = self.get(path, headers);
        assert!(
            response.status == 200 && response.body.contains(body),
            "{step}: should pass, served by {body:?}: {response:?}\nfloodgate:\n{}",
            self.reference.process.log_text()
        );
        response
    }

    /// The script's `curl -f` failing because of the limit: Envoy's 429 Too Many Requests.
    fn assert_limited(&self, path: &str, headers: &[(&str, &str)], step: &str) {
        let response = self.get(path, headers);
        assert_eq!(
            response.status,
            429,
            "{step}: should be limited: {response:?}\nfloodgate:\n{}",
            self.reference.process.log_text()
        );
        assert_eq!(
            response.header("x-envoy-ratelimited"),
            Some("true"),
            "{step}"
        );
    }

    /// Calls floodgate decided so far, whatever the answer.
    fn decided_calls(&self) -> f64 {
        counted(&self.reference.metrics(), "floodgate_calls_total", &[])
    }

    /// Waits until floodgate has decided `calls` calls: Envoy sends a route's
    /// `apply_on_stream_done` descriptors after the response, so the test must not send the
    /// next request before that call has landed.
    fn wait_for_calls(&self, calls: f64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.decided_calls() < calls {
            assert!(
                Instant::now() < deadline,
                "floodgate decided {} calls, not {calls}",
                self.decided_calls()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Envoy on the test's bootstrap, its ports moved to free ones and its rate-limit cluster
/// pointed at `rls_port`.
fn start_envoy(rls_port: u16, dir: &std::path::Path) -> Envoy {
    let (proxy, mock, mock_2, admin) = (free_port(), free_port(), free_port(), free_port());
    let bootstrap = fixture_text("tests/reference/scripts_proxy.yaml")
        .replace("port_value: 8888", &format!("port_value: {proxy}"))
        .replace("port_value: 9999", &format!("port_value: {mock}"))
        .replace("port_value: 10001", &format!("port_value: {mock_2}"))
        .replace("port_value: 8001", &format!("port_value: {admin}"))
        .replace("port_value: 8081", &format!("port_value: {rls_port}"));
    Envoy::start(&bootstrap, "proxy.yaml", dir, &[proxy, mock, mock_2])
}

#[test]
fn simple_get() {
    let stack = Stack::start("simple-get");
    stack.assert_ok(
        "/twoheader",
        &[("foo", "test"), ("baz", "shady")],
        "happy path",
    );
}

#[test]
fn trigger_ratelimit() {
    // (foo: *), (baz: not-so-shady): 3 per minute.
    let stack = Stack::start("trigger-ratelimit");
    let headers = [("foo", "pelle"), ("baz", "not-so-shady")];
    for call in 1..=3 {
        stack.assert_ok("/twoheader", &headers, &format!("call {call}"));
    }
    stack.assert_limited("/twoheader", &headers, "call 4");
    stack.assert_limited("/twoheader", &headers, "call 5: Too Many Requests");
}

#[test]
fn trigger_shadow_mode_key() {
    // (foo: *), (baz: shady): 3 per minute, shadow_mode.
    let stack = Stack::start("trigger-shadow-mode-key");
    let headers = [("foo", "pelle"), ("baz", "shady")];
    for call in 1..=5 {
        stack.assert_ok("/twoheader", &headers, &format!("call {call}"));
    }
    // The script means "remaining should be zero"; its comparison reads the header with its
    // CR, so it cannot fail. Asserted here as meant.
    let sixth = stack.assert_ok("/twoheader", &headers, "call 6");
    assert_eq!(
        sixth.header("x-ratelimit-remaining"),
        Some("0"),
        "{sixth:?}"
    );
}

#[test]
fn replaces() {
    let stack = Stack::start("replaces");
    let ok = |path: &str, headers: &[(&str, &str)], step: &str| {
        stack.assert_ok(path, headers, step);
    };
    let limited = |path: &str, headers: &[(&str, &str)], step: &str| {
        stack.assert_limited(path, headers, step);
    };

    // replaces raises a limit: (foo: *), (bar: banned) is banned_limit, 0 per minute;
    // (source_cluster: proxy), (destination_cluster: override) replaces it, 2 per minute.
    let banned = [("foo", "bkthomps"), ("bar", "banned")];
    limited("/twoheader", &banned, "banned");
    let to_mock = [
        ("foo", "bkthomps"),
        ("bar", "banned"),
        ("source_cluster", "proxy"),
        ("destination_cluster", "mock"),
    ];
    limited("/fourheader", &to_mock, "banned, not replaced by mock");
    let override_ = [
        ("foo", "bkthomps"),
        ("bar", "banned"),
        ("source_cluster", "proxy"),
        ("destination_cluster", "override"),
    ];
    ok("/fourheader", &override_, "override 1");
    ok("/fourheader", &override_, "override 2");
    limited("/fourheader", &override_, "override 3");

    // replaces leaves the replaced limit alone: (foo: *), (bar: bkthomps) is bkthomps, 1 per
    // minute; (source_cluster: proxy), (destination_cluster: bkthomps) replaces it, 2.
    let replacing = [
        ("foo", "my_foo"),
        ("bar", "bkthomps"),
        ("source_cluster", "proxy"),
        ("destination_cluster", "bkthomps"),
    ];
    ok("/fourheader", &replacing, "bkthomps replaced 1");
    ok("/fourheader", &replacing, "bkthomps replaced 2");
    limited("/fourheader", &replacing, "bkthomps replaced 3");
    let not_replacing = [
        ("foo", "my_foo"),
        ("bar", "bkthomps"),
        ("source_cluster", "proxy"),
        ("destination_cluster", "not_bkthomps"),
    ];
    ok("/fourheader", &not_replacing, "bkthomps itself 1");
    limited("/fourheader", &not_replacing, "bkthomps itself 2");
    limited("/fourheader", &replacing, "bkthomps replaced 4");

    // replaces can replace several: (category: account) replaces bkthomps and fake_name
    // ((source_cluster: proxy), (destination_cluster: fake)), 4 per minute.
    let account = [
        ("foo", "my_foo"),
        ("bar", "bkthomps"),
        ("source_cluster", "proxy"),
        ("destination_cluster", "fake"),
        ("category", "account"),
    ];
    for call in 1..=4 {
        ok("/fiveheader", &account, &format!("account {call}"));
    }
    limited("/fiveheader", &account, "account 5");
    let foo_2 = [("foo", "foo_2"), ("bar", "bkthomps")];
    ok("/twoheader", &foo_2, "bkthomps for foo_2 1");
    limited("/twoheader", &foo_2, "bkthomps for foo_2 2");
    let foo_3 = [
        ("foo", "foo_3"),
        ("bar", "bar_3"),
        ("source_cluster", "proxy"),
        ("destination_cluster", "fake"),
    ];
    ok("/fourheader", &foo_3, "fake_name 1");
    ok("/fourheader", &foo_3, "fake_name 2");
    limited("/fourheader", &foo_3, "fake_name 3");
    limited("/fiveheader", &account, "account 6");
}

#[test]
fn value_included_in_stats_key_when_unspecified() {
    // (unspec: *): 2 per minute, detailed_metric.
    let stack = Stack::start("value-included-in-stats-key-when-unspecified");
    let headers = [("unspec", "unspecified_value")];
    stack.assert_ok("/unspec", &headers, "call 1");
    stack.assert_ok("/unspec", &headers, "call 2");
    stack.assert_limited("/unspec", &headers, "call 3");
    // The reference's stat ratelimit_service_rate_limit_over_limit for
    // rl.unspec_unspecified_value is 1; floodgate's is the rejected counter of that label.
    let scrape = stack.reference.metrics();
    assert_eq!(
        counted(
            &scrape,
            "floodgate_requests_rejected_total",
            &[
                ("domain", "rl"),
                ("rule", "rl.unspec_unspecified_value"),
                ("reason", "limit"),
            ],
        ),
        1.0,
        "{}",
        scrape.text
    );
}

#[test]
fn quota() {
    // (service: service_1) 1 per minute and (service: service_2) 2 per minute, both quota_mode:
    // a request is limited only when both are spent.
    let mut stack = Stack::start("quota");
    stack.assert_ok("/quota", &[], "call 1");
    stack.assert_ok("/quota", &[], "call 2");
    stack.assert_limited("/quota", &[], "call 3");
    // The script sleeps 60 s here.
    stack.clock.advance(60);
    stack.assert_ok("/quota", &[], "a minute later");
}

#[test]
fn token_quota() {
    // /tokenquota checks (service: service_2) with hits_addend 0 on the request, and charges it
    // 1 when the stream is done; service_2 has 2 per minute. A check passes while the count is
    // not beyond the limit, as the reference's (and its door's) does, so 3 requests pass: the
    // third's check finds 2 of 2, within the limit, and its charge takes the count to 3.
    let mut stack = Stack::start("token-quota");
    for request in 1..=3 {
        let number = request.to_string();
        stack.assert_ok(
            "/tokenquota",
            &[("request-no", &number)],
            &format!("request {request}"),
        );
        // Its check, then its charge when the stream is done.
        stack.wait_for_calls(f64::from(2 * request));
    }
    stack.assert_limited("/tokenquota", &[("request-no", "4")], "request 4");
    // The script sleeps 60 s here.
    stack.clock.advance(60);
    stack.assert_ok("/tokenquota", &[("request-no", "5")], "a minute later");
}

/// /multiservice-tokenquota checks (service: service_1) and (service: service_2), both
/// `quota_mode`, with `hits_addend: 0` on the request, and when the stream is done charges 1 to
/// (service: <the `envoy.cluster.locality` name of the endpoint that served it>); service_1 has 1
/// per minute, service_2 has 2. floodgate's answer carries the `metadata:` of the rules that
/// passed, first value winning (`service_with_quota: {name: …}`); Envoy copies that name into
/// `x-envoy-service-with-quota`, then into `envoy.lb`, and the subset load balancer sends the
/// request to that service. So each request's upstream shows which rules floodgate passed: were
/// no metadata returned, Envoy's fallback (any endpoint, round robin) would alternate between
/// the two services, which no step below allows.
///
/// As the script asserts, a check passing while the count is not beyond the limit:
///
/// 1. service_1 0/1, service_2 0/2: both pass, service_1's name comes first: service 1;
///    charged service_1 1/1.
/// 2. service_1 1/1 is within its limit: both pass again, service 1; charged service_1 2/1.
/// 3. service_1 2/1 is beyond it and gives no metadata; service_2 0/2 passes: service 2;
///    charged service_2 1/2.
/// 4. and 5. the same, service 2; charged service_2 2/2, then 3/2.
/// 6. both quota descriptors beyond their limits, so the request is: 429. No endpoint served
///    it, so Envoy sends no charge.
/// 7. a minute later both are fresh: service 1.
#[test]
fn multiservice_token_quota() {
    let mut stack = Stack::start("multiservice-tokenquota");
    let path = "/multiservice-tokenquota";
    let served = [
        UPSTREAM_BODY,
        UPSTREAM_BODY,
        SERVICE_2_BODY,
        SERVICE_2_BODY,
        SERVICE_2_BODY,
    ];
    let mut calls = 0.0;
    for (request, body) in (1..).zip(served) {
        let number = format!("{request}");
        stack.assert_served_by(
            path,
            &[("request-no", &number)],
            body,
            &format!("request {request}"),
        );
        // Its check, then its charge when the stream is done.
        calls += 2.0;
        stack.wait_for_calls(calls);
    }
    stack.assert_limited(path, &[("request-no", "6")], "request 6");
    // The script sleeps 60 s here.
    stack.clock.advance(60);
    stack.assert_served_by(
        path,
        &[("request-no", "7")],
        UPSTREAM_BODY,
        "a minute later",
    );
}
