//! test/service/ratelimit_test.go's dynamic metadata cases (`RESPONSE_DYNAMIC_METADATA=true`),
//! against the floodgate binary over gRPC: the reference mocks its cache to say which
//! descriptor is over; here a limit of 1 per hour, spent by a first call, makes it so. Then the
//! reference's `metadata.yaml` fixture through gRPC and `/json`, the answer without the
//! setting, and, at either door, the metadata of limits the reference rebuilds for their stats
//! key.

use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use floodgate_testkit::http::request as http_request;
use floodgate_testkit::rls::{self, Client};
use floodgate_testkit::{repo_file, tempdir, wait_for_port, Floodgate};

use crate::serving::{self, Door, MEMORY};
use prost_types::value::Kind;
use prost_types::{Struct, Value};
use tempfile::TempDir;

/// One floodgate under test, on `rules` with floodgate's `flags` and the reference's
/// variables `env`, and a gRPC client to it.
struct Served {
    floodgate: Floodgate,
    client: Client,
    /// Holds the rules and the log; removed once the process is stopped (fields drop in order).
    _dir: TempDir,
}

impl Served {
    async fn start(rules: &str, flags: &[&str], env: &[(&str, &str)]) -> Served {
        let dir = tempdir();
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, rules).unwrap_or_else(|error| panic!("write config: {error}"));
        let floodgate = Floodgate::start_with_env(&config, flags, env, dir.path());
        wait_for_port(
            floodgate.http_port,
            Duration::from_secs(10),
            "floodgate HTTP",
        );
        let client = rls::connect(&floodgate.grpc_url()).await;
        Served {
            floodgate,
            client,
            _dir: dir,
        }
    }

    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        let answer = rls::call(&mut self.client, request).await;
        answer.unwrap_or_else(|status| {
            panic!(
                "ShouldRateLimit failed: {status}\nfloodgate log:\n{}",
                self.floodgate.process.log_text()
            )
        })
    }

    /// `/json`'s answer to the fixture's request, parsed.
    fn ask_json(&self) -> serde_json::Value {
        let port = self.floodgate.http_port;
        let answer = http_request(port, "POST", "/json", &[], FIXTURE_JSON_REQUEST)
            .unwrap_or_else(|error| panic!("POST /json: {error}"));
        assert_eq!(answer.status, 200, "{answer:?}");
        serde_json::from_str(&answer.body)
            .unwrap_or_else(|error| panic!("/json answered no JSON ({error}): {}", answer.body))
    }
}

/// The Go tests' two limits, `metadata:` on each; `quota` allows `quota_per_hour` calls (1
/// makes a second call find it over, as the Go test's mock answers OVER_LIMIT for it).
fn quota_domain(regular_metadata: &str, quota_metadata: &str, quota_per_hour: u32) -> String {
    format!(
        "domain: quota-domain
descriptors:
  - key: regular
    rate_limit: {{unit: minute, requests_per_unit: 10}}
    metadata: {regular_metadata}
  - key: quota
    quota_mode: true
    rate_limit: {{unit: hour, requests_per_unit: {quota_per_hour}}}
    metadata: {quota_metadata}
"
    )
}

/// The Go tests' request: `[regular=limit]`, `[quota=limit]` (in `order`), hits_addend 1.
fn quota_request(order: [&str; 2]) -> RateLimitRequest {
    let mut request = rls::request(
        "quota-domain",
        &[&[(order[0], "limit")], &[(order[1], "limit")]],
    );
    request.hits_addend = 1;
    request
}

/// The reference's `metadata.yaml`.
fn fixture() -> String {
    let path = repo_file("tests/reference/fixtures/config/metadata.yaml");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// The fixture's two rules, in one request.
fn fixture_request() -> RateLimitRequest {
    rls::request(
        "test-domain",
        &[
            &[("key1", "value1"), ("subkey1", "something")],
            &[("key2", "something")],
        ],
    )
}

const FIXTURE_JSON_REQUEST: &str = r#"{"domain": "test-domain", "descriptors": [
  {"entries": [{"key": "key1", "value": "value1"}, {"key": "subkey1", "value": "something"}]},
  {"entries": [{"key": "key2", "value": "something"}]}]}"#;

fn dynamic_metadata(response: &RateLimitResponse) -> &Struct {
    response
        .dynamic_metadata
        .as_ref()
        .unwrap_or_else(|| panic!("no dynamic_metadata: {response:?}"))
}

fn field<'s>(fields: &'s Struct, name: &str) -> Option<&'s Kind> {
    fields.fields.get(name)?.kind.as_ref()
}

