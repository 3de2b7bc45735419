//! A concurrency rule's descriptor status. OK while its lease call was admitted, with the slots
//! its class may still take; otherwise OVER_LIMIT, `duration_until_reset` the time until it
//! may pass, at most [`LEASE_REFUSAL_WAIT`]:
//!
//!   full, or the class over its share   until the earliest lease expires
//!   shed                                 that (`lease::SHED_RETRY_AFTER` caps it already)
//!   no outcome                           [`LEASE_REFUSAL_WAIT`]
//!
//! Every status carries the class's in-flight limit ([`InFlightLimit`]), so that a refusal
//! gets `Retry-After` and the header mode's fields (`core::decision::headers`) as a rate limit's does.

use crate::arithmetic::lease::{reserve_at, LeaseCall, LeaseOutcome};
use crate::arithmetic::priority::ClassChoice;
use crate::decision::status::{Code, DescriptorStatus, InFlightLimit};
use crate::ground::time::Micros;
use crate::policy::rules::Rule;

/// The longest a concurrency refusal tells a client to wait. A slot frees when any request in
/// flight ends, usually long before the earliest lease's TTL runs out (the TTL is only the
/// latest a slot frees by itself: 30 s in the guide, against a backend answering in
/// milliseconds), so the expiry alone would keep a client that obeys `Retry-After` away for
/// far too long. Also what a refusal with no lease outcome says: a descriptor without a lease
/// id (refused until it carries one), or calls a store could not decide, refused by
/// `fail_closed`.
pub const LEASE_REFUSAL_WAIT: Micros = 1_000_000;

/// The status of a concurrency rule's descriptor, from its lease call and the call's outcome
/// (either absent: no lease id, or no store answer).
pub(super) fn lease_status(
    rule: &Rule,
    class: Option<ClassChoice<'_>>,
    call: Option<&LeaseCall>,
    outcome: Option<&LeaseOutcome>,
) -> DescriptorStatus {
    let in_flight_limit = Some(InFlightLimit {
        max_in_flight: class_slots(rule, class, call),
        name: rule.name.clone(),
    });
    let rule_path = Some(rule.path.clone());
    match (call, outcome) {
        (Some(call), Some(outcome)) if outcome.admitted => DescriptorStatus {
            code: Code::Ok,
            current_limit: None,
            in_flight_limit,
            limit_remaining: outcome.remaining(call),
            duration_until_reset: None,
            rule_path,
            shadowed: false,
            quota: false,
        },
        _ => DescriptorStatus {
            code: Code::OverLimit,
            current_limit: None,
            in_flight_limit,
            limit_remaining: 0,
            duration_until_reset: Some(outcome.map_or(LEASE_REFUSAL_WAIT, |o| {
                o.retry_after.clamp(1, LEASE_REFUSAL_WAIT)
            })),
            rule_path,
            shadowed: false,
            quota: false,
        },
    }
}

/// The leases the class may hold: the limit in force (the call's, which an adaptive
/// controller may have moved) less the class's reserve; the configured limit without a call.
fn class_slots(rule: &Rule, class: Option<ClassChoice<'_>>, call: Option<&LeaseCall>) -> u32 {
    if let Some(call) = call {
        return call.max_in_flight.saturating_sub(call.reserve);
    }
    let max = rule
        .concurrency
        .as_ref()
        .map_or(0, |concurrency| concurrency.max_in_flight);
    match class {
        Some(class) => max.saturating_sub(reserve_at(max, class.share())),
        None => max,
    }
}
