//! One descriptor's answer and the request's code: the words both the answer
//! (`core::decision::response`) and its rate-limit headers (`core::decision::headers`) are written in.

use crate::arithmetic::algorithm::{Quota, Share};
use crate::ground::time::Micros;
use crate::ground::unit::Unit;

/// Whether a descriptor, or the request as a whole, is admitted.
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
    /// `quota` as a class with `share` sees it: its part of the limit.
    pub(crate) fn of(quota: &Quota, name: Option<&str>, share: Share) -> Self {
        let requests_per_unit = share.of(u64::from(quota.requests_per_unit));
        Self {
            requests_per_unit: u32::try_from(requests_per_unit).unwrap_or(quota.requests_per_unit),
            unit: quota.unit,
            unit_multiplier: quota.unit_multiplier.max(1),
            name: name.map(str::to_owned),
        }
    }

    pub fn window_seconds(&self) -> u64 {
        self.unit.seconds() * u64::from(self.unit_multiplier)
    }
}

/// A concurrency rule's limit as the descriptor's class sees it: the leases the class may hold
/// at once (`max_in_flight` in force less the class's reserve), and the rule's `name`. Never
/// sent as `current_limit`: that has a rate unit, and Envoy would build its `x-ratelimit-*`
/// headers on a rate that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlightLimit {
    pub max_in_flight: u32,
    pub name: Option<String>,
}

/// One descriptor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    pub code: Code,
    pub current_limit: Option<CurrentLimit>,
    /// Set for a concurrency rule's descriptor (`current_limit` is `None` then), so that its
    /// refusal gets headers (`core::decision::headers`).
    pub in_flight_limit: Option<InFlightLimit>,
    pub limit_remaining: u32,
    /// Until the counter is whole again (OK) or until the request could pass (OVER_LIMIT).
    pub duration_until_reset: Option<Micros>,
    /// The rule that decided (its config path), for headers, logs and `check`.
    pub rule_path: Option<String>,
    /// The limit that decided was in shadow mode and over: reported as OK.
    pub shadowed: bool,
    /// The descriptor counts as a quota (`quota_mode`, `QUOTA_MODE`): over its limit alone it
    /// does not refuse the request.
    pub quota: bool,
}

impl DescriptorStatus {
    pub(crate) fn without_limit(remaining: u32, rule_path: Option<String>) -> Self {
        Self {
            code: Code::Ok,
            current_limit: None,
            in_flight_limit: None,
            limit_remaining: remaining,
            duration_until_reset: None,
            rule_path,
            shadowed: false,
            quota: false,
        }
    }
}
