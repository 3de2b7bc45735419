//! Limits changed at run time, without touching the configuration: an operator's temporary
//! override (admin API) or an adaptive controller's value (AIMD). Pure: the shells keep the
//! live set (`floodgate::engine::adjustment_set`) and pass "now" in.
//!
//! # Which limit is in force
//!
//! For one rule (domain + config path): an active override, else an adaptive value, else the
//! configured limit. Envoy's per-descriptor `limit` in a request still wins over all three: it
//! names its own limit and does not use the rule at all (`plan::LimitSource::Override`).
//!
//! # What an adjustment changes
//!
//! Only `requests_per_unit` of one of the rule's limits (`limit_index`, 0 for a rule with one
//! `rate_limit`). The unit, the window and the algorithm stay, so the counter keeps its identity
//! (`key::counter_key` leaves the limit's size out): changing a limit never resets what was
//! counted, and clearing the adjustment goes back to the same counter.
//!
//! An explicit `burst` keeps its proportion to the limit (a rule of 100/s with burst 200 at an
//! override of 10/s gets burst 20), rounded down, and a token bucket keeps at least 1: a burst
//! left as configured would let a lowered limit still admit the configured burst at once.
//! Without `burst`, a token bucket's capacity follows the limit anyway and a leaky bucket keeps
//! its default of none.
//!
//! A sliding log never gets more than [`SLIDING_LOG_MAX_LIMIT`]: its memory grows with the limit.

use std::collections::HashMap;

/// The longest an operator's override may last: an incident measure, not a configuration.
pub const MAX_OVERRIDE_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

use crate::arithmetic::algorithm::{Algorithm, Quota, SLIDING_LOG_MAX_LIMIT};
use crate::policy::rules::Rule;

/// Where an adjusted limit came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdjustmentSource {
    /// Set by an operator through the admin API; gone at `expires_at_unix_ms`.
    Override {
        id: String,
        reason: String,
        expires_at_unix_ms: u64,
    },
    /// Set by the adaptive controller from `signal`.
    Adaptive { signal: String },
}

impl AdjustmentSource {
    /// `override` or `adaptive`: a metric label and the word `/rlconfig` shows.
    pub fn label(&self) -> &'static str {
        match self {
            AdjustmentSource::Override { .. } => "override",
            AdjustmentSource::Adaptive { .. } => "adaptive",
        }
    }
}

/// A limit in force instead of the configured one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjustment {
    pub requests_per_unit: u64,
    /// Which of the rule's limits (its `rate_limits` index; 0 for a single `rate_limit`).
    pub limit_index: usize,
    pub source: AdjustmentSource,
}

impl Adjustment {
    /// Whether the adjustment is still in force at `now_unix_ms` (adaptive values do not expire:
    /// their controller clears them).
    pub fn active_at(&self, now_unix_ms: u64) -> bool {
        match &self.source {
            AdjustmentSource::Override {
                expires_at_unix_ms, ..
            } => now_unix_ms < *expires_at_unix_ms,
            AdjustmentSource::Adaptive { .. } => true,
        }
    }

    /// The rule's limits with this adjustment applied (see the module docs for `burst`). An index
    /// beyond the rule's limits (the rule changed on reload) changes nothing.
    pub fn apply(&self, limits: &[Quota]) -> Vec<Quota> {
        let mut quotas = limits.to_vec();
        if let Some(quota) = quotas.get_mut(self.limit_index) {
            *quota = adjusted_quota(quota, self.requests_per_unit);
        }
        quotas
    }
}

/// `quota` at `requests_per_unit`, with its burst in proportion.
pub fn adjusted_quota(quota: &Quota, requests_per_unit: u64) -> Quota {
    let ceiling = match quota.algorithm {
        Algorithm::SlidingLog => SLIDING_LOG_MAX_LIMIT,
        _ => u64::from(u32::MAX),
    };
    let limit = u32::try_from(requests_per_unit.min(ceiling)).unwrap_or(u32::MAX);
    let burst = quota.burst.map(|burst| {
        let scaled = match quota.requests_per_unit {
            0 => u64::from(burst),
            configured => u64::from(burst) * u64::from(limit) / u64::from(configured),
        };
        let scaled = u32::try_from(scaled).unwrap_or(u32::MAX);
        match quota.algorithm {
            // A bucket of capacity 0 admits nothing, which only a limit of 0 should mean.
            Algorithm::TokenBucket if limit > 0 => scaled.max(1),
            _ => scaled,
        }
    });
    Quota {
        requests_per_unit: limit,
        burst,
        ..quota.clone()
    }
}

