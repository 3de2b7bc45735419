//! What a decided call was, classified for whoever counts it: the verdict of the rule that
//! decided each descriptor (allowed, over its limit, over in shadow mode), the call's overall
//! decision, the descriptor and algorithm that drove the answer, the near-limit hits
//! ([`near_limit`]) and `detailed_metric`'s label. Telemetry counts these; it never classifies.

pub mod near_limit;
pub mod reference_counts;
pub mod stats_key;

use crate::arithmetic::algorithm::{Algorithm, Hits};
use crate::arithmetic::lease::LeaseOutcome;
use crate::decision::plan::{DescriptorPlan, Plan};
use crate::decision::response::{deciding_counter, Decided, Response};
use crate::decision::status::{Code, DescriptorStatus};
use crate::policy::rules::{DomainRules, MatchedLevel};
use near_limit::{near_limit_hits, threshold, Around};

/// How one ShouldRateLimit call ended (`floodgate_calls_total{decision}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Answered OK by at least one rule, nothing over.
    Ok,
    /// Answered OVER_LIMIT.
    OverLimit,
    /// Answered OK, but a limit in shadow mode (the rule's or `--shadow-mode`) was over.
    Shadow,
    /// Answered OK because no descriptor matched a rule (or the domain is unknown).
    Unknown,
    /// Not decided: an invalid request or a store failure.
    Error,
}

impl Decision {
    pub const ALL: [Decision; 5] = [
        Decision::Ok,
        Decision::OverLimit,
        Decision::Shadow,
        Decision::Unknown,
        Decision::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Decision::Ok => "ok",
            Decision::OverLimit => "over_limit",
            Decision::Shadow => "shadow",
            Decision::Unknown => "unknown",
            Decision::Error => "error",
        }
    }

    /// Its place in [`Decision::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why a descriptor (or a whole call) was rejected (`floodgate_requests_rejected_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// Over its limit.
    Limit,
    /// Over its limit, answered OK because of shadow mode: what *would* have been rejected.
    Shadow,
    /// The store failed and the failure policy answered OVER_LIMIT.
    FailurePolicy,
    /// A concurrency rule's new lease, refused by probabilistic shedding past `shed_above`
    /// while a slot was free.
    Shed,
    /// The request itself was malformed (no rule involved).
    InvalidRequest,
}

impl RejectReason {
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::Limit => "limit",
            RejectReason::Shadow => "shadow",
            RejectReason::FailurePolicy => "failure_policy",
            RejectReason::Shed => "shed",
            RejectReason::InvalidRequest => "invalid_request",
        }
    }
}

/// The longest `detailed_metric` label kept; longer ones are cut (at a character boundary).
/// A request value can be kilobytes long and would be kept for the life of the process.
pub const MAX_DETAILED_LABEL_BYTES: usize = 256;

/// What the rule of one descriptor said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleVerdict {
    Allowed,
    Rejected(RejectReason),
}

/// The verdict of the rule that decided one descriptor; `None` when no rule did (no match, or
/// the rule was replaced by another for this call). Global shadow mode (`--shadow-mode`)
/// leaves an over-limit descriptor status in place but answers OK: that is a shadow rejection.
pub fn classify_descriptor(
    plan: &DescriptorPlan<'_>,
    status: &DescriptorStatus,
    global_shadow: bool,
    leases: &[LeaseOutcome],
) -> Option<RuleVerdict> {
    match plan {
        DescriptorPlan::NoRule | DescriptorPlan::Replaced { .. } => None,
        DescriptorPlan::Unlimited { .. } => Some(RuleVerdict::Allowed),
        DescriptorPlan::Limited { .. } | DescriptorPlan::Concurrency { .. } => Some(
            if status.shadowed || (global_shadow && status.code == Code::OverLimit) {
                RuleVerdict::Rejected(RejectReason::Shadow)
            } else if status.code == Code::OverLimit {
                RuleVerdict::Rejected(if lease_shed(plan, leases) {
                    RejectReason::Shed
                } else {
                    RejectReason::Limit
                })
            } else {
                RuleVerdict::Allowed
            },
        ),
    }
}

