//! Where a limit's `overflow` comes from when it does not say: its file's `overflow:`, else
//! `--overflow` (`LoadOptions::default_overflow`) — which reaches the rules pushed over xDS
//! (loaded as files without it) and Envoy's `limit` override (through the domain).

use super::*;
use crate::arithmetic::algorithm::Overflow;
use crate::decision::plan::{plan, LimitSource, PlanSettings};
use crate::ground::unit::Unit;
use crate::policy::request::{Descriptor, LimitOverride, Request};

const RULES: &str = "
descriptors:
  - key: tokens
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: refusing
    rate_limit: {unit: day, requests_per_unit: 100, overflow: refuse}
  - key: bucket
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
";

fn domain_file(top: &str) -> String {
    format!("domain: llm\n{top}{RULES}")
}

fn overflow_of(rules: &RuleSet, key: &str) -> Overflow {
    rule_at(rules, "llm", &format!("llm.{key}")).limits[0].overflow
}

/// The overflow of the quota Envoy's `limit` override gets in domain `llm`.
fn override_overflow(rules: &RuleSet) -> Overflow {
    let mut descriptor = Descriptor::new(entries(&[("tenant", "a")]));
    descriptor.limit_override = Some(LimitOverride {
        requests_per_unit: 100,
        unit: Some(Unit::Day),
        unit_multiplier: None,
    });
    let request = Request {
        domain: "llm".to_owned(),
        descriptors: vec![descriptor],
        hits_addend: 1,
    };
    let planned = plan(&request, rules.domain("llm"), PlanSettings::default());
    match planned.descriptors.first() {
        Some(crate::decision::plan::DescriptorPlan::Limited {
            limit: LimitSource::Override { quotas, .. },
            ..
        }) => quotas[0].overflow,
        other => panic!("{other:?}"),
    }
}

fn owing_by_default() -> LoadOptions {
    LoadOptions {
        default_overflow: Overflow::Owe,
        ..LoadOptions::default()
    }
}

#[test]
fn a_domain_that_owes_owes_for_its_windows_that_do_not_say_and_for_overrides() {
    let rules = loaded(&domain_file("overflow: owe\n"));
    assert_eq!(overflow_of(&rules, "tokens"), Overflow::Owe);
    assert_eq!(overflow_of(&rules, "refusing"), Overflow::Refuse);
    assert_eq!(
        overflow_of(&rules, "bucket"),
        Overflow::Refuse,
        "a bucket holds admitted hits only"
    );
    assert_eq!(override_overflow(&rules), Overflow::Owe);
}

#[test]
fn the_process_default_reaches_files_without_overflow_and_their_overrides() {
    let rules = loaded_with(&domain_file(""), &owing_by_default());
    assert_eq!(overflow_of(&rules, "tokens"), Overflow::Owe);
    assert_eq!(overflow_of(&rules, "refusing"), Overflow::Refuse);
    assert_eq!(overflow_of(&rules, "bucket"), Overflow::Refuse);
    assert_eq!(override_overflow(&rules), Overflow::Owe);
    // The domain's own word wins over the process's.
    let refusing = loaded_with(&domain_file("overflow: refuse\n"), &owing_by_default());
    assert_eq!(overflow_of(&refusing, "tokens"), Overflow::Refuse);
    assert_eq!(override_overflow(&refusing), Overflow::Refuse);
}

#[test]
fn without_any_overflow_a_charge_that_does_not_fit_is_refused() {
    let rules = loaded(&domain_file(""));
    assert_eq!(overflow_of(&rules, "tokens"), Overflow::Refuse);
    assert_eq!(override_overflow(&rules), Overflow::Refuse);
}

#[test]
fn merged_files_of_one_domain_must_agree_on_its_overflow() {
    let merged = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let first = "domain: llm\noverflow: owe\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    let agreeing = "domain: llm\noverflow: owe\ndescriptors:\n  - key: b\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    let silent = "domain: llm\ndescriptors:\n  - key: c\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    let other = "domain: llm\noverflow: refuse\ndescriptors:\n  - key: d\n    rate_limit: {unit: day, requests_per_unit: 1}\n";
    assert!(load_files(&[("1.yaml", first), ("2.yaml", agreeing)], &merged).is_ok());
    let rules = match load_files(&[("1.yaml", first), ("3.yaml", silent)], &merged) {
        Ok(rules) => rules,
        Err(errors) => panic!("{}", lines(&errors)),
    };
    assert_eq!(override_overflow(&rules), Overflow::Owe);
    let refused = match load_files(&[("1.yaml", first), ("4.yaml", other)], &merged) {
        Ok(_) => panic!("merged files that disagree should be refused"),
        Err(errors) => errors,
    };
    assert!(
        refused.iter().any(|error| error
            .message
            .contains("`overflow: refuse` differs from `overflow: owe`")),
        "{}",
        lines(&refused)
    );
}

#[test]
fn a_domain_overflow_that_is_not_a_word_floodgate_knows_is_refused() {
    let errors = errors_of(&domain_file("overflow: debt\n"));
    assert!(
        errors
            .iter()
            .any(|error| error.message.contains("debt") && error.message.contains("owe")),
        "{}",
        lines(&errors)
    );
}
