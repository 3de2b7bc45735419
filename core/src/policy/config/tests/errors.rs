//! Every validation of the reference (same message start, plus the fix), the type checks, and
//! that every problem is reported, not only the first.

use super::*;

#[test]
fn yaml_syntax_error_names_line_and_column() {
    let error = single_error("domain: d\ndescriptors:\n  - key: [a\n    value: b\n");
    assert_eq!(error.file, FILE);
    assert!(error.path.starts_with("line "), "{error}");
    assert!(error.path.contains(" column "), "{error}");
    assert!(
        error.message.starts_with("error loading config file: "),
        "{error}"
    );
    assert!(error.message.contains("fix the YAML"), "{error}");
}

#[test]
fn flow_collections_nested_too_deep_are_refused_before_parsing() {
    // 16 000 unclosed `[` (found by the config_loader fuzz target) took the parser 5 s.
    let deep = format!(
        "domain: d\ndescriptors:\n  - key: a\n    value: {}\n",
        "[".repeat(16_000)
    );
    let error = single_error(&deep);
    assert_eq!(error.path, "line 4 column 140", "{error}");
    assert!(error.message.contains("more than 128"), "{error}");
    // As deep as a rule could want loads (and fails for what it is, not for its depth).
    let fine = format!("domain: d\nx: {}{}\n", "[".repeat(64), "]".repeat(64));
    assert!(
        single_error(&fine).message.contains("unknown"),
        "{}",
        single_error(&fine)
    );
}

#[test]
fn the_file_must_be_a_map() {
    let error = single_error("- domain: d\n");
    assert!(
        error.message.contains("must be a map with `domain:`"),
        "{error}"
    );
}

#[test]
fn empty_domain() {
    let error = single_error(
        "descriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "<no domain>",
        "config file cannot have empty domain",
        &["add `domain:"],
    );
    let error = single_error("domain: \"\"\n");
    assert!(error
        .message
        .starts_with("config file cannot have empty domain"));
    let error = single_error("");
    assert!(error
        .message
        .starts_with("config file cannot have empty domain"));
}

#[test]
fn descriptor_without_key() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "d.descriptors[0]",
        "descriptor has empty key",
        &["add `key:`"],
    );
}

#[test]
fn duplicate_composite_key_at_one_level() {
    let error = single_error(
        "domain: test-domain\n\
         descriptors:\n\
         \x20 - key: key1\n\
         \x20   value: value1\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20 - key: key1\n\
         \x20   value: value1\n\
         \x20   rate_limit: {unit: day, requests_per_unit: 100}\n",
    );
    assert_error(
        &error,
        "test-domain.key1_value1",
        "duplicate descriptor composite key 'test-domain.key1_value1'",
        &["merge them", "rate_limits:"],
    );
}

#[test]
fn duplicates_are_found_at_nested_levels_and_key_only_too() {
    let errors = errors_of(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: a\n\
         \x20   descriptors:\n\
         \x20     - key: b\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20     - key: b\n\
         \x20       value: \"\"\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 2}\n",
    );
    assert_eq!(errors.len(), 1, "{}", lines(&errors));
    assert_eq!(errors[0].path, "d.a.b");
}

#[test]
fn same_key_with_different_values_is_not_a_duplicate() {
    loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: a\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20 - key: a\n\
         \x20   value: x\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 2}\n\
         \x20 - key: a\n\
         \x20   value: \"x*\"\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 3}\n",
    );
}

#[test]
fn composite_keys_that_collide_through_underscores_are_duplicates_as_in_the_reference() {
    // The reference names both `d.a_b_c`; floodgate keeps rule paths unique the same way.
    let error = single_error(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: a_b\n\
         \x20   value: c\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20 - key: a\n\
         \x20   value: b_c\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 2}\n",
    );
    assert!(error
        .message
        .starts_with("duplicate descriptor composite key 'd.a_b_c'"));
}

#[test]
fn invalid_unit_is_quoted_with_the_valid_ones() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: seconds, requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "d.k",
        "invalid rate limit unit 'seconds'",
        &[
            "did you mean 'second'?",
            "second, minute, hour, day, week, month, year",
        ],
    );
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo, requests_per_unit: 1}\n",
    );
    assert!(error.message.starts_with("invalid rate limit unit 'foo'"));
    assert!(!error.message.contains("did you mean"), "{error}");
}

#[test]
fn missing_unit_is_the_empty_unit() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "d.k",
        "invalid rate limit unit ''",
        &["add `unit:`", "unlimited: true"],
    );
    let error = single_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {}\n");
    assert!(
        error.message.starts_with("invalid rate limit unit ''"),
        "{error}"
    );
}

