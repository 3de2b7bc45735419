//! What an answer's dynamic metadata holds, from rules loaded from YAML, a planned request and
//! the counters' say (given here instead of a store's).

use super::*;
use crate::arithmetic::algorithm::Snapshot;
use crate::decision::headers::HeaderMode;
use crate::decision::plan::{plan, PlanSettings};
use crate::decision::response::{assemble, CounterOutcome, Decided};
use crate::ground::unit::Unit;
use crate::policy::config::{load, LoadOptions, SourceFile};
use crate::policy::request::Entry;
use crate::policy::request::LimitOverride;
use crate::policy::rules::RuleSet;

/// Two rules with `metadata:`, a third without, one unlimited, one in shadow mode, one that
/// `replaces` another, and the ones whose stats keys the request's values may shape
/// (`detailed_metric`, `value_to_metric`), each with `metadata:`.
const RULES: &str = r#"
domain: shop
descriptors:
  - key: regular
    rate_limit: {name: regular_limit, unit: minute, requests_per_unit: 10}
    metadata: {name: service_1, team: {owner: alice}}
  - key: quota
    rate_limit: {unit: minute, requests_per_unit: 5}
    quota_mode: true
    metadata: {name: service_2, some_other_name: service_2, team: {owner: bob, pager: ops}}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {name: free}
  - key: trial
    rate_limit: {unit: minute, requests_per_unit: 1}
    shadow_mode: true
    metadata: {trial: shadowed}
  - key: old
    rate_limit: {name: old_limit, unit: minute, requests_per_unit: 1}
    metadata: {old: replaced}
  - key: new
    rate_limit: {unit: minute, requests_per_unit: 1, replaces: [{name: old_limit}]}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {detailed: kept}
  - key: valued
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {valued: kept}
  - key: detailed_parent
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {detailed_parent: kept}
    descriptors:
      - key: sub
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: valued_exact
    value: fixed
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {valued_exact: kept}
  - key: valued_wildcard
    value: "fix*"
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {valued_wildcard: kept}
  - key: shared_wildcard
    value: "fix*"
    value_to_metric: true
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {shared_wildcard: kept}
  - key: valued_parent
    value_to_metric: true
    descriptors:
      - key: leaf
        rate_limit: {unit: minute, requests_per_unit: 5}
        metadata: {valued_parent: kept}
"#;

fn rules() -> RuleSet {
    let source = SourceFile {
        name: "shop.yaml".to_owned(),
        text: RULES.to_owned(),
    };
    load(&[source], &LoadOptions::default())
        .unwrap_or_else(|errors| panic!("rules should load: {errors:?}"))
}

fn request(descriptors: &[&[(&str, &str)]]) -> Request {
    Request {
        domain: "shop".to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| {
                Descriptor::new(
                    entries
                        .iter()
                        .map(|(key, value)| Entry::new(*key, *value))
                        .collect(),
                )
            })
            .collect(),
        hits_addend: 0,
    }
}

/// The answer with dynamic metadata, where the counters of the descriptors in `over` refuse
/// and every other counter admits.
fn answer(
    request: &Request,
    over: &[usize],
    settings: PlanSettings,
    global_shadow: bool,
) -> Response {
    answer_with(
        request,
        over,
        (settings, global_shadow),
        RuleMetadata::Always,
    )
}

/// [`answer`], with the rules' metadata given as `rule_metadata` says.
fn answer_with(
    request: &Request,
    over: &[usize],
    (settings, global_shadow): (PlanSettings, bool),
    rule_metadata: RuleMetadata,
) -> Response {
    let rules = rules();
    let planned = plan(request, rules.domain(&request.domain), settings);
    let outcomes: Vec<CounterOutcome> = planned
        .counters
        .iter()
        .map(|counter| {
            let admitted = !over.contains(&counter.descriptor);
            CounterOutcome {
                admitted,
                snapshot: Snapshot {
                    remaining: u64::from(admitted),
                    reset_after: 0,
                },
                retry_after: if admitted { 0 } else { 1_000_000 },
                charged: admitted,
                withheld: false,
                wait: 0,
            }
        })
        .collect();
    let over_limit =
        Decided::from_outcomes(&planned.counters, outcomes.clone(), global_shadow).over_limit;
    let mut response = assemble(&planned, &outcomes, over_limit, HeaderMode::None);
    let domain = rules.domain(&request.domain);
    attach(&mut response, request, &planned, rule_metadata, domain);
    response
}

