//! `/json` over a socket against the real binary: envoyproxy/ratelimit's JSON endpoint, a
//! `RateLimitRequest` in proto3 JSON in and the `RateLimitResponse` out; 200 OK, 429 OVER_LIMIT,
//! 400 with a message for a bad body or a request that cannot be decided.

use std::path::Path;

use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::{tempdir, Floodgate};
use serde_json::{json, Value};

const RULES: &str = r#"
domain: dummy
descriptors:
  - key: one_per_minute
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: token_bucket}
  - key: two_per_minute
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket, name: two}
  - key: five_per_thirty_seconds
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 5}
"#;

fn start(dir: &Path, extra: &[&str]) -> Floodgate {
    Floodgate::start_with_rules(dir, "dummy.yaml", RULES, extra)
}

fn post(floodgate: &Floodgate, body: &str) -> HttpResponse {
    request(floodgate.http_port, "POST", "/json", &[], body)
        .unwrap_or_else(|error| panic!("POST /json failed: {error}"))
}

fn body_json(response: &HttpResponse) -> Value {
    serde_json::from_str(&response.body)
        .unwrap_or_else(|error| panic!("not JSON ({error}): {response:?}"))
}

/// `durationUntilReset` as whole seconds (`"58s"` → 58).
fn seconds(value: &Value) -> u64 {
    value
        .as_str()
        .and_then(|text| text.strip_suffix('s'))
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("not a protojson Duration: {value}"))
}

#[test]
fn ok_then_over_limit_in_protojson() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &[]);
    let body = r#"{"domain": "dummy", "descriptors": [
        {"entries": [{"key": "one_per_minute", "value": "something"}]},
        {"entries": [{"key": "two_per_minute", "value": "something"}]}]}"#;

    let first = post(&floodgate, body);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.header("content-type"), Some("application/json"));
    let mut json = body_json(&first);
    // Durations depend on timing: check and remove them, then compare the rest exactly.
    for status in json["statuses"].as_array_mut().into_iter().flatten() {
        let reset = seconds(&status["durationUntilReset"]);
        assert!((1..=60).contains(&reset), "{status}");
        if let Some(object) = status.as_object_mut() {
            object.remove("durationUntilReset");
        }
    }
    assert_eq!(
        json,
        json!({"overallCode": "OK", "statuses": [
            // limitRemaining 0 is a zero value: omitted, as protojson does.
            {"code": "OK", "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"}},
            {"code": "OK", "currentLimit": {"name": "two", "requestsPerUnit": 2, "unit": "MINUTE"},
             "limitRemaining": 1}
        ]})
    );

    let second = post(&floodgate, body);
    assert_eq!(second.status, 429, "{second:?}");
    let json = body_json(&second);
    assert_eq!(json["overallCode"], "OVER_LIMIT");
    assert_eq!(json["statuses"][0]["code"], "OVER_LIMIT");
    assert!(json["statuses"][0].get("limitRemaining").is_none());
    // One token back every 60 s.
    let retry = seconds(&json["statuses"][0]["durationUntilReset"]);
    assert!((59..=60).contains(&retry), "{json}");
    // A rejected request charges nothing: the second descriptor still has its 1.
    assert_eq!(json["statuses"][1]["code"], "OK");
    assert_eq!(json["statuses"][1]["limitRemaining"], 1);
}

#[test]
fn proto_field_names_strings_for_numbers_and_any_method_are_accepted() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &[]);
    let body = r#"{"domain": "dummy", "hits_addend": "2",
        "descriptors": [{"entries": [{"key": "five_per_thirty_seconds", "value": "a"}]}]}"#;
    let response = request(floodgate.http_port, "GET", "/json", &[], body)
        .unwrap_or_else(|error| panic!("GET /json: {error}"));
    assert_eq!(response.status, 200, "{response:?}");
    let json = body_json(&response);
    assert_eq!(
        json["statuses"][0]["currentLimit"],
        json!({"requestsPerUnit": 5, "unit": "SECOND", "unitMultiplier": 30})
    );
    assert_eq!(json["statuses"][0]["limitRemaining"], 3);

    // Unknown domain or no matching rule: OK without a limit.
    let unknown = post(
        &floodgate,
        r#"{"domain": "nowhere", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#,
    );
    assert_eq!(unknown.status, 200, "{unknown:?}");
    assert_eq!(
        body_json(&unknown),
        json!({"overallCode": "OK", "statuses": [{"code": "OK"}]})
    );

    // A limit override (Envoy's per-descriptor `limit`) with an enum number.
    let overridden = post(
        &floodgate,
        r#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "one_per_minute", "value": "o"}],
            "limit": {"requests_per_unit": 7, "unit": 3}}]}"#,
    );
    assert_eq!(overridden.status, 200, "{overridden:?}");
    assert_eq!(
        body_json(&overridden)["statuses"][0]["currentLimit"],
        json!({"requestsPerUnit": 7, "unit": "HOUR"})
    );
}

#[test]
fn response_headers_are_in_the_body_when_enabled() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &["--response-headers", "ietf"]);
    let body = r#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "two_per_minute", "value": "h"}]}]}"#;
    let json = body_json(&post(&floodgate, body));
    assert_eq!(
        json["responseHeadersToAdd"],
        json!([
            {"key": "RateLimit-Policy", "value": "\"two\";q=2;w=60"},
            {"key": "RateLimit", "value": "\"two\";r=1;t=30"}
        ])
    );
}

#[test]
fn bad_bodies_get_400_with_a_message() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &[]);
    let cases = [
        ("", "empty body"),
        (
            "{\"domain\": ",
            "invalid RateLimitRequest JSON: EOF while parsing",
        ),
        (
            "{domain}",
            "invalid RateLimitRequest JSON: key must be a string",
        ),
        (
            r#"{"domain": "dummy", "bogus": 1}"#,
            "unknown field `bogus`",
        ),
        (r#"{"domain": 7}"#, "invalid type: integer `7`"),
        (
            r#"{"domain": "dummy", "descriptors": {}}"#,
            "invalid type: map",
        ),
        (r#"{"hitsAddend": -3}"#, "negative"),
        (
            r#"{"descriptors": [{"limit": {"unit": "FORTNIGHT"}}]}"#,
            "unknown RateLimitUnit \"FORTNIGHT\"",
        ),
        // Parsed, but not a request that can be decided: the limiter's own messages.
        (
            r#"{"descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#,
            "rate limit domain must not be empty",
        ),
        (
            r#"{"domain": "dummy"}"#,
            "descriptor list must not be empty",
        ),
        (
            r#"{"domain": "dummy", "descriptors": [{"entries": [{"value": "v"}]}]}"#,
            "the key is empty",
        ),
        (
            r#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "k", "value": "v"}],
               "limit": {"requestsPerUnit": 5}}]}"#,
            "unit UNKNOWN",
        ),
    ];
    for (body, expected) in cases {
        let response = post(&floodgate, body);
        assert_eq!(response.status, 400, "{body}: {response:?}");
        assert_eq!(
            response.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
        assert!(
            response.body.contains(expected) && response.body.ends_with('\n'),
            "{body}: expected {expected:?} in {:?}",
            response.body
        );
    }
}
