//! `floodgate check --explain`: offline, from --config, each level and the reason for the
//! outcome, for the nested-matching cases users ask about.

use floodgate_testkit as common;

use std::process::Command;

const RULES: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit: {unit: second, requests_per_unit: 10, name: api_per_client}
      - key: client_id
        value: internal
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: "/export/*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: vip
    rate_limit: {unit: minute, requests_per_unit: 1000, replaces: [{name: api_per_client}]}
"#;

fn explain(args: &[&str]) -> (Option<i32>, String) {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = temp.path().join("edge.yaml");
    std::fs::write(&file, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let output = Command::new(common::floodgate_bin())
        .args(["check", "--explain", "--config"])
        .arg(&file)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("run floodgate: {error}"));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr),
    )
}

#[test]
fn each_level_and_the_rule_are_named() {
    let (code, text) = explain(&["--domain", "edge", "generic_key=api,client_id=alice"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("offline"), "{text}");
    assert!(
        text.contains("generic_key=api: exact value -> edge.generic_key_api"),
        "{text}"
    );
    assert!(
        text.contains("client_id=alice: key-only descriptor"),
        "{text}"
    );
    assert!(
        text.contains("=> limited by edge.generic_key_api.client_id"),
        "{text}"
    );
}

#[test]
fn the_nested_matching_surprises_are_explained() {
    let (code, text) = explain(&[
        "--domain",
        "edge",
        "generic_key=api,client_id=internal",
        "generic_key=api,path=/x",
        "generic_key=api",
        "path=/export/a",
        "path=/export/a,extra=1",
        "unknown=1",
    ]);
    assert_eq!(code, Some(0), "{text}");
    // A value-specific node without a limit exempts the value.
    assert!(text.contains("whitelists"), "{text}");
    // No backtracking from generic_key=api to the key-only generic_key.
    assert!(
        text.contains("would have led to rule edge.generic_key.path"),
        "{text}"
    );
    assert!(text.contains("never goes back"), "{text}");
    // A node without a limit whose children need one more entry.
    assert!(text.contains("need one more entry"), "{text}");
    // A wildcard.
    assert!(text.contains("wildcard \"/export/*\""), "{text}");
    // Too deep.
    assert!(text.contains("the depth must match exactly"), "{text}");
    // No such key.
    assert!(
        text.contains("no descriptor with key \"unknown\""),
        "{text}"
    );
}

#[test]
fn replaces_and_unknown_domains_are_explained() {
    let (_, text) = explain(&["--domain", "edge", "generic_key=api,client_id=a", "vip=1"]);
    assert!(text.contains("not counted: edge.vip"), "{text}");
    let (code, text) = explain(&["--domain", "nope", "a=1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("domain \"nope\": no rules"), "{text}");
    assert!(text.contains("\"edge\""), "{text}");
}

#[test]
fn a_broken_configuration_is_reported() {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = temp.path().join("bad.yaml");
    std::fs::write(&file, "domain: [\n").unwrap_or_else(|error| panic!("write: {error}"));
    let output = Command::new(common::floodgate_bin())
        .args(["check", "--explain", "--config"])
        .arg(&file)
        .args(["--domain", "x", "a=1"])
        .output()
        .unwrap_or_else(|error| panic!("run floodgate: {error}"));
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("bad.yaml"));
}
