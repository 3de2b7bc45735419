//! A concurrency refusal through the real Envoy 1.40 with the guide's bootstrap
//! (`deploy/envoy/concurrency.yaml`, which also has Envoy compute its own draft-03 headers):
//! the 429 carries `retry-after` and the headers of floodgate's `--response-headers` mode, and
//! Envoy adds no `x-ratelimit-*` of its own, since floodgate sends no rate (`current_limit`)
//! for a concurrency rule.

use floodgate_testkit::http::{get, request, HttpResponse};
use floodgate_testkit::{free_port, Floodgate};

use super::envoy_concurrency::{guide_rules, start_envoy};

/// The 429 Envoy answers while the rule's one slot is held, floodgate answering in `mode`.
fn refusal_through_envoy(mode: &str) -> HttpResponse {
    let rules = guide_rules().replace("max_in_flight: 4", "max_in_flight: 1");
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "backend.yaml",
        &rules,
        &["--response-headers", mode],
    );
    // Nothing reaches the upstream: the slot is taken by a start call sent directly.
    let envoy = start_envoy(floodgate.grpc_port, free_port(), dir.path(), "envoy.yaml");
    let start_call = r#"{"domain":"backend","descriptors":[{"entries":[{"key":"backend","value":"slow"},{"key":"request_id","value":"holder"}]}]}"#;
    let held = request(floodgate.http_port, "POST", "/json", &[], start_call)
        .unwrap_or_else(|error| panic!("POST /json: {error}"));
    assert!(held.body.contains(r#""overallCode":"OK""#), "{held:?}");
    let refused = get(envoy.port, "/", &[]).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        refused.status,
        429,
        "{refused:?}\n{}",
        floodgate.process.log_text()
    );
    refused
}

/// `retry-after`, checked to be the refusal's wait: 1 s, though the held lease has 30 s to
/// live (a slot frees when a request ends, long before its lease's TTL).
fn retry_after(response: &HttpResponse) -> u64 {
    let seconds = response
        .header("retry-after")
        .and_then(|value| value.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no retry-after in seconds: {response:?}"));
    assert_eq!(seconds, 1, "{response:?}");
    seconds
}

fn count(response: &HttpResponse, name: &str) -> usize {
    response
        .headers
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case(name))
        .count()
}

#[test]
fn a_full_concurrency_rule_answers_429_with_retry_after_and_the_ietf_fields() {
    let refused = refusal_through_envoy("ietf");
    let wait = retry_after(&refused);
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some(r#""slow_backend_in_flight";q=1;qu="concurrent-requests""#),
        "{refused:?}"
    );
    assert_eq!(
        refused.header("ratelimit"),
        Some(format!(r#""slow_backend_in_flight";r=0;t={wait}"#).as_str()),
        "{refused:?}"
    );
    assert_eq!(count(&refused, "x-ratelimit-limit"), 0, "{refused:?}");
}

#[test]
fn a_full_concurrency_rule_answers_429_with_retry_after_and_the_draft03_fields_once() {
    let refused = refusal_through_envoy("draft03");
    let wait = retry_after(&refused).to_string();
    for (name, value) in [
        ("x-ratelimit-limit", "1"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", wait.as_str()),
    ] {
        assert_eq!(refused.header(name), Some(value), "{refused:?}");
        assert_eq!(count(&refused, name), 1, "only floodgate's: {refused:?}");
    }
}
