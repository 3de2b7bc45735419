//! A request's bans (`ban:` on a rule, `core::arithmetic::ban`): which of its descriptors a
//! ban may refuse, the calls that ask the store, and what a ban in force makes of the
//! counters' outcomes. The limiter asks `Check` before counting (a banned request is refused
//! without charging anything) and `Strike` for the descriptors the counters refused.

use crate::arithmetic::algorithm::Hits;
use crate::arithmetic::ban::{BanAction, BanOutcome, BanPolicy};
use crate::decision::plan::{DescriptorPlan, Plan};
use crate::decision::response::Decided;
use crate::ground::time::Micros;
use crate::ground::verdict::Role;

/// One key's ban record asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BanCall {
    pub descriptor: usize,
    /// The record's identity (`ban_key`).
    pub key: Vec<u8>,
    pub policy: BanPolicy,
    pub action: BanAction,
}

/// A length prefix no field of a counter identity can have (`core::decision::key`): the ban
/// record of a counter is its identity with this after it, distinct from every counter's and
/// still led by the same domain and rule path (a Redis key places by them).
const BAN_SUFFIX: [u8; 8] = [0xFF; 8];

/// The identity of the ban record beside the counter identity `counter_key`.
pub fn ban_key(counter_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(counter_key.len() + BAN_SUFFIX.len());
    key.extend_from_slice(counter_key);
    key.extend_from_slice(&BAN_SUFFIX);
    key
}

/// `action` for every descriptor of `plan` whose rule bans (its record beside its first
/// counter); `wanted` picks the descriptors.
pub fn ban_calls(
    plan: &Plan<'_>,
    action: BanAction,
    mut wanted: impl FnMut(usize, &std::ops::Range<usize>) -> bool,
) -> Vec<BanCall> {
    let mut calls = Vec::new();
    for (descriptor, planned) in plan.descriptors.iter().enumerate() {
        let DescriptorPlan::Limited {
            limit, counters, ..
        } = planned
        else {
            continue;
        };
        let Some(policy) = limit.rule().and_then(|rule| rule.ban) else {
            continue;
        };
        let Some(first) = plan.counters.get(counters.start) else {
            continue;
        };
        if first.role == Role::Shadow || !wanted(descriptor, counters) {
            continue;
        }
        calls.push(BanCall {
            descriptor,
            key: ban_key(&first.key),
            policy,
            action,
        });
    }
    calls
}

/// Whether any descriptor of `plan` may be banned (no call is made otherwise).
pub fn bans_apply(plan: &Plan<'_>) -> bool {
    plan.descriptors.iter().any(|planned| {
        matches!(planned, DescriptorPlan::Limited { limit, .. }
            if limit.rule().is_some_and(|rule| rule.ban.is_some()))
    })
}

/// The strikes of a decided request: one per banning descriptor an enforced counter refused.
pub fn strike_calls(plan: &Plan<'_>, decided: &Decided) -> Vec<BanCall> {
    ban_calls(plan, BanAction::Strike, |_, counters| {
        counters.clone().any(|index| {
            let refused = decided.outcomes.get(index).is_some_and(|o| !o.admitted);
            // A check-only look (`hits_addend: 0`) refused is not an offence of its own.
            let enforced = plan.counters.get(index).is_some_and(|counter| {
                counter.role == Role::Enforced && matches!(counter.hits, Hits::Charge(_))
            });
            refused && enforced
        })
    })
}

/// Refuses the counters of each descriptor a ban is in force on, until the ban's end: the
/// answer's retry (Retry-After) is the time left. Whether any was banned.
pub fn apply_bans(
    plan: &Plan<'_>,
    calls: &[BanCall],
    outcomes: &[BanOutcome],
    decided: &mut Decided,
) -> bool {
    let mut banned = false;
    for (call, outcome) in calls.iter().zip(outcomes) {
        if outcome.banned_for <= 0 {
            continue;
        }
        let Some(DescriptorPlan::Limited { counters, .. }) = plan.descriptors.get(call.descriptor)
        else {
            continue;
        };
        for index in counters.clone() {
            if let Some(counter) = decided.outcomes.get_mut(index) {
                refuse_until(counter, outcome.banned_for);
            }
        }
        banned = true;
    }
    decided.over_limit |= banned;
    banned
}

fn refuse_until(outcome: &mut crate::decision::response::CounterOutcome, banned_for: Micros) {
    outcome.admitted = false;
    outcome.retry_after = outcome.retry_after.max(banned_for);
    outcome.snapshot.remaining = 0;
    outcome.snapshot.reset_after = outcome.snapshot.reset_after.max(banned_for);
}
