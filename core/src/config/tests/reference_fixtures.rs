//! Shapes of envoyproxy/ratelimit's own test fixtures (`test/config/*.yaml`), which must load
//! unchanged and answer as the reference's tests assert.

use super::*;
use crate::algorithm::Quota;
use crate::unit::Unit;

/// Like the reference's `basic_config.yaml`.
const BASIC_CONFIG: &str = r#"
# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10

      # 2nd level key/value with unlimited.
      - key: subkey1
        value: subvalue2
        rate_limit:
          unlimited: true

  # Top level key only default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  # Top level key/value with limit.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30

  # Top level key/value with no limit (whitelisted).
  - key: key2
    value: value3

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1

  - key: key4
    rate_limit:
      unit: day
      requests_per_unit: 1

  # Shadow mode.
  - key: key6
    shadow_mode: true
    rate_limit:
      unit: second
      requests_per_unit: 0

  - key: key7
    rate_limit:
      unit: week
      requests_per_unit: 1
    quota_mode: true

  - key: key8
    detailed_metric: true
    rate_limit:
      unit: MONTH
      requests_per_unit: 100
      name: monthly
"#;

fn basic() -> RuleSet {
    let rules = loaded(BASIC_CONFIG);
    assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
    rules
}

fn limit(rules: &RuleSet, pairs: &[(&str, &str)]) -> Option<(u32, Unit)> {
    matched(rules, "test-domain", pairs).and_then(|found| {
        found
            .rule
            .limits
            .first()
            .map(|q| (q.requests_per_unit, q.unit))
    })
}

#[test]
fn basic_config_loads_and_answers_like_the_reference() {
    let rules = basic();
    assert_eq!(limit(&rules, &[("key1", "value1")]), None);
    assert_eq!(
        limit(&rules, &[("key1", "value1"), ("subkey1", "something")]),
        Some((5, Unit::Second))
    );
    assert_eq!(
        limit(&rules, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some((10, Unit::Second))
    );
    let Some(unlimited) = matched(
        &rules,
        "test-domain",
        &[("key1", "value1"), ("subkey1", "subvalue2")],
    ) else {
        panic!("the unlimited rule should match");
    };
    assert!(unlimited.rule.unlimited);
    assert_eq!(limit(&rules, &[("key1", "value2"), ("subkey1", "x")]), None);
    assert_eq!(
        limit(&rules, &[("key2", "value1")]),
        Some((20, Unit::Minute))
    );
    assert_eq!(
        limit(&rules, &[("key2", "value2")]),
        Some((30, Unit::Minute))
    );
    assert_eq!(limit(&rules, &[("key2", "value3")]), None);
    assert_eq!(limit(&rules, &[("key2", "value2"), ("subkey", "x")]), None);
    assert_eq!(limit(&rules, &[("key3", "")]), Some((1, Unit::Hour)));
    assert_eq!(limit(&rules, &[("key4", "x")]), Some((1, Unit::Day)));
    assert_eq!(limit(&rules, &[("key7", "x")]), Some((1, Unit::Week)));
    assert_eq!(limit(&rules, &[("key8", "x")]), Some((100, Unit::Month)));
}

#[test]
fn basic_config_flags_and_names() {
    let rules = basic();
    assert!(rule_at(&rules, "test-domain", "test-domain.key6").shadow_mode);
    assert!(rule_at(&rules, "test-domain", "test-domain.key7").quota_mode);
    let key8 = rule_at(&rules, "test-domain", "test-domain.key8");
    assert!(key8.detailed_metric);
    assert_eq!(key8.name.as_deref(), Some("monthly"));
    assert_eq!(
        rule_at(
            &rules,
            "test-domain",
            "test-domain.key1_value1.subkey1_subvalue1"
        )
        .limits,
        vec![Quota::new(10, Unit::Second)]
    );
    assert_eq!(rules.rule_count(), 10);
}

#[test]
fn the_reference_error_fixtures_are_refused_with_the_reference_messages() {
    let cases: [(&str, &str); 11] = [
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: [\n", "error loading config file"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    0.25: x\n", "config error, key is not of type string: 0.25"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    ratelimit:\n      unit: day\n", "config error, unknown key 'ratelimit'"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", "config error, unknown key 'requestsperunit'"),
        ("domain: test-domain\ndescriptors:\n  - a\n  - b\n", "config error, yaml file contains list of type other than map: a"),
        ("descriptors:\n  - key: key1\n", "config file cannot have empty domain"),
        ("domain: test-domain\ndescriptors:\n  - value: value1\n", "descriptor has empty key"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n", "duplicate descriptor composite key 'test-domain.key1_value1'"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n", "invalid rate limit unit 'foo'"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: day\n      unlimited: true\n", "should not specify rate limit unit when unlimited"),
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n      name: self\n      replaces:\n        - name: self\n", "replaces should not contain name of same descriptor"),
    ];
    for (text, start) in cases {
        let errors = errors_of(text);
        assert!(
            errors.iter().any(|error| error.message.starts_with(start)),
            "expected '{start}' for:\n{text}\ngot:\n{}",
            lines(&errors)
        );
    }
}

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
