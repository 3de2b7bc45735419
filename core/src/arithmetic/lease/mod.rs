//! Concurrency rules as arithmetic: how many requests are in flight, counted as slots that a
//! start call acquires and a release call (or the slot's TTL) frees. A rate limit counts
//! requests that start; a lease counts requests that have started and not yet ended, which is
//! what protects a slow backend from a pile-up.
//!
//!   leases      = per counter, lease id → its slots, each with its own expiry; a slot with
//!                 expires_at ≤ now is gone; count = the slots of every id
//!   acquire id  : count + 1 + reserve ≤ max → admitted, one more slot for id until now + ttl
//!                 (an id that holds slots already takes another: one slot per acquire, so
//!                 that requests sharing an id cannot share a slot)
//!                 otherwise → refused, retry_after = earliest expiry − now (≥ 1)
//!                 (past `shed_above` an acquire must also survive `core::arithmetic::shed`, or it is
//!                 refused as shed, retry_after = min(earliest expiry − now, 1 s), ≥ 1)
//!   release id  : admitted; frees the one slot of id that expires soonest, the earliest
//!                 acquired while the TTL is unchanged (an id holding no slot frees nothing):
//!                 N admitted acquires and N releases of one id leave it no slot
//!   reserve     = max − floor(max × share) for a priority class (`algorithm::Share`), as a
//!                 class leaves headroom in a rate limit
//!
//! Both stores run exactly this (the memory store in Rust, the Redis store in
//! `src/store/redis/lua/leases.lua`), and a request's calls are all or nothing: when one
//! acquire is refused, none of its calls change anything.

mod slots;

pub use slots::Leases;

use crate::arithmetic::algorithm::Share;
use crate::arithmetic::shed;
use crate::ground::time::Micros;

/// The most slots one concurrency rule may hold: each slot is stored (and the Redis store
/// reads every slot of a counter at each call), as a sliding log keeps each hit.
pub const MAX_IN_FLIGHT: u32 = 10_000;

/// The longest lease TTL: a day. A lease that lives longer is a leak, not a request.
pub const MAX_LEASE_TTL: Micros = 86_400 * 1_000_000;

/// The longest lease id kept: ids are stored per slot (`x-request-id` is a UUID, 36 bytes).
pub const MAX_LEASE_ID_LEN: usize = 256;

/// Whether `id` can name a lease: not empty, at most [`MAX_LEASE_ID_LEN`] bytes, and no NUL
/// byte, since the Redis store names an id's further slots `id NUL n` and an id holding a NUL
/// could then be read as another id's slot.
pub fn is_usable_lease_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_LEASE_ID_LEN && !id.contains('\0')
}

/// `concurrency:` of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency {
    /// The most leases held at once (the in-flight limit).
    pub max_in_flight: u32,
    /// How long a lease lives without a release (µs, ≥ 1).
    pub lease_ttl: Micros,
    /// The descriptor entry key whose value is the lease id (`request_id`).
    pub lease_key: String,
    /// The entry that marks a call as a release (`{key: phase, value: done}`).
    pub release: ReleaseMarker,
    /// Past this many in flight a new lease is shed with probability (`core::arithmetic::shed`); `None`
    /// sheds nothing, only the hard `max_in_flight` refuses.
    pub shed_above: Option<u32>,
}

/// What a shed acquire is told to wait at most: the load that shed it is momentary.
pub const SHED_RETRY_AFTER: Micros = 1_000_000;

/// The entry only the release call sends (Envoy: a `generic_key` in the
/// `apply_on_stream_done: true` rate limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseMarker {
    pub key: String,
    pub value: String,
}

impl Concurrency {
    /// Whether `key` is one of the entries this rule reads rather than a level of the tree.
    pub fn reads_entry(&self, key: &str) -> bool {
        key == self.lease_key || key == self.release.key
    }
}

/// The slots a class with `share` must leave free of `max_in_flight` (the configured limit,
/// or the one an adaptive controller moved it to).
pub fn reserve_at(max_in_flight: u32, share: Share) -> u32 {
    let max = u64::from(max_in_flight);
    u32::try_from(max - share.of(max)).unwrap_or(max_in_flight)
}

/// The in-flight limit an adjustment of `requests_per_unit` stands for: 1 to [`MAX_IN_FLIGHT`].
pub fn adjusted_max_in_flight(requests_per_unit: u64) -> u32 {
    u32::try_from(requests_per_unit.clamp(1, u64::from(MAX_IN_FLIGHT))).unwrap_or(MAX_IN_FLIGHT)
}

/// What one call does to its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAction {
    Acquire,
    Release,
}

impl LeaseAction {
    pub fn name(self) -> &'static str {
        match self {
            LeaseAction::Acquire => "acquire",
            LeaseAction::Release => "release",
        }
    }
}

/// One lease call of a request: which descriptor asks, the counter's identity, the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseCall {
    pub descriptor: usize,
    /// The counter's identity (`key::lease_key`); every lease of the rule for the same
    /// descriptor values shares it.
    pub key: Vec<u8>,
    pub lease_id: String,
    pub action: LeaseAction,
    pub max_in_flight: u32,
    /// Slots the descriptor's priority class must leave free (0 without classes).
    pub reserve: u32,
    pub lease_ttl: Micros,
    /// The class's shedding threshold (`core::arithmetic::shed::threshold_for`); 0 sheds nothing.
    pub shed_above: u32,
    /// The shell's uniform draw in 0..2^32 for `core::arithmetic::shed::survives` (any value when
    /// `shed_above` is 0).
    pub draw: u32,
}