fn text<'s>(fields: &'s Struct, name: &str) -> Option<&'s str> {
    match field(fields, name)? {
        Kind::StringValue(text) => Some(text),
        _ => None,
    }
}

fn inner<'s>(fields: &'s Struct, name: &str) -> Option<&'s Struct> {
    match field(fields, name)? {
        Kind::StructValue(inner) => Some(inner),
        _ => None,
    }
}

/// The merged `metadata:` of the rules that passed.
fn passed_metadata(response: &RateLimitResponse) -> &Struct {
    let metadata = dynamic_metadata(response);
    inner(metadata, "metadata").unwrap_or_else(|| panic!("no passed metadata: {metadata:?}"))
}

fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

fn code(response: &RateLimitResponse, descriptor: usize) -> Code {
    let status = &response.statuses[descriptor];
    Code::try_from(status.code).unwrap_or(Code::Unknown)
}

fn string_value(text: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.to_owned())),
    }
}

fn list_value(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(prost_types::ListValue { values })),
    }
}

/// `{entries: ["key=value", …], code: …}`, as the reference describes a descriptor, with the
/// descriptor's `code` added as envoyproxy/ratelimit's open pull request #1239 proposes (these
/// rules have no `name`, so no `limitName`).
fn described(entries: &[&str], code: &str) -> Value {
    let mut fields = Struct::default();
    let entries = entries.iter().map(|entry| string_value(entry)).collect();
    fields
        .fields
        .insert("entries".to_owned(), list_value(entries));
    fields.fields.insert("code".to_owned(), string_value(code));
    Value {
        kind: Some(Kind::StructValue(fields)),
    }
}

