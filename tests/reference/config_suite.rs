//! `test/config/config_test.go`: the reference's fixtures (`fixtures/config/`, named as its
//! `loadFile` names them) and its in-code configurations (written here as the YAML they stand
//! for), loaded through floodgate's loader; each descriptor path finds the limit, unit, flags,
//! wildcard and metadata the reference's `GetLimit` finds. The error fixtures are in `errors`,
//! `TestShareThreshold` in `share_threshold`, the other stats keys (`detailed_metric`,
//! `value_to_metric`, wildcards) in `stats_keys`; the string fields read as yaml.v2 reads them,
//! at either door, in `yaml_strings`.
//!
//! A stats key of the reference (`rl.Stats.Key`) is built by floodgate's core
//! (`core::decision::outcome::stats_key`) for the reference's metric names; [`stats_key`] asks it.

mod errors;
mod share_threshold;
mod stats_keys;
mod yaml_strings;

use floodgate_core::decision::outcome::stats_key::stats_key as reference_stats_key;
use floodgate_core::decision::plan::{plan, DescriptorPlan, PlanSettings};
use floodgate_core::ground::unit::Unit;
use floodgate_core::policy::config::{load, ConfigErrors, LoadOptions, SourceFile};
use floodgate_core::policy::request::Entry;
use floodgate_core::policy::request::{Descriptor, LimitOverride, Request};
use floodgate_core::policy::rules::{Matched, MatchedLevel, Rule, RuleSet};

/// One entry of a request descriptor: (key, value).
type Pair<'a> = (&'a str, &'a str);

/// A request descriptor's entries.
type Pairs<'a> = &'a [Pair<'a>];

/// Where the reference's `test/config/*.yaml` are copied.
const FIXTURES: &str = "tests/reference/fixtures/config";

/// A fixture, named by its file name as the reference's `loadFile` names it.
fn fixture(name: &str) -> SourceFile {
    let path = floodgate_testkit::repo_file(&format!("{FIXTURES}/{name}"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    SourceFile {
        name: name.to_owned(),
        text,
    }
}

/// Loads `names` in that order, as `NewRateLimitConfigImpl(files, …, merge_domains)` does.
fn load_fixtures(names: &[&str], merge_domains: bool) -> Result<RuleSet, ConfigErrors> {
    let files: Vec<SourceFile> = names.iter().map(|name| fixture(name)).collect();
    let options = LoadOptions {
        merge_domains,
        ..LoadOptions::default()
    };
    load(&files, &options)
}

fn loaded(names: &[&str], merge_domains: bool) -> RuleSet {
    load_fixtures(names, merge_domains)
        .unwrap_or_else(|errors| panic!("{names:?} should load:\n{errors}"))
}

/// One of the reference's in-code configurations (a `config.YamlRoot`, named "inline"), as YAML.
fn inline(yaml: &str) -> RuleSet {
    let file = SourceFile {
        name: "inline".to_owned(),
        text: yaml.to_owned(),
    };
    load(&[file], &LoadOptions::default())
        .unwrap_or_else(|errors| panic!("should load:\n{errors}\n{yaml}"))
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(key, value)| Entry::new(*key, *value))
        .collect()
}

/// What `GetLimit(domain, descriptor)` finds: `None` where the reference returns nil.
fn found<'r>(rules: &'r RuleSet, domain: &str, pairs: &[(&str, &str)]) -> Option<Matched<'r>> {
    rules.domain(domain)?.lookup(&entries(pairs))
}

fn rule<'r>(rules: &'r RuleSet, domain: &str, pairs: &[(&str, &str)]) -> &'r Rule {
    match found(rules, domain, pairs) {
        Some(matched) => matched.rule,
        None => panic!("{domain} {pairs:?} should find a rule"),
    }
}

/// `(rl.Limit.RequestsPerUnit, rl.Limit.Unit)` of the rule found.
fn limit(rules: &RuleSet, domain: &str, pairs: &[(&str, &str)]) -> (u32, Unit) {
    let found = rule(rules, domain, pairs);
    match found.limits.as_slice() {
        [quota] => (quota.requests_per_unit, quota.unit),
        other => panic!("{domain} {pairs:?}: expected one limit, got {other:?}"),
    }
}

