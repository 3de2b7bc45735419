//! `priority:` classes: what loads, how the class entry meets the tree, and every error.

use super::*;
use crate::arithmetic::algorithm::{Hits, Share};
use crate::decision::plan::{plan, DescriptorPlan, PlanSettings};
use crate::policy::request::{Descriptor, Request};

fn with_priority(priority: &str) -> String {
    format!(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: pool\n\
         \x20   value: checkout\n\
         \x20   rate_limit: {{unit: second, requests_per_unit: 100}}\n\
         \x20   priority: {priority}\n"
    )
}

const CLASSES: &str =
    "{key: priority, classes: {critical: 100%, normal: 80%, low: 12.5%}, default: low}";

fn percent(value: u32) -> Share {
    Share::from_millionths(value * 10_000).unwrap_or(Share::FULL)
}

#[test]
fn classes_load_in_file_order_with_their_shares_and_default() {
    let rules = loaded(&with_priority(CLASSES));
    let rule = rule_at(&rules, "d", "d.pool_checkout");
    let Some(priority) = &rule.priority else {
        panic!("no priority on {rule:?}");
    };
    assert_eq!(priority.key, "priority");
    let classes: Vec<(&str, Share)> = priority
        .classes
        .iter()
        .map(|class| (class.name.as_str(), class.share))
        .collect();
    let eighth = Share::from_millionths(125_000).unwrap_or(Share::FULL);
    assert_eq!(
        classes,
        [
            ("critical", Share::FULL),
            ("normal", percent(80)),
            ("low", eighth)
        ]
    );
    assert_eq!(priority.default, 2);
    assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
}

#[test]
fn the_class_entry_is_the_last_entry_and_not_a_level() {
    let rules = loaded(&with_priority(CLASSES));
    let with_class = matched(&rules, "d", &[("pool", "checkout"), ("priority", "low")]);
    let Some(with_class) = with_class else {
        panic!("the class entry must find the rule");
    };
    assert_eq!(with_class.rule.path, "d.pool_checkout");
    assert_eq!(with_class.levels.len(), 1);
    assert_eq!(with_class.class_entry, Some(1));
    let without = matched(&rules, "d", &[("pool", "checkout")]);
    assert_eq!(without.map(|m| m.class_entry), Some(None));
    // Not last, another key, or on a rule without classes: no match, as the reference.
    for pairs in [
        &[("pool", "checkout"), ("priority", "low"), ("x", "y")][..],
        &[("pool", "checkout"), ("tier", "low")],
        &[("priority", "low"), ("pool", "checkout")],
        &[("pool", "other"), ("priority", "low")],
    ] {
        assert_eq!(rule_path(&rules, "d", pairs), None, "{pairs:?}");
    }
}

fn request(pairs: &[&[(&str, &str)]]) -> Request {
    Request {
        domain: "d".into(),
        descriptors: pairs
            .iter()
            .map(|pairs| Descriptor::new(entries(pairs)))
            .collect(),
        hits_addend: 0,
    }
}