/// TestMetadataReturnedForPassedDescriptors: QUOTA_MODE, the quota descriptor over, the answer
/// OK (one quota of two is over): only the passed descriptor's `metadata:` comes back.
#[tokio::test]
async fn metadata_returned_for_passed_descriptors() {
    let rules = quota_domain("{name: service_1}", "{name: service_2}", 1);
    let env = [
        ("QUOTA_MODE", "true"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ];
    let mut served = Served::start(&rules, &[], &env).await;

    let spends_the_quota = served.ask(quota_request(["regular", "quota"])).await;
    assert_eq!(overall(&spends_the_quota), Code::Ok, "{spends_the_quota:?}");

    let response = served.ask(quota_request(["regular", "quota"])).await;
    assert_eq!(overall(&response), Code::Ok, "{response:?}");
    assert_eq!(code(&response, 1), Code::OverLimit, "{response:?}");
    assert_eq!(text(passed_metadata(&response), "name"), Some("service_1"));

    // The quota descriptor first: were an over-limit descriptor's metadata merged, its name
    // would come first and win.
    let swapped = served.ask(quota_request(["quota", "regular"])).await;
    assert_eq!(overall(&swapped), Code::Ok, "{swapped:?}");
    assert_eq!(code(&swapped, 0), Code::OverLimit, "{swapped:?}");
    assert_eq!(text(passed_metadata(&swapped), "name"), Some("service_1"));
}

/// TestMetadataReturnedForAllPassedDescriptors: both descriptors pass, each rule's names come
/// back; and the request is described as the reference does (domain, entries, hitsAddend).
#[tokio::test]
async fn metadata_returned_for_all_passed_descriptors() {
    let rules = quota_domain("{name: service_1}", "{some_other_name: service_2}", 5);
    let flags = ["--quota-mode", "--response-dynamic-metadata"];
    let mut served = Served::start(&rules, &flags, &[]).await;

    let response = served.ask(quota_request(["regular", "quota"])).await;
    assert_eq!(overall(&response), Code::Ok, "{response:?}");
    let passed = passed_metadata(&response);
    assert_eq!(text(passed, "name"), Some("service_1"));
    assert_eq!(text(passed, "some_other_name"), Some("service_2"));

    let metadata = dynamic_metadata(&response);
    assert_eq!(text(metadata, "domain"), Some("quota-domain"));
    assert_eq!(
        metadata.fields.get("descriptors"),
        Some(&list_value(vec![
            described(&["regular=limit"], "OK"),
            described(&["quota=limit"], "OK")
        ]))
    );
    assert_eq!(field(metadata, "hitsAddend"), Some(&Kind::NumberValue(1.0)));
}

/// TestOverlappingMetadataReturnsTheFirstValue: both rules set `name`; the first descriptor's
/// value wins, whichever rule it is.
#[tokio::test]
async fn overlapping_metadata_returns_the_first_value() {
    let rules = quota_domain("{name: service_1}", "{name: service_2}", 5);
    let flags = ["--quota-mode", "--response-dynamic-metadata"];
    let mut served = Served::start(&rules, &flags, &[]).await;

    let response = served.ask(quota_request(["regular", "quota"])).await;
    assert_eq!(overall(&response), Code::Ok, "{response:?}");
    assert_eq!(text(passed_metadata(&response), "name"), Some("service_1"));

    let swapped = served.ask(quota_request(["quota", "regular"])).await;
    assert_eq!(overall(&swapped), Code::Ok, "{swapped:?}");
    assert_eq!(text(passed_metadata(&swapped), "name"), Some("service_2"));
}

/// The reference's `metadata.yaml` (its TestMetadata loads it): both rules' `metadata:`, a
/// nested one included, in the gRPC answer and, in proto3 JSON (`dynamicMetadata`, as Go's
/// protojson names it), in `/json`'s.
#[tokio::test]
async fn the_metadata_fixture_answers_with_both_rules_metadata() {
    let mut served = Served::start(&fixture(), &["--response-dynamic-metadata"], &[]).await;

    let response = served.ask(fixture_request()).await;
    assert_eq!(overall(&response), Code::Ok, "{response:?}");
    let passed = passed_metadata(&response);
    assert_eq!(text(passed, "name"), Some("service_1"));
    let quota = inner(passed, "service_with_quota");
    assert_eq!(
        quota.and_then(|quota| text(quota, "name")),
        Some("service_2")
    );
    let metadata = dynamic_metadata(&response);
    assert_eq!(field(metadata, "hitsAddend"), None, "0 is left out");

    let json = served.ask_json();
    assert_eq!(
        json["dynamicMetadata"],
        serde_json::json!({
            "domain": "test-domain",
            "descriptors": [
                {"entries": ["key1=value1", "subkey1=something"], "code": "OK"},
                {"entries": ["key2=something"], "code": "OK"}
            ],
            "metadata": {"name": "service_1", "service_with_quota": {"name": "service_2"}}
        }),
        "{json}"
    );
}

/// Without the setting (the reference's default), answers carry no dynamic metadata.
#[tokio::test]
async fn without_the_setting_no_dynamic_metadata_is_returned() {
    let env = [("RESPONSE_DYNAMIC_METADATA", "false")];
    let mut served = Served::start(&fixture(), &[], &env).await;

    let response = served.ask(fixture_request()).await;
    assert_eq!(overall(&response), Code::Ok, "{response:?}");
    assert_eq!(response.dynamic_metadata, None, "{response:?}");
    let json = served.ask_json();
    assert!(json.get("dynamicMetadata").is_none(), "{json}");
}

/// A `detailed_metric` rule and a `value_to_metric` one, each with `metadata:`: the
/// reference's `GetLimit` rebuilds both limits for their stats key (the request's value is in
/// it), with `NewRateLimit`, which takes no metadata.
const STATS_KEYED: &str = "domain: stats-keyed
descriptors:
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {detailed: given}
  - key: valued
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {valued: given}
";

/// The metadata names the answer gave for one call passing both stats-keyed rules.
fn stats_keyed_names(door: Door, flags: &[&str]) -> Vec<String> {
    let flags = [MEMORY, flags].concat();
    let env = [("RESPONSE_DYNAMIC_METADATA", "true")];
    let mut served = serving::Served::start_at(door, Some(STATS_KEYED), &flags, &env);
    let request = rls::request("stats-keyed", &[&[("detailed", "a")], &[("valued", "b")]]);
    let response = served
        .call(request)
        .unwrap_or_else(|status| panic!("ShouldRateLimit failed: {status}"));
    assert_eq!(overall(&response), Code::Ok, "{response:?}");
    match inner(dynamic_metadata(&response), "metadata") {
        Some(passed) => passed.fields.keys().cloned().collect(),
        None => Vec::new(),
    }
}

/// Started as `ratelimit`, the limits the reference rebuilds for their stats give no metadata,
/// as in the reference; `floodgate serve` gives every passed rule's, and so does the door with
/// `--rule-metadata always`.
#[test]
fn limits_rebuilt_for_their_stats_key_give_metadata_only_by_floodgates_choice() {
    let both = ["detailed", "valued"].map(str::to_owned).to_vec();
    assert_eq!(stats_keyed_names(Door::Serve, &[]), both);
    assert_eq!(
        stats_keyed_names(Door::Ratelimit, &[]),
        Vec::<String>::new()
    );
    let always = ["--rule-metadata", "always"];
    assert_eq!(stats_keyed_names(Door::Ratelimit, &always), both);
}