/// `rl.Stats.Key`: the reference's stats key of this descriptor, as floodgate's core builds it
/// for the reference's metric names (`core::decision::outcome::stats_key`).
fn stats_key(rules: &RuleSet, domain: &str, pairs: &[(&str, &str)]) -> String {
    let Some(matched) = found(rules, domain, pairs) else {
        panic!("{domain} {pairs:?} should find a rule");
    };
    reference_stats_key(domain, &matched, &entries(pairs))
        .as_str()
        .to_owned()
}

/// `rl.ShareThresholdKeyPattern`: per entry, the pattern a `share_threshold` wildcard made it
/// share (`None` where the entry keeps its own value).
fn shared_patterns<'r>(
    rules: &'r RuleSet,
    domain: &str,
    pairs: &[(&str, &str)],
) -> Vec<Option<&'r str>> {
    let Some(matched) = found(rules, domain, pairs) else {
        panic!("{domain} {pairs:?} should find a rule");
    };
    matched
        .levels
        .iter()
        .map(|level| match level {
            MatchedLevel::Wildcard {
                pattern,
                shared: true,
            } => Some(*pattern),
            _ => None,
        })
        .collect()
}

/// What the planner makes of one descriptor that a limit decides.
#[derive(Debug)]
struct Planned {
    /// The label its limits count under (`LimitSource::path`).
    label: String,
    limits: Vec<(u32, Unit)>,
    /// The identities of its counters: equal for two requests exactly when they share a
    /// counter (the reference's cache key).
    keys: Vec<Vec<u8>>,
}

/// One descriptor of `pairs` (with Envoy's `limit_override`) planned; `None` when no limit
/// decides it (no rule, unlimited).
fn planned(
    rules: &RuleSet,
    domain: &str,
    pairs: &[(&str, &str)],
    limit_override: Option<LimitOverride>,
) -> Option<Planned> {
    let request = Request {
        domain: domain.to_owned(),
        descriptors: vec![Descriptor {
            limit_override,
            ..Descriptor::new(entries(pairs))
        }],
        hits_addend: 0,
    };
    let planned = plan(&request, rules.domain(domain), PlanSettings::default());
    let Some(DescriptorPlan::Limited { limit, .. }) = planned.descriptors.first() else {
        return None;
    };
    Some(Planned {
        label: limit.path().to_owned(),
        limits: limit
            .quotas()
            .iter()
            .map(|quota| (quota.requests_per_unit, quota.unit))
            .collect(),
        keys: planned
            .counters
            .iter()
            .map(|counter| counter.key.clone())
            .collect(),
    })
}

/// The counters of every descriptor of `all` are one (the same identities).
#[track_caller]
fn one_counter(rules: &RuleSet, domain: &str, all: &[&[(&str, &str)]]) {
    let keys: Vec<Vec<Vec<u8>>> = all
        .iter()
        .map(|pairs| {
            planned(rules, domain, pairs, None)
                .unwrap_or_else(|| panic!("{pairs:?} should be limited"))
                .keys
        })
        .collect();
    assert!(
        keys.windows(2).all(|pair| pair[0] == pair[1]),
        "{all:?} should share one counter"
    );
}

#[track_caller]
fn own_counters(rules: &RuleSet, domain: &str, a: &[(&str, &str)], b: &[(&str, &str)]) {
    let keys = |pairs| planned(rules, domain, pairs, None).map(|planned| planned.keys);
    assert_ne!(keys(a), keys(b), "{a:?} and {b:?} should count apart");
}