fn metadata_of(response: &Response) -> &MetadataStruct {
    response
        .dynamic_metadata
        .as_deref()
        .unwrap_or_else(|| panic!("no dynamic metadata: {response:?}"))
}

/// The merged `metadata` of the passed rules; `None` when the field is left out.
fn passed(response: &Response) -> Option<&MetadataStruct> {
    metadata_of(response)
        .get("metadata")
        .map(|value| match value.as_struct() {
            Some(inner) => inner,
            None => panic!("metadata is not a struct: {value:?}"),
        })
}

fn text_of<'m>(metadata: Option<&'m MetadataStruct>, name: &str) -> Option<&'m str> {
    metadata?.get(name)?.as_str()
}

fn text(value: &str) -> MetadataValue {
    MetadataValue::String(value.to_owned())
}

fn quota_mode() -> PlanSettings {
    PlanSettings {
        global_quota_mode: true,
        ..PlanSettings::default()
    }
}

#[test]
fn only_descriptors_that_passed_give_their_rules_metadata() {
    let request = request(&[&[("regular", "limit")], &[("quota", "limit")]]);
    let response = answer(&request, &[1], quota_mode(), false);
    assert_eq!(response.overall_code, Code::Ok, "one quota of two is over");
    let metadata = passed(&response);
    assert_eq!(text_of(metadata, "name"), Some("service_1"));
    assert_eq!(
        text_of(metadata, "some_other_name"),
        None,
        "the over quota descriptor gives nothing"
    );
}

#[test]
fn every_passed_descriptor_adds_its_names() {
    let request = request(&[&[("regular", "limit")], &[("quota", "limit")]]);
    let response = answer(&request, &[], quota_mode(), false);
    let metadata = passed(&response);
    assert_eq!(text_of(metadata, "name"), Some("service_1"));
    assert_eq!(text_of(metadata, "some_other_name"), Some("service_2"));
}

#[test]
fn the_first_descriptor_to_give_a_name_wins_and_structs_merge() {
    let request = request(&[&[("regular", "limit")], &[("quota", "limit")]]);
    let first = answer(&request, &[], quota_mode(), false);
    assert_eq!(text_of(passed(&first), "name"), Some("service_1"));
    let team = passed(&first)
        .and_then(|metadata| metadata.get("team"))
        .and_then(MetadataValue::as_struct);
    assert_eq!(text_of(team, "owner"), Some("alice"));
    assert_eq!(text_of(team, "pager"), Some("ops"));

    // In the other order, the other rule's values win.
    let swapped = self::request(&[&[("quota", "limit")], &[("regular", "limit")]]);
    let second = answer(&swapped, &[], quota_mode(), false);
    assert_eq!(text_of(passed(&second), "name"), Some("service_2"));
}

#[test]
fn an_over_limit_answer_still_carries_what_passed() {
    let request = request(&[&[("regular", "limit")], &[("plain", "x")]]);
    let response = answer(&request, &[0], PlanSettings::default(), false);
    assert_eq!(response.overall_code, Code::OverLimit);
    assert_eq!(
        passed(&response),
        None,
        "the only rule with metadata is over"
    );
    let metadata = metadata_of(&response);
    assert_eq!(metadata.get("domain"), Some(&text("shop")));

    let both = self::request(&[&[("plain", "x")], &[("quota", "q")]]);
    let response = answer(&both, &[0], PlanSettings::default(), false);
    assert_eq!(response.overall_code, Code::OverLimit);
    assert_eq!(text_of(passed(&response), "name"), Some("service_2"));
}

#[test]
fn unlimited_replaced_and_unmatched_descriptors_give_nothing() {
    let request = request(&[
        &[("free", "x")],
        &[("old", "x")],
        &[("new", "x")],
        &[("unknown", "x")],
    ]);
    let response = answer(&request, &[], PlanSettings::default(), false);
    assert_eq!(passed(&response), None, "{:?}", response.dynamic_metadata);
    assert_eq!(
        descriptors_of(&response).len(),
        4,
        "every descriptor is listed all the same"
    );
}

