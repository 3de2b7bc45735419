//! Several files: unique domains, or merged ones with `MERGE_DOMAIN_CONFIG`.

use super::*;

const FIRST: &str = "domain: shared\n\
    descriptors:\n\
    \x20 - key: a\n\
    \x20   rate_limit: {unit: second, requests_per_unit: 1}\n";
const SECOND: &str = "domain: shared\n\
    descriptors:\n\
    \x20 - key: b\n\
    \x20   rate_limit: {unit: second, requests_per_unit: 2}\n";

fn merging() -> LoadOptions {
    LoadOptions {
        default_algorithm: Algorithm::FixedWindow,
        merge_domains: true,
        ..LoadOptions::default()
    }
}

#[test]
fn a_domain_twice_is_refused_naming_the_later_file() {
    let Err(errors) = load_files(
        &[("1.yaml", FIRST), ("2.yaml", SECOND)],
        &LoadOptions::default(),
    ) else {
        panic!("should be refused");
    };
    assert_eq!(errors.len(), 1, "{}", lines(&errors));
    assert_eq!(errors[0].file, "2.yaml");
    assert_eq!(errors[0].path, "shared");
    assert!(errors[0]
        .message
        .starts_with("duplicate domain 'shared' in config file: it is already defined in 1.yaml"));
    assert!(errors[0].message.contains("MERGE_DOMAIN_CONFIG=true"));
    assert!(!errors[0].message.contains("ConfigMap"));
}

#[test]
fn a_configmap_read_twice_gets_a_hint() {
    let Err(errors) = load_files(
        &[
            ("/etc/rl/..2026_11_30/rules.yaml", FIRST),
            ("/etc/rl/rules.yaml", FIRST),
        ],
        &LoadOptions::default(),
    ) else {
        panic!("should be refused");
    };
    assert!(
        errors[0].message.contains("RUNTIME_IGNOREDOTFILES=true"),
        "{}",
        errors[0]
    );
}

#[test]
fn the_duplicate_file_is_still_checked() {
    let broken_second = "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: eon}\n";
    let Err(errors) = load_files(
        &[("1.yaml", FIRST), ("2.yaml", broken_second)],
        &LoadOptions::default(),
    ) else {
        panic!("should be refused");
    };
    assert_eq!(errors.len(), 2, "{}", lines(&errors));
}

#[test]
fn merging_appends_top_level_descriptors() {
    let Ok(rules) = load_files(&[("1.yaml", FIRST), ("2.yaml", SECOND)], &merging()) else {
        panic!("should merge");
    };
    let shared = domain(&rules, "shared");
    assert_eq!(
        shared.sources,
        vec!["1.yaml".to_owned(), "2.yaml".to_owned()]
    );
    assert_eq!(
        rule_path(&rules, "shared", &[("a", "x")]).as_deref(),
        Some("shared.a")
    );
    assert_eq!(
        rule_path(&rules, "shared", &[("b", "x")]).as_deref(),
        Some("shared.b")
    );
    assert_eq!(&*rule_at(&rules, "shared", "shared.b").source, "2.yaml");
    assert_eq!(rules.rule_count(), 2);
}

#[test]
fn merging_is_not_deep_the_same_top_level_key_is_a_duplicate() {
    let Err(errors) = load_files(&[("1.yaml", FIRST), ("2.yaml", FIRST)], &merging()) else {
        panic!("should be refused");
    };
    assert_eq!(errors.len(), 1, "{}", lines(&errors));
    assert_eq!(errors[0].file, "2.yaml");
    assert_eq!(errors[0].path, "shared.a");
    assert!(errors[0]
        .message
        .starts_with("duplicate descriptor composite key 'shared.a': 1.yaml defines it already"));
}

#[test]
fn merged_files_must_agree_on_the_default_algorithm() {
    let token = format!("default_algorithm: token_bucket\n{FIRST}");
    let sliding = format!("default_algorithm: sliding_window\n{SECOND}");
    let Err(errors) = load_files(&[("1.yaml", &token), ("2.yaml", &sliding)], &merging()) else {
        panic!("should be refused");
    };
    assert_eq!(errors.len(), 1, "{}", lines(&errors));
    assert!(errors[0]
        .message
        .starts_with("`default_algorithm: sliding_window` differs from `default_algorithm: token_bucket` in 1.yaml"));

    let Ok(rules) = load_files(&[("1.yaml", FIRST), ("2.yaml", &sliding)], &merging()) else {
        panic!("one explicit default is fine");
    };
    assert_eq!(
        domain(&rules, "shared").default_algorithm,
        Algorithm::SlidingWindow
    );
    assert_eq!(
        rule_at(&rules, "shared", "shared.a").limits[0].algorithm,
        Algorithm::FixedWindow
    );
    assert_eq!(
        rule_at(&rules, "shared", "shared.b").limits[0].algorithm,
        Algorithm::SlidingWindow
    );
}

#[test]
fn replaces_work_across_merged_files() {
    let named = "domain: shared\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: first}\n";
    let replacing = "domain: shared\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: first}]}\n";
    let Ok(rules) = load_files(&[("1.yaml", named), ("2.yaml", replacing)], &merging()) else {
        panic!("should merge");
    };
    assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
}
