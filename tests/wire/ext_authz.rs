//! The ext_authz check against the real binary: `envoy.service.auth.v3.Authorization/Check` on
//! the gRPC port and its HTTP form (`/authz/...`) on the HTTP port. Within the limit: OK with the
//! rate-limit headers for the client; over: 429 with `Retry-After` and the profile's body.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse as CheckHttp;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest, CheckResponse};

use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{runtime, tempdir, Floodgate};

const RULES: &str = r#"
domain: edge
descriptors:
  # 2 per hour per path, one back every 30 minutes.
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token_bucket, name: per_path}
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket}
check_profiles:
  default:
    descriptors:
      - entries:
          - {key: path, header: ":path"}
    deny_body: "{\"error\": \"slow down\"}"
  keys:
    hosts: [api.example.com]
    descriptors:
      - entries:
          - {key: api_key, header: X-Api-Key}
"#;

fn check_request(
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    profile: Option<&str>,
) -> CheckRequest {
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    let context_extensions = profile
        .map(|name| HashMap::from([("floodgate_profile".to_owned(), name.to_owned())]))
        .unwrap_or_default();
    CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".to_owned(),
                    path: path.to_owned(),
                    host: host.to_owned(),
                    headers,
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            context_extensions,
            ..AttributeContext::default()
        }),
    }
}

fn check(
    floodgate: &Floodgate,
    checks: Vec<CheckRequest>,
) -> Vec<Result<CheckResponse, tonic::Status>> {
    runtime().block_on(async {
        // Bounded: a floodgate that does not answer fails the test instead of hanging it.
        let channel = tonic::transport::Endpoint::from_shared(floodgate.grpc_url())
            .unwrap_or_else(|error| panic!("url: {error}"))
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let mut client = AuthorizationClient::new(channel);
        let mut answers = Vec::new();
        for check in checks {
            answers.push(client.check(check).await.map(tonic::Response::into_inner));
        }
        answers
    })
}

fn header<'a>(headers: &'a [HeaderValueOption], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .filter_map(|option| option.header.as_ref())
        .find(|header| header.key.eq_ignore_ascii_case(name))
        .map(|header| header.value.as_str())
}

#[test]
fn grpc_check_allows_with_headers_then_denies_with_429() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    let same = || check_request("www.example.com:443", "/orders", &[], None);
    let answers = check(&floodgate, vec![same(), same(), same()]);
    let answers: Vec<CheckResponse> = answers
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|status| panic!("{status:?}\n{}", floodgate.process.log_text()))
        })
        .collect();
    for (answer, remaining) in answers[..2].iter().zip(["1", "0"]) {
        assert_eq!(
            answer.status.as_ref().map(|status| status.code),
            Some(0),
            "{answer:?}"
        );
        let Some(CheckHttp::OkResponse(ok)) = &answer.http_response else {
            panic!("expected an OkHttpResponse: {answer:?}");
        };
        assert!(ok.headers.is_empty(), "headers for the upstream: {ok:?}");
        let headers = &ok.response_headers_to_add;
        assert_eq!(
            header(headers, "x-ratelimit-remaining"),
            Some(remaining),
            "{ok:?}"
        );
        assert_eq!(
            header(headers, "ratelimit-policy"),
            Some("\"per_path\";q=2;w=3600")
        );
    }
    let denied = &answers[2];
    assert_eq!(
        denied.status.as_ref().map(|status| status.code),
        Some(8),
        "{denied:?}"
    );
    let Some(CheckHttp::DeniedResponse(denied)) = &denied.http_response else {
        panic!("expected a DeniedHttpResponse: {denied:?}");
    };
    assert_eq!(denied.status.as_ref().map(|status| status.code), Some(429));
    assert_eq!(denied.body, "{\"error\": \"slow down\"}");
    assert_eq!(
        header(&denied.headers, "retry-after"),
        Some("1800"),
        "{denied:?}"
    );
    assert_eq!(header(&denied.headers, "x-ratelimit-remaining"), Some("0"));
}