#[test]
fn shadow_mode_over_its_limit_passes_but_global_shadow_mode_does_not() {
    let request = request(&[&[("trial", "x")]]);
    let response = answer(&request, &[0], PlanSettings::default(), false);
    assert_eq!(text_of(passed(&response), "trial"), Some("shadowed"));

    let regular = self::request(&[&[("regular", "x")]]);
    let response = answer(&regular, &[0], PlanSettings::default(), true);
    assert_eq!(response.overall_code, Code::Ok, "--shadow-mode answers OK");
    assert_eq!(passed(&response), None, "but the descriptor was over");
}

#[test]
fn the_request_is_described_as_the_reference_does() {
    let mut request = request(&[&[("regular", "a"), ("sub", "b")], &[("plain", "x")]]);
    request.hits_addend = 3;
    request.descriptors[1].hits_addend = Some(7);
    request.descriptors[1].limit_override = Some(LimitOverride {
        requests_per_unit: 42,
        unit: Some(Unit::Minute),
        unit_multiplier: Some(2),
    });
    let response = answer(&request, &[], PlanSettings::default(), false);
    let metadata = metadata_of(&response);
    assert_eq!(metadata.get("domain"), Some(&text("shop")));
    assert_eq!(
        metadata.get("hitsAddend"),
        Some(&MetadataValue::Number(3.0))
    );
    let mut first = MetadataStruct::default();
    first.insert(
        "entries",
        MetadataValue::List(vec![text("regular=a"), text("sub=b")]),
    );
    first.insert("code", text("OK"));
    let mut second = MetadataStruct::default();
    second.insert("entries", MetadataValue::List(vec![text("plain=x")]));
    second.insert("code", text("OK"));
    second.insert(
        "limit",
        text("requests_per_unit:42 unit:MINUTE unit_multiplier:{value:2}"),
    );
    second.insert("hitsAddend", MetadataValue::Number(7.0));
    assert_eq!(
        metadata.get("descriptors"),
        Some(&MetadataValue::List(vec![
            MetadataValue::Struct(first),
            MetadataValue::Struct(second)
        ]))
    );
    // `regular` has two entries here, deeper than its rule: no rule, no metadata; an override
    // uses no configured rule either.
    assert_eq!(passed(&response), None);
    assert_eq!(
        metadata.fields.keys().collect::<Vec<_>>(),
        ["descriptors", "domain", "hitsAddend"]
    );
}

#[test]
fn a_request_hits_addend_of_zero_is_left_out() {
    let request = request(&[&[("regular", "limit")]]);
    let response = answer(&request, &[], PlanSettings::default(), false);
    assert_eq!(metadata_of(&response).get("hitsAddend"), None);
}

/// Every rule with detailed or value metrics, each passing, with the value it is asked with.
const STATS_KEYED: [(&str, &str, &str); 8] = [
    // (rule's metadata name, key, value); the leaf of `valued_parent` is asked below it.
    ("detailed", "detailed", "x"),
    ("detailed_parent", "detailed_parent", "x"),
    ("valued", "valued", "y"),
    ("valued_exact", "valued_exact", "fixed"),
    ("valued_wildcard", "valued_wildcard", "fixture"),
    ("shared_wildcard", "shared_wildcard", "fixture"),
    ("valued_parent", "valued_parent", "z"),
    ("valued", "valued", ""),
];

/// The metadata names the passed rules gave, one request per rule of [`STATS_KEYED`].
fn given_by_stats_keyed_rules(rule_metadata: RuleMetadata) -> Vec<(&'static str, bool)> {
    STATS_KEYED
        .iter()
        .map(|(name, key, value)| {
            let request = if *name == "valued_parent" {
                request(&[&[(key, value), ("leaf", "w")]])
            } else {
                request(&[&[(key, value)]])
            };
            let settings = (PlanSettings::default(), false);
            let response = answer_with(&request, &[], settings, rule_metadata);
            (*name, text_of(passed(&response), name) == Some("kept"))
        })
        .collect()
}

#[test]
fn rules_with_detailed_or_value_metrics_keep_their_metadata() {
    let given = given_by_stats_keyed_rules(RuleMetadata::Always);
    assert!(given.iter().all(|(_, kept)| *kept), "{given:?}");
}

