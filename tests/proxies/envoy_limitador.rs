//! End to end with the real Envoy 1.40 binary and a Limitador limits file: Envoy's http
//! ratelimit filter sends the README bootstrap's domain `edge`, which is the file's namespace, so
//! floodgate answers from Limitador's limits (CEL over the descriptors): 200 until the limit,
//! then 429, each client counted apart.

use floodgate_testkit::Floodgate;

use super::envoy_e2e::{call, start_envoy_failing_closed};

/// Three an hour per client, as Limitador's file writes it.
const LIMITS: &str = r#"
- namespace: edge
  max_value: 3
  seconds: 3600
  name: per-client
  conditions:
  - "descriptors[0].generic_key == 'api'"
  variables:
  - descriptors[0].client_id
"#;

#[test]
fn envoy_is_limited_by_limitadors_limits_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITS).unwrap_or_else(|error| panic!("write limits: {error}"));
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let limits_flag = limits.display().to_string();
    let floodgate = Floodgate::start(&rules, &["--limitador-limits", &limits_flag], dir.path());
    let envoy = start_envoy_failing_closed(floodgate.grpc_port, dir.path());
    for _ in 0..3 {
        let response = call(&envoy, "alice");
        assert_eq!(
            response.status,
            200,
            "{response:?}\nfloodgate log:\n{}",
            floodgate.process.log_text()
        );
    }
    let rejected = call(&envoy, "alice");
    assert_eq!(rejected.status, 429, "{rejected:?}");
    assert_eq!(rejected.header("x-envoy-ratelimited"), Some("true"));
    assert_eq!(call(&envoy, "bob").status, 200);
}
