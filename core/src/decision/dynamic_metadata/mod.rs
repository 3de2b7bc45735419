//! The `dynamic_metadata` of an answer, when asked for (`--response-dynamic-metadata`, the
//! reference's `RESPONSE_DYNAMIC_METADATA`): what envoyproxy/ratelimit's `ratelimitToMetadata`
//! puts there, with its field names, so that an access log reads the same after the swap.
//!
//! - `domain`: the request's domain.
//! - `descriptors`: one struct per descriptor, in order: `entries` (`key=value` texts), `limit`
//!   (Envoy's override, in protobuf text form) and `hitsAddend` when the descriptor set them;
//!   then, as envoyproxy/ratelimit's open pull request #1239 proposes (for AI Gateway's
//!   QuotaPolicy, to route on which rule fired), `code` (the descriptor's status, `OK` or `OVER_LIMIT`, as the enum's name)
//!   and `limitName` (the `rate_limit.name` of the rule that decided it, left out when that rule
//!   has none or no rule decided: unmatched, `unlimited`, replaced and overridden descriptors).
//!   Added to the fields above, not in place of any: an access log that read them reads the same.
//! - `hitsAddend`: the request's, when not 0.
//! - `metadata`: the `metadata:` of the rules of the descriptors that passed, merged in
//!   descriptor order, the first value of a name winning (`MetadataStruct::merge_first_wins`);
//!   left out when no such rule has any. A descriptor passed when a configured rule limited it
//!   and its status is OK: an over-limit descriptor (also a quota one, or one over under
//!   `--shadow-mode`, which leaves its status OVER_LIMIT) gives nothing, nor do `unlimited`,
//!   replaced, unmatched and overridden descriptors. A rule over in its own `shadow_mode` is
//!   answered OK, so it gives its metadata, as in the reference. With
//!   [`RuleMetadata::AsTheReference`], neither do the rules whose limit the reference rebuilds
//!   for its stats key (`rebuilt`: most `detailed_metric` rules, and `value_to_metric` ones
//!   whose key the request's values change).

mod rebuilt;

use crate::decision::plan::{DescriptorPlan, Plan};
use crate::decision::response::Response;
use crate::decision::status::{Code, DescriptorStatus};
use crate::ground::metadata::{MetadataStruct, MetadataValue};
use crate::policy::request::{Descriptor, LimitOverride, Request};
use crate::policy::rules::DomainRules;

/// Which passed rules give their `metadata:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RuleMetadata {
    /// Every rule that has some: an access log reads the rule's metadata whatever its stats.
    #[default]
    Always,
    /// envoyproxy/ratelimit's: not a rule whose limit it rebuilds for its stats key
    /// (`detailed_metric`, `value_to_metric`), since the rebuilt limit has no metadata.
    AsTheReference,
}

/// Sets `response.dynamic_metadata` from the request, its plan and the statuses already in it;
/// `domain` is the request's domain's rules (for [`RuleMetadata::AsTheReference`]).
pub fn attach(
    response: &mut Response,
    request: &Request,
    plan: &Plan<'_>,
    rule_metadata: RuleMetadata,
    domain: Option<&DomainRules>,
) {
    let statuses = &response.statuses;
    let metadata = dynamic_metadata(request, plan, statuses, rule_metadata, domain);
    response.dynamic_metadata = Some(Box::new(metadata));
}

/// The Struct for one answer.
pub fn dynamic_metadata(
    request: &Request,
    plan: &Plan<'_>,
    statuses: &[DescriptorStatus],
    rule_metadata: RuleMetadata,
    domain: Option<&DomainRules>,
) -> MetadataStruct {
    let mut fields = MetadataStruct::default();
    fields.insert("domain", MetadataValue::String(request.domain.clone()));
    let descriptors = request
        .descriptors
        .iter()
        .enumerate()
        .map(|(index, descriptor)| {
            let decided = Decided {
                status: statuses.get(index),
                plan: plan.descriptors.get(index),
            };
            descriptor_struct(descriptor, &decided)
        })
        .collect();
    fields.insert("descriptors", MetadataValue::List(descriptors));
    if request.hits_addend != 0 {
        let hits = MetadataValue::Number(f64::from(request.hits_addend));
        fields.insert("hitsAddend", hits);
    }
    let passed = passed_rules_metadata(request, plan, statuses, rule_metadata, domain);
    if !passed.is_empty() {
        fields.insert("metadata", MetadataValue::Struct(passed));
    }
    fields
}

