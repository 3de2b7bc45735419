//! A new override checked against the rules in force and the store, each step saying what is
//! wrong, where, and how to fix it: its domain, its rule, which of the rule's limits, whether
//! the store can decide the new limit, how long it lasts and why.

use std::time::Duration;

use super::{InvalidOverride, OverrideRecord, OverrideRequest, RuleChoice, MAX_REASON_CHARS};
use crate::core::ground::unit::Unit;
use crate::core::policy::adjustment::{adjusted_quota, target_limit, MAX_OVERRIDE_TTL};
use crate::core::policy::rules::{DomainRules, Rule, RuleSet};
use crate::store::Store;

/// The record `request` puts in force from `now_unix_ms`, or the first thing wrong with it.
pub(super) fn record(
    request: &OverrideRequest,
    rules: &RuleSet,
    store: &impl Store,
    now_unix_ms: u64,
) -> Result<OverrideRecord, InvalidOverride> {
    let domain = domain(rules, &request.domain)?;
    let rule = rule(domain, &request.rule)?;
    let limit_index = target_limit(
        rule,
        unit(request.unit.as_deref())?,
        request.requests_per_unit,
    )
    .map_err(InvalidOverride::Limit)?;
    if let Some(quota) = rule.limits.get(limit_index) {
        store
            .check_quota(&adjusted_quota(quota, request.requests_per_unit))
            .map_err(InvalidOverride::Uncountable)?;
    }
    let ttl = lifetime(request.ttl)?;
    let reason = reason(&request.reason)?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Ok(OverrideRecord {
        id: format!("ovr-{:016x}", rand::random::<u64>()),
        domain: domain.name.clone(),
        rule: rule.path.clone(),
        limit_index,
        requests_per_unit: request.requests_per_unit,
        reason: reason.to_owned(),
        created_at_unix_ms: now_unix_ms,
        expires_at_unix_ms: now_unix_ms.saturating_add(ttl_ms),
    })
}

fn domain<'a>(rules: &'a RuleSet, name: &str) -> Result<&'a DomainRules, InvalidOverride> {
    rules
        .domain(name)
        .ok_or_else(|| InvalidOverride::UnknownDomain {
            domain: name.to_owned(),
            known: rules
                .domains()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn rule<'a>(domain: &'a DomainRules, choice: &RuleChoice) -> Result<&'a Rule, InvalidOverride> {
    match choice {
        RuleChoice::Path(path) => {
            domain
                .rule_by_path(path)
                .ok_or_else(|| InvalidOverride::UnknownRule {
                    path: path.clone(),
                    domain: domain.name.clone(),
                    example: domain
                        .rules()
                        .next()
                        .map_or_else(String::new, |rule| format!(", e.g. {:?}", rule.path)),
                })
        }
        RuleChoice::Descriptor(entries) => domain
            .lookup(entries)
            .map(|matched| matched.rule)
            .ok_or_else(|| InvalidOverride::NoRuleMatches {
                entries: entries
                    .iter()
                    .map(|entry| format!("{}={}", entry.key, entry.value))
                    .collect::<Vec<_>>()
                    .join(", "),
                domain: domain.name.clone(),
            }),
    }
}

fn unit(text: Option<&str>) -> Result<Option<Unit>, InvalidOverride> {
    let Some(text) = text else {
        return Ok(None);
    };
    Unit::parse(text)
        .map(Some)
        .ok_or_else(|| InvalidOverride::UnknownUnit {
            text: text.to_owned(),
            units: Unit::ALL
                .iter()
                .map(|unit| unit.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// At least 1 s, at most [`MAX_OVERRIDE_TTL`].
fn lifetime(ttl: Duration) -> Result<Duration, InvalidOverride> {
    if ttl < Duration::from_secs(1) {
        return Err(InvalidOverride::TooShort);
    }
    if ttl > MAX_OVERRIDE_TTL {
        return Err(InvalidOverride::TooLong);
    }
    Ok(ttl)
}

fn reason(text: &str) -> Result<&str, InvalidOverride> {
    let reason = text.trim();
    if reason.is_empty() {
        return Err(InvalidOverride::NoReason);
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(InvalidOverride::ReasonTooLong);
    }
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_lasts_at_least_a_second_and_at_most_a_day() {
        assert_eq!(
            lifetime(Duration::from_secs(90)),
            Ok(Duration::from_secs(90))
        );
        assert_eq!(lifetime(MAX_OVERRIDE_TTL), Ok(MAX_OVERRIDE_TTL));
        assert_eq!(lifetime(Duration::ZERO), Err(InvalidOverride::TooShort));
        assert_eq!(
            lifetime(Duration::from_millis(999)),
            Err(InvalidOverride::TooShort)
        );
        assert_eq!(
            lifetime(Duration::from_secs(25 * 3600)),
            Err(InvalidOverride::TooLong)
        );
    }
}