#[test]
fn config_test_basic_config() {
    let rules = loaded(&["basic_config.yaml"], false);
    assert!(rules.domains().next().is_some(), "IsEmptyDomains");
    assert!(rules.domain("foo_domain").is_none());
    let nothing: [&[(&str, &str)]; 7] = [
        &[],
        &[("key1", "something")],
        &[("key1", "value1")],
        &[("key2", "value2"), ("subkey", "subvalue")],
        &[("key5", "value5"), ("subkey5", "subvalue")],
        &[("key2", "value3")],
        &[("key8", "anything")],
    ];
    for pairs in nothing {
        assert!(found(&rules, "test-domain", pairs).is_none(), "{pairs:?}");
    }
    let limited: [(Pairs, (u32, Unit), &str); 8] = [
        (
            &[("key1", "value1"), ("subkey1", "something")],
            (5, Unit::Second),
            "test-domain.key1_value1.subkey1",
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            (10, Unit::Second),
            "test-domain.key1_value1.subkey1_subvalue1",
        ),
        (
            &[("key2", "something")],
            (20, Unit::Minute),
            "test-domain.key2",
        ),
        (
            &[("key2", "value2")],
            (30, Unit::Minute),
            "test-domain.key2_value2",
        ),
        (&[("key3", "foo")], (1, Unit::Hour), "test-domain.key3"),
        (&[("key4", "foo")], (1, Unit::Day), "test-domain.key4"),
        // detailed_metric: the stats key holds the request's value.
        (
            &[("key7", "unspecified_value")],
            (70, Unit::Minute),
            "test-domain.key7_unspecified_value",
        ),
        (
            &[("key7", "another_value")],
            (70, Unit::Minute),
            "test-domain.key7_another_value",
        ),
    ];
    for (pairs, expected, key) in limited {
        assert_eq!(limit(&rules, "test-domain", pairs), expected, "{pairs:?}");
        assert_eq!(stats_key(&rules, "test-domain", pairs), key, "{pairs:?}");
    }
    assert_eq!(rule(&rules, "test-domain", &[("key3", "foo")]).name, None);
    assert_eq!(
        rule(&rules, "test-domain", &[("key4", "foo")])
            .name
            .as_deref(),
        Some("key4_rate_limit")
    );
    let unlimited = rule(&rules, "test-domain", &[("key6", "foo")]);
    assert!(unlimited.unlimited && unlimited.limits.is_empty());
    assert!(rule(&rules, "test-domain", &[("key7", "x")]).detailed_metric);
}

#[test]
fn config_test_domain_merge() {
    let rules = loaded(&["merge_domain_key1.yaml", "merge_domain_key2.yaml"], true);
    assert!(rules.domain("foo_domain").is_none());
    assert!(found(&rules, "test-domain", &[]).is_none());
    assert_eq!(
        limit(&rules, "test-domain", &[("key1", "value1")]),
        (10, Unit::Minute)
    );
    assert_eq!(
        limit(&rules, "test-domain", &[("key2", "value2")]),
        (20, Unit::Minute)
    );
    assert_eq!(
        rules
            .domain("test-domain")
            .map(|domain| domain.sources.clone()),
        Some(vec![
            "merge_domain_key1.yaml".to_owned(),
            "merge_domain_key2.yaml".to_owned()
        ])
    );
}

/// Envoy's `limit` on a descriptor: the limit it names, in counters of their own per value. The
/// reference names its stats `test-domain.key1_value1.subkey1_something`; floodgate's label
/// leaves the request's values out (`test-domain.key1.subkey1[override]`) so that overrides do
/// not make a metric series per value (operations.md, Metrics).
#[test]
fn config_test_config_limit_override() {
    let rules = loaded(&["basic_config.yaml"], false);
    let with = |requests_per_unit, unit| {
        Some(LimitOverride {
            requests_per_unit,
            unit: Some(unit),
            unit_multiplier: None,
        })
    };
    assert!(planned(&rules, "foo_domain", &[], with(10, Unit::Day)).is_none());

    let something = [("key1", "value1"), ("subkey1", "something")];
    let overridden = |pairs: &[(&str, &str)], requests_per_unit, unit| {
        planned(&rules, "test-domain", pairs, with(requests_per_unit, unit))
            .unwrap_or_else(|| panic!("{pairs:?}: the override should decide"))
    };
    let daily = overridden(&something, 10, Unit::Day);
    assert_eq!(daily.label, "test-domain.key1.subkey1[override]");
    assert_eq!(daily.limits, vec![(10, Unit::Day)]);
    assert_eq!(daily.keys.len(), 1);

    // Another override of the same descriptor: the same stats (label), its own limit.
    let hourly = overridden(&something, 42, Unit::Hour);
    assert_eq!(hourly.label, daily.label);
    assert_eq!(hourly.limits, vec![(42, Unit::Hour)]);

    // Another value: its own counter, still the same label.
    let other = overridden(
        &[("key1", "value1"), ("subkey1", "something_else")],
        42,
        Unit::Hour,
    );
    assert_eq!(other.label, daily.label);
    assert_eq!(other.limits, hourly.limits);
    assert_ne!(other.keys, hourly.keys);
}