/// What a call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseOutcome {
    pub admitted: bool,
    /// Slots held after the call (as judged, when refused).
    pub in_flight: u32,
    /// When refused: until the earliest slot expires (µs, ≥ 1); 0 when admitted.
    pub retry_after: Micros,
    /// A release that freed a slot (false for an id holding none, and for acquires).
    pub released: bool,
    /// For a release that freed a slot: how long the slot was held, from its acquire (µs);
    /// what adaptive concurrency learns the backend's latency from. 0 otherwise.
    pub held_for: Micros,
    /// A refused acquire that had a slot but did not survive shedding.
    pub shed: bool,
}

impl LeaseOutcome {
    /// What the call's class may still take: max − reserve − in_flight, at least 0.
    pub fn remaining(&self, call: &LeaseCall) -> u32 {
        call.max_in_flight
            .saturating_sub(call.reserve)
            .saturating_sub(self.in_flight)
    }
}

/// Applies `call` to `leases` (expired slots already dropped) at `now`, in place.
pub fn apply(leases: &mut Leases, now: Micros, call: &LeaseCall) -> LeaseOutcome {
    match call.action {
        LeaseAction::Release => {
            let freed = leases.free_soonest(&call.lease_id);
            LeaseOutcome {
                admitted: true,
                in_flight: leases.held(),
                retry_after: 0,
                released: freed.is_some(),
                held_for: freed.map_or(0, |expiry| held_for(now, expiry, call.lease_ttl)),
                shed: false,
            }
        }
        LeaseAction::Acquire => acquire(leases, now, call),
    }
}

/// An acquire: one more slot when one is free and the call survives shedding.
fn acquire(leases: &mut Leases, now: Micros, call: &LeaseCall) -> LeaseOutcome {
    let held = leases.held();
    let expires_at = now.saturating_add(call.lease_ttl.max(1));
    let fits = u64::from(held) + 1 + u64::from(call.reserve) <= u64::from(call.max_in_flight);
    if fits && shed::survives(call.shed_above, held.saturating_add(1), call.draw) {
        leases.take(&call.lease_id, expires_at);
        return LeaseOutcome {
            admitted: true,
            in_flight: leases.held(),
            retry_after: 0,
            released: false,
            held_for: 0,
            shed: false,
        };
    }
    let earliest = leases.earliest_expiry().unwrap_or(expires_at);
    let wait = (earliest - now).max(1);
    LeaseOutcome {
        admitted: false,
        in_flight: held,
        retry_after: if fits {
            wait.min(SHED_RETRY_AFTER)
        } else {
            wait
        },
        released: false,
        held_for: 0,
        shed: fits,
    }
}

/// How long a slot that expires at `expiry` has been held at `now`: it was acquired at
/// `expiry − ttl`. At least 0 (a TTL shortened by a reload since).
pub fn held_for(now: Micros, expiry: Micros, ttl: Micros) -> Micros {
    now.saturating_sub(expiry.saturating_sub(ttl.max(1))).max(0)
}

/// The outcome of a request's lease calls, and which counters change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub outcomes: Vec<LeaseOutcome>,
    /// Whether the calls' changes are kept: false when an acquire was refused.
    pub kept: bool,
}

/// Decides every call of one request against the counters `load` gives (loaded once per key,
/// expired slots dropped), in order, each call seeing the ones before it: all or nothing.
/// Returns the outcomes and the counters' next leases, keyed as the calls name them (only
/// when kept).
pub fn settle(
    calls: &[LeaseCall],
    now: Micros,
    mut load: impl FnMut(&[u8]) -> Leases,
) -> (Settled, Vec<(Vec<u8>, Leases)>) {
    let mut working: Vec<(Vec<u8>, Leases)> = Vec::new();
    let mut outcomes = Vec::with_capacity(calls.len());
    for call in calls {
        let at = match working.iter().position(|(key, _)| *key == call.key) {
            Some(at) => at,
            None => {
                let mut leases = load(&call.key);
                leases.expire(now);
                working.push((call.key.clone(), leases));
                working.len() - 1
            }
        };
        let outcome = match working.get_mut(at) {
            Some((_, leases)) => apply(leases, now, call),
            None => continue,
        };
        outcomes.push(outcome);
    }
    let kept = outcomes.iter().all(|outcome| outcome.admitted);
    let next = if kept { working } else { Vec::new() };
    (Settled { outcomes, kept }, next)
}

/// What a failure policy that admits (`fail_open`) makes of calls the store could not
/// decide: every call admitted, nothing known in flight.
pub fn admitted_without_store(calls: &[LeaseCall]) -> Vec<LeaseOutcome> {
    let admitted = LeaseOutcome {
        admitted: true,
        in_flight: 0,
        retry_after: 0,
        released: false,
        held_for: 0,
        shed: false,
    };
    vec![admitted; calls.len()]
}

/// The releases that undo the admitted acquires of a request that another limit refused: all
/// or nothing holds across a request's rate limits and leases too, one call later.
pub fn undo_acquired(calls: &[LeaseCall], outcomes: &[LeaseOutcome]) -> Vec<LeaseCall> {
    calls
        .iter()
        .zip(outcomes)
        .filter(|(call, outcome)| call.action == LeaseAction::Acquire && outcome.admitted)
        .map(|(call, _)| LeaseCall {
            action: LeaseAction::Release,
            ..call.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests;
