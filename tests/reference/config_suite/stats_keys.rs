//! The reference's stats keys (`rl.Stats.Key`, `rl.FullKey`): `TestDetailedMetric`, the
//! `TestValueToMetric_*` cases and `TestWildcardStatsBehavior` (`TestShareThreshold` is in
//! `share_threshold`).
//!
//! floodgate builds the reference's key in its core (`core::decision::outcome::stats_key`) for the
//! reference's metric names (`ratelimit_service_rate_limit_*`, on `USE_PROMETHEUS`'s
//! listener); it has one key where the reference has two (`FullKey`, used in its logs, and
//! `Stats.Key`), so the two cannot disagree. floodgate's own `rule` label stays the config
//! path (or with `detailed_metric` the request's values); the last case checks it against a
//! real `/metrics`.

use super::{inline, limit, own_counters, stats_key};
use crate::serving::{counted, Served, MEMORY};
use floodgate_core::ground::unit::Unit;
use floodgate_core::policy::rules::RuleSet;

/// The rule found for `pairs` has `expected` as its limit and `key` as its stats key.
#[track_caller]
fn assert_limit_and_key(
    rules: &RuleSet,
    domain: &str,
    pairs: &[(&str, &str)],
    expected: (u32, Unit),
    key: &str,
) {
    assert_eq!(limit(rules, domain, pairs), expected, "{pairs:?}");
    assert_eq!(stats_key(rules, domain, pairs), key, "{pairs:?}");
}

/// `key-1` (100/min) with `key-2` (5/min) below it, each with `detailed_metric` or not.
fn nested(top_detailed: bool, leaf_detailed: bool) -> RuleSet {
    inline(&format!(
        "domain: nested\n\
         descriptors:\n\
         \x20 - key: key-1\n\
         \x20   detailed_metric: {top_detailed}\n\
         \x20   rate_limit: {{unit: minute, requests_per_unit: 100}}\n\
         \x20   descriptors:\n\
         \x20     - key: key-2\n\
         \x20       detailed_metric: {leaf_detailed}\n\
         \x20       rate_limit: {{unit: minute, requests_per_unit: 5}}\n"
    ))
}

/// The reference's `realisticExampleConfig`.
const REALISTIC: &str = r#"
domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
"#;