#[test]
fn as_the_reference_limits_rebuilt_for_their_stats_key_give_no_metadata() {
    // The reference's GetLimit rebuilds a detailed_metric limit at a descriptor with nothing
    // below it, and any limit whose value_to_metric key differs from the rule's own; the
    // rebuilt limit has no metadata.
    let given = given_by_stats_keyed_rules(RuleMetadata::AsTheReference);
    assert_eq!(
        given,
        [
            ("detailed", false),
            // Descriptors below: the reference changes only its stats key, after the walk.
            ("detailed_parent", true),
            // A key-only level: the request's value goes into the key.
            ("valued", false),
            // The configured value is the request's: the key is the rule's own.
            ("valued_exact", true),
            // A pattern, replaced by the request's value.
            ("valued_wildcard", false),
            // share_threshold keeps the pattern in the key.
            ("shared_wildcard", true),
            // value_to_metric on a level above the rule counts too.
            ("valued_parent", false),
            // An empty value adds nothing to the key.
            ("valued", true),
        ]
    );
}

/// An answer's `descriptors` list.
fn descriptors_of(response: &Response) -> &[MetadataValue] {
    let descriptors = metadata_of(response).get("descriptors");
    let Some(MetadataValue::List(descriptors)) = descriptors else {
        panic!("descriptors is a list: {descriptors:?}");
    };
    descriptors
}

/// The struct of the descriptor at `index` in an answer's `descriptors`.
fn descriptor_at(response: &Response, index: usize) -> &MetadataStruct {
    let descriptors = descriptors_of(response);
    descriptors
        .get(index)
        .and_then(MetadataValue::as_struct)
        .unwrap_or_else(|| panic!("no descriptor struct at {index}: {descriptors:?}"))
}

fn code_and_name(response: &Response, index: usize) -> (Option<&str>, Option<&str>) {
    let descriptor = descriptor_at(response, index);
    (
        descriptor.get("code").and_then(MetadataValue::as_str),
        descriptor.get("limitName").and_then(MetadataValue::as_str),
    )
}

#[test]
fn each_descriptor_says_its_code_and_the_name_of_the_rule_that_decided_it() {
    let request = request(&[
        &[("regular", "x")],
        &[("plain", "x")],
        &[("free", "x")],
        &[("old", "x")],
        &[("unknown", "x")],
    ]);
    let response = answer(&request, &[0], PlanSettings::default(), false);
    assert_eq!(
        code_and_name(&response, 0),
        (Some("OVER_LIMIT"), Some("regular_limit"))
    );
    assert_eq!(code_and_name(&response, 1), (Some("OK"), None), "no name");
    assert_eq!(code_and_name(&response, 2), (Some("OK"), None), "unlimited");
    assert_eq!(
        code_and_name(&response, 3),
        (Some("OK"), Some("old_limit")),
        "nothing replaces it in this request"
    );
    assert_eq!(code_and_name(&response, 4), (Some("OK"), None), "no rule");
    // What was there before stays: the entries, and the domain beside the list.
    assert_eq!(
        descriptor_at(&response, 0).get("entries"),
        Some(&MetadataValue::List(vec![text("regular=x")]))
    );
    assert_eq!(metadata_of(&response).get("domain"), Some(&text("shop")));
}

#[test]
fn a_replaced_or_overridden_descriptor_has_a_code_but_no_limit_name() {
    let replaced = request(&[&[("old", "x")], &[("new", "x")]]);
    let response = answer(&replaced, &[], PlanSettings::default(), false);
    assert_eq!(code_and_name(&response, 0), (Some("OK"), None));

    let mut overridden = request(&[&[("regular", "x")]]);
    overridden.descriptors[0].limit_override = Some(LimitOverride {
        requests_per_unit: 5,
        unit: Some(Unit::Hour),
        unit_multiplier: None,
    });
    let response = answer(&overridden, &[0], PlanSettings::default(), false);
    assert_eq!(
        code_and_name(&response, 0),
        (Some("OVER_LIMIT"), None),
        "Envoy's limit is not the rule's"
    );
}

#[test]
fn the_code_is_the_descriptors_status_under_either_shadow_mode() {
    // A rule in its own shadow mode answers its descriptor OK.
    let trial = request(&[&[("trial", "x")]]);
    let response = answer(&trial, &[0], PlanSettings::default(), false);
    assert_eq!(code_and_name(&response, 0).0, Some("OK"));

    // `--shadow-mode` answers the request OK, but the descriptor was over.
    let regular = request(&[&[("regular", "x")]]);
    let response = answer(&regular, &[0], PlanSettings::default(), true);
    assert_eq!(response.overall_code, Code::Ok);
    assert_eq!(code_and_name(&response, 0).0, Some("OVER_LIMIT"));
}