#[test]
fn every_class_charges_the_rule_s_one_counter() {
    let rules = loaded(&with_priority(CLASSES));
    let request = request(&[
        &[("pool", "checkout"), ("priority", "critical")],
        &[("pool", "checkout"), ("priority", "low")],
        &[("pool", "checkout")],
        &[("pool", "checkout"), ("priority", "gold")],
    ]);
    let planned = plan(&request, rules.domain("d"), PlanSettings::default());
    let keys: Vec<&[u8]> = planned.counters.iter().map(|c| c.key.as_slice()).collect();
    assert!(
        keys.windows(2).all(|pair| pair[0] == pair[1]),
        "one counter"
    );
    let shares: Vec<Share> = planned.counters.iter().map(|c| c.share).collect();
    let low = Share::from_millionths(125_000).unwrap_or(Share::FULL);
    // No entry, or an unknown class: the default.
    assert_eq!(shares, [Share::FULL, low, low, low]);
    assert!(planned.counters.iter().all(|c| c.hits == Hits::Charge(1)));
    let names: Vec<&str> = planned
        .descriptors
        .iter()
        .filter_map(|descriptor| match descriptor {
            DescriptorPlan::Limited {
                class: Some(class), ..
            } => Some(class.name()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["critical", "low", "low", "low"]);
}

#[track_caller]
fn assert_priority_error(priority: &str, start: &str, hints: &[&str]) {
    let error = single_error(&with_priority(priority));
    assert_error(&error, "d.pool_checkout", start, hints);
}

#[test]
fn the_class_key_classes_and_default_are_required() {
    assert_priority_error(
        "{classes: {all: 100%}, default: all}",
        "`priority.key` is missing",
        &["descriptor_key"],
    );
    assert_priority_error(
        "{key: p, default: all}",
        "`priority.classes` is missing",
        &["critical: 100%"],
    );
    assert_priority_error(
        "{key: p, classes: {}, default: all}",
        "`priority.classes` is empty",
        &["critical: 100%"],
    );
    assert_priority_error(
        "{key: p, classes: [all], default: all}",
        "error checking config: `priority.classes` must be a map of class: share",
        &["critical: 100%"],
    );
    assert_priority_error(
        "{key: p, classes: {all: 100%}}",
        "`priority.default` is missing",
        &["one of all"],
    );
    assert_priority_error(
        "high",
        "error checking config: `priority` must be a map",
        &[],
    );
}

#[test]
fn shares_are_percentages_above_nothing_up_to_the_whole() {
    for (share, why) in [
        (
            "80",
            "a share is a percentage of the capacity, found the number 80",
        ),
        (
            "0.8",
            "a share is a percentage of the capacity, found the decimal number 0.8",
        ),
        ("0%", "'0%' would refuse every request"),
        ("150%", "'150%' is more than the whole capacity"),
        ("ten%", "'ten%' is not a percentage"),
    ] {
        assert_priority_error(
            &format!("{{key: p, classes: {{all: 100%, low: {share}}}, default: low}}"),
            &format!("`priority.classes.low`: {why}"),
            &["`80%`"],
        );
    }
}

#[test]
fn one_class_must_have_the_whole_capacity() {
    assert_priority_error(
        "{key: p, classes: {normal: 80%, low: 50%}, default: low}",
        "no class in `priority.classes` may use 100% of the capacity",
        &["critical: 100%"],
    );
}

#[test]
fn class_names_are_plain_words() {
    assert_priority_error(
        "{key: p, classes: {\"very low\": 10%, all: 100%}, default: all}",
        "invalid class name 'very low'",
        &["starts with a letter", "metric label"],
    );
    assert_priority_error(
        "{key: p, classes: {1: 10%, all: 100%}, default: all}",
        "invalid class name '1'",
        &[],
    );
}

#[test]
fn the_default_must_name_a_class() {
    assert_priority_error(
        "{key: p, classes: {critical: 100%, low: 50%}, default: Low}",
        "`priority.default: Low` names no class in `priority.classes`",
        &["did you mean 'low'?", "critical, low"],
    );
}

#[test]
fn unknown_keys_inside_priority_are_errors_with_a_suggestion() {
    assert_priority_error(
        "{key: p, classes: {all: 100%}, default: all, defualt: all}",
        "config error, unknown key 'defualt' in `priority`",
        &["did you mean 'default'?", "key, classes, default"],
    );
}

#[test]
fn priority_needs_a_limit_on_its_descriptor() {
    let without_limit = "domain: d\n\
         descriptors:\n\
         \x20 - key: pool\n\
         \x20   priority: {key: p, classes: {all: 100%}, default: all}\n\
         \x20   descriptors:\n\
         \x20     - key: user\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 1}\n";
    assert_error(
        &single_error(without_limit),
        "d.pool",
        "`priority` needs a limit on the same descriptor",
        &["rate_limit"],
    );
    let unlimited = "domain: d\n\
         descriptors:\n\
         \x20 - key: pool\n\
         \x20   rate_limit: {unlimited: true}\n\
         \x20   priority: {key: p, classes: {all: 100%}, default: all}\n";
    assert_error(
        &single_error(unlimited),
        "d.pool",
        "`priority` has nothing to share on an unlimited rule",
        &[],
    );
}

#[test]
fn the_class_key_may_not_also_be_a_level_below() {
    let ambiguous = "domain: d\n\
         descriptors:\n\
         \x20 - key: pool\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 10}\n\
         \x20   priority: {key: tier, classes: {all: 100%}, default: all}\n\
         \x20   descriptors:\n\
         \x20     - key: tier\n\
         \x20       rate_limit: {unit: second, requests_per_unit: 1}\n";
    assert_error(
        &single_error(ambiguous),
        "d.pool",
        "`priority.key: tier` is also the key of a nested descriptor here",
        &["another key"],
    );
}

#[test]
fn a_share_too_small_for_a_capacity_is_a_warning() {
    let tiny = "domain: d\n\
         descriptors:\n\
         \x20 - key: pool\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket}\n\
         \x20   priority: {key: p, classes: {all: 100%, low: 50%}, default: low}\n";
    let rules = loaded(tiny);
    let warnings = rules.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].path, "d.pool");
    assert!(
        warnings[0]
            .message
            .starts_with("class 'low' may use 50% of a capacity of 1, which rounds down"),
        "{}",
        warnings[0].message
    );
}
