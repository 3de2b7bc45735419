//! Shapes of envoyproxy/ratelimit's README examples, which must load unchanged and answer as
//! the README says. Its own test fixtures (`test/config/*.yaml`) are loaded, case by case as
//! its `config_test.go` does, by the `reference` test binary (`tests/reference/config_suite.rs`).

use super::*;

#[test]
fn the_reference_readme_wildcard_and_share_threshold_examples_load() {
    let rules = loaded(
        r#"
domain: example11
descriptors:
  - key: route
    value: "api/*"
    value_to_metric: true
    share_threshold: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 10
  - key: files
    value: "files/*/1234"
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 100
"#,
    );
    let Some(found) = matched(
        &rules,
        "example11",
        &[("route", "api/v1"), ("method", "GET")],
    ) else {
        panic!("should match");
    };
    assert_eq!(found.rule.path, "example11.route_api/*.method");
    assert!(found.config_path[0].value_to_metric);
    assert_eq!(
        rule_path(&rules, "example11", &[("files", "files/a/1234")]).as_deref(),
        Some("example11.files_files/*/1234")
    );
}
