//! The reference's format, field by field, as it lands in `Rule`.

use super::*;
use crate::arithmetic::algorithm::Quota;
use crate::ground::metadata::MetadataValue;
use crate::ground::unit::Unit;
use crate::policy::rules::PathLevel;

#[test]
fn a_minimal_rule() {
    let rules = loaded(
        "domain: edge\n\
         descriptors:\n\
         \x20 - key: remote_address\n\
         \x20   rate_limit:\n\
         \x20     unit: second\n\
         \x20     requests_per_unit: 10\n",
    );
    let rule = rule_at(&rules, "edge", "edge.remote_address");
    assert_eq!(
        rule,
        &Rule {
            path: "edge.remote_address".to_owned(),
            index: 0,
            config_path: Box::new([PathLevel {
                key: "remote_address".into(),
                value: None,
                value_to_metric: false,
                share_threshold: false,
            }]),
            source: FILE.into(),
            name: None,
            replaces: Vec::new(),
            limits: vec![Quota::new(10, Unit::Second)],
            unlimited: false,
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            value_to_metric: false,
            share_threshold: false,
            has_descriptors: false,
            metadata: None,
            adaptive: None,
            priority: None,
            concurrency: None,
            ban: None,
            hitter_values: Default::default(),
        }
    );
    assert_eq!(rules.rule_count(), 1);
    assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
}

#[test]
fn units_are_case_insensitive_and_include_week_month_year() {
    let text = "domain: d\ndescriptors:\n".to_owned()
        + &[
            ("a", "second"),
            ("b", "MINUTE"),
            ("c", "Hour"),
            ("d", "day"),
            ("e", "week"),
            ("f", "month"),
            ("g", "YEAR"),
        ]
        .iter()
        .map(|(key, unit)| {
            format!("  - key: {key}\n    rate_limit: {{unit: {unit}, requests_per_unit: 1}}\n")
        })
        .collect::<String>();
    let rules = loaded(&text);
    let units: Vec<Unit> = domain(&rules, "d")
        .rules()
        .map(|rule| rule.limits[0].unit)
        .collect();
    assert_eq!(units, Unit::ALL.to_vec());
}

#[test]
fn paths_join_key_or_key_value_per_level() {
    let rules = loaded(
        "domain: edge\n\
         descriptors:\n\
         \x20 - key: generic_key\n\
         \x20   value: api\n\
         \x20   descriptors:\n\
         \x20     - key: client_id\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 10}\n\
         \x20     - key: client_id\n\
         \x20       value: \"vip*\"\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 100}\n",
    );
    let paths: Vec<&str> = domain(&rules, "edge")
        .rules()
        .map(|rule| rule.path.as_str())
        .collect();
    assert_eq!(
        paths,
        vec![
            "edge.generic_key_api.client_id",
            "edge.generic_key_api.client_id_vip*"
        ]
    );
}

#[test]
fn numbers_and_booleans_in_key_and_value_are_their_text() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: 42\n\
         \x20   value: 123\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20 - key: flag\n\
         \x20   value: true\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 2}\n\
         \x20 - key: answer\n\
         \x20   value: yes\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 3}\n",
    );
    assert_eq!(
        rule_path(&rules, "d", &[("42", "123")]).as_deref(),
        Some("d.42_123")
    );
    assert_eq!(
        rule_path(&rules, "d", &[("flag", "true")]).as_deref(),
        Some("d.flag_true")
    );
    assert_eq!(
        rule_path(&rules, "d", &[("answer", "yes")]).as_deref(),
        Some("d.answer_yes")
    );
}

#[test]
fn an_empty_value_is_a_key_only_descriptor() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   value: \"\"\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_eq!(
        rule_path(&rules, "d", &[("k", "anything")]).as_deref(),
        Some("d.k")
    );
}

#[test]
fn descriptor_flags_accept_yaml_1_1_booleans() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   value: \"v*\"\n\
         \x20   shadow_mode: yes\n\
         \x20   quota_mode: On\n\
         \x20   detailed_metric: Y\n\
         \x20   value_to_metric: TRUE\n\
         \x20   share_threshold: on\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20 - key: other\n\
         \x20   shadow_mode: no\n\
         \x20   quota_mode: off\n\
         \x20   detailed_metric: n\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1, unlimited: No}\n",
    );
    let flagged = rule_at(&rules, "d", "d.k_v*");
    assert!(flagged.shadow_mode);
    assert!(flagged.quota_mode);
    assert!(flagged.detailed_metric);
    assert!(flagged.value_to_metric);
    assert!(flagged.share_threshold);
    let plain = rule_at(&rules, "d", "d.other");
    assert!(!plain.shadow_mode && !plain.quota_mode && !plain.detailed_metric && !plain.unlimited);
}

#[test]
fn unlimited_rules_have_no_limits() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: internal\n\
         \x20   rate_limit:\n\
         \x20     unlimited: true\n\
         \x20     name: internal_traffic\n",
    );
    let rule = rule_at(&rules, "d", "d.internal");
    assert!(rule.unlimited);
    assert!(rule.limits.is_empty());
    assert_eq!(rule.name.as_deref(), Some("internal_traffic"));
}

