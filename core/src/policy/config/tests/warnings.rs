//! What loads (the reference accepts it too) but is reported as probably wrong.

use super::*;
use crate::policy::rules::ConfigWarning;

fn warnings_of(text: &str) -> Vec<ConfigWarning> {
    loaded(text).warnings().to_vec()
}

#[test]
fn reference_keys_in_the_wrong_place_load_with_a_warning() {
    // The reference's flat allow-list accepts `unit` on a descriptor and ignores it.
    let warnings = warnings_of(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   unit: second\n\
         \x20   domain: other\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n",
    );
    let messages: Vec<&str> = warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(warnings.len(), 3, "{messages:?}");
    assert!(
        messages[0].starts_with("'unit' has no effect on a descriptor"),
        "{}",
        messages[0]
    );
    assert!(messages[0].contains("inside `rate_limit`"));
    assert!(
        messages[1].contains("belongs at the top level"),
        "{}",
        messages[1]
    );
    assert!(
        messages[2].starts_with("'shadow_mode' has no effect inside `rate_limit`"),
        "{}",
        messages[2]
    );
    assert!(messages[2].contains("belongs on a descriptor"));
    assert_eq!(warnings[0].file, FILE);
    assert_eq!(warnings[0].path, "d.k");
}

#[test]
fn duplicate_yaml_keys_are_last_wins_with_a_warning() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limit:\n\
         \x20     unit: second\n\
         \x20     requests_per_unit: 1\n\
         \x20     requests_per_unit: 5\n",
    );
    assert_eq!(rule_at(&rules, "d", "d.k").limits[0].requests_per_unit, 5);
    let warnings = rules.warnings();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].path, "descriptors[0].rate_limit");
    assert!(warnings[0]
        .message
        .starts_with("'requests_per_unit' is written twice"));
}

#[test]
fn more_documents_are_ignored_with_a_warning() {
    let rules = loaded("domain: d\n---\ndomain: e\n");
    assert!(rules.domain("e").is_none());
    assert!(rules.warnings()[0]
        .message
        .contains("more than one YAML document"));
}

#[test]
fn replaces_naming_no_rule() {
    let warnings = warnings_of(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: typo}]}\n",
    );
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0]
        .message
        .starts_with("replaces 'typo', but no rule in domain 'd'"));
}

#[test]
fn unlimited_with_an_unknown_unit_or_a_limit() {
    // The reference only refuses a *valid* unit on an unlimited rule.
    let warnings = warnings_of(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: bogus, requests_per_unit: 3}\n",
    );
    assert_eq!(warnings.len(), 2);
    assert!(warnings[0].message.starts_with("unit 'bogus' is ignored"));
    assert!(warnings[1]
        .message
        .starts_with("`requests_per_unit` is ignored"));
}

#[test]
fn a_star_in_a_key_is_literal() {
    let rules = loaded("domain: d\ndescriptors:\n  - key: \"a*\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
    assert!(rules.warnings()[0].message.contains("literal"));
    assert_eq!(
        rule_path(&rules, "d", &[("a*", "x")]).as_deref(),
        Some("d.a*")
    );
    assert_eq!(rule_path(&rules, "d", &[("ab", "x")]), None);
}
