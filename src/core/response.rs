//! The answer to a request, from the plan and what the store said about each counter: one status
//! per descriptor, in order, the overall code and the rate-limit headers.

use super::algorithm::{Quota, Snapshot};
use super::headers::{response_headers, HeaderMode};
use super::plan::{DescriptorPlan, LimitSource, Plan};
use super::time::Micros;
use super::unit::Unit;
use super::verdict::Role;

/// What the store found for one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterOutcome {
    pub admitted: bool,
    /// Budget and reset as they stand after the store acted (charged when the request passed).
    pub snapshot: Snapshot,
    /// When not admitted: time until the hits could fit.
    pub retry_after: Micros,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

/// `current_limit` of a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub unit_multiplier: u32,
    pub name: Option<String>,
}

impl CurrentLimit {
    fn of(quota: &Quota, name: Option<&str>) -> Self {
        Self {
            requests_per_unit: quota.requests_per_unit,
            unit: quota.unit,
            unit_multiplier: quota.unit_multiplier.max(1),
            name: name.map(str::to_owned),
        }
    }

    pub fn window_seconds(&self) -> u64 {
        self.unit.seconds() * u64::from(self.unit_multiplier)
    }
}

/// One descriptor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    pub code: Code,
    pub current_limit: Option<CurrentLimit>,
    pub limit_remaining: u32,
    /// Until the counter is whole again (OK) or until the request could pass (OVER_LIMIT).
    pub duration_until_reset: Option<Micros>,
    /// The rule that decided (its config path), for headers, logs and `check`.
    pub rule_path: Option<String>,
    /// The limit that decided was in shadow mode and over: reported as OK.
    pub shadowed: bool,
}

impl DescriptorStatus {
    fn without_limit(remaining: u32, rule_path: Option<String>) -> Self {
        Self {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: remaining,
            duration_until_reset: None,
            rule_path,
            shadowed: false,
        }
    }
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub overall_code: Code,
    pub statuses: Vec<DescriptorStatus>,
    pub response_headers: Vec<(String, String)>,
}

/// Builds the answer. `over_limit` is the store's verdict (`verdict::request_over_limit`).
pub fn assemble(
    plan: &Plan<'_>,
    outcomes: &[CounterOutcome],
    over_limit: bool,
    header_mode: HeaderMode,
) -> Response {
    let statuses: Vec<DescriptorStatus> = plan
        .descriptors
        .iter()
        .map(|descriptor| status_of(descriptor, plan, outcomes))
        .collect();
    let overall_code = if over_limit {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let response_headers = response_headers(header_mode, &statuses);
    Response {
        overall_code,
        statuses,
        response_headers,
    }
}

fn status_of(
    descriptor: &DescriptorPlan<'_>,
    plan: &Plan<'_>,
    outcomes: &[CounterOutcome],
) -> DescriptorStatus {
    match descriptor {
        DescriptorPlan::NoRule => DescriptorStatus::without_limit(0, None),
        DescriptorPlan::Replaced { rule } => {
            DescriptorStatus::without_limit(0, Some(rule.path.clone()))
        }
        DescriptorPlan::Unlimited { rule } => {
            DescriptorStatus::without_limit(u32::MAX, Some(rule.path.clone()))
        }
        DescriptorPlan::Limited { limit, counters } => {
            let quotas = limit.quotas();
            let deciding = counters
                .clone()
                .zip(quotas)
                .filter_map(|(index, quota)| outcomes.get(index).map(|outcome| (quota, outcome)))
                .min_by_key(|(_, outcome)| (outcome.admitted, outcome.snapshot.remaining));
            match deciding {
                Some((quota, outcome)) => limited_status(limit, plan, counters, quota, outcome),
                None => DescriptorStatus::without_limit(0, Some(limit.path().to_owned())),
            }
        }
    }
}

fn limited_status(
    limit: &LimitSource<'_>,
    plan: &Plan<'_>,
    counters: &std::ops::Range<usize>,
    quota: &Quota,
    outcome: &CounterOutcome,
) -> DescriptorStatus {
    let shadow = plan
        .counters
        .get(counters.start)
        .is_some_and(|counter| counter.role == Role::Shadow);
    let over = !outcome.admitted;
    let code = if over && !shadow {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let duration = if over {
        outcome.retry_after
    } else {
        outcome.snapshot.reset_after
    };
    DescriptorStatus {
        code,
        current_limit: Some(CurrentLimit::of(quota, limit.name())),
        limit_remaining: if over {
            0
        } else {
            u32::try_from(outcome.snapshot.remaining).unwrap_or(u32::MAX)
        },
        duration_until_reset: Some(duration.max(0)),
        rule_path: Some(limit.path().to_owned()),
        shadowed: over && shadow,
    }
}