#[test]
fn unlimited_with_a_unit() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
    );
    assert_error(
        &error,
        "d.k",
        "should not specify rate limit unit when unlimited",
        &["remove `unit`"],
    );
}

#[test]
fn empty_replaces_name() {
    let errors = errors_of(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limit:\n\
         \x20     unit: second\n\
         \x20     requests_per_unit: 1\n\
         \x20     replaces:\n\
         \x20       - name: \"\"\n\
         \x20       - {}\n",
    );
    assert_eq!(errors.len(), 2, "{}", lines(&errors));
    assert_error(
        &errors[0],
        "d.k",
        "should not have an empty replaces entry",
        &["replaces[0]", "`name:`"],
    );
    assert!(errors[1].message.contains("replaces[1]"));
}

#[test]
fn replaces_own_name() {
    let error = single_error(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limit:\n\
         \x20     unit: second\n\
         \x20     requests_per_unit: 1\n\
         \x20     name: mine\n\
         \x20     replaces: [{name: mine}]\n",
    );
    assert_error(
        &error,
        "d.k",
        "replaces should not contain name of same descriptor",
        &["remove 'mine'"],
    );
}

#[test]
fn replaces_entries_must_be_maps() {
    let error = single_error(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1, replaces: [other]}\n",
    );
    assert_error(
        &error,
        "d.k",
        "config error, yaml file contains list of type other than map: other",
        &["name: other_rule"],
    );
}

#[test]
fn share_threshold_needs_a_wildcard_value() {
    let error = single_error(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: path\n\
         \x20   value: /files\n\
         \x20   share_threshold: true\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "d.path_/files",
        "share_threshold can only be used with wildcard values (containing '*'), but found key 'path_/files'",
        &["'*'"],
    );
}

#[test]
fn unknown_keys_get_the_closest_valid_key() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "d.k",
        "config error, unknown key 'ratelimit'",
        &["did you mean 'rate_limit'?"],
    );
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requestsperunit: 1}\n",
    );
    // The missing requests_per_unit is only a warning, so this is the one error.
    assert_error(
        &error,
        "d.k",
        "config error, unknown key 'requestsperunit'",
        &["did you mean 'requests_per_unit'?"],
    );
    let error = single_error("domain: d\ndescriptor:\n  - key: k\n");
    assert_error(
        &error,
        "d",
        "config error, unknown key 'descriptor'",
        &["'descriptors'"],
    );
}

#[test]
fn an_unknown_key_can_point_to_where_its_neighbour_belongs() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    requestsperunit: 1\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert!(
        error
            .message
            .contains("'requests_per_unit' (which belongs inside `rate_limit`"),
        "{error}"
    );
}

#[test]
fn unknown_keys_with_nothing_close_list_the_allowed_keys() {
    let error = single_error("domain: d\ncolour: blue\n");
    assert!(error
        .message
        .starts_with("config error, unknown key 'colour'"));
    assert!(
        error
            .message
            .contains("domain, descriptors, default_algorithm"),
        "{error}"
    );
}

#[test]
fn non_string_map_keys() {
    let error = single_error("domain: d\n0.25: x\n");
    assert_error(
        &error,
        "d",
        "config error, key is not of type string: 0.25",
        &["keys allowed"],
    );
}

#[test]
fn list_elements_must_be_maps() {
    let error = single_error("domain: d\ndescriptors:\n  - a\n");
    assert_error(
        &error,
        "d",
        "config error, yaml file contains list of type other than map: a",
        &["- key: generic_key"],
    );
}

#[test]
fn descriptors_must_be_a_list() {
    let error = single_error("domain: d\ndescriptors:\n  key: k\n");
    assert!(error
        .message
        .starts_with("error checking config: `descriptors` must be a list"));
}

#[test]
fn numbers_where_integers_are_expected() {
    for (written, found) in [
        ("1.5", "the decimal number 1.5"),
        ("-1", "-1, a negative number"),
        ("4294967296", "4294967296, which is too large"),
        (
            "18446744073709551616",
            "the integer 18446744073709551616, which is too large",
        ),
        ("ten", "'ten'"),
    ] {
        let error = single_error(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: {written}}}\n"
        ));
        assert_error(
            &error,
            "d.k",
            "error checking config: `requests_per_unit` must be a whole number",
            &[found, "requests_per_unit: 10"],
        );
    }
}

