//! `/lease/acquire` and `/lease/release` over a socket against the real binary, in memory and
//! in Redis: slots up to the limit, then 429 with `Retry-After`; a repeated acquire takes
//! another slot and each release of the id frees one; an unknown id changes nothing; a priority class leaves the
//! reserve to the classes above; a request that a rate limit refuses gives its lease back
//! (all or nothing across both); refusals are counted by class; errors are 400 with what to
//! send.

use std::path::Path;

use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{tempdir, Floodgate};
use serde_json::Value;

const RULES: &str = r#"
domain: jobs
descriptors:
  - key: pool
    value: render
    concurrency:
      max_in_flight: 2
      lease: lease_id
      release: {key: phase, value: done}
      ttl: 60s
  - key: pool
    value: export
    concurrency:
      max_in_flight: 4
      lease: lease_id
      release: {key: phase, value: done}
      ttl: 60s
    priority: {key: priority, classes: {critical: 100%, batch: 50%}, default: batch}
  - key: per_minute
    rate_limit: {unit: minute, requests_per_unit: 1}
"#;

fn post(floodgate: &Floodgate, path: &str, body: &str) -> HttpResponse {
    request(floodgate.http_port, "POST", path, &[], body)
        .unwrap_or_else(|error| panic!("POST {path} failed: {error}"))
}

fn lease_call(
    floodgate: &Floodgate,
    action: &str,
    pool: &str,
    extra: &str,
    id: &str,
) -> HttpResponse {
    let body = format!(
        r#"{{"domain": "jobs", "entries": [{{"key": "pool", "value": "{pool}"}}{extra}], "lease": "{id}"}}"#
    );
    post(floodgate, &format!("/lease/{action}"), &body)
}

fn acquire(floodgate: &Floodgate, id: &str) -> HttpResponse {
    lease_call(floodgate, "acquire", "render", "", id)
}

fn release(floodgate: &Floodgate, id: &str) -> HttpResponse {
    lease_call(floodgate, "release", "render", "", id)
}

fn json(response: &HttpResponse) -> Value {
    serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {response:?}"))
}

fn remaining(response: &HttpResponse) -> u64 {
    assert_eq!(response.status, 200, "{response:?}");
    json(response)["remaining"].as_u64().unwrap_or(u64::MAX)
}