#[test]
fn config_test_shadow_mode_config() {
    let rules = loaded(&["shadowmode_config.yaml"], false);
    let cases: [(Pairs, bool, (u32, Unit), &str); 4] = [
        (
            &[("key1", "value1"), ("subkey1", "something")],
            false,
            (5, Unit::Second),
            "test-domain.key1_value1.subkey1",
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            true,
            (10, Unit::Second),
            "test-domain.key1_value1.subkey1_subvalue1",
        ),
        (
            &[("key2", "something")],
            true,
            (20, Unit::Minute),
            "test-domain.key2",
        ),
        (
            &[("key2", "value2")],
            false,
            (30, Unit::Minute),
            "test-domain.key2_value2",
        ),
    ];
    for (pairs, shadow_mode, expected, key) in cases {
        assert_eq!(
            rule(&rules, "test-domain", pairs).shadow_mode,
            shadow_mode,
            "{pairs:?}"
        );
        assert_eq!(limit(&rules, "test-domain", pairs), expected, "{pairs:?}");
        assert_eq!(stats_key(&rules, "test-domain", pairs), key, "{pairs:?}");
    }
}

#[test]
fn config_test_wildcard_config() {
    let rules = loaded(&["wildcard.yaml"], false);
    let same_rule = |a: &[(&str, &str)], b: &[(&str, &str)], key: &str| {
        let (first, second) = (
            rule(&rules, "test-domain", a),
            rule(&rules, "test-domain", b),
        );
        assert!(std::ptr::eq(first, second), "{a:?} and {b:?}: one rule");
        assert_eq!(stats_key(&rules, "test-domain", a), key);
        assert_eq!(stats_key(&rules, "test-domain", b), key);
    };
    let nested = [("nestedWild", "val1"), ("wild", "goo2")];
    assert_eq!(
        stats_key(&rules, "test-domain", &nested),
        "test-domain.nestedWild_val1.wild_goo*"
    );
    let alike: [(Pair, Pair, &str); 5] = [
        // A key without value (the baseline): any value, one stats key.
        (("noVal", "foo1"), ("noVal", "foo2"), "test-domain.noVal"),
        (("wild", "foo1"), ("wild", "foo2"), "test-domain.wild_foo*"),
        (
            ("midWild", "barab"),
            ("midWild", "bar123b"),
            "test-domain.midWild_bar*b",
        ),
        // `*` also matches nothing.
        (
            ("midWild", "barb"),
            ("midWild", "barab"),
            "test-domain.midWild_bar*b",
        ),
        (
            ("multiWild", "foo123bar456baz"),
            ("multiWild", "foobarbaz"),
            "test-domain.multiWild_foo*bar*baz",
        ),
    ];
    for (a, b, key) in alike {
        same_rule(&[a], &[b], key);
    }
    let misses: [(&str, &str); 6] = [
        ("wild", "bar"),
        // A value without `*` is no prefix.
        ("noWild", "foo1"),
        ("midWild", "bara"),
        ("midWild", "xbarb"),
        ("multiWild", "foo123baz"),
        ("multiWild", "bar456baz"),
    ];
    for pair in misses {
        assert!(found(&rules, "test-domain", &[pair]).is_none(), "{pair:?}");
    }
}

#[test]
fn config_test_metadata() {
    let rules = loaded(&["metadata.yaml"], false);
    assert!(found(&rules, "test-domain", &[]).is_none());
    let subkey = [("key1", "value1"), ("subkey1", "something")];
    assert_eq!(limit(&rules, "test-domain", &subkey), (5, Unit::Second));
    assert_eq!(
        stats_key(&rules, "test-domain", &subkey),
        "test-domain.key1_value1.subkey1"
    );
    let metadata = |pairs: &[(&str, &str)]| {
        rule(&rules, "test-domain", pairs)
            .metadata
            .as_deref()
            .cloned()
            .unwrap_or_else(|| panic!("{pairs:?}: no metadata"))
    };
    assert_eq!(
        metadata(&subkey).get("name").and_then(|name| name.as_str()),
        Some("service_1")
    );

    let key2 = [("key2", "something")];
    assert_eq!(limit(&rules, "test-domain", &key2), (20, Unit::Minute));
    assert_eq!(stats_key(&rules, "test-domain", &key2), "test-domain.key2");
    assert_eq!(
        metadata(&key2)
            .get("service_with_quota")
            .and_then(|quota| quota.as_struct())
            .and_then(|quota| quota.get("name"))
            .and_then(|name| name.as_str()),
        Some("service_2")
    );
    let plain = rule(
        &rules,
        "test-domain",
        &[("key1", "value1"), ("subkey1", "subvalue1")],
    );
    assert!(plain.metadata.is_none());
}
