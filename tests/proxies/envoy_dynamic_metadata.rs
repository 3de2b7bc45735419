//! Which rule fired, in Envoy's access log: with `--response-dynamic-metadata`, a real Envoy 1.40
//! stores floodgate's `dynamic_metadata` under its ratelimit filter's namespace, and an access log
//! printing `%DYNAMIC_METADATA(envoy.filters.http.ratelimit)%` shows the domain, the descriptors
//! (each with its `code` and, when its rule is named, its `limitName`, as envoyproxy/ratelimit's
//! open pull request #1239 proposes) and the `metadata:` of the rules that passed, on an allowed
//! and on a rejected request. Without the setting the log shows none.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use floodgate_testkit::{tempdir, Floodgate};

use super::envoy_e2e::{call, start_envoy};

/// One call per hour per client, so that alice's second call is over; a shared budget that
/// passes; and between them the per-IP descriptor of the bootstrap, which matches no rule.
const RULES: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit: {name: per_client, unit: hour, requests_per_unit: 1}
        metadata: {rule: per_client, team: {owner: payments}}
  - key: generic_key
    value: global
    rate_limit: {unit: hour, requests_per_unit: 1000}
    metadata: {budget: global}
"#;

/// Envoy writes access log files every 10 s by default; a test reads them sooner.
const FLUSH_EVERY_100_MS: [&str; 2] = ["--file-flush-interval-msec", "100"];

/// How long Envoy may take to write its log lines.
const LOG_TIMEOUT: Duration = Duration::from_secs(15);

/// The bootstrap's edge listener with a file access log at `path`: the status, then the
/// ratelimit filter's dynamic metadata (JSON, or `-` when there is none).
fn with_access_log(bootstrap: String, path: &Path) -> String {
    let access_log = format!(
        "stat_prefix: edge
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: {}
              log_format:
                text_format_source:
                  inline_string: \"%RESPONSE_CODE% %DYNAMIC_METADATA(envoy.filters.http.ratelimit)%\\n\"
",
        path.display()
    );
    assert!(
        bootstrap.contains("stat_prefix: edge\n"),
        "deploy/envoy/envoy.yaml changed: no edge listener to log"
    );
    bootstrap.replacen("stat_prefix: edge\n", &access_log, 1)
}

/// The log's first `count` lines, each split into its status and its metadata text.
fn log_lines(path: &Path, count: usize, floodgate: &Floodgate) -> Vec<(u16, String)> {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() >= count {
            return lines
                .iter()
                .take(count)
                .map(|line| {
                    let (status, metadata) = line
                        .split_once(' ')
                        .unwrap_or_else(|| panic!("not `<status> <metadata>`: {line:?}"));
                    let status = status
                        .parse()
                        .unwrap_or_else(|error| panic!("status {status:?}: {error}"));
                    (status, metadata.to_owned())
                })
                .collect();
        }
        assert!(
            started.elapsed() < LOG_TIMEOUT,
            "{count} access log lines expected, found {text:?}\nfloodgate log:\n{}",
            floodgate.process.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn metadata_json(text: &str) -> serde_json::Value {
    serde_json::from_str(text)
        .unwrap_or_else(|error| panic!("the logged metadata is no JSON ({error}): {text}"))
}

/// Floodgate (with `flags`) behind Envoy with the access log; alice calls twice.
fn two_calls_logged(flags: &[&str]) -> Vec<(u16, String)> {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, flags);
    let log: PathBuf = dir.path().join("access.log");
    let envoy = start_envoy(
        floodgate.grpc_port,
        dir.path(),
        // Fail closed so that an RLS error shows up as a 500, never as a silent 200.
        |text| {
            with_access_log(text, &log)
                .replace("failure_mode_deny: false", "failure_mode_deny: true")
        },
        &FLUSH_EVERY_100_MS,
    );
    let allowed = call(&envoy, "alice");
    assert_eq!(allowed.status, 200, "{allowed:?}");
    let rejected = call(&envoy, "alice");
    assert_eq!(rejected.status, 429, "{rejected:?}");
    log_lines(&log, 2, &floodgate)
}

#[test]
fn envoy_logs_the_domain_descriptors_and_metadata_of_the_rules_that_passed() {
    let lines = two_calls_logged(&["--response-dynamic-metadata"]);
    // The client's descriptor names the rule that decided it (`per_client`); the per-IP one
    // matches no rule and the global budget's rule has no name, so they name none.
    let descriptors = |client_code: &str| {
        serde_json::json!([
            {"entries": ["generic_key=api", "client_id=alice"], "code": client_code,
             "limitName": "per_client"},
            {"entries": ["remote_address=127.0.0.1"], "code": "OK"},
            {"entries": ["generic_key=global"], "code": "OK"}
        ])
    };
    let logged = |client_code: &str, metadata| {
        serde_json::json!({
            "domain": "edge",
            "descriptors": descriptors(client_code),
            "metadata": metadata
        })
    };
    let both_passed = serde_json::json!({
        "rule": "per_client",
        "team": {"owner": "payments"},
        "budget": "global"
    });
    // per_client is over: only the shared budget passed.
    let only_the_budget_passed = serde_json::json!({"budget": "global"});
    let expected = [
        (200, logged("OK", both_passed)),
        (429, logged("OVER_LIMIT", only_the_budget_passed)),
    ];
    let found: Vec<(u16, serde_json::Value)> = lines
        .iter()
        .map(|(status, text)| (*status, metadata_json(text)))
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn without_the_setting_envoy_logs_no_rate_limit_metadata() {
    let lines = two_calls_logged(&[]);
    assert_eq!(lines, [(200, "-".to_owned()), (429, "-".to_owned())]);
}