/// One rule's adjustments, one of each kind at most.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleAdjustments {
    pub overriding: Option<Adjustment>,
    pub adaptive: Option<Adjustment>,
}

impl RuleAdjustments {
    /// The adjustment in force at `now_unix_ms`, by precedence.
    pub fn effective(&self, now_unix_ms: u64) -> Option<&Adjustment> {
        self.overriding
            .as_ref()
            .filter(|adjustment| adjustment.active_at(now_unix_ms))
            .or(self.adaptive.as_ref())
    }

    fn is_empty(&self) -> bool {
        self.overriding.is_none() && self.adaptive.is_none()
    }
}

/// Every adjustment, by domain and rule config path: one immutable snapshot, swapped whole by
/// the shell. Rules that are not in the current configuration may be listed (an override
/// outlives a reload that drops its rule); they simply never match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adjustments {
    domains: HashMap<String, HashMap<String, RuleAdjustments>>,
}

impl Adjustments {
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Both kinds for one rule, expired overrides included.
    pub fn rule(&self, domain: &str, rule_path: &str) -> Option<&RuleAdjustments> {
        self.domains.get(domain)?.get(rule_path)
    }

    /// The adjustment in force for `rule_path` of `domain` at `now_unix_ms`.
    pub fn effective(
        &self,
        domain: &str,
        rule_path: &str,
        now_unix_ms: u64,
    ) -> Option<&Adjustment> {
        self.rule(domain, rule_path)?.effective(now_unix_ms)
    }

    /// Every rule with an adjustment: (domain, rule path, adjustments), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &RuleAdjustments)> {
        self.domains.iter().flat_map(|(domain, rules)| {
            rules
                .iter()
                .map(move |(path, rule)| (domain.as_str(), path.as_str(), rule))
        })
    }

    /// Sets the override of a rule, replacing any earlier one (returned).
    pub fn set_override(
        &mut self,
        domain: &str,
        rule_path: &str,
        adjustment: Adjustment,
    ) -> Option<Adjustment> {
        self.entry(domain, rule_path).overriding.replace(adjustment)
    }

    /// Removes the override with this `id`, wherever it is.
    pub fn remove_override(&mut self, id: &str) -> Option<(String, String, Adjustment)> {
        let (domain, path) = self.iter().find_map(|(domain, path, rule)| {
            matches!(&rule.overriding, Some(Adjustment { source: AdjustmentSource::Override { id: own, .. }, .. }) if own == id)
                .then(|| (domain.to_owned(), path.to_owned()))
        })?;
        let removed = self
            .domains
            .get_mut(&domain)
            .and_then(|rules| rules.get_mut(&path))
            .and_then(|rule| rule.overriding.take());
        self.tidy(&domain, &path);
        removed.map(|adjustment| (domain, path, adjustment))
    }

    /// Sets the adaptive value of a rule; returns the earlier one.
    pub fn set_adaptive(
        &mut self,
        domain: &str,
        rule_path: &str,
        adjustment: Adjustment,
    ) -> Option<Adjustment> {
        self.entry(domain, rule_path).adaptive.replace(adjustment)
    }

    /// Removes the adaptive value of a rule; returns it.
    pub fn clear_adaptive(&mut self, domain: &str, rule_path: &str) -> Option<Adjustment> {
        let removed = self
            .domains
            .get_mut(domain)
            .and_then(|rules| rules.get_mut(rule_path))
            .and_then(|rule| rule.adaptive.take());
        self.tidy(domain, rule_path);
        removed
    }

    /// Drops overrides that expired at `now_unix_ms`; returns them (domain, path, adjustment).
    pub fn remove_expired(&mut self, now_unix_ms: u64) -> Vec<(String, String, Adjustment)> {
        let expired: Vec<(String, String)> = self
            .iter()
            .filter(|(_, _, rule)| {
                rule.overriding
                    .as_ref()
                    .is_some_and(|adjustment| !adjustment.active_at(now_unix_ms))
            })
            .map(|(domain, path, _)| (domain.to_owned(), path.to_owned()))
            .collect();
        let mut removed = Vec::with_capacity(expired.len());
        for (domain, path) in expired {
            let taken = self
                .domains
                .get_mut(&domain)
                .and_then(|rules| rules.get_mut(&path))
                .and_then(|rule| rule.overriding.take());
            self.tidy(&domain, &path);
            if let Some(adjustment) = taken {
                removed.push((domain, path, adjustment));
            }
        }
        removed
    }

    fn entry(&mut self, domain: &str, rule_path: &str) -> &mut RuleAdjustments {
        self.domains
            .entry(domain.to_owned())
            .or_default()
            .entry(rule_path.to_owned())
            .or_default()
    }

    /// Forgets a rule with nothing left, and a domain with no rule left.
    fn tidy(&mut self, domain: &str, rule_path: &str) {
        if let Some(rules) = self.domains.get_mut(domain) {
            if rules.get(rule_path).is_some_and(RuleAdjustments::is_empty) {
                rules.remove(rule_path);
            }
            if rules.is_empty() {
                self.domains.remove(domain);
            }
        }
    }
}