fn leases_hold_their_slots(dir: &Path, flags: &[&str]) {
    let floodgate = Floodgate::start_with_rules(dir, "jobs.yaml", RULES, flags);
    assert_eq!(remaining(&acquire(&floodgate, "a")), 1);
    // The same id again takes a second slot: two requests cannot share one.
    assert_eq!(remaining(&acquire(&floodgate, "a")), 0);
    let refused = acquire(&floodgate, "c");
    assert_eq!(refused.status, 429, "{refused:?}");
    let body = json(&refused);
    assert_eq!(body["code"], "OVER_LIMIT");
    assert_eq!(body["rule"], "jobs.pool_render");
    // Until the earliest lease expires, at the latest: about a minute.
    let retry: u64 = refused
        .header("retry-after")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    assert!((1..=60).contains(&retry), "{refused:?}");
    // Each release of a frees one of its slots; then a holds none, and frees nothing.
    assert_eq!(remaining(&release(&floodgate, "a")), 1);
    assert_eq!(remaining(&release(&floodgate, "a")), 2);
    assert_eq!(remaining(&release(&floodgate, "a")), 2);

    // An unknown id releases nothing; a known one frees exactly its slot.
    assert_eq!(remaining(&acquire(&floodgate, "a")), 1);
    assert_eq!(remaining(&acquire(&floodgate, "b")), 0);
    assert_eq!(remaining(&release(&floodgate, "nobody")), 0);
    assert_eq!(acquire(&floodgate, "c").status, 429);
    assert_eq!(remaining(&release(&floodgate, "a")), 1);
    assert_eq!(remaining(&acquire(&floodgate, "c")), 0);
    assert_eq!(
        acquire(&floodgate, "a").status,
        429,
        "a was released, and b and c hold the two slots"
    );

    // A batch job may take half of 4; the rest is kept for critical ones.
    let batch = |id: &str| lease_call(&floodgate, "acquire", "export", "", id);
    let critical = |id: &str| {
        let class = r#", {"key": "priority", "value": "critical"}"#;
        lease_call(&floodgate, "acquire", "export", class, id)
    };
    assert_eq!(batch("b1").status, 200);
    assert_eq!(batch("b2").status, 200);
    let reserved = batch("b3");
    assert_eq!(reserved.status, 429);
    assert_eq!(
        reserved.header("x-floodgate-priority"),
        Some(r#"batch;reason=reserved;reserved-for="critical""#),
        "{reserved:?}"
    );
    assert_eq!(critical("c1").status, 200);
    assert_eq!(critical("c2").status, 200);
    let full = critical("c3");
    assert_eq!(full.status, 429);
    assert_eq!(
        full.header("x-floodgate-priority"),
        Some("critical;reason=full"),
        "{full:?}"
    );
    let refused_in = |class: &str| {
        scrape(floodgate.debug_port).value(
            "floodgate_requests_rejected_total",
            &[
                ("domain", "jobs"),
                ("rule", "jobs.pool_export"),
                ("reason", "limit"),
                ("class", class),
            ],
        )
    };
    assert_eq!((refused_in("batch"), refused_in("critical")), (1.0, 1.0));

    // All or nothing: the second request's rate limit refuses it, so its lease is given back.
    let with_rate = |id: &str| {
        format!(
            r#"{{"domain": "jobs", "descriptors": [
                {{"entries": [{{"key": "pool", "value": "render"}}, {{"key": "lease_id", "value": "{id}"}}]}},
                {{"entries": [{{"key": "per_minute", "value": "x"}}]}}]}}"#
        )
    };
    assert_eq!(remaining(&release(&floodgate, "b")), 1);
    assert_eq!(post(&floodgate, "/json", &with_rate("r1")).status, 200);
    assert_eq!(post(&floodgate, "/json", &with_rate("r2")).status, 429);
    assert_eq!(remaining(&release(&floodgate, "r1")), 1);
    assert_eq!(
        remaining(&acquire(&floodgate, "d")),
        0,
        "r2's lease was given back"
    );
}

#[test]
fn leases_hold_their_slots_in_memory() {
    let dir = tempdir();
    leases_hold_their_slots(dir.path(), &[]);
}

#[test]
fn leases_hold_their_slots_in_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tempdir();
    leases_hold_their_slots(dir.path(), &["--store", "redis", "--redis-url", &url]);
}

#[test]
fn a_request_that_names_no_concurrency_rule_is_told_what_to_send() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "jobs.yaml", RULES, &[]);
    let cases = [
        (r#"{"domain": "jobs"}"#, "not a lease request"),
        (
            r#"{"domain": "jobs", "lease": "x", "extra": 1}"#,
            "not a lease request",
        ),
        (r#"{"domain": "nope", "lease": "x"}"#, "no domain \"nope\""),
        (
            r#"{"domain": "jobs", "entries": [{"key": "per_minute", "value": "x"}], "lease": "x"}"#,
            "no concurrency rule of domain \"jobs\" matches the entries [per_minute=x]",
        ),
        (
            r#"{"domain": "jobs", "entries": [{"key": "pool", "value": "render"}], "lease": ""}"#,
            "the lease id is empty",
        ),
        (
            r#"{"domain": "jobs", "entries": [{"key": "pool", "value": "render"}], "lease": "a\u0000b"}"#,
            "holds a NUL byte",
        ),
    ];
    for (body, hint) in cases {
        let answer = post(&floodgate, "/lease/acquire", body);
        assert_eq!(answer.status, 400, "{body}: {answer:?}");
        assert!(answer.body.contains(hint), "{hint:?} not in {answer:?}");
    }
}
