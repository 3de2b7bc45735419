//! The live runtime adjustments (`core::policy::adjustment`): operators' overrides from the admin API and
//! the adaptive controller's values, held as one immutable snapshot that a decision loads
//! without a lock and a change replaces whole.
//!
//! Writers are rare (an operator, a controller every few seconds) and serialised by a mutex;
//! readers (every decision) only load the current `Arc`. When the store is Redis, the overrides
//! are also kept there (`redis` below) so every instance applies the same ones.

use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::core::ground::time::{Clock, SystemClock};
use crate::core::policy::adjustment::{adjusted_rules, Adjustment, AdjustmentSource, Adjustments};
use crate::core::policy::rules::RuleSet;

/// One override as the admin API lists it and Redis stores it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OverrideRecord {
    pub id: String,
    pub domain: String,
    /// The rule's config path, as `/rlconfig` shows it.
    pub rule: String,
    /// Which of the rule's limits (`rate_limits` index).
    pub limit_index: usize,
    pub requests_per_unit: u64,
    pub reason: String,
    pub created_at_unix_ms: u64,
    pub expires_at_unix_ms: u64,
}

impl OverrideRecord {
    /// The adjustment this record puts in force.
    pub fn adjustment(&self) -> Adjustment {
        Adjustment {
            requests_per_unit: self.requests_per_unit,
            limit_index: self.limit_index,
            source: AdjustmentSource::Override {
                id: self.id.clone(),
                reason: self.reason.clone(),
                expires_at_unix_ms: self.expires_at_unix_ms,
            },
        }
    }
}

/// The adjustments in force, shared by the limiter (which plans with [`snapshot`]), the admin
/// API and the adaptive controller.
///
/// [`snapshot`]: LiveAdjustments::snapshot
pub struct LiveAdjustments {
    current: ArcSwap<Adjustments>,
    /// The overrides with what `Adjustments` does not need to decide (creation time).
    overrides: Mutex<Vec<OverrideRecord>>,
    /// Serialises read-modify-write of `current`: two writers must not lose each other's change.
    writing: Mutex<()>,
    clock: Arc<dyn Clock>,
    /// What `floodgate_effective_limit` shows now: republished only when it changes, so a
    /// scrape never lands between the reset and the new values for nothing.
    published: Mutex<Vec<PublishedLimit>>,
}

/// One `floodgate_effective_limit` series: domain, rule, source, requests_per_unit.
type PublishedLimit = (String, String, &'static str, u32);

impl Default for LiveAdjustments {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl std::fmt::Debug for LiveAdjustments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveAdjustments")
            .field("current", &self.current.load())
            .finish_non_exhaustive()
    }
}

