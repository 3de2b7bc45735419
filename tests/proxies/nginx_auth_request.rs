//! End to end with a real nginx (1.22, auth_request) running `deploy/nginx/nginx.conf` in front
//! of a small test application, with floodgate on `deploy/nginx/floodgate.yaml`:
//! 200 until the limit, then 429 with Retry-After and the RateLimit headers; floodgate stopped →
//! fail open on `/`, fail closed on `/strict/`; the perimeter `limit_req` cuts floods before
//! floodgate is asked.

use std::path::Path;
use std::time::Duration;

use floodgate_testkit as common;
use floodgate_testkit::http::{get, HttpResponse};
use floodgate_testkit::nginx::{replace_once, App, KeepAliveClient, Nginx};
use floodgate_testkit::{free_port, repo_file, tempdir, Floodgate};

/// floodgate on the deploy rules, the test app, and nginx on the deploy configuration with its
/// three addresses moved to free loopback ports.
struct Stack {
    floodgate: Floodgate,
    _app: App,
    nginx: Nginx,
}

impl Stack {
    fn start(dir: &Path) -> Stack {
        let floodgate = Floodgate::start(&repo_file("deploy/nginx/floodgate.yaml"), &[], dir);
        common::wait_for_port(
            floodgate.http_port,
            Duration::from_secs(10),
            "floodgate HTTP",
        );
        let app = App::start();
        let template = std::fs::read_to_string(repo_file("deploy/nginx/nginx.conf"))
            .unwrap_or_else(|error| panic!("cannot read deploy/nginx/nginx.conf: {error}"));
        let port = free_port();
        let config = replace_once(
            &template,
            "listen 8000;",
            &format!("listen 127.0.0.1:{port};"),
        );
        let config = replace_once(
            &config,
            "server 127.0.0.1:8080;",
            &format!("server 127.0.0.1:{};", floodgate.http_port),
        );
        let config = replace_once(
            &config,
            "server 127.0.0.1:8082;",
            &format!("server 127.0.0.1:{};", app.port),
        );
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(&prefix)
            .unwrap_or_else(|error| panic!("cannot create the nginx prefix: {error}"));
        let nginx = Nginx::start(&config, &prefix, port);
        Stack {
            floodgate,
            _app: app,
            nginx,
        }
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
        get(self.nginx.port, path, headers).unwrap_or_else(|error| {
            panic!("request through nginx failed: {error}\n{}", self.logs())
        })
    }

    fn logs(&self) -> String {
        format!(
            "{}\nfloodgate log:\n{}",
            self.nginx.logs(),
            self.floodgate.process.log_text()
        )
    }
}

#[test]
fn nginx_answers_429_with_retry_after_and_ratelimit_headers_after_the_limit() {
    let dir = tempdir();
    let stack = Stack::start(dir.path());

    // per_key: leaky bucket, 10 per second with a burst of 20: 21 at once, then 10 per second.
    // Sent back to back, the 22nd or one soon after is refused.
    let alice = [("X-Api-Key", "alice")];
    let mut allowed = Vec::new();
    let mut rejected = None;
    for _ in 0..40 {
        let response = stack.get("/", &alice);
        match response.status {
            200 => allowed.push(response),
            429 => {
                rejected = Some(response);
                break;
            }
            other => panic!("unexpected {other}: {response:?}\n{}", stack.logs()),
        }
    }
    assert!(
        allowed.len() >= 21,
        "refused within the burst: {}",
        allowed.len()
    );
    let Some(rejected) = rejected else {
        panic!("no 429 in 40 requests\n{}", stack.logs());
    };

    let first = &allowed[0];
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per_key\";q=10;w=1"),
        "{first:?}"
    );
    assert_eq!(first.header("ratelimit"), Some("\"per_key\";r=20;t=1"));
    assert_eq!(
        first.header("x-ratelimit-limit"),
        Some("10, 10;w=1;name=\"per_key\"")
    );
    assert_eq!(first.header("x-ratelimit-remaining"), Some("20"));
    assert_eq!(first.header("retry-after"), None);
    // The application was told too (proxy_set_header X-RateLimit-Remaining $rl_remaining).
    assert_eq!(first.body, "app: x-ratelimit-remaining=20\n");

    assert_eq!(rejected.header("retry-after"), Some("1"), "{rejected:?}");
    assert_eq!(rejected.header("ratelimit"), Some("\"per_key\";r=0;t=1"));
    assert_eq!(
        rejected.header("ratelimit-policy"),
        Some("\"per_key\";q=10;w=1")
    );
    assert_eq!(rejected.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(rejected.header("x-ratelimit-reset"), Some("1"));
    assert_eq!(rejected.header("content-type"), Some("application/json"));
    assert_eq!(rejected.body, "{\"error\":\"rate_limited\"}\n");

    // Counters are per key; a client without a key is counted per IP instead.
    let bob = stack.get("/", &[("X-Api-Key", "bob")]);
    assert_eq!(bob.status, 200, "{bob:?}");
    assert_eq!(bob.header("x-ratelimit-remaining"), Some("20"));
    let anonymous = stack.get("/", &[]);
    assert_eq!(anonymous.status, 200, "{anonymous:?}");
    assert_eq!(
        anonymous.header("ratelimit-policy"),
        Some("\"anonymous_per_ip\";q=120;w=60")
    );

    // The original path reaches the profile, normalized by nginx ($uri): 5 logins per minute
    // per IP, however the path is spelt.
    let paths = [
        "/login", "/login", "/login", "/login", "//login", "/%6cogin",
    ];
    let logins: Vec<u16> = paths
        .iter()
        .map(|path| stack.get(path, &[("X-Api-Key", "carol")]).status)
        .collect();
    assert_eq!(logins, [200, 200, 200, 200, 200, 429], "{}", stack.logs());
}