/// Whether the descriptor's lease call (a concurrency rule's) was refused by shedding.
fn lease_shed(plan: &DescriptorPlan<'_>, leases: &[LeaseOutcome]) -> bool {
    match plan {
        DescriptorPlan::Concurrency {
            lease: Some(index), ..
        } => leases.get(*index).is_some_and(|outcome| outcome.shed),
        _ => false,
    }
}

/// The call's decision, from its descriptors' verdicts (added one by one, so recording needs
/// no list) and the overall code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecisionTally {
    any_rule: bool,
    shadowed: bool,
}

impl DecisionTally {
    pub fn add(&mut self, verdict: Option<RuleVerdict>) {
        if let Some(verdict) = verdict {
            self.any_rule = true;
            self.shadowed |= verdict == RuleVerdict::Rejected(RejectReason::Shadow);
        }
    }

    pub fn decision(self, overall: Code) -> Decision {
        if overall == Code::OverLimit {
            Decision::OverLimit
        } else if self.shadowed {
            Decision::Shadow
        } else if self.any_rule {
            Decision::Ok
        } else {
            Decision::Unknown
        }
    }
}

/// Near-limit hits of one descriptor: the most of any of its counters (several limits on one
/// descriptor must not count one hit several times).
pub fn descriptor_near_limit(
    plan: &Plan<'_>,
    counters: &std::ops::Range<usize>,
    decided: &Decided,
    ratio: f32,
) -> u64 {
    counters
        .clone()
        .filter_map(|index| {
            let counter = plan.counters.get(index)?;
            let outcome = decided.outcomes.get(index)?;
            let Hits::Charge(hits) = counter.hits else {
                return None;
            };
            let capacity = counter.quota.capacity();
            let around = Around::of(outcome, capacity, hits);
            let near = threshold(capacity, ratio);
            Some(near_limit_hits(
                capacity,
                near,
                around,
                hits,
                outcome.admitted,
            ))
        })
        .max()
        .unwrap_or(0)
}

/// The descriptor whose rule drove the answer: the first over its limit, else the first over
/// in shadow mode, else the limited one with the least budget left, else the first matched.
pub fn deciding_descriptor(plan: &Plan<'_>, response: &Response) -> Option<usize> {
    let statuses = &response.statuses;
    let limited = |index: &usize| {
        matches!(
            plan.descriptors.get(*index),
            Some(DescriptorPlan::Limited { .. } | DescriptorPlan::Concurrency { .. })
        )
    };
    let indices = || (0..statuses.len()).filter(limited);
    indices()
        .find(|&index| statuses[index].code == Code::OverLimit)
        .or_else(|| indices().find(|&index| statuses[index].shadowed))
        .or_else(|| indices().min_by_key(|&index| statuses[index].limit_remaining))
        .or_else(|| {
            statuses
                .iter()
                .position(|status| status.rule_path.is_some())
        })
}

/// The algorithm of the limit that decided descriptor `index` (the tightest of its counters,
/// as the answer reports it).
pub fn deciding_algorithm(plan: &Plan<'_>, decided: &Decided, index: usize) -> Option<Algorithm> {
    let DescriptorPlan::Limited { counters, .. } = plan.descriptors.get(index)? else {
        return None;
    };
    deciding_counter(plan, counters, &decided.outcomes).map(|(counter, _)| counter.quota.algorithm)
}

/// `detailed_metric`'s label, as the reference builds its stats key: the domain, then per
/// entry `key_value` with the request's value (a `share_threshold` wildcard level shows its
/// pattern instead, since all its values share one counter).
pub fn detailed_label(
    domain: &DomainRules,
    request_entries: &[crate::policy::request::Entry],
) -> Option<String> {
    let matched = domain.lookup(request_entries)?;
    let mut label = domain.name.clone();
    for (entry, level) in request_entries.iter().zip(&matched.levels) {
        label.push('.');
        label.push_str(&entry.key);
        label.push('_');
        match level {
            MatchedLevel::Wildcard {
                pattern,
                shared: true,
            } => label.push_str(pattern),
            _ => label.push_str(&entry.value),
        }
    }
    Some(stats_key::bounded(label))
}