/// The adjustments as one request sees them: a snapshot and the instant of the decision.
#[derive(Debug, Clone, Copy)]
pub struct AdjustmentsAt<'a> {
    pub adjustments: &'a Adjustments,
    pub now_unix_ms: u64,
}

impl<'a> AdjustmentsAt<'a> {
    /// The adjustment in force for `rule` of `domain`; `None` for an unlimited rule, which has
    /// no limit to adjust.
    pub fn for_rule(&self, domain: &str, rule: &Rule) -> Option<&'a Adjustment> {
        if rule.unlimited {
            return None;
        }
        self.adjustments
            .effective(domain, &rule.path, self.now_unix_ms)
    }
}

/// Why an adjustment cannot apply to a rule; the admin API answers with these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAdjustment {
    #[error("rule {rule} is unlimited: it has no limit to override")]
    Unlimited { rule: String },
    #[error(
        "rule {rule} is a concurrency rule: its max_in_flight is not overridden at run time \
         (only its own `adaptive:` moves it); change it in the configuration and reload"
    )]
    Concurrency { rule: String },
    #[error(
        "rule {rule} has {count} limits and none is per {unit}: give `unit` as one of {units}"
    )]
    NoLimitWithUnit {
        rule: String,
        count: usize,
        unit: String,
        units: String,
    },
    #[error("rule {rule} has {count} limits ({units}): say which with `unit`")]
    AmbiguousLimit {
        rule: String,
        count: usize,
        units: String,
    },
    #[error(
        "rule {rule} counts with a sliding log, whose memory grows with the limit: \
         requests_per_unit must be at most {max}, not {requests_per_unit}"
    )]
    SlidingLogTooLarge {
        rule: String,
        requests_per_unit: u64,
        max: u64,
    },
    #[error("requests_per_unit must be at most {max}, not {requests_per_unit}")]
    TooLarge { requests_per_unit: u64, max: u64 },
}