#[test]
fn config_test_detailed_metric() {
    let top_only = [("key-1", "value-1")];
    let both = [("key-1", "value-1"), ("key-2", "value-2")];
    assert_eq!(
        stats_key(&nested(true, false), "nested", &top_only),
        "nested.key-1_value-1"
    );
    assert_eq!(
        stats_key(&nested(false, false), "nested", &top_only),
        "nested.key-1"
    );
    assert_eq!(
        stats_key(&nested(true, true), "nested", &both),
        "nested.key-1_value-1.key-2_value-2"
    );
    assert_eq!(
        stats_key(&nested(false, false), "nested", &both),
        "nested.key-1.key-2"
    );

    let realistic = inline(REALISTIC);
    let cases: [(&[(&str, &str)], &str); 3] = [
        (
            &[("key_1", "value-for-key-1")],
            "nested.key_1_value-for-key-1",
        ),
        (&[("key_2", "key-2-value")], "nested.key_2_key-2-value"),
        (
            &[("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
            "nested.key_2_key-2-value.key_3_requested-key3-value",
        ),
    ];
    for (pairs, key) in cases {
        assert_eq!(stats_key(&realistic, "nested", pairs), key, "{pairs:?}");
    }
}

/// `route` → `http_method` → `subject_id` (60/min) in `domain`, `value_to_metric` on the first
/// two levels, `detailed_metric` on the leaf or not.
fn route_method_subject(domain: &str, flags: bool, leaf_detailed: bool) -> RuleSet {
    inline(&format!(
        "domain: {domain}\n\
         descriptors:\n\
         \x20 - key: route\n\
         \x20   value_to_metric: {flags}\n\
         \x20   descriptors:\n\
         \x20     - key: http_method\n\
         \x20       value_to_metric: {flags}\n\
         \x20       descriptors:\n\
         \x20         - key: subject_id\n\
         \x20           detailed_metric: {leaf_detailed}\n\
         \x20           rate_limit: {{unit: minute, requests_per_unit: 60}}\n"
    ))
}

const DRAW_GET_123: [(&str, &str); 3] = [
    ("route", "draw"),
    ("http_method", "GET"),
    ("subject_id", "123"),
];

#[test]
fn config_test_value_to_metric_uses_runtime_values_in_stats() {
    let rules = route_method_subject("domain", true, false);
    assert_limit_and_key(
        &rules,
        "domain",
        &DRAW_GET_123,
        (60, Unit::Minute),
        "domain.route_draw.http_method_GET.subject_id",
    );
}

#[test]
fn config_test_value_to_metric_default_key_includes_value_at_that_level() {
    let rules = inline(
        "domain: d\ndescriptors:\n  - key: k1\n    value_to_metric: true\n    descriptors:\n      \
         - key: k2\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let pairs = [("k1", "A"), ("k2", "foo")];
    assert_limit_and_key(&rules, "d", &pairs, (1, Unit::Second), "d.k1_A.k2");
}

#[test]
fn config_test_value_to_metric_mid_level_only() {
    let rules = inline(
        "domain: d\ndescriptors:\n  - key: k1\n    descriptors:\n      - key: k2\n        \
         value_to_metric: true\n        descriptors:\n          - key: k3\n            \
         rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let pairs = [("k1", "X"), ("k2", "Y"), ("k3", "Z")];
    assert_limit_and_key(&rules, "d", &pairs, (1, Unit::Second), "d.k1.k2_Y.k3");
}

#[test]
fn config_test_value_to_metric_no_flag_unchanged() {
    let rules = inline(
        "domain: d\ndescriptors:\n  - key: k1\n    descriptors:\n      - key: k2\n        \
         rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_eq!(
        stats_key(&rules, "d", &[("k1", "X"), ("k2", "Y")]),
        "d.k1.k2"
    );
}

#[test]
fn config_test_value_to_metric_does_not_override_detailed_metric() {
    let rules = route_method_subject("domain", true, true);
    assert_eq!(
        stats_key(&rules, "domain", &DRAW_GET_123),
        "domain.route_draw.http_method_GET.subject_id_123"
    );
}

#[test]
fn config_test_value_to_metric_with_configured_values() {
    let rules = inline(
        r#"
domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 30}
"#,
    );
    for (method, requests) in [("GET", 60), ("POST", 30)] {
        let pairs = [
            ("route", "api"),
            ("http_method", method),
            ("subject_id", "user123"),
        ];
        assert_limit_and_key(
            &rules,
            "test-domain",
            &pairs,
            (requests, Unit::Minute),
            &format!("test-domain.route_api.http_method_{method}.subject_id"),
        );
    }
}

#[test]
fn config_test_value_to_metric_with_wildcard() {
    let rules = inline(
        r#"
domain: domain
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: "read*"
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
"#,
    );
    let alice = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    let bob = [
        ("user", "bob"),
        ("action", "readdata"),
        ("resource", "database"),
    ];
    for (pairs, key) in [
        (&alice, "domain.user_alice.action_readfile.resource"),
        (&bob, "domain.user_bob.action_readdata.resource"),
    ] {
        assert_limit_and_key(&rules, "domain", pairs, (100, Unit::Minute), key);
    }
    // Without share_threshold every value of the wildcard counts apart.
    own_counters(&rules, "domain", &alice, &bob);
}

/// An empty value adds no `_`.
#[test]
fn config_test_value_to_metric_with_empty_value() {
    let rules = route_method_subject("domain", true, false);
    for (route, method, key) in [
        ("", "GET", "domain.route.http_method_GET.subject_id"),
        ("draw", "", "domain.route_draw.http_method.subject_id"),
        ("", "", "domain.route.http_method.subject_id"),
    ] {
        let pairs = [
            ("route", route),
            ("http_method", method),
            ("subject_id", "123"),
        ];
        assert_limit_and_key(&rules, "domain", &pairs, (60, Unit::Minute), key);
    }
}

/// floodgate has one stats key per descriptor, so `FullKey` and `Stats.Key` cannot differ.
#[test]
fn config_test_value_to_metric_full_key_matches_stats_key() {
    let pairs = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "user123"),
    ];
    let flagged = route_method_subject("test-domain", true, false);
    assert_limit_and_key(
        &flagged,
        "test-domain",
        &pairs,
        (60, Unit::Minute),
        "test-domain.route_api.http_method_GET.subject_id",
    );
    assert_eq!(
        stats_key(
            &route_method_subject("test-domain-2", false, false),
            "test-domain-2",
            &pairs
        ),
        "test-domain-2.route.http_method.subject_id"
    );
    assert_eq!(
        stats_key(
            &route_method_subject("test-domain-3", false, true),
            "test-domain-3",
            &pairs
        ),
        "test-domain-3.route_api.http_method_GET.subject_id_user123"
    );
}

/// `wild` (20/min) with `value` and `flags` (YAML fields), in `test-domain`.
fn wild(value: &str, flags: &str) -> RuleSet {
    inline(&format!(
        "domain: test-domain\ndescriptors:\n  - key: wild\n    value: \"{value}\"\n{flags}    \
         rate_limit: {{unit: minute, requests_per_unit: 20}}\n"
    ))
}

/// Without `value_to_metric` on the wildcard, or with share_threshold over it, the key keeps
/// the pattern; with `value_to_metric` (and no share_threshold) it has the request's value.
#[test]
fn config_test_wildcard_stats_behavior() {
    let foo1 = [("wild", "foo1")];
    for flags in [
        "",
        "    share_threshold: true\n",
        "    share_threshold: true\n    value_to_metric: true\n",
    ] {
        assert_eq!(
            stats_key(&wild("foo*", flags), "test-domain", &foo1),
            "test-domain.wild_foo*",
            "{flags}"
        );
    }
    let flagged = wild("foo*", "    value_to_metric: true\n");
    assert_limit_and_key(
        &flagged,
        "test-domain",
        &foo1,
        (20, Unit::Minute),
        "test-domain.wild_foo1",
    );

    let other = inline(
        "domain: test-domain\ndescriptors:\n  - key: wild\n    value: \"foo*\"\n    descriptors:\n      \
         - key: other\n        value_to_metric: true\n        descriptors:\n          - key: limit\n            \
         rate_limit: {unit: minute, requests_per_unit: 20}\n",
    );
    let nested = [("wild", "foo1"), ("other", "bar"), ("limit", "X")];
    assert_limit_and_key(
        &other,
        "test-domain",
        &nested,
        (20, Unit::Minute),
        "test-domain.wild_foo*.other_bar.limit",
    );

    let middle = wild("foo*bar*", "");
    for pairs in [[("wild", "foo123bar456")], [("wild", "fooXbarY")]] {
        assert_eq!(
            stats_key(&middle, "test-domain", &pairs),
            "test-domain.wild_foo*bar*"
        );
    }
    let middle_flagged = wild("foo*bar*", "    value_to_metric: true\n");
    let pairs = [("wild", "foo123bar456")];
    assert_limit_and_key(
        &middle_flagged,
        "test-domain",
        &pairs,
        (20, Unit::Minute),
        "test-domain.wild_foo123bar456",
    );
}

/// Keys without request values are also the `rule` labels of floodgate's own metrics on a
/// real `/metrics`, and the reference's `domain_not_found` is
/// `floodgate_calls_total{decision="unknown"}`.
#[test]
fn config_test_stats_keys_are_the_rule_labels_of_floodgate_metrics() {
    let fixture = |name| super::fixture(name).text;
    let allowed = |served: &Served, rule: &str| {
        counted(
            &served.metrics(),
            "floodgate_requests_allowed_total",
            &[("domain", "test-domain"), ("rule", rule)],
        )
    };

    let mut basic = Served::start(Some(&fixture("basic_config.yaml")), MEMORY, &[]);
    basic.answer(
        "test-domain",
        &[&[("key1", "value1"), ("subkey1", "something")]],
    );
    basic.answer("test-domain", &[&[("key7", "another_value")]]);
    basic.answer("foo_domain", &[&[("key1", "value1")]]);
    assert_eq!(allowed(&basic, "test-domain.key1_value1.subkey1"), 1.0);
    assert_eq!(allowed(&basic, "test-domain.key7_another_value"), 1.0);
    let calls = basic.metrics();
    assert_eq!(
        counted(&calls, "floodgate_calls_total", &[("decision", "unknown")]),
        1.0
    );

    let mut shared = Served::start(Some(&fixture("share_threshold.yaml")), MEMORY, &[]);
    shared.answer("test-domain", &[&[("files", "files/a.pdf")]]);
    shared.answer("test-domain", &[&[("files", "files/b.csv")]]);
    shared.answer(
        "test-domain",
        &[&[("service", "svc/user"), ("endpoint", "get")]],
    );
    assert_eq!(allowed(&shared, "test-domain.files_files/*"), 2.0);
    assert_eq!(
        allowed(&shared, "test-domain.service_svc/*.endpoint_get"),
        1.0
    );
}
