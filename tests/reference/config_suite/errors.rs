//! The reference's error fixtures: loading them is refused, naming the same problem in the same
//! file. The reference panics with the first problem as `<file>: <problem>`; floodgate reports
//! every problem, each as `<file>: <rule path>: <problem>: <what to change>`
//! (migrating-from-envoy-ratelimit.md, "What answers differently": config errors), so these
//! check the file, the rule path and the reference's words for the problem.

use super::load_fixtures;

/// Loading `names` is refused; one of the errors is in `file`, at `path`, and says `problem`.
#[track_caller]
fn assert_refused(names: &[&str], merge_domains: bool, file: &str, path: &str, problem: &str) {
    let errors = match load_fixtures(names, merge_domains) {
        Ok(_) => panic!("{names:?} should be refused ({problem})"),
        Err(errors) => errors,
    };
    assert!(
        errors.0.iter().any(|error| error.file == file
            && error.path == path
            && error.message.contains(problem)),
        "expected {file}: {path}: {problem:?} among:\n{errors}"
    );
}

#[test]
fn config_test_empty_domain() {
    assert_refused(
        &["empty_domain.yaml"],
        false,
        "empty_domain.yaml",
        "<no domain>",
        "config file cannot have empty domain",
    );
}

#[test]
fn config_test_duplicate_domain() {
    assert_refused(
        &["basic_config.yaml", "duplicate_domain.yaml"],
        false,
        "duplicate_domain.yaml",
        "test-domain",
        "duplicate domain 'test-domain' in config file",
    );
}

#[test]
fn config_test_empty_key() {
    assert_refused(
        &["empty_key.yaml"],
        false,
        "empty_key.yaml",
        "test-domain.descriptors[0]",
        "descriptor has empty key",
    );
}

#[test]
fn config_test_duplicate_key() {
    assert_refused(
        &["duplicate_key.yaml"],
        false,
        "duplicate_key.yaml",
        "test-domain.key1_value1",
        "duplicate descriptor composite key 'test-domain.key1_value1'",
    );
}

#[test]
fn config_test_duplicate_key_domain_merge() {
    assert_refused(
        &["merge_domain_key1.yaml", "merge_domain_key1.yaml"],
        true,
        "merge_domain_key1.yaml",
        "test-domain.key1_value1",
        "duplicate descriptor composite key 'test-domain.key1_value1'",
    );
}

#[test]
fn config_test_bad_limit_unit() {
    assert_refused(
        &["bad_limit_unit.yaml"],
        false,
        "bad_limit_unit.yaml",
        "test-domain.key1_value1",
        "invalid rate limit unit 'foo'",
    );
}

#[test]
fn config_test_replaces_self() {
    assert_refused(
        &["replaces_self.yaml"],
        false,
        "replaces_self.yaml",
        "test-domain.key1_value1.subkey1",
        "replaces should not contain name of same descriptor",
    );
}

#[test]
fn config_test_replaces_empty() {
    assert_refused(
        &["replaces_empty.yaml"],
        false,
        "replaces_empty.yaml",
        "test-domain.key1_value1.subkey1",
        "should not have an empty replaces entry",
    );
}

/// The reference says `yaml: line 2: found unexpected end of stream` (yaml.v2's words); the
/// YAML parser's words and place are floodgate's parser's, the problem the same.
#[test]
fn config_test_bad_yaml() {
    for problem in [
        "error loading config file",
        "found unexpected end of stream",
    ] {
        assert_refused(
            &["bad_yaml.yaml"],
            false,
            "bad_yaml.yaml",
            "line 2 column 1",
            problem,
        );
    }
}

#[test]
fn config_test_misspelled_key() {
    assert_refused(
        &["misspelled_key.yaml"],
        false,
        "misspelled_key.yaml",
        "test-domain.key1_value1",
        "config error, unknown key 'ratelimit'",
    );
    assert_refused(
        &["misspelled_key2.yaml"],
        false,
        "misspelled_key2.yaml",
        "test-domain.key1_value1",
        "config error, unknown key 'requestsperunit'",
    );
}

/// floodgate also says what follows from it: the file has no `domain:` either.
#[test]
fn config_test_non_string_key() {
    assert_refused(
        &["non_string_key.yaml"],
        false,
        "non_string_key.yaml",
        "<no domain>",
        "config error, key is not of type string: 0.25",
    );
}

/// The reference stops at `a`; floodgate names `b` and `c` too.
#[test]
fn config_test_non_map_list() {
    for item in ["a", "b", "c"] {
        assert_refused(
            &["non_map_list.yaml"],
            false,
            "non_map_list.yaml",
            "test-domain",
            &format!("config error, yaml file contains list of type other than map: {item}"),
        );
    }
}

#[test]
fn config_test_unlimited_with_rate_limit_unit() {
    assert_refused(
        &["unlimited_with_unit.yaml"],
        false,
        "unlimited_with_unit.yaml",
        "test-domain.foo",
        "should not specify rate limit unit when unlimited",
    );
}
