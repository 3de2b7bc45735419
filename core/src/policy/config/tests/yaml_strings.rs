//! The reference's string fields holding unquoted numbers and booleans: YAML 1.2's reading
//! (`YamlStrings::Resolved`, floodgate's) and yaml.v2's, the text as written
//! (`YamlStrings::AsWritten`, envoyproxy/ratelimit's), refusals included.

use super::*;
use crate::policy::config::YamlStrings;

fn as_written() -> LoadOptions {
    LoadOptions {
        yaml_strings: YamlStrings::AsWritten,
        ..LoadOptions::default()
    }
}

/// A descriptor `k` whose `value` is written `value`, and a child keyed `key`.
fn valued(value: &str, key: &str) -> String {
    format!(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   value: {value}\n\
         \x20   descriptors:\n\
         \x20     - key: {key}\n\
         \x20       rate_limit: {{unit: second, requests_per_unit: 1, name: {value}}}\n"
    )
}

/// The rule path `valued(value, key)` loads under `options`.
fn path_of(value: &str, key: &str, options: &LoadOptions) -> String {
    let rules = loaded_with(&valued(value, key), options);
    let Some(rule) = domain(&rules, "d").rules().next() else {
        panic!("no rule");
    };
    rule.path.clone()
}

#[test]
fn as_written_string_fields_hold_the_text_as_yaml_v2_decodes_it() {
    for (written, text) in [
        ("True", "True"),
        ("FALSE", "FALSE"),
        ("on", "on"),
        ("Yes", "Yes"),
        ("0x10", "0x10"),
        ("0o17", "0o17"),
        ("017", "017"),
        ("+5", "+5"),
        ("1_000", "1_000"),
        ("-0", "-0"),
        ("'0x10'", "0x10"),
    ] {
        let path = path_of(written, "True", &as_written());
        assert_eq!(path, format!("d.k_{text}.True"), "{written}");
        let rules = loaded_with(&valued(written, "True"), &as_written());
        let rule = rule_at(&rules, "d", &path);
        assert_eq!(
            rule.name.as_deref(),
            Some(text),
            "{written}: the limit's name too"
        );
    }
}

#[test]
fn resolved_string_fields_hold_the_text_of_yaml_1_2_values() {
    for (written, text) in [
        ("True", "true"),
        ("FALSE", "false"),
        ("on", "on"),
        ("0x10", "16"),
        ("0o17", "15"),
        ("+5", "5"),
        ("09", "09"),
        ("'0x10'", "0x10"),
    ] {
        let path = path_of(written, "key", &LoadOptions::default());
        assert_eq!(path, format!("d.k_{text}.key"), "{written}");
    }
}

#[test]
fn as_written_a_null_value_is_no_value_as_the_empty_one() {
    for written in ["~", "null", "NULL", "''"] {
        let text = valued(written, "key").replace(&format!(", name: {written}"), "");
        let rules = loaded_with(&text, &as_written());
        assert!(
            domain(&rules, "d").rule_by_path("d.k.key").is_some(),
            "{written}"
        );
    }
}

#[test]
fn as_written_what_yaml_v2_reads_as_a_float_or_a_uint64_is_refused_as_the_reference() {
    for written in [
        "09",
        "1_0.5",
        "1.5",
        "1e3",
        ".inf",
        "9223372036854775808",
        "18446744073709551615",
    ] {
        let text = valued(written, "key");
        let errors = match load_files(&[(FILE, &text)], &as_written()) {
            Ok(_) => panic!("{written} should be refused"),
            Err(errors) => errors,
        };
        assert!(
            errors
                .iter()
                .any(|error| error.message.starts_with("error checking config")
                    && error.message.contains("yaml.v2")
                    && error.message.contains(&format!("\"{written}\""))),
            "{written}: {}",
            lines(&errors)
        );
    }
    // Quoted, they are text.
    let path = path_of("\"09\"", "key", &as_written());
    assert_eq!(path, "d.k_09.key");
}

#[test]
fn as_written_leaves_other_fields_and_metadata_resolved() {
    let text = "domain: d\n\
                descriptors:\n\
                \x20 - key: k\n\
                \x20   shadow_mode: on\n\
                \x20   rate_limit: {unit: second, requests_per_unit: 0x10}\n\
                \x20   metadata: {value: 0x10, on: True}\n";
    let rules = loaded_with(text, &as_written());
    let rule = rule_at(&rules, "d", "d.k");
    assert!(rule.shadow_mode);
    assert_eq!(
        rule.limits.first().map(|quota| quota.requests_per_unit),
        Some(16)
    );
    let metadata = rule
        .metadata
        .as_deref()
        .map(|metadata| format!("{metadata:?}"));
    assert!(
        metadata.as_deref().is_some_and(|text| text.contains("16")),
        "{metadata:?}"
    );
}

#[test]
fn as_written_reads_the_domain_and_replaced_names_too() {
    let text = "domain: 0x10\n\
                descriptors:\n\
                \x20 - key: a\n\
                \x20   rate_limit: {unit: second, requests_per_unit: 1, name: 0x1}\n\
                \x20 - key: b\n\
                \x20   rate_limit:\n\
                \x20     unit: second\n\
                \x20     requests_per_unit: 1\n\
                \x20     replaces: [{name: 0x1}]\n";
    let rules = loaded_with(text, &as_written());
    let domain = domain(&rules, "0x10");
    let replacing = rule_at(&rules, "0x10", "0x10.b");
    assert_eq!(replacing.replaces, ["0x1"]);
    assert!(domain.rule_by_path("0x10.a").is_some());
    // Resolved, the domain is 16.
    assert!(loaded_with(text, &LoadOptions::default())
        .domain("16")
        .is_some());
}
