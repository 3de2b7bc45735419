//! The answer to a request, from the plan and what the store said about each counter: one status
//! per descriptor, in order, the overall code and the rate-limit headers.
//!
//! A descriptor decided in a priority class is reported as the class sees its counters:
//! `limit_remaining` is what the class can still use (the shared remaining minus its reserve),
//! `current_limit.requests_per_unit` its share of the limit (floor(L × share)), and
//! `duration_until_reset` of a refused class the time until the hit fits above its reserve.
//! A refused class also gets the `x-floodgate-priority` header (`headers::priority_headers`).
//!
//! A concurrency rule's descriptor (`response::leases`) carries its in-flight limit apart from
//! `current_limit`, which has a rate unit: the headers describe it, the proxy reads no rate.

use crate::arithmetic::algorithm::{Hits, Snapshot};
use crate::arithmetic::failure::UNAVAILABLE_HEADER;
use crate::arithmetic::lease::LeaseOutcome;
use crate::arithmetic::priority::ClassChoice;
use crate::decision::headers::{
    priority_headers, response_headers, ClassRefusal, HeaderMode, Refused,
};
use crate::decision::plan::{Counter, DescriptorPlan, LimitSource, Plan};
use crate::decision::status::{Code, CurrentLimit, DescriptorStatus};
use crate::ground::metadata::MetadataStruct;
use crate::ground::time::Micros;
use crate::ground::verdict::{request_over_limit, Role, Vote};

#[cfg(test)]
mod lease_refusal_tests;
mod leases;

pub use leases::LEASE_REFUSAL_WAIT;

/// What the store found for one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterOutcome {
    pub admitted: bool,
    /// Budget and reset after the charge when the counter admitted and was charged, else as
    /// the counter stood when judged (`core::decision::charging`).
    pub snapshot: Snapshot,
    /// When not admitted: time until the hits could fit.
    pub retry_after: Micros,
    /// Whether the store kept what the hits did to the counter: charged (refused hits
    /// recorded, with `--charge every-descriptor`) or refunded.
    pub charged: bool,
    /// A charge held back because another counter of the request refused, under all-or-refused
    /// charging (envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`): not
    /// charged, and admitted unless the count passed the limit by other calls meanwhile (the
    /// reference's two round trips). The reference increments its key by 0 and reads the count
    /// that answers as the count after the hits; its stats follow that reading
    /// (`outcome::near_limit::Around`).
    pub withheld: bool,
    /// How long the answer is held for this counter's turn (a queueing leaky bucket's admitted
    /// and charged hits, `core::arithmetic::algorithm::Queue`); 0 at once.
    pub wait: Micros,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub overall_code: Code,
    pub statuses: Vec<DescriptorStatus>,
    pub response_headers: Vec<(String, String)>,
    /// Set only when asked for (`core::decision::dynamic_metadata`). Boxed: an answer without it, the
    /// usual case, grows by one pointer and allocates nothing.
    pub dynamic_metadata: Option<Box<MetadataStruct>>,
}

/// Builds the answer. `over_limit` is the store's verdict (`verdict::request_over_limit`).
pub fn assemble(
    plan: &Plan<'_>,
    outcomes: &[CounterOutcome],
    over_limit: bool,
    header_mode: HeaderMode,
) -> Response {
    assemble_with_leases(plan, (outcomes, &[]), over_limit, header_mode)
}

/// [`assemble`] of a plan with lease calls too: `leases` holds one outcome per
/// `plan.leases` (`core::arithmetic::lease`), and `over_limit` joins both verdicts
/// ([`crate::decision::plan::leases_over_limit`]).
pub fn assemble_with_leases(
    plan: &Plan<'_>,
    (outcomes, leases): (&[CounterOutcome], &[LeaseOutcome]),
    over_limit: bool,
    header_mode: HeaderMode,
) -> Response {
    let statuses: Vec<DescriptorStatus> = plan
        .descriptors
        .iter()
        .map(|descriptor| status_of(descriptor, plan, outcomes, leases))
        .collect();
    let overall_code = if over_limit {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let mut response_headers = response_headers(header_mode, &statuses);
    if let Some(refusal) = over_limit
        .then(|| class_refusal(plan, (outcomes, leases), &statuses))
        .flatten()
    {
        response_headers.extend(priority_headers(header_mode, &statuses, &refusal));
    }
    Response {
        overall_code,
        statuses,
        response_headers,
        dynamic_metadata: None,
    }
}

/// OVER_LIMIT on every limited descriptor (the others stay OK), with a header naming the store
/// that could not decide.
pub fn fail_closed(plan: &Plan<'_>, header_mode: HeaderMode, backend: &str) -> Response {
    let mut response = assemble(plan, &[], true, header_mode);
    for (descriptor, status) in plan.descriptors.iter().zip(&mut response.statuses) {
        if matches!(
            descriptor,
            DescriptorPlan::Limited { .. } | DescriptorPlan::Concurrency { .. }
        ) {
            status.code = Code::OverLimit;
        }
    }
    response
        .response_headers
        .push((UNAVAILABLE_HEADER.to_owned(), backend.to_owned()));
    response
}

fn status_of(
    descriptor: &DescriptorPlan<'_>,
    plan: &Plan<'_>,
    outcomes: &[CounterOutcome],
    leases: &[LeaseOutcome],
) -> DescriptorStatus {
    match descriptor {
        DescriptorPlan::Concurrency { rule, lease, class } => {
            let call = lease.and_then(|at| plan.leases.get(at));
            let outcome = lease.and_then(|at| leases.get(at));
            leases::lease_status(rule, *class, call, outcome)
        }
        DescriptorPlan::NoRule => DescriptorStatus::without_limit(0, None),
        DescriptorPlan::Replaced { rule } => {
            DescriptorStatus::without_limit(0, Some(rule.path.clone()))
        }
        DescriptorPlan::Unlimited { rule } => {
            DescriptorStatus::without_limit(u32::MAX, Some(rule.path.clone()))
        }
        DescriptorPlan::Limited {
            limit, counters, ..
        } => match deciding_counter(plan, counters, outcomes) {
            Some((counter, outcome)) => limited_status(limit, plan, counters, counter, outcome),
            None => DescriptorStatus::without_limit(0, Some(limit.path().to_owned())),
        },
    }
}

/// The counter that answers for a descriptor: a refusing one before an admitting one, then the
/// least budget left for the descriptor's class. Metrics name its algorithm
/// (`telemetry::record::deciding_algorithm`), so they and the answer agree.
pub fn deciding_counter<'p>(
    plan: &'p Plan<'_>,
    counters: &std::ops::Range<usize>,
    outcomes: &'p [CounterOutcome],
) -> Option<(&'p Counter, &'p CounterOutcome)> {
    counters
        .clone()
        .filter_map(|index| Some((plan.counters.get(index)?, outcomes.get(index)?)))
        .min_by_key(|(counter, outcome)| (outcome.admitted, class_remaining(counter, outcome)))
}

