//! The explanation names each lookup outcome and always agrees with `DomainRules::lookup`.

use super::*;
use crate::policy::config::load_valid;

const RULES: &str = r#"
domain: d
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key1
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 7}
      - key: subkey2
  - key: file
    value: "test*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: file
    rate_limit: {unit: minute, requests_per_unit: 300}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_client}
  - key: client
    value: internal
  - key: only_values
    value: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit:
      {unit: minute, requests_per_unit: 1000, name: vip, replaces: [{name: per_client}]}
  - key: free
    rate_limit: {unlimited: true}
"#;

fn rules() -> RuleSet {
    load_valid("d.yaml", RULES)
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect()
}

/// Explains one descriptor of a request to domain `d` and hands the explanation to `check`.
fn with_one<T>(
    rules: &RuleSet,
    pairs: &[(&str, &str)],
    check: impl FnOnce(&DescriptorExplanation<'_>) -> T,
) -> T {
    let descriptors = vec![entries(pairs)];
    let request = explain(rules, "d", &descriptors);
    check(&request.descriptors[0])
}

fn rule_path<'a>(verdict: &Verdict<'a>) -> Option<&'a str> {
    match verdict {
        Verdict::Limited(rule) | Verdict::Unlimited(rule) => Some(rule.path.as_str()),
        _ => None,
    }
}

#[test]
fn exact_then_default() {
    with_one(&rules(), &[("key1", "value1"), ("subkey1", "x")], |found| {
        assert_eq!(found.levels.len(), 2);
        assert_eq!(found.levels[0].how, LevelMatch::Exact);
        assert_eq!(found.levels[0].node_path, "d.key1_value1");
        assert_eq!(
            found.levels[1].how,
            LevelMatch::Default {
                patterns_tried: vec![]
            }
        );
        assert_eq!(rule_path(&found.verdict), Some("d.key1_value1.subkey1"));
        assert!(found.not_tried.is_empty());
    });
}

#[test]
fn wildcard_is_reported_with_its_pattern() {
    let rules = rules();
    with_one(&rules, &[("file", "test-a")], |found| {
        assert_eq!(
            found.levels[0].how,
            LevelMatch::Wildcard {
                pattern: "test*",
                shared: true
            }
        );
        assert_eq!(found.levels[0].node_path, "d.file_test*");
    });
    with_one(&rules, &[("file", "zzz")], |found| {
        assert_eq!(
            found.levels[0].how,
            LevelMatch::Default {
                patterns_tried: vec!["test*"]
            }
        );
        assert_eq!(rule_path(&found.verdict), Some("d.file"));
    });
}

#[test]
fn no_backtracking_names_the_rule_not_tried() {
    let rules = rules();
    with_one(&rules, &[("key1", "value1"), ("subkey2", "x")], |found| {
        match &found.verdict {
            Verdict::Missed {
                level: 1,
                miss: Miss::NoSuchKey { keys },
                ..
            } => assert_eq!(keys, &vec!["subkey1"]),
            other => panic!("expected a miss at level 1, got {other:?}"),
        }
        // key1 (key-only) has subkey2, but without a limit: no rule to name.
        assert!(found.not_tried.is_empty());
    });
    with_one(&rules, &[("key1", "value1")], |found| {
        match &found.verdict {
            Verdict::NoLimitHere {
                deeper_keys,
                exempted_from: None,
            } => assert_eq!(deeper_keys, &vec!["subkey1"]),
            other => panic!("expected no limit here, got {other:?}"),
        }
        assert_eq!(found.not_tried.len(), 1);
        assert_eq!(found.not_tried[0].taken, "d.key1_value1");
        assert_eq!(found.not_tried[0].instead, "d.key1");
        assert_eq!(found.not_tried[0].rule.path, "d.key1");
    });
}

#[test]
fn a_value_without_limit_exempts_it_from_the_default() {
    with_one(&rules(), &[("client", "internal")], |found| {
        match &found.verdict {
            Verdict::NoLimitHere {
                exempted_from: Some(rule),
                deeper_keys,
            } => {
                assert_eq!(rule.path, "d.client");
                assert!(deeper_keys.is_empty());
            }
            other => panic!("expected an exemption, got {other:?}"),
        }
    });
}

#[test]
fn depth_mismatch_when_the_tree_ends() {
    with_one(
        &rules(),
        &[("client", "bob"), ("extra", "1")],
        |found| match &found.verdict {
            Verdict::Missed {
                level: 1,
                miss:
                    Miss::TreeEnds {
                        node_path,
                        node_rule: Some(rule),
                    },
                ..
            } => {
                assert_eq!(node_path, "d.client");
                assert_eq!(rule.path, "d.client");
            }
            other => panic!("expected the tree to end, got {other:?}"),
        },
    );
}