#[test]
fn floats_and_lists_where_strings_are_expected() {
    let error = single_error("domain: d\ndescriptors:\n  - key: k\n    value: 1.0\n");
    assert_error(
        &error,
        "d.descriptors[0]",
        "error checking config: `value` must be a string",
        &["the decimal number 1.0"],
    );
    let error = single_error("domain: [a]\n");
    assert!(error
        .message
        .starts_with("error checking config: `domain` must be a string"));
}

#[test]
fn booleans_must_be_booleans() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: 1\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert_error(
        &error,
        "d.k",
        "error checking config: `shadow_mode` must be true or false",
        &["the number 1"],
    );
}

#[test]
fn metadata_must_be_a_map_with_string_keys() {
    let error = single_error("domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n");
    assert!(error
        .message
        .starts_with("error checking config: `metadata` must be a map"));
    let error = single_error("domain: d\ndescriptors:\n  - key: k\n    metadata: {1: a}\n");
    assert!(
        error.message.starts_with("error parsing metadata"),
        "{error}"
    );
}

#[test]
fn metadata_keys_deep_inside_may_not_be_lists_or_maps() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    metadata: {team: [{? [a, b] : c}]}\n",
    );
    assert!(
        error
            .message
            .starts_with("error parsing metadata: the key [a, b] is a list or a map"),
        "{error}"
    );
    // Scalar keys deep inside are fine: they become text, as in the reference.
    let rules = loaded(
        "domain: d\ndescriptors:\n  - key: k\n    metadata: {team: {1: a}}\n    \
         rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    assert!(rule_at(&rules, "d", "d.k").metadata.is_some());
}

#[test]
fn every_problem_in_every_file_is_reported() {
    let first = "domain: one\n\
                 descriptors:\n\
                 \x20 - key: a\n\
                 \x20   ratelimit: {unit: second}\n\
                 \x20 - value: orphan\n\
                 \x20 - key: b\n\
                 \x20   rate_limit: {unit: fortnight, requests_per_unit: 1.5}\n\
                 \x20   descriptors:\n\
                 \x20     - key: c\n\
                 \x20       rate_limit: {unlimited: true, unit: hour}\n\
                 \x20     - key: c\n\
                 \x20       rate_limit: {unit: hour, requests_per_unit: 1}\n";
    let second = "descriptors:\n  - key: x\n    shadow_mode: maybe\n";
    let third = "domain: three\ndescriptors: [\n";
    let Err(errors) = load_files(
        &[
            ("one.yaml", first),
            ("two.yaml", second),
            ("three.yaml", third),
        ],
        &LoadOptions::default(),
    ) else {
        panic!("should be refused");
    };
    let summary: Vec<(&str, &str, &str)> = errors
        .iter()
        .map(|error| {
            let start = error.message.split(':').next().unwrap_or("");
            (error.file.as_str(), error.path.as_str(), start)
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("one.yaml", "one.a", "config error, unknown key 'ratelimit'"),
            ("one.yaml", "one.descriptors[1]", "descriptor has empty key"),
            ("one.yaml", "one.b", "error checking config"),
            ("one.yaml", "one.b", "invalid rate limit unit 'fortnight'"),
            (
                "one.yaml",
                "one.b.c",
                "should not specify rate limit unit when unlimited"
            ),
            (
                "one.yaml",
                "one.b.c",
                "duplicate descriptor composite key 'one.b.c'"
            ),
            (
                "two.yaml",
                "<no domain>",
                "config file cannot have empty domain"
            ),
            ("two.yaml", "<no domain>.x", "error checking config"),
            ("three.yaml", "line 3 column 1", "error loading config file"),
        ],
        "{}",
        lines(&errors)
    );
}

#[test]
fn the_display_names_file_path_and_message() {
    let error = single_error("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo}\n");
    let shown = error.to_string();
    assert!(
        shown.starts_with("test.yaml: d.k: invalid rate limit unit 'foo'"),
        "{shown}"
    );
}

#[test]
fn hostile_input_is_an_error_not_a_panic() {
    let deep = format!(
        "domain: d\ndescriptors: {}{}\n",
        "[".repeat(500),
        "]".repeat(500)
    );
    assert!(!errors_of(&deep).is_empty());
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]\n\
                domain: d\n";
    assert!(!errors_of(bomb).is_empty());
    for text in [
        "\u{0}",
        "!!binary x",
        "? [a]\n: b\n",
        "domain: !custom d\n",
        "---\n---\n",
        "*x\n",
    ] {
        let _ = load_files(&[(FILE, text)], &LoadOptions::default());
    }
}