impl LiveAdjustments {
    /// None in force; overrides expire on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            current: ArcSwap::from_pointee(Adjustments::default()),
            overrides: Mutex::new(Vec::new()),
            writing: Mutex::new(()),
            clock,
            published: Mutex::new(Vec::new()),
        }
    }

    /// What a decision plans with now.
    pub fn snapshot(&self) -> Arc<Adjustments> {
        self.current.load_full()
    }

    /// Now, in Unix milliseconds, on this set's clock.
    pub fn now_unix_ms(&self) -> u64 {
        u64::try_from(self.clock.now() / 1_000).unwrap_or(0)
    }

    /// The adaptive controller's limit for `rule_path` of `domain` (its first limit), from
    /// `signal`. An active override still wins over it.
    pub fn set_adaptive(
        &self,
        domain: &str,
        rule_path: &str,
        requests_per_unit: u64,
        signal: &str,
    ) {
        let adjustment = Adjustment {
            requests_per_unit,
            limit_index: 0,
            source: AdjustmentSource::Adaptive {
                signal: signal.to_owned(),
            },
        };
        self.update(|adjustments| {
            adjustments.set_adaptive(domain, rule_path, adjustment);
        });
    }

    /// Back to the configured limit (or an override) for `rule_path` of `domain`.
    pub fn clear_adaptive(&self, domain: &str, rule_path: &str) {
        self.update(|adjustments| {
            adjustments.clear_adaptive(domain, rule_path);
        });
    }

    /// The adaptive value of a rule, if any.
    pub fn adaptive(&self, domain: &str, rule_path: &str) -> Option<u64> {
        self.snapshot()
            .rule(domain, rule_path)?
            .adaptive
            .as_ref()
            .map(|adjustment| adjustment.requests_per_unit)
    }

    /// Puts `record` in force, replacing the rule's earlier override (returned).
    pub fn set_override(&self, record: OverrideRecord) -> Option<OverrideRecord> {
        let mut replaced = None;
        self.update(|adjustments| {
            adjustments.set_override(&record.domain, &record.rule, record.adjustment());
            let mut overrides = self.overrides.lock();
            if let Some(at) = overrides
                .iter()
                .position(|old| old.domain == record.domain && old.rule == record.rule)
            {
                replaced = Some(overrides.remove(at));
            }
            overrides.push(record);
        });
        replaced
    }

    /// Removes the override `id`; returns it.
    pub fn remove_override(&self, id: &str) -> Option<OverrideRecord> {
        let mut removed = None;
        self.update(|adjustments| {
            adjustments.remove_override(id);
            let mut overrides = self.overrides.lock();
            if let Some(at) = overrides.iter().position(|record| record.id == id) {
                removed = Some(overrides.remove(at));
            }
        });
        removed
    }

    /// Every override not yet expired, soonest to expire first.
    pub fn overrides(&self) -> Vec<OverrideRecord> {
        let now = self.now_unix_ms();
        let mut overrides: Vec<OverrideRecord> = self
            .overrides
            .lock()
            .iter()
            .filter(|record| record.expires_at_unix_ms > now)
            .cloned()
            .collect();
        overrides.sort_by(|a, b| (a.expires_at_unix_ms, &a.id).cmp(&(b.expires_at_unix_ms, &b.id)));
        overrides
    }

    /// Makes `records` the overrides in force (the set shared through Redis), keeping the
    /// adaptive values. For two records of one rule, the newest wins.
    pub fn replace_overrides(&self, records: Vec<OverrideRecord>) {
        let now = self.now_unix_ms();
        let mut records: Vec<OverrideRecord> = records
            .into_iter()
            .filter(|record| record.expires_at_unix_ms > now)
            .collect();
        records.sort_by(|a, b| {
            (&a.domain, &a.rule, a.created_at_unix_ms, &a.id).cmp(&(
                &b.domain,
                &b.rule,
                b.created_at_unix_ms,
                &b.id,
            ))
        });
        // Sorted oldest first within a rule: keep the last of each run.
        records.reverse();
        records.dedup_by(|later, kept| later.domain == kept.domain && later.rule == kept.rule);
        {
            let overrides = self.overrides.lock();
            let mut same = overrides.clone();
            same.sort_by(|a, b| a.id.cmp(&b.id));
            let mut incoming = records.clone();
            incoming.sort_by(|a, b| a.id.cmp(&b.id));
            if same == incoming {
                return;
            }
        }
        self.update(|adjustments| {
            let stale: Vec<String> = adjustments
                .iter()
                .filter_map(|(_, _, rule)| match &rule.overriding {
                    Some(Adjustment {
                        source: AdjustmentSource::Override { id, .. },
                        ..
                    }) => Some(id.clone()),
                    _ => None,
                })
                .collect();
            for id in stale {
                adjustments.remove_override(&id);
            }
            for record in &records {
                adjustments.set_override(&record.domain, &record.rule, record.adjustment());
            }
            *self.overrides.lock() = records;
        });
    }

    /// Forgets overrides that have expired; returns them (for the audit log).
    pub fn remove_expired(&self) -> Vec<OverrideRecord> {
        let now = self.now_unix_ms();
        let has_expired = self
            .overrides
            .lock()
            .iter()
            .any(|record| record.expires_at_unix_ms <= now);
        if !has_expired {
            return Vec::new();
        }
        let mut expired = Vec::new();
        self.update(|adjustments| {
            adjustments.remove_expired(now);
            let mut overrides = self.overrides.lock();
            let (gone, kept): (Vec<_>, Vec<_>) = overrides
                .drain(..)
                .partition(|record| record.expires_at_unix_ms <= now);
            *overrides = kept;
            expired = gone;
        });
        expired
    }

    /// Publishes the effective limit of every adjusted rule of `rules` as
    /// `floodgate_effective_limit`.
    pub fn publish_metrics(&self, rules: &RuleSet) {
        let snapshot = self.snapshot();
        let current: Vec<PublishedLimit> = adjusted_rules(rules, &snapshot, self.now_unix_ms())
            .iter()
            .map(|adjusted| {
                (
                    adjusted.domain.to_owned(),
                    adjusted.rule.path.clone(),
                    adjusted.adjustment.source.label(),
                    adjusted.effective.requests_per_unit,
                )
            })
            .collect();
        let mut published = self.published.lock();
        if *published == current {
            return;
        }
        crate::telemetry::metrics::effective_limits(current.iter().map(
            |(domain, rule, source, limit)| (domain.as_str(), rule.as_str(), *source, *limit),
        ));
        *published = current;
    }

    fn update(&self, change: impl FnOnce(&mut Adjustments)) {
        let _writing = self.writing.lock();
        let mut next = Adjustments::clone(&self.current.load());
        change(&mut next);
        self.current.store(Arc::new(next));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ground::time::ManualClock;

    fn record(id: &str, rule: &str, created: u64, expires: u64) -> OverrideRecord {
        OverrideRecord {
            id: id.to_owned(),
            domain: "d".to_owned(),
            rule: rule.to_owned(),
            limit_index: 0,
            requests_per_unit: 3,
            reason: "test".to_owned(),
            created_at_unix_ms: created,
            expires_at_unix_ms: expires,
        }
    }

    fn live_at(ms: i64) -> (Arc<ManualClock>, LiveAdjustments) {
        let clock = Arc::new(ManualClock::new(ms * 1_000));
        let live = LiveAdjustments::new(clock.clone());
        (clock, live)
    }

    #[test]
    fn an_override_beats_the_adaptive_value_until_it_expires() {
        let (clock, live) = live_at(1_000);
        live.set_adaptive("d", "d.k", 50, "p95");
        live.set_override(record("a", "d.k", 1_000, 2_000));
        let effective = |live: &LiveAdjustments| {
            live.snapshot()
                .effective("d", "d.k", live.now_unix_ms())
                .map(|adjustment| adjustment.requests_per_unit)
        };
        assert_eq!(effective(&live), Some(3));
        clock.set(2_000_000);
        assert_eq!(effective(&live), Some(50));
        assert_eq!(live.remove_expired().len(), 1);
        assert!(live.overrides().is_empty());
        live.clear_adaptive("d", "d.k");
        assert_eq!(effective(&live), None);
        assert!(live.snapshot().is_empty());
    }

    #[test]
    fn a_new_override_replaces_the_rules_earlier_one() {
        let (_, live) = live_at(1_000);
        assert!(live
            .set_override(record("a", "d.k", 1_000, 9_000))
            .is_none());
        let replaced = live.set_override(record("b", "d.k", 1_001, 9_000));
        assert_eq!(replaced.map(|r| r.id), Some("a".to_owned()));
        assert_eq!(live.overrides().len(), 1);
        assert!(live.remove_override("a").is_none());
        assert!(live.remove_override("b").is_some());
        assert!(live.snapshot().is_empty());
    }

    #[test]
    fn replacing_from_the_shared_set_keeps_the_newest_per_rule_and_the_adaptive_values() {
        let (_, live) = live_at(1_000);
        live.set_adaptive("d", "d.other", 7, "p95");
        live.set_override(record("local", "d.k", 900, 9_000));
        live.replace_overrides(vec![
            record("old", "d.k", 950, 9_000),
            record("new", "d.k", 990, 9_000),
            record("gone", "d.j", 10, 999),
        ]);
        let ids: Vec<String> = live.overrides().into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["new"]);
        let snapshot = live.snapshot();
        assert!(snapshot.effective("d", "d.j", 1_000).is_none());
        assert_eq!(live.adaptive("d", "d.other"), Some(7));
    }
}