#[test]
fn grpc_check_chooses_the_profile_by_name_then_host_then_default() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    let key = [("x-api-key", "k1")];
    let answers = check(
        &floodgate,
        vec![
            // By host: one per hour per key.
            check_request("api.example.com", "/a", &key, None),
            check_request("API.example.com:8443", "/b", &key, None),
            // By name: `keys` on another host, the same key's counter.
            check_request("www.example.com", "/c", &key, Some("keys")),
            // By default: the path's counter is untouched.
            check_request("www.example.com", "/b", &key, None),
            check_request("www.example.com", "/b", &key, Some("nope")),
        ],
    );
    let denied = |answer: &Result<CheckResponse, tonic::Status>| match answer {
        Ok(answer) => answer.status.as_ref().map(|status| status.code) == Some(8),
        Err(status) => panic!("{status:?}"),
    };
    assert!(!denied(&answers[0]));
    assert!(denied(&answers[1]));
    assert!(denied(&answers[2]));
    assert!(!denied(&answers[3]));
    match &answers[4] {
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::NotFound);
            assert!(
                status.message().contains("the profiles are default, keys"),
                "{status:?}"
            );
        }
        Ok(answer) => panic!("an unknown profile was answered: {answer:?}"),
    }
}

fn http(floodgate: &Floodgate, method: &str, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    request(floodgate.http_port, method, path, headers, "")
        .unwrap_or_else(|error| panic!("{method} {path} failed: {error}"))
}

#[test]
fn http_form_answers_envoy_and_forward_auth_with_429() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    // Envoy's HTTP ext_authz: the original method, and path after the path_prefix.
    let first = http(&floodgate, "POST", "/authz/default/orders?id=1", &[]);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    // Caddy's forward_auth: a fixed URI and X-Forwarded-Uri, the same path's counter.
    let forwarded = [
        ("X-Forwarded-Method", "POST"),
        ("X-Forwarded-Uri", "/orders?id=1"),
    ];
    let second = http(&floodgate, "GET", "/authz/default", &forwarded);
    assert_eq!(second.status, 200, "{second:?}");
    assert_eq!(second.header("x-ratelimit-remaining"), Some("0"));
    // `/authz`: the profile chosen by host and path, here the default.
    let third = http(&floodgate, "GET", "/authz", &forwarded);
    assert_eq!(third.status, 429, "{third:?}");
    assert_eq!(third.header("retry-after"), Some("1800"));
    assert_eq!(third.body, "{\"error\": \"slow down\"}");
    let unknown = http(&floodgate, "GET", "/authz/nope/x", &[]);
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert!(
        unknown.body.contains("no check profile \"nope\""),
        "{unknown:?}"
    );
}

#[test]
fn a_failed_store_is_an_error_for_envoys_failure_mode_unless_the_domain_fails_closed() {
    let dir = tempdir();
    // Domain `edge` answers store failures with an error (the default), `strict` refuses.
    let strict = "domain: strict\nfailure_policy: fail_closed\ndescriptors:\n  - key: path\n    \
                  rate_limit: {unit: hour, requests_per_unit: 2}\ncheck_profiles:\n  strict:\n    \
                  descriptors:\n      - entries:\n          - {key: path, header: \":path\"}\n";
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap_or_else(|error| panic!("mkdir: {error}"));
    for (name, text) in [("edge.yaml", RULES), ("strict.yaml", strict)] {
        std::fs::write(config.join(name), text).unwrap_or_else(|error| panic!("write: {error}"));
    }
    // floodgate connects, then Redis is gone: every store call fails.
    let mut redis = RedisServer::start();
    let redis_url = redis.url();
    let floodgate = Floodgate::start(
        &config,
        &[
            "--store",
            "redis",
            "--redis-url",
            &redis_url,
            "--redis-timeout-ms",
            "200",
        ],
        dir.path(),
    );
    // Decided once with Redis up, so the store is past its startup.
    let before = check(
        &floodgate,
        vec![check_request("a.example", "/warm", &[], None)],
    );
    assert!(
        before[0].is_ok(),
        "{before:?}\n{}",
        floodgate.process.log_text()
    );
    redis.kill();
    let answers = check(
        &floodgate,
        vec![
            check_request("www.example.com", "/orders", &[], None),
            check_request("www.example.com", "/orders", &[], Some("strict")),
        ],
    );
    match &answers[0] {
        Err(status) => assert_eq!(
            status.code(),
            tonic::Code::Unavailable,
            "{status:?}\n{}",
            floodgate.process.log_text()
        ),
        Ok(answer) => panic!("a failed store was answered: {answer:?}"),
    }
    match &answers[1] {
        Ok(answer) => assert_eq!(answer.status.as_ref().map(|status| status.code), Some(8)),
        Err(status) => panic!("fail_closed should refuse, not fail: {status:?}"),
    }
    let http = http(&floodgate, "GET", "/authz/default/orders", &[]);
    assert_eq!(http.status, 503, "{http:?}");
}