#[test]
fn floodgate_down_fails_open_on_root_and_closed_on_strict() {
    let dir = tempdir();
    let mut stack = Stack::start(dir.path());
    let key = [("X-Api-Key", "dave")];

    let up = stack.get("/strict/report", &key);
    assert_eq!(up.status, 200, "{up:?}\n{}", stack.logs());
    assert_eq!(up.header("x-ratelimit-remaining"), Some("20"));

    let stopped = stack.floodgate.process.terminate(Duration::from_secs(10));
    assert!(stopped.is_some(), "floodgate did not stop");

    // Fail open: served by the application, without rate-limit headers.
    let open = stack.get("/", &key);
    assert_eq!(open.status, 200, "{open:?}\n{}", stack.logs());
    assert_eq!(open.body, "app: x-ratelimit-remaining=-\n");
    assert_eq!(open.header("ratelimit"), None);
    assert_eq!(open.header("x-ratelimit-remaining"), None);

    // Fail closed: 503 with Retry-After, never reaching the application.
    let closed = stack.get("/strict/report", &key);
    assert_eq!(closed.status, 503, "{closed:?}\n{}", stack.logs());
    assert_eq!(closed.header("retry-after"), Some("1"));
    assert_eq!(closed.body, "{\"error\":\"rate_limiter_unavailable\"}\n");
    assert!(
        stack
            .nginx
            .logs()
            .contains("auth request unexpected status: 502"),
        "{}",
        stack.logs()
    );
}

#[test]
fn perimeter_limit_req_refuses_a_flood_from_one_ip_before_floodgate() {
    let dir = tempdir();
    let stack = Stack::start(dir.path());
    let mut client = KeepAliveClient::new(stack.nginx.port);

    // limit_req rate=50r/s burst=100 nodelay per IP: 101 at once, then 50 per second. Every
    // request has its own API key so that floodgate's per-key limit never refuses one.
    let mut statuses = Vec::new();
    let mut refused = None;
    for index in 0..250 {
        let key = format!("flood-{index}");
        let answer = client
            .get("/", &[("X-Api-Key", &key)])
            .unwrap_or_else(|error| panic!("request {index}: {error}\n{}", stack.logs()));
        if answer.status == 429 && refused.is_none() {
            refused = Some(answer.clone());
        }
        statuses.push(answer.status);
    }
    assert!(
        statuses.iter().take(101).all(|status| *status == 200),
        "refused within the perimeter burst: {statuses:?}"
    );
    let Some(refused) = refused else {
        panic!("no 429 in 250 requests: {statuses:?}\n{}", stack.logs());
    };
    let header = |name: &str| {
        refused
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(header("retry-after"), Some("1"), "{refused:?}");
    // Not floodgate's answer: no RateLimit headers, since floodgate was never asked.
    assert_eq!(header("ratelimit"), None, "{refused:?}");
    let access_log =
        std::fs::read_to_string(stack.nginx.prefix.join("access.log")).unwrap_or_default();
    assert!(
        access_log.contains("429 limit_req=REJECTED ratelimit=\"-\""),
        "{access_log}"
    );
}
