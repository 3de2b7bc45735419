//! End to end with the real Envoy 1.40 binary: Envoy's http ratelimit filter → floodgate over
//! gRPC → 200 until the limit, then 429 with Envoy's `x-ratelimit-*` headers and floodgate's.

use std::path::Path;

use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::http::{get, HttpResponse};
use floodgate_testkit::{free_port, repo_file, Floodgate};

/// Starts Envoy with the README's bootstrap (`deploy/envoy/envoy.yaml`) changed by `edit`, its
/// ports moved to free ones and its rate-limit cluster pointed at `rls_port`; `extra` goes on
/// Envoy's command line.
pub(super) fn start_envoy(
    rls_port: u16,
    dir: &Path,
    edit: impl Fn(String) -> String,
    extra: &[&str],
) -> Envoy {
    let template = std::fs::read_to_string(repo_file("deploy/envoy/envoy.yaml"))
        .unwrap_or_else(|error| panic!("cannot read deploy/envoy/envoy.yaml: {error}"));
    let (edge, direct, admin) = (free_port(), free_port(), free_port());
    let bootstrap = edit(template)
        .replace("port_value: 10000", &format!("port_value: {edge}"))
        .replace("port_value: 10001", &format!("port_value: {direct}"))
        .replace("port_value: 9901", &format!("port_value: {admin}"))
        .replace("port_value: 8081", &format!("port_value: {rls_port}"));
    Envoy::start_with_args(&bootstrap, "envoy.yaml", dir, &[edge, direct], extra)
}

/// Envoy as `start_envoy` starts it, failing closed: an RLS error shows up as a 500, never as a
/// silent 200.
pub(super) fn start_envoy_failing_closed(rls_port: u16, dir: &Path) -> Envoy {
    start_envoy(
        rls_port,
        dir,
        |text| text.replace("failure_mode_deny: false", "failure_mode_deny: true"),
        &[],
    )
}

pub(super) fn call(envoy: &Envoy, client: &str) -> HttpResponse {
    get(envoy.port, "/", &[("x-client-id", client)])
        .unwrap_or_else(|error| panic!("request through envoy failed: {error}"))
}

/// A rule set whose numbers do not depend on timing: 3 per hour per client.
const THREE_PER_HOUR: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit:
          name: per_client
          unit: hour
          requests_per_unit: 3
          algorithm: token_bucket
"#;

#[test]
fn envoy_gets_429_with_both_sets_of_headers_after_the_limit() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, THREE_PER_HOUR).unwrap_or_else(|error| panic!("write config: {error}"));
    let floodgate = Floodgate::start(&config, &["--response-headers", "ietf"], dir.path());
    let envoy = start_envoy_failing_closed(floodgate.grpc_port, dir.path());

    for expected_remaining in ["2", "1", "0"] {
        let response = call(&envoy, "alice");
        assert_eq!(
            response.status,
            200,
            "{response:?}\nfloodgate log:\n{}",
            floodgate.process.log_text()
        );
        assert_eq!(
            response.header("x-ratelimit-remaining"),
            Some(expected_remaining)
        );
        assert_eq!(
            response.header("x-ratelimit-limit"),
            Some("3, 3;w=3600;name=\"per_client\"")
        );
        assert_eq!(
            response.header("ratelimit-policy"),
            Some("\"per_client\";q=3;w=3600")
        );
    }
    let rejected = call(&envoy, "alice");
    assert_eq!(rejected.status, 429, "{rejected:?}");
    assert_eq!(rejected.header("x-envoy-ratelimited"), Some("true"));
    assert_eq!(rejected.header("x-ratelimit-remaining"), Some("0"));
    // One token comes back every 1200 s.
    let retry_after: i64 = rejected
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After on the 429: {rejected:?}"));
    assert!((1199..=1200).contains(&retry_after), "{rejected:?}");
    assert_eq!(
        rejected
            .header("x-ratelimit-reset")
            .and_then(|v| v.parse::<i64>().ok()),
        Some(retry_after)
    );
    let state = rejected.header("ratelimit").unwrap_or_default();
    assert!(state.starts_with("\"per_client\";r=0;t="), "{rejected:?}");

    // Counters are per client: bob is untouched by alice's rejection.
    let bob = call(&envoy, "bob");
    assert_eq!(bob.status, 200, "{bob:?}");
    assert_eq!(bob.header("x-ratelimit-remaining"), Some("2"));
}

#[test]
fn readme_quick_start_config_rate_limits_through_envoy() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start(
        &repo_file("config"),
        &["--response-headers", "ietf"],
        dir.path(),
    );
    let envoy = start_envoy(floodgate.grpc_port, dir.path(), |text| text, &[]);

    // config/edge.yaml: 10 r/s per client with a burst of 20. Sent back to back, the first 20
    // pass; well before 60 the bucket runs dry because requests outpace 10 per second.
    let mut statuses = Vec::new();
    let mut first_rejection = None;
    for _ in 0..60 {
        let response = call(&envoy, "carol");
        statuses.push(response.status);
        if response.status == 429 {
            first_rejection = Some(response);
            break;
        }
    }
    assert!(
        statuses.len() > 20,
        "rejected within the burst: {statuses:?}"
    );
    assert!(statuses.iter().take(20).all(|s| *s == 200), "{statuses:?}");
    let rejected = first_rejection.unwrap_or_else(|| {
        panic!(
            "no 429 in 60 requests: {statuses:?}\n{}",
            floodgate.process.log_text()
        )
    });
    assert_eq!(rejected.header("x-envoy-ratelimited"), Some("true"));
    assert!(
        rejected.header("x-ratelimit-limit").is_some(),
        "{rejected:?}"
    );
    assert_eq!(rejected.header("retry-after"), Some("1"), "{rejected:?}");
    assert!(
        rejected.header("ratelimit-policy").is_some(),
        "{rejected:?}"
    );
}