/// What the counter's class can still use: the shared remaining above its reserve.
fn class_remaining(counter: &Counter, outcome: &CounterOutcome) -> u64 {
    let reserve = counter.quota.reserve(counter.share);
    outcome.snapshot.remaining.saturating_sub(reserve)
}

/// The first descriptor refused in its priority class (not in shadow mode), for the header.
fn class_refusal<'a>(
    plan: &Plan<'a>,
    (outcomes, leases): (&[CounterOutcome], &[LeaseOutcome]),
    statuses: &[DescriptorStatus],
) -> Option<ClassRefusal<'a>> {
    plan.descriptors
        .iter()
        .zip(statuses)
        .filter(|(_, status)| status.code == Code::OverLimit && !status.shadowed)
        .find_map(|(descriptor, _)| match descriptor {
            DescriptorPlan::Limited {
                counters,
                class: Some(class),
                ..
            } => {
                let (counter, outcome) = deciding_counter(plan, counters, outcomes)?;
                Some(refusal_of(*class, counter, outcome))
            }
            DescriptorPlan::Concurrency {
                lease: Some(at),
                class: Some(class),
                ..
            } => {
                let (call, outcome) = (plan.leases.get(*at)?, leases.get(*at)?);
                // Shed past the soft threshold, a free slot kept for the classes above, or
                // none at all.
                let reason = if outcome.shed {
                    Refused::Shed
                } else if outcome.in_flight < call.max_in_flight {
                    Refused::Reserved
                } else {
                    Refused::Full
                };
                Some(ClassRefusal {
                    class: class.name(),
                    reason,
                    reserved_for: class.reserved_for(),
                })
            }
            _ => None,
        })
}

/// Why a class was refused: the shared counter still had room for the hits (kept for the
/// classes above), or it had none.
fn refusal_of<'a>(
    class: ClassChoice<'a>,
    counter: &Counter,
    outcome: &CounterOutcome,
) -> ClassRefusal<'a> {
    let needed = match counter.hits {
        Hits::Charge(n) => n,
        _ => 1,
    };
    let reason = if outcome.snapshot.remaining >= needed {
        Refused::Reserved
    } else {
        Refused::Full
    };
    ClassRefusal {
        class: class.name(),
        reason,
        reserved_for: class.reserved_for(),
    }
}

fn limited_status(
    limit: &LimitSource<'_>,
    plan: &Plan<'_>,
    counters: &std::ops::Range<usize>,
    counter: &Counter,
    outcome: &CounterOutcome,
) -> DescriptorStatus {
    let role = plan
        .counters
        .get(counters.start)
        .map(|counter| counter.role);
    let shadow = role == Some(Role::Shadow);
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
        current_limit: Some(CurrentLimit::of(
            &counter.quota,
            limit.name(),
            counter.share,
        )),
        in_flight_limit: None,
        limit_remaining: if over {
            0
        } else {
            u32::try_from(class_remaining(counter, outcome)).unwrap_or(u32::MAX)
        },
        duration_until_reset: Some(duration.max(0)),
        rule_path: Some(limit.path().to_owned()),
        shadowed: over && shadow,
        quota: role == Some(Role::Quota),
    }
}

/// What a store decided for one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decided {
    /// One per counter, in the order given.
    pub outcomes: Vec<CounterOutcome>,
    /// The request's verdict (`core::ground::verdict::request_over_limit`); all or nothing, nothing
    /// was charged if true (`core::decision::charging`).
    pub over_limit: bool,
}

impl Decided {
    /// A request's answer from each of its `counters`' outcome, in order, for a store that
    /// judged every counter by itself (envoyproxy/ratelimit's keys, `core::decision::reference_cache`):
    /// the verdict is every store's (`core::ground::verdict`: roles, quota mode, `--shadow-mode`).
    pub fn from_outcomes(
        counters: &[Counter],
        outcomes: Vec<CounterOutcome>,
        global_shadow: bool,
    ) -> Self {
        let votes: Vec<Vote> = counters
            .iter()
            .zip(&outcomes)
            .map(|(counter, outcome)| Vote {
                descriptor: counter.descriptor,
                role: counter.role,
                admitted: outcome.admitted,
            })
            .collect();
        Self {
            over_limit: request_over_limit(&votes, global_shadow),
            outcomes,
        }
    }
}