/// Which of `rule`'s limits an adjustment with `unit` (`None`: the only one) targets, checking
/// that `requests_per_unit` fits it.
pub fn target_limit(
    rule: &Rule,
    unit: Option<crate::ground::unit::Unit>,
    requests_per_unit: u64,
) -> Result<usize, InvalidAdjustment> {
    if rule.concurrency.is_some() {
        return Err(InvalidAdjustment::Concurrency {
            rule: rule.path.clone(),
        });
    }
    if rule.unlimited || rule.limits.is_empty() {
        return Err(InvalidAdjustment::Unlimited {
            rule: rule.path.clone(),
        });
    }
    let units = || {
        rule.limits
            .iter()
            .map(|quota| quota.unit.name().to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let index = match unit {
        Some(unit) => rule
            .limits
            .iter()
            .position(|quota| quota.unit == unit)
            .ok_or_else(|| InvalidAdjustment::NoLimitWithUnit {
                rule: rule.path.clone(),
                count: rule.limits.len(),
                unit: unit.name().to_owned(),
                units: units(),
            })?,
        None if rule.limits.len() == 1 => 0,
        None => {
            return Err(InvalidAdjustment::AmbiguousLimit {
                rule: rule.path.clone(),
                count: rule.limits.len(),
                units: units(),
            })
        }
    };
    let max = u64::from(u32::MAX);
    if requests_per_unit > max {
        return Err(InvalidAdjustment::TooLarge {
            requests_per_unit,
            max,
        });
    }
    let sliding_log = rule
        .limits
        .get(index)
        .is_some_and(|quota| quota.algorithm == Algorithm::SlidingLog);
    if sliding_log && requests_per_unit > SLIDING_LOG_MAX_LIMIT {
        return Err(InvalidAdjustment::SlidingLogTooLarge {
            rule: rule.path.clone(),
            requests_per_unit,
            max: SLIDING_LOG_MAX_LIMIT,
        });
    }
    Ok(index)
}

/// One configured rule whose limit is adjusted now, for `/rlconfig` and the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct AdjustedRule<'a> {
    pub domain: &'a str,
    pub rule: &'a Rule,
    /// The configured limit that is adjusted.
    pub configured: &'a Quota,
    /// What counts instead.
    pub effective: Quota,
    pub adjustment: &'a Adjustment,
}

/// Every rule of `rules` with an adjustment in force at `now_unix_ms`, by domain and path.
/// Adjustments of rules that are not in `rules` are left out.
pub fn adjusted_rules<'a>(
    rules: &'a crate::policy::rules::RuleSet,
    adjustments: &'a Adjustments,
    now_unix_ms: u64,
) -> Vec<AdjustedRule<'a>> {
    let mut adjusted: Vec<AdjustedRule<'a>> = adjustments
        .iter()
        .filter_map(|(domain, path, rule_adjustments)| {
            let adjustment = rule_adjustments.effective(now_unix_ms)?;
            let rule = rules.domain(domain)?.rule_by_path(path)?;
            let configured = rule.limits.get(adjustment.limit_index)?;
            Some(AdjustedRule {
                domain,
                rule,
                configured,
                effective: adjusted_quota(configured, adjustment.requests_per_unit),
                adjustment,
            })
        })
        .collect();
    adjusted.sort_by(|a, b| (a.domain, &a.rule.path).cmp(&(b.domain, &b.rule.path)));
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::plan::{plan, plan_adjusted, DescriptorPlan, LimitSource, PlanSettings};
    use crate::ground::unit::Unit;
    use crate::policy::config::load_valid;
    use crate::policy::request::Entry;
    use crate::policy::request::{Descriptor, Request};
    use crate::policy::rules::RuleSet;

    const RULES: &str = r#"
domain: d
descriptors:
  - key: api
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, burst: 200}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: minute, requests_per_unit: 100}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}
  - key: free
    rate_limit: {unlimited: true}
  - key: pool
    concurrency: {max_in_flight: 4, lease: lease_id, release: {key: phase, value: done}, ttl: 60s}