#[test]
fn unknown_key_and_unknown_value() {
    let rules = rules();
    with_one(&rules, &[("nope", "1")], |found| {
        assert!(matches!(
            found.verdict,
            Verdict::Missed {
                level: 0,
                miss: Miss::NoSuchKey { .. },
                ..
            }
        ));
    });
    with_one(&rules, &[("only_values", "b")], |found| {
        match &found.verdict {
            Verdict::Missed {
                miss: Miss::NoValue { values, patterns },
                ..
            } => {
                assert_eq!(values, &vec!["a"]);
                assert!(patterns.is_empty());
            }
            other => panic!("expected no value, got {other:?}"),
        }
    });
}

#[test]
fn replaces_and_unlimited_and_unknown_domain() {
    let rules = rules();
    let descriptors = vec![entries(&[("client", "bob")]), entries(&[("vip", "x")])];
    let request = explain(&rules, "d", &descriptors);
    match &request.descriptors[0].verdict {
        Verdict::Replaced {
            rule,
            by,
            by_descriptor: 1,
        } => {
            assert_eq!(rule.path, "d.client");
            assert_eq!(by.path, "d.vip");
        }
        other => panic!("expected replaced, got {other:?}"),
    }
    assert!(matches!(
        request.descriptors[1].verdict,
        Verdict::Limited(_)
    ));
    with_one(&rules, &[("free", "")], |found| {
        assert!(matches!(found.verdict, Verdict::Unlimited(_)));
    });
    let unknown = explain(&rules, "other", &descriptors);
    assert!(unknown.domain.is_none());
    assert_eq!(unknown.known_domains, vec!["d"]);
    assert!(unknown
        .descriptors
        .iter()
        .all(|d| d.verdict == Verdict::UnknownDomain));
    let empty = vec![Vec::new()];
    assert_eq!(
        explain(&rules, "d", &empty).descriptors[0].verdict,
        Verdict::NoEntries
    );
}

#[test]
fn agrees_with_lookup_on_every_combination() {
    let rules = rules();
    let Some(domain) = rules.domain("d") else {
        panic!("domain d");
    };
    let keys = [
        "key1", "subkey1", "subkey2", "file", "client", "vip", "free", "x",
    ];
    let values = ["value1", "test-1", "internal", "a", "", "zzz"];
    let pairs: Vec<(&str, &str)> = keys
        .iter()
        .flat_map(|key| values.iter().map(move |value| (*key, *value)))
        .collect();
    let mut checked = 0;
    for first in &pairs {
        for second in &pairs {
            for request in [vec![*first], vec![*first, *second]] {
                let request_entries = entries(&request);
                let expected = domain.lookup(&request_entries).map(|m| m.rule.path.clone());
                let found = with_one(&rules, &request, |found| {
                    rule_path(&found.verdict).map(str::to_owned)
                });
                assert_eq!(found, expected, "{request:?}");
                checked += 1;
            }
        }
    }
    assert!(checked > 4000);
}

#[test]
fn a_concurrency_rule_s_lease_and_release_entries_end_at_its_rule_as_in_lookup() {
    let rules = load_valid(
        "d.yaml",
        "domain: d\n\
         descriptors:\n\
         \x20 - key: backend\n\
         \x20   concurrency: {max_in_flight: 2, lease: request_id, ttl: 10s,\n\
         \x20                 release: {key: phase, value: done}}\n",
    );
    type Case<'c> = (&'c [(&'c str, &'c str)], Option<&'c str>);
    let cases: [Case<'_>; 4] = [
        (&[("backend", "a"), ("request_id", "r")], Some("d.backend")),
        (
            &[("backend", "a"), ("request_id", "r"), ("phase", "done")],
            Some("d.backend"),
        ),
        (
            &[("backend", "a"), ("request_id", "r"), ("phase", "later")],
            None,
        ),
        (&[("backend", "a"), ("other", "r")], None),
    ];
    for (pairs, expected) in cases {
        let looked_up = rules
            .domain("d")
            .and_then(|domain| domain.lookup(&entries(pairs)))
            .map(|matched| matched.rule.path.as_str());
        assert_eq!(looked_up, expected, "{pairs:?}");
        with_one(&rules, pairs, |found| {
            assert_eq!(rule_path(&found.verdict), expected, "{pairs:?}");
        });
    }
}
