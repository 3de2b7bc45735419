//! The reference's lookup semantics (§1.4–1.5) on loaded trees.

use super::*;
use crate::policy::rules::MatchedLevel;

fn limit_of(rules: &RuleSet, pairs: &[(&str, &str)]) -> Option<u32> {
    matched(rules, "d", pairs).map(|found| found.rule.limits[0].requests_per_unit)
}

const NESTED: &str = "domain: d\n\
    descriptors:\n\
    \x20 - key: key1\n\
    \x20   value: value1\n\
    \x20   descriptors:\n\
    \x20     - key: subkey1\n\
    \x20       rate_limit: {unit: second, requests_per_unit: 5}\n\
    \x20 - key: key1\n\
    \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
    \x20   descriptors:\n\
    \x20     - key: subkey1\n\
    \x20       rate_limit: {unit: second, requests_per_unit: 7}\n\
    \x20     - key: subkey2\n";

#[test]
fn depth_must_match() {
    let rules = loaded(NESTED);
    // key1_value1 has only children: a request that stops there finds nothing.
    assert_eq!(limit_of(&rules, &[("key1", "value1")]), None);
    assert_eq!(
        limit_of(&rules, &[("key1", "value1"), ("subkey1", "x")]),
        Some(5)
    );
    // Deeper than the tree.
    assert_eq!(
        limit_of(
            &rules,
            &[("key1", "value1"), ("subkey1", "x"), ("extra", "y")]
        ),
        None
    );
}

#[test]
fn fewer_entries_match_a_limit_on_an_inner_node() {
    let rules = loaded(NESTED);
    assert_eq!(limit_of(&rules, &[("key1", "other")]), Some(1));
    assert_eq!(
        limit_of(&rules, &[("key1", "other"), ("subkey1", "x")]),
        Some(7)
    );
}

#[test]
fn a_limit_on_a_level_that_is_not_the_last_is_ignored() {
    let rules = loaded(NESTED);
    // key1 (default) has a limit, but the request goes on to subkey2, which has none.
    assert_eq!(
        limit_of(&rules, &[("key1", "other"), ("subkey2", "x")]),
        None
    );
}

#[test]
fn no_backtracking_to_the_key_only_sibling() {
    let rules = loaded(NESTED);
    // key1=value1 matched exactly; its children have no subkey2, and the key1 default (which
    // has subkey2 and subkey1=7) is not tried.
    assert_eq!(
        limit_of(&rules, &[("key1", "value1"), ("subkey2", "x")]),
        None
    );
    assert_eq!(
        limit_of(&rules, &[("key1", "value1"), ("subkey1", "x")]),
        Some(5)
    );
}

#[test]
fn a_value_without_limit_or_children_whitelists_it() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: key2\n\
         \x20   rate_limit: {unit: minute, requests_per_unit: 20}\n\
         \x20 - key: key2\n\
         \x20   value: value3\n",
    );
    assert_eq!(limit_of(&rules, &[("key2", "value1")]), Some(20));
    assert_eq!(limit_of(&rules, &[("key2", "value3")]), None);
}

const WILDCARDS: &str = "domain: d\n\
    descriptors:\n\
    \x20 - key: file\n\
    \x20   value: test1\n\
    \x20   rate_limit: {unit: minute, requests_per_unit: 50}\n\
    \x20 - key: file\n\
    \x20   value: \"test*\"\n\
    \x20   rate_limit: {unit: minute, requests_per_unit: 100}\n\
    \x20 - key: file\n\
    \x20   value: \"test-long*\"\n\
    \x20   rate_limit: {unit: minute, requests_per_unit: 200}\n\
    \x20 - key: file\n\
    \x20   rate_limit: {unit: minute, requests_per_unit: 300}\n\
    \x20 - key: path\n\
    \x20   value: \"/api/*/action\"\n\
    \x20   share_threshold: true\n\
    \x20   rate_limit: {unit: minute, requests_per_unit: 400}\n\
    \x20 - key: any\n\
    \x20   value: \"*\"\n\
    \x20   rate_limit: {unit: minute, requests_per_unit: 500}\n";

#[test]
fn exact_beats_wildcard_beats_default() {
    let rules = loaded(WILDCARDS);
    assert_eq!(limit_of(&rules, &[("file", "test1")]), Some(50));
    assert_eq!(limit_of(&rules, &[("file", "test2")]), Some(100));
    assert_eq!(limit_of(&rules, &[("file", "other")]), Some(300));
}

