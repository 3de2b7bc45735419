//! `test/server/health_test.go` and `server_impl_test.go`: health as a load balancer and a
//! kubelet see it (grpc.health.v1 service `ratelimit` for readiness, `""` for liveness, HTTP
//! `/healthcheck`), SIGTERM, and the `/json` endpoint, against the real binary. The reference's
//! tests flip its health checker's components (`redis`, `config`, `sigterm`) by hand; here Redis
//! is stopped, started and paused, the rules are reloaded, and the process gets SIGTERM.

use std::process::Command;

use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::ops;
use floodgate_testkit::redis::RedisServer;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::serving::{Door, Served, BOTH_DOORS, MEMORY, WITHIN};

const RULES: &str = "
domain: foo
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// floodgate on `redis` (with a deadline short enough that a paused Redis is noticed at once,
/// as in tests/redis/redis_health.rs), `rules` in its directory or none.
///
/// The reference's health starts with its `redis` component failed until the first connection;
/// a client cannot see that state, since the reference answers only once Redis answered, and so
/// does floodgate (its wait for Redis at start is tests/redis/redis_startup.rs). So Redis runs at
/// start, and the cases stop it
/// (SIGSTOP: nothing answers) where the reference's tests fail the component.
fn on_redis(redis: &RedisServer, rules: Option<&str>, env: &[(&str, &str)]) -> Served {
    let url = redis.url();
    // The reference's `redis` component fails only with this switch (its tests fail the
    // component by hand); without it health stays serving while Redis is down, in both.
    let env = [env, &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")]].concat();
    Served::start(
        rules,
        &[
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--redis-timeout-ms",
            "300",
        ],
        &env,
    )
}

/// Waits until floodgate has noticed that Redis does not answer (`floodgate_store_up` 0).
fn store_down(served: &Served) {
    ops::wait_for(WITHIN, "floodgate_store_up 0", || {
        served
            .metrics()
            .get("floodgate_store_up", &[("backend", "redis")])
            == Some(0.0)
    });
}

const AT_LEAST_ONE_CONFIG: [(&str, &str); 1] =
    [("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")];

#[test]
fn server_test_health_check() {
    let redis = RedisServer::start();
    let served = on_redis(&redis, Some(RULES), &[]);
    served.healthcheck_becomes(200);
    let healthy = floodgate_testkit::http::get(served.floodgate.http_port, "/healthcheck", &[])
        .map(|answer| answer.body)
        .unwrap_or_default();
    assert_eq!(healthy, "OK");
    redis.pause();
    served.healthcheck_becomes(500);
    redis.resume();
    served.healthcheck_becomes(200);
}

#[test]
fn server_test_healthy_with_at_least_one_config_loaded() {
    let redis = RedisServer::start();
    let served = on_redis(&redis, None, &AT_LEAST_ONE_CONFIG);
    // Neither a configuration with a domain nor Redis (its outage noticed).
    redis.pause();
    store_down(&served);
    assert_eq!(served.healthcheck(), 500);
    // The configuration is ready, Redis still is not.
    served.reload(Some(RULES));
    assert_eq!(served.healthcheck(), 500);
    redis.resume();
    served.healthcheck_becomes(200);
    redis.pause();
    served.healthcheck_becomes(500);
    redis.resume();
    served.healthcheck_becomes(200);
}

/// Readiness follows Redis; liveness (`""`) stays SERVING, as grpc-go's default in the
/// reference.
#[test]
fn server_test_grpc_health_check() {
    let redis = RedisServer::start();
    let served = on_redis(&redis, Some(RULES), &[]);
    served.health_becomes("ratelimit", ServingStatus::Serving);
    redis.pause();
    served.health_becomes("ratelimit", ServingStatus::NotServing);
    assert_eq!(served.health(""), Some(ServingStatus::Serving));
    redis.resume();
    served.health_becomes("ratelimit", ServingStatus::Serving);
}

#[test]
fn server_test_grpc_healthy_with_at_least_one_config_loaded() {
    let redis = RedisServer::start();
    let served = on_redis(&redis, None, &AT_LEAST_ONE_CONFIG);
    served.health_becomes("ratelimit", ServingStatus::NotServing);
    served.reload(Some(RULES));
    served.health_becomes("ratelimit", ServingStatus::Serving);
    // Both fail: the rules are gone and Redis does not answer.
    served.reload(None);
    redis.pause();
    store_down(&served);
    served.health_becomes("ratelimit", ServingStatus::NotServing);
    redis.resume();
}

/// The reference's health checker fails its `sigterm` component on SIGTERM (no test of its
/// own sends one): readiness turns NOT_SERVING, liveness stays SERVING, and the process exits
/// cleanly (floodgate first answers for `--drain-seconds`).
#[test]
fn server_test_sigterm_fails_the_health_check() {
    let flags = [MEMORY, &["--drain-seconds", "2"]].concat();
    let mut served = Served::start(Some(RULES), &flags, &[]);
    served.health_becomes("ratelimit", ServingStatus::Serving);
    assert_eq!(served.healthcheck(), 200);
    let sent = Command::new("kill")
        .arg("-TERM")
        .arg(served.floodgate.process.pid().to_string())
        .status();
    assert!(sent.is_ok_and(|status| status.success()), "kill -TERM");
    served.healthcheck_becomes(500);
    served.health_becomes("ratelimit", ServingStatus::NotServing);
    assert_eq!(served.health(""), Some(ServingStatus::Serving));
    let exited = served.floodgate.process.exit_within(WITHIN);
    assert!(exited.is_some_and(|status| status.success()), "{exited:?}");
}

fn post_json(served: &Served, body: &str) -> HttpResponse {
    request(served.floodgate.http_port, "POST", "/json", &[], body)
        .unwrap_or_else(|error| panic!("POST /json: {error}"))
}

/// `/json`: a body that is no request, or a request the service refuses, is a 400 in plain
/// text, `Bad Request` at the reference's door as in the reference (`floodgate serve`'s says
/// why); an answer is JSON, 200 for OK and 429 for OVER_LIMIT. The reference's two other cases
/// hand its handler answers a service never gives (an empty response, and none without an
/// error).
#[test]
fn server_test_json_handler() {
    for door in BOTH_DOORS {
        json_handler_at(door);
    }
}

fn json_handler_at(door: Door) {
    let served = Served::start_at(door, Some(RULES), MEMORY, &[]);
    for body in ["", "}", r#"{"domain": "foo"}"#] {
        let refused = post_json(&served, body);
        assert_eq!(refused.status, 400, "{door:?} {body}: {refused:?}");
        assert_eq!(
            refused.header("content-type"),
            Some("text/plain; charset=utf-8"),
            "{body}"
        );
        let bad_request = refused.body == "Bad Request\n";
        assert_eq!(
            bad_request,
            door == Door::Ratelimit,
            "{door:?} {body}: {refused:?}"
        );
    }
    let call = r#"{"domain": "foo", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#;
    for (status, code) in [(200, "OK"), (429, "OVER_LIMIT")] {
        let answer = post_json(&served, call);
        assert_eq!(answer.status, status, "{answer:?}");
        assert_eq!(answer.header("content-type"), Some("application/json"));
        let json: serde_json::Value = serde_json::from_str(&answer.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {answer:?}"));
        assert_eq!(json["overallCode"], code, "{json}");
    }
}
