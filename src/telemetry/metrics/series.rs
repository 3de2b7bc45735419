//! The resolved series a decision records into: handles (atomics) made ahead of time, per rule
//! when its first decision comes and per store when the limiter is built, so recording costs
//! an increment.

use prometheus::{Histogram, IntCounter, IntGauge};

use super::{class_names, sheds};
use crate::core::decision::outcome::RejectReason;
use crate::core::policy::rules::Rule;

/// The resolved per-rule series of one `(domain, rule)` label pair.
#[derive(Debug)]
pub struct RuleSeries {
    /// The labels, to remove the series from the registry when the label is released.
    pub(super) domain: Box<str>,
    pub(super) rule: Box<str>,
    /// Rejections per priority class of the rule, in the rule's class order.
    pub(super) classes: Box<[(Box<str>, ClassSeries)]>,
    pub(super) allowed: IntCounter,
    pub(super) rejected_limit: IntCounter,
    pub(super) rejected_shadow: IntCounter,
    pub(super) rejected_failure_policy: IntCounter,
    /// Made for concurrency rules only; elsewhere a shed (never expected) counts as `limit`.
    pub(super) rejected_shed: Option<IntCounter>,
    pub(super) near_limit: IntCounter,
    /// Set on the overflow series (`rule="other"`): every decision recorded there was folded.
    pub(super) folded: Option<IntCounter>,
}

impl RuleSeries {
    /// Its labels: domain and rule.
    pub fn labels(&self) -> (&str, &str) {
        (&self.domain, &self.rule)
    }

    pub fn allowed(&self) {
        self.allowed.inc();
        self.count_fold();
    }

    pub fn rejected(&self, reason: RejectReason) {
        match reason {
            RejectReason::Limit => self.rejected_limit.inc(),
            RejectReason::Shadow => self.rejected_shadow.inc(),
            RejectReason::FailurePolicy => self.rejected_failure_policy.inc(),
            RejectReason::Shed => self
                .rejected_shed
                .as_ref()
                .unwrap_or(&self.rejected_limit)
                .inc(),
            // Invalid requests have no rule; they are recorded by `Metrics::invalid_request`.
            RejectReason::InvalidRequest => return,
        }
        self.count_fold();
    }

    /// Hits that arrived with the counter past the near-limit threshold (reference §2.5).
    pub fn near_limit(&self, hits: u64) {
        if hits > 0 {
            self.near_limit.inc_by(hits);
        }
    }

    #[cfg(test)]
    pub fn is_folded(&self) -> bool {
        self.folded.is_some()
    }

    /// The rejection series of the rule's priority class at `index`, if it has classes.
    pub fn class(&self, index: usize) -> Option<&ClassSeries> {
        self.classes.get(index).map(|(_, series)| series)
    }

    /// Whether these series were made for `rule`'s classes and kind (a reload may have changed
    /// them).
    pub(super) fn fits(&self, rule: &Rule) -> bool {
        self.classes
            .iter()
            .map(|(name, _)| &**name)
            .eq(class_names(rule))
            && self.rejected_shed.is_some() == sheds(rule)
    }

    fn count_fold(&self) {
        if let Some(folded) = &self.folded {
            folded.inc();
        }
    }
}

/// The rejection series of one priority class of one rule (`class="low"`).
#[derive(Debug, Clone)]
pub struct ClassSeries {
    pub(super) rejected_limit: IntCounter,
    pub(super) rejected_shadow: IntCounter,
    pub(super) rejected_shed: Option<IntCounter>,
}

impl ClassSeries {
    /// A descriptor of this class refused for `reason`; false when the reason has no class
    /// series (the caller records it without a class).
    pub fn rejected(&self, reason: RejectReason) -> bool {
        match reason {
            RejectReason::Limit => self.rejected_limit.inc(),
            RejectReason::Shadow => self.rejected_shadow.inc(),
            RejectReason::Shed => match &self.rejected_shed {
                Some(shed) => shed.inc(),
                None => return false,
            },
            RejectReason::FailurePolicy | RejectReason::InvalidRequest => return false,
        }
        true
    }
}

/// The resolved series of one store backend.
#[derive(Debug, Clone)]
pub struct StoreSeries {
    pub(super) seconds: Histogram,
    pub(super) errors: IntCounter,
}

impl StoreSeries {
    /// One round trip to the store: how long it took and whether it failed.
    pub fn call(&self, seconds: f64, ok: bool) {
        self.seconds.observe(seconds);
        if !ok {
            self.errors.inc();
        }
    }
}

/// The eviction series of one store backend (the memory store: `--max-keys`).
#[derive(Debug, Clone)]
pub struct EvictionSeries {
    pub(super) evictions: IntCounter,
    pub(super) full: IntCounter,
}

impl EvictionSeries {
    /// `counters` live counters forgotten to make room.
    pub fn evicted(&self, counters: usize) {
        self.evictions
            .inc_by(u64::try_from(counters).unwrap_or(u64::MAX));
    }

    /// A request refused because only exhausted counters were left to forget.
    pub fn refused_full(&self) {
        self.full.inc();
    }
}

/// Decrements the in-flight gauge when dropped. It borrows the gauge: a call's guard never
/// outlives the metrics it counts in, and a clone would cost two more atomic operations a call.
#[derive(Debug)]
pub struct InFlight<'m> {
    pub(super) gauge: &'m IntGauge,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}