#[test]
fn name_and_replaces_are_carried_into_the_rule() {
    // README Example 7 of the reference.
    let rules = loaded(
        "domain: example7\n\
         descriptors:\n\
         \x20 - key: key_1\n\
         \x20   value: value_1\n\
         \x20   descriptors:\n\
         \x20     - key: user\n\
         \x20       rate_limit:\n\
         \x20         unit: second\n\
         \x20         requests_per_unit: 5\n\
         \x20         name: specific_limit\n\
         \x20 - key: key_2\n\
         \x20   value: value_2\n\
         \x20   descriptors:\n\
         \x20     - key: user\n\
         \x20       rate_limit:\n\
         \x20         unit: second\n\
         \x20         requests_per_unit: 10\n\
         \x20         replaces:\n\
         \x20           - name: specific_limit\n",
    );
    let specific = rule_at(&rules, "example7", "example7.key_1_value_1.user");
    assert_eq!(specific.name.as_deref(), Some("specific_limit"));
    assert!(specific.replaces.is_empty());
    let general = rule_at(&rules, "example7", "example7.key_2_value_2.user");
    assert_eq!(general.name, None);
    assert_eq!(general.replaces, vec!["specific_limit".to_owned()]);
    assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
}

#[test]
fn metadata_becomes_a_struct_and_is_not_checked_inside() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   metadata:\n\
         \x20     team: payments\n\
         \x20     weights: [1.5, 2.5]\n\
         \x20     anything: {ratelimit: not a key we check}\n\
         \x20     big: 99999999999999999999\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let rule = rule_at(&rules, "d", "d.k");
    let Some(metadata) = &rule.metadata else {
        panic!("metadata should be kept");
    };
    assert_eq!(
        metadata.get("team").and_then(MetadataValue::as_str),
        Some("payments")
    );
    assert_eq!(
        metadata.get("weights"),
        Some(&MetadataValue::List(vec![
            MetadataValue::Number(1.5),
            MetadataValue::Number(2.5)
        ]))
    );
    let anything = metadata.get("anything").and_then(MetadataValue::as_struct);
    assert_eq!(
        anything
            .and_then(|inner| inner.get("ratelimit"))
            .and_then(MetadataValue::as_str),
        Some("not a key we check")
    );
    // Beyond 64 bits the reference's yaml.v2 reads a float64.
    assert_eq!(metadata.get("big"), Some(&MetadataValue::Number(1e20)));
}

#[test]
fn requests_per_unit_defaults_to_zero() {
    let rules = loaded("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n");
    assert_eq!(rule_at(&rules, "d", "d.k").limits[0].requests_per_unit, 0);
    assert_eq!(rules.warnings().len(), 1, "a warning says the limit is 0");
}

#[test]
fn nulls_mean_absent_as_in_the_reference() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   value: ~\n\
         \x20   shadow_mode:\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1, name: null}\n\
         \x20   descriptors:\n\
         \x20 - key: no_limit\n\
         \x20   rate_limit:\n",
    );
    let rule = rule_at(&rules, "d", "d.k");
    assert!(!rule.shadow_mode);
    assert_eq!(rule.name, None);
    assert_eq!(rules.rule_count(), 1);
}

#[test]
fn an_empty_descriptor_list_is_a_domain_without_rules() {
    let rules = loaded("domain: quiet\n");
    assert_eq!(domain(&rules, "quiet").rule_count(), 0);
    let rules = loaded("domain: quiet\ndescriptors: []\n");
    assert_eq!(domain(&rules, "quiet").rules().count(), 0);
}

#[test]
fn no_files_is_a_valid_empty_configuration() {
    let Ok(rules) = load_files(&[], &LoadOptions::default()) else {
        panic!("no files should load");
    };
    assert_eq!(rules.domains().count(), 0);
    assert_eq!(rules.rule_count(), 0);
}

#[test]
fn anchors_and_merge_keys_work() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: a\n\
         \x20   rate_limit: &per_second {unit: second, requests_per_unit: 5}\n\
         \x20 - key: b\n\
         \x20   rate_limit:\n\
         \x20     <<: *per_second\n\
         \x20     requests_per_unit: 7\n",
    );
    assert_eq!(
        rule_at(&rules, "d", "d.a").limits,
        vec![Quota::new(5, Unit::Second)]
    );
    assert_eq!(
        rule_at(&rules, "d", "d.b").limits,
        vec![Quota::new(7, Unit::Second)]
    );
}

#[test]
fn a_matched_rule_comes_with_its_config_path() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: route\n\
         \x20   value: \"api/*\"\n\
         \x20   value_to_metric: true\n\
         \x20   share_threshold: true\n\
         \x20   descriptors:\n\
         \x20     - key: ip\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let Some(found) = matched(&rules, "d", &[("route", "api/x"), ("ip", "10.0.0.1")]) else {
        panic!("should match");
    };
    assert_eq!(
        found.config_path,
        &[
            PathLevel {
                key: "route".into(),
                value: Some("api/*".into()),
                value_to_metric: true,
                share_threshold: true,
            },
            PathLevel {
                key: "ip".into(),
                value: None,
                value_to_metric: false,
                share_threshold: false,
            },
        ]
    );
    assert_eq!(found.config_path[0].composite_key(), "route_api/*");
}

#[test]
fn domains_are_listed_by_name() {
    let Ok(rules) = load_files(
        &[
            ("z.yaml", "domain: zeta\n"),
            ("a.yaml", "domain: alpha\n"),
            ("m.yaml", "domain: mu\n"),
        ],
        &LoadOptions::default(),
    ) else {
        panic!("should load");
    };
    let names: Vec<&str> = rules.domains().map(|domain| domain.name.as_str()).collect();
    assert_eq!(names, vec!["alpha", "mu", "zeta"]);
    assert_eq!(domain(&rules, "zeta").sources, vec!["z.yaml".to_owned()]);
}