"#;

    fn rules() -> RuleSet {
        load_valid("d.yaml", RULES)
    }

    fn rule<'a>(rules: &'a RuleSet, path: &str) -> &'a Rule {
        rules
            .domain("d")
            .and_then(|domain| domain.rule_by_path(path))
            .unwrap_or_else(|| panic!("no rule {path}"))
    }

    fn overriding(requests_per_unit: u64, expires_at_unix_ms: u64) -> Adjustment {
        Adjustment {
            requests_per_unit,
            limit_index: 0,
            source: AdjustmentSource::Override {
                id: "o".into(),
                reason: "r".into(),
                expires_at_unix_ms,
            },
        }
    }

    fn adaptive(requests_per_unit: u64) -> Adjustment {
        Adjustment {
            requests_per_unit,
            limit_index: 0,
            source: AdjustmentSource::Adaptive {
                signal: "p95".into(),
            },
        }
    }

    #[test]
    fn an_override_wins_until_it_expires_then_the_adaptive_value_then_the_configured_one() {
        let mut adjustments = Adjustments::default();
        adjustments.set_adaptive("d", "d.api", adaptive(50));
        adjustments.set_override("d", "d.api", overriding(5, 1_000));
        let limit = |adjustments: &Adjustments, now| {
            adjustments
                .effective("d", "d.api", now)
                .map(|adjustment| adjustment.requests_per_unit)
        };
        assert_eq!(limit(&adjustments, 999), Some(5));
        assert_eq!(limit(&adjustments, 1_000), Some(50));
        assert_eq!(adjustments.remove_expired(1_000).len(), 1);
        assert!(adjustments.clear_adaptive("d", "d.api").is_some());
        assert_eq!(limit(&adjustments, 0), None);
        assert!(adjustments.is_empty());
    }

    #[test]
    fn burst_keeps_its_proportion_and_a_bucket_never_closes_by_rounding() {
        let rules = rules();
        let quota = &rule(&rules, "d.api").limits[0];
        let lowered = adjusted_quota(quota, 10);
        assert_eq!((lowered.requests_per_unit, lowered.burst), (10, Some(20)));
        assert_eq!(
            (lowered.unit, lowered.algorithm),
            (quota.unit, quota.algorithm)
        );
        assert_eq!(adjusted_quota(quota, 0).burst, Some(0));
        let tiny = adjusted_quota(&quota.clone().with_burst(1), 1);
        assert_eq!(tiny.burst, Some(1));
        let log = &rule(&rules, "d.log").limits[0];
        assert_eq!(
            u64::from(adjusted_quota(log, 1 << 40).requests_per_unit),
            SLIDING_LOG_MAX_LIMIT
        );
    }

    #[test]
    fn the_target_limit_is_chosen_by_unit_and_checked() {
        let rules = rules();
        assert_eq!(target_limit(rule(&rules, "d.api"), None, 5), Ok(0));
        let two = rule(&rules, "d.two");
        assert_eq!(target_limit(two, Some(Unit::Minute), 5), Ok(1));
        assert!(matches!(
            target_limit(two, None, 5),
            Err(InvalidAdjustment::AmbiguousLimit { .. })
        ));
        assert!(matches!(
            target_limit(two, Some(Unit::Hour), 5),
            Err(InvalidAdjustment::NoLimitWithUnit { .. })
        ));
        assert!(matches!(
            target_limit(rule(&rules, "d.free"), None, 5),
            Err(InvalidAdjustment::Unlimited { .. })
        ));
        let pool = target_limit(rule(&rules, "d.pool"), None, 5);
        assert!(
            matches!(pool, Err(InvalidAdjustment::Concurrency { .. })),
            "{pool:?}"
        );
        assert!(pool
            .err()
            .is_some_and(|error| error.to_string().contains("concurrency rule")));
        assert!(matches!(
            target_limit(rule(&rules, "d.log"), None, SLIDING_LOG_MAX_LIMIT + 1),
            Err(InvalidAdjustment::SlidingLogTooLarge { .. })
        ));
    }

    #[test]
    fn an_adjusted_plan_counts_the_same_counter_with_the_adjusted_limit() {
        let rules = rules();
        let domain = rules.domain("d");
        let request = Request {
            domain: "d".into(),
            descriptors: vec![
                Descriptor::new(vec![Entry::new("two", "x")]),
                Descriptor::new(vec![Entry::new("api", "y")]),
            ],
            hits_addend: 0,
        };
        let mut adjustments = Adjustments::default();
        adjustments.set_override(
            "d",
            "d.two",
            Adjustment {
                limit_index: 1,
                ..overriding(7, 10)
            },
        );
        let at = AdjustmentsAt {
            adjustments: &adjustments,
            now_unix_ms: 5,
        };
        let configured = plan(&request, domain, PlanSettings::default());
        let adjusted = plan_adjusted(&request, domain, PlanSettings::default(), Some(at));
        let keys = |plan: &crate::decision::plan::Plan<'_>| -> Vec<Vec<u8>> {
            plan.counters.iter().map(|c| c.key.clone()).collect()
        };
        assert_eq!(keys(&configured), keys(&adjusted));
        let limits: Vec<u32> = adjusted
            .counters
            .iter()
            .map(|c| c.quota.requests_per_unit)
            .collect();
        assert_eq!(limits, [10, 7, 100]);
        assert!(matches!(
            &adjusted.descriptors[0],
            DescriptorPlan::Limited {
                limit: LimitSource::Adjusted { .. },
                ..
            }
        ));
        // Expired: the configured limits again.
        let later = AdjustmentsAt {
            now_unix_ms: 10,
            ..at
        };
        let expired = plan_adjusted(&request, domain, PlanSettings::default(), Some(later));
        assert_eq!(expired, configured);
    }
}
