//! Probabilistic shedding on a concurrency rule (`shed_above`, `core::arithmetic::shed`), over the HTTP
//! lease pair against the real binary, in memory and in Redis: past a class's own threshold
//! new leases are refused with probability (429, `Retry-After: 1`, `reason=shed`), well before
//! the hard `max_in_flight`; the lower class's threshold comes first; below a threshold
//! nothing is shed.

use std::path::Path;

use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::{store_flags, RedisServer};
use floodgate_testkit::{tempdir, Floodgate};

const RULES: &str = r#"
domain: jobs
descriptors:
  - key: pool
    value: render
    concurrency:
      max_in_flight: 100
      shed_above: 10
      lease: lease_id
      release: {key: phase, value: done}
      ttl: 60s
    priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}
"#;

/// Acquire attempts by the low class: about √(10 × attempts) survive (survival 5 / depth),
/// far from its 50 slots, so every refusal is a shed.
const LOW_ATTEMPTS: usize = 40;

fn lease(floodgate: &Floodgate, action: &str, class: &str, id: &str) -> HttpResponse {
    let body = format!(
        r#"{{"domain": "jobs", "entries": [{{"key": "pool", "value": "render"}}, {{"key": "priority", "value": "{class}"}}], "lease": "{id}"}}"#
    );
    let path = format!("/lease/{action}");
    request(floodgate.http_port, "POST", &path, &[], &body)
        .unwrap_or_else(|error| panic!("POST {path} failed: {error}"))
}

fn sheds_past_each_class_threshold(dir: &Path, flags: &[&str]) {
    let floodgate = Floodgate::start_with_rules(dir, "jobs.yaml", RULES, flags);
    let mut held = Vec::new();
    let mut shed = 0;
    for attempt in 0..LOW_ATTEMPTS {
        let id = format!("low-{attempt}");
        let answer = lease(&floodgate, "acquire", "low", &id);
        match answer.status {
            200 => held.push(id),
            429 => {
                shed += 1;
                assert!(
                    held.len() >= 5,
                    "low sheds only past 5 in flight: {answer:?}"
                );
                assert_eq!(answer.header("retry-after"), Some("1"), "{answer:?}");
                assert_eq!(
                    answer.header("x-floodgate-priority"),
                    Some(r#"low;reason=shed;reserved-for="critical""#),
                    "{answer:?}"
                );
            }
            _ => panic!("acquire {id}: {answer:?}"),
        }
    }
    assert!(
        shed > 0 && held.len() >= 5 && held.len() < 50,
        "{} held, {shed} shed of {LOW_ATTEMPTS}",
        held.len()
    );
    // Counted by reason, in the class: sheds apart from refusals at the bound.
    let rejected = |reason: &str| {
        scrape(floodgate.debug_port)
            .get(
                "floodgate_requests_rejected_total",
                &[
                    ("domain", "jobs"),
                    ("rule", "jobs.pool_render"),
                    ("reason", reason),
                    ("class", "low"),
                ],
            )
            .unwrap_or(0.0)
    };
    assert_eq!(rejected("shed"), shed as f64);
    assert_eq!(rejected("limit"), 0.0);
    // Down to 7 low leases: critical's threshold is 10, so its next three (depths 8 to 10)
    // are never shed, where low at those depths survives 5 / depth of the time.
    for id in held.split_off(7) {
        assert_eq!(lease(&floodgate, "release", "low", &id).status, 200);
    }
    for index in 0..3 {
        let answer = lease(
            &floodgate,
            "acquire",
            "critical",
            &format!("critical-{index}"),
        );
        assert_eq!(
            answer.status,
            200,
            "critical at depth {}: {answer:?}",
            8 + index
        );
    }
}

/// Memory first, then Redis: both stores run the same survival arithmetic on the same draws.
#[test]
fn leases_are_shed_past_each_class_threshold_in_memory_and_in_redis() {
    let memory = tempdir();
    sheds_past_each_class_threshold(memory.path(), &[]);
    let redis = RedisServer::start();
    let (url, dir) = (redis.url(), tempdir());
    sheds_past_each_class_threshold(dir.path(), &store_flags(&url, &[]));
}