/// How one descriptor was decided: its status and its plan (absent only for a response that
/// does not match its request, which no caller builds).
struct Decided<'p, 'a> {
    status: Option<&'p DescriptorStatus>,
    plan: Option<&'p DescriptorPlan<'a>>,
}

fn descriptor_struct(descriptor: &Descriptor, decided: &Decided<'_, '_>) -> MetadataValue {
    let mut fields = MetadataStruct::default();
    let entries = descriptor
        .entries
        .iter()
        .map(|entry| MetadataValue::String(format!("{}={}", entry.key, entry.value)))
        .collect();
    fields.insert("entries", MetadataValue::List(entries));
    if let Some(limit) = &descriptor.limit_override {
        fields.insert("limit", MetadataValue::String(override_text(limit)));
    }
    if let Some(hits) = descriptor.hits_addend {
        // As Go's float64(uint64): exact up to 2^53.
        #[allow(clippy::cast_precision_loss)]
        fields.insert("hitsAddend", MetadataValue::Number(hits as f64));
    }
    if let Some(status) = decided.status {
        fields.insert(
            "code",
            MetadataValue::String(code_name(status.code).to_owned()),
        );
    }
    if let Some(name) = decided.plan.and_then(deciding_rule_name) {
        fields.insert("limitName", MetadataValue::String(name.to_owned()));
    }
    MetadataValue::Struct(fields)
}

/// The status code as the proto enum names it (Go's `Code.String()`).
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// `rate_limit.name` of the configured rule that decided a descriptor. The reference names a
/// descriptor by the limit it checked: none for an unmatched, `unlimited` or replaced one (it
/// checks none), nor for Envoy's override (a limit it builds without a name).
fn deciding_rule_name<'p>(plan: &'p DescriptorPlan<'_>) -> Option<&'p str> {
    let rule = match plan {
        DescriptorPlan::Limited { limit, .. } => limit.rule()?,
        DescriptorPlan::Concurrency { rule, .. } => rule,
        DescriptorPlan::NoRule
        | DescriptorPlan::Replaced { .. }
        | DescriptorPlan::Unlimited { .. } => return None,
    };
    rule.name.as_deref().filter(|name| !name.is_empty())
}

/// The override as protobuf's text form writes it (Go's `String()` of `RateLimitOverride`):
/// fields at their zero value left out.
fn override_text(limit: &LimitOverride) -> String {
    let mut parts = Vec::with_capacity(3);
    if limit.requests_per_unit != 0 {
        parts.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if let Some(unit) = limit.unit {
        parts.push(format!("unit:{}", unit.name()));
    }
    if let Some(multiplier) = limit.unit_multiplier {
        parts.push(format!("unit_multiplier:{{value:{multiplier}}}"));
    }
    parts.join(" ")
}

/// The merged `metadata:` of the rules whose descriptors passed, in descriptor order.
fn passed_rules_metadata(
    request: &Request,
    plan: &Plan<'_>,
    statuses: &[DescriptorStatus],
    choice: RuleMetadata,
    domain: Option<&DomainRules>,
) -> MetadataStruct {
    let mut merged = MetadataStruct::default();
    let planned = plan.descriptors.iter().zip(&request.descriptors);
    for ((descriptor_plan, descriptor), status) in planned.zip(statuses) {
        let DescriptorPlan::Limited { limit, .. } = descriptor_plan else {
            continue;
        };
        if status.code != Code::Ok {
            continue;
        }
        let Some(rule) = limit.rule() else {
            continue;
        };
        let Some(metadata) = rule.metadata.as_deref() else {
            continue;
        };
        let left_out = match (choice, domain) {
            (RuleMetadata::AsTheReference, Some(domain)) => {
                rebuilt::rebuilt_without_metadata(domain, rule, descriptor)
            }
            _ => false,
        };
        if !left_out {
            merged.merge_first_wins(metadata);
        }
    }
    merged
}

#[cfg(test)]
mod tests;