#[test]
fn the_first_listed_wildcard_wins_not_the_longest() {
    let rules = loaded(WILDCARDS);
    assert_eq!(limit_of(&rules, &[("file", "test-long-name")]), Some(100));
}

#[test]
fn wildcards_in_the_middle() {
    let rules = loaded(WILDCARDS);
    assert_eq!(limit_of(&rules, &[("path", "/api/v1/action")]), Some(400));
    assert_eq!(limit_of(&rules, &[("path", "/api/v1/other")]), None);
}

#[test]
fn how_each_level_matched_is_reported() {
    let rules = loaded(WILDCARDS);
    let levels =
        |pairs: &[(&str, &str)]| matched(&rules, "d", pairs).map(|found| found.levels.to_vec());
    assert_eq!(
        levels(&[("file", "test1")]),
        Some(vec![MatchedLevel::Exact])
    );
    assert_eq!(
        levels(&[("file", "test2")]),
        Some(vec![MatchedLevel::Wildcard {
            pattern: "test*",
            shared: false
        }])
    );
    assert_eq!(
        levels(&[("path", "/api/x/action")]),
        Some(vec![MatchedLevel::Wildcard {
            pattern: "/api/*/action",
            shared: true
        }])
    );
    assert_eq!(
        levels(&[("file", "zzz")]),
        Some(vec![MatchedLevel::Default])
    );

    let nested = loaded(NESTED);
    let Some(found) = matched(&nested, "d", &[("key1", "value1"), ("subkey1", "x")]) else {
        panic!("should match");
    };
    assert_eq!(
        found.levels.as_slice(),
        [MatchedLevel::Exact, MatchedLevel::Default]
    );
    assert_eq!(found.rule.path, "d.key1_value1.subkey1");
}

#[test]
fn an_empty_request_value() {
    let rules = loaded(WILDCARDS);
    // `*` matches the empty value; `test*` does not, so `file` falls back to its default.
    assert_eq!(limit_of(&rules, &[("any", "")]), Some(500));
    assert_eq!(limit_of(&rules, &[("file", "")]), Some(300));
}

#[test]
fn wildcards_match_the_value_only_with_an_equal_key() {
    // The reference matched `any_*` against `any_thing_x`, so a key `any_thing` hit the
    // wildcard of key `any` (quirk §9.7). Here the keys must be equal.
    let rules = loaded(WILDCARDS);
    assert_eq!(limit_of(&rules, &[("any_thing", "x")]), None);
    assert_eq!(limit_of(&rules, &[("any", "thing_x")]), Some(500));
}

#[test]
fn nested_wildcards() {
    let rules = loaded(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: nested\n\
         \x20   value: value\n\
         \x20   descriptors:\n\
         \x20     - key: wild\n\
         \x20       value: \"goo*\"\n\
         \x20       rate_limit: {unit: minute, requests_per_unit: 20}\n\
         \x20     - key: wild\n\
         \x20       value: \"foo*\"\n\
         \x20       rate_limit: {unit: minute, requests_per_unit: 30}\n",
    );
    assert_eq!(
        limit_of(&rules, &[("nested", "value"), ("wild", "foo1")]),
        Some(30)
    );
    assert_eq!(
        limit_of(&rules, &[("nested", "value"), ("wild", "goo1")]),
        Some(20)
    );
    assert_eq!(
        limit_of(&rules, &[("nested", "value"), ("wild", "zoo")]),
        None
    );
}

#[test]
fn nothing_matches() {
    let rules = loaded(NESTED);
    assert_eq!(limit_of(&rules, &[]), None, "a descriptor without entries");
    assert_eq!(limit_of(&rules, &[("unknown", "x")]), None);
    assert_eq!(
        limit_of(&rules, &[("subkey1", "x")]),
        None,
        "keys are per level"
    );
    assert!(rules.domain("other").is_none());
}

#[test]
fn keys_and_values_are_compared_exactly() {
    let rules = loaded(WILDCARDS);
    assert_eq!(limit_of(&rules, &[("FILE", "test1")]), None);
    assert_eq!(limit_of(&rules, &[("file", "TEST1")]), Some(300));
}
