//! The audit log of operators' overrides (tracing target `floodgate::audit`): each one set,
//! refused for want of the shared store, deleted or expired, and each counter reset, with the
//! caller's address when a caller made the change. One place, so every line of the log names its fields alike.

use super::OverrideRecord;
use crate::store::StoreError;

/// `record` is in force (`replaced`: the rule's override it took the place of).
pub fn set(record: &OverrideRecord, replaced: Option<&OverrideRecord>, from: &str) {
    let ttl_seconds = (record.expires_at_unix_ms - record.created_at_unix_ms) / 1_000;
    tracing::info!(
        target: "floodgate::audit",
        action = "override.set",
        id = %record.id,
        domain = %record.domain,
        rule = %record.rule,
        limit_index = record.limit_index,
        requests_per_unit = record.requests_per_unit,
        ttl_seconds,
        reason = %record.reason,
        replaced = replaced.map(|old| old.id.as_str()).unwrap_or(""),
        from,
        "limit override set"
    );
}

/// An override was refused: the store every instance reads it from failed.
pub fn not_set(error: &StoreError, from: &str) {
    tracing::warn!(target: "floodgate::audit", from, "override not set: {error}");
}

/// Override `id` was deleted (`removed`: this instance's copy, if it had one).
pub fn deleted(id: &str, removed: Option<&OverrideRecord>, from: &str) {
    tracing::info!(
        target: "floodgate::audit",
        action = "override.deleted",
        id = %id,
        domain = removed.map(|r| r.domain.as_str()).unwrap_or(""),
        rule = removed.map(|r| r.rule.as_str()).unwrap_or(""),
        from,
        "limit override deleted"
    );
}

/// `record` reached its end and was forgotten.
pub fn expired(record: &OverrideRecord) {
    tracing::info!(
        target: "floodgate::audit",
        action = "override.expired",
        id = %record.id,
        domain = %record.domain,
        rule = %record.rule,
        "limit override expired"
    );
}

/// The counters of `descriptor`, which `rule` limits, were reset (`removed`: how many were
/// held).
pub fn counters_reset(domain: &str, rule: &str, descriptor: &str, removed: usize, from: &str) {
    tracing::info!(
        target: "floodgate::audit",
        action = "counters.reset",
        domain,
        rule,
        descriptor,
        removed,
        from,
        "counters reset"
    );
}
