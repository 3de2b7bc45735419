//! Prometheus metrics, served as text on the debug port's `/metrics`.
//!
//! One process-wide registry ([`global`]): the limiter, the stores and the reloader all record
//! into it through the small functions below, without passing a handle around. Every series a
//! decision touches is resolved to a handle (an atomic) ahead of time — per rule when the rule
//! set is swapped in, per store when the limiter is built — so deciding costs a few atomic
//! increments, no allocation and no lock (see `telemetry::record`).
//!
//! Label cardinality is bounded: per-rule series carry the rule's config path
//! (`rule="edge.generic_key_api.client_id"`), never request values, except for rules with
//! `detailed_metric` (the operator asked for the values) and Envoy's limit overrides (whose path
//! names the request's keys). At most [`MAX_RULE_LABELS`] rule labels exist at once, admitted
//! through a [`LabelBudget`] that follows the rules in force (a reload releases the labels of
//! rules that are gone); the others are recorded under `rule="other"` and counted by
//! `floodgate_metric_labels_folded_total`. A rule's series are made at its first decision, so
//! rules that are never hit cost nothing here.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

mod adaptive;
mod families;
pub mod queue;
mod series;

use crate::core::decision::outcome::{Decision, RejectReason};
use parking_lot::RwLock;
use prometheus::core::{MetricVec, MetricVecBuilder};
use prometheus::{Registry, TextEncoder};

use super::label_budget::LabelBudget;
use crate::core::policy::rules::{Rule, RuleSet};
use adaptive::AdaptiveSeries;
use families::{CallFamilies, ConfigFamilies, RuleFamilies, StoreFamilies};

pub use adaptive::{
    adaptive_error_ratio, adaptive_forget, adaptive_latency, adaptive_limit, adaptive_step,
};
pub use series::{ClassSeries, EvictionSeries, InFlight, RuleSeries, StoreSeries};

/// How many distinct rule labels the per-rule metrics may carry before folding into `other`.
pub const MAX_RULE_LABELS: usize = 1000;
/// The `rule` label of decisions whose own label would exceed [`MAX_RULE_LABELS`].
pub const FOLDED_RULE_LABEL: &str = "other";
/// The `rule` label of rejections no rule made (an invalid request).
pub const NO_RULE_LABEL: &str = "none";
/// The `class` label of rejections outside any priority class (rules without classes).
pub const NO_CLASS_LABEL: &str = "";
/// The `domain` label of a request whose domain is not configured: request text never becomes
/// a label unless a rule asks for it.
pub const UNKNOWN_DOMAIN_LABEL: &str = "unknown";

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("metrics registry: {0}")]
    Registry(#[from] prometheus::Error),
}

/// Why a call was answered without being decided (`floodgate_overload_rejections_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverloadReason {
    /// `--max-in-flight` calls were in flight: answered by `--overload-answer`.
    InFlight,
    /// The caller's deadline (`grpc-timeout`) passed before the decision: DEADLINE_EXCEEDED.
    Deadline,
    /// Shed past `--shed-above` calls in flight (probabilistically, lowest class first):
    /// answered by `--overload-answer`.
    Shed,
}

impl OverloadReason {
    #[cfg(test)]
    pub const ALL: [OverloadReason; 3] = [
        OverloadReason::InFlight,
        OverloadReason::Deadline,
        OverloadReason::Shed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            OverloadReason::InFlight => "in_flight",
            OverloadReason::Deadline => "deadline",
            OverloadReason::Shed => "shed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Every metric floodgate exports.
pub struct Metrics {
    registry: Registry,
    calls: CallFamilies,
    config: ConfigFamilies,
    store: StoreFamilies,
    per_rule: RuleFamilies,
    adaptive: AdaptiveSeries,
    /// Per-rule series handed out, by domain and rule label.
    rule_labels: LabelBudget<Arc<RuleSeries>>,
    /// Each domain's `rule="other"` series.
    folded: RwLock<HashMap<Box<str>, Arc<RuleSeries>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("max_rule_labels", &self.rule_labels.capacity())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// A fresh registry (the process uses [`global`]; tests build their own).
    pub fn new(max_rule_labels: usize) -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let calls = CallFamilies::register(&registry)?;
        let config = ConfigFamilies::register(&registry)?;
        let store = StoreFamilies::register(&registry)?;
        let per_rule = RuleFamilies::register(&registry)?;
        let adaptive = AdaptiveSeries::register(&registry)?;
        families::register_build_info(&registry)?;
        Ok(Self {
            registry,
            calls,
            config,
            store,
            per_rule,
            adaptive,
            rule_labels: LabelBudget::new(max_rule_labels),
            folded: RwLock::new(HashMap::new()),
        })
    }

    /// Where families kept in files of their own (`telemetry::connections`) register.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Result<String, MetricsError> {
        Ok(TextEncoder::new().encode_to_string(&self.registry.gather())?)
    }

    pub fn call_finished(&self, decision: Decision, seconds: f64) {
        self.calls.by_decision[decision.index()].inc();
        self.calls.seconds.observe(seconds);
    }

    /// Counts a call as in flight until the returned guard is dropped (also when the caller's
    /// future is cancelled, e.g. the client went away).
    pub fn call_started(&self) -> InFlight<'_> {
        self.calls.in_flight.inc();
        InFlight {
            gauge: &self.calls.in_flight,
        }
    }

    /// A call answered without a decision, to protect floodgate.
    pub fn overload_rejected(&self, reason: OverloadReason) {
        if let Some(counter) = self.calls.overload_rejections.get(reason.index()) {
            counter.inc();
        }
    }

    /// A call the store failed, answered by `policy` (its name).
    pub fn failure_policy_applied(&self, policy: &str) {
        if let Ok(counter) = self
            .store
            .failure_policy_calls
            .get_metric_with_label_values(&[policy])
        {
            counter.inc();
        }
    }

    /// An invalid request: rejected before any rule was looked at.
    pub fn invalid_request(&self, domain_label: &str) {
        if let Ok(counter) = self.per_rule.rejected.get_metric_with_label_values(&[
            domain_label,
            NO_RULE_LABEL,
            RejectReason::InvalidRequest.label(),
            NO_CLASS_LABEL,
        ]) {
            counter.inc();
        }
    }

    pub fn reload_succeeded(&self, rules: usize) {
        self.config.load_success.inc();
        self.config
            .rules_loaded
            .set(i64::try_from(rules).unwrap_or(i64::MAX));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|since| since.as_secs_f64())
            .unwrap_or_default();
        self.config.last_good_load.set(now);
    }

    pub fn reload_failed(&self) {
        self.config.load_error.inc();
    }

    /// The series of one store backend, for callers that record on every call.
    pub fn store_series(&self, backend: &str) -> Result<StoreSeries, MetricsError> {
        Ok(StoreSeries {
            seconds: self
                .store
                .seconds
                .get_metric_with_label_values(&[backend])?,
            errors: self.store.errors.get_metric_with_label_values(&[backend])?,
        })
    }

    /// The eviction series of one store backend.
    pub fn eviction_series(&self, backend: &str) -> Result<EvictionSeries, MetricsError> {
        Ok(EvictionSeries {
            evictions: self
                .store
                .evictions
                .get_metric_with_label_values(&[backend])?,
            full: self.store.full.get_metric_with_label_values(&[backend])?,
        })
    }

    pub fn store_state(&self, backend: &str, up: bool) {
        if let Ok(gauge) = self.store.up.get_metric_with_label_values(&[backend]) {
            gauge.set(i64::from(up));
        }
    }

    /// The series of a configured `rule` of `domain`, made on first use; the domain's
    /// `rule="other"` series when the rule is beyond the label budget. Known labels cost a
    /// read lock and no allocation.
    pub fn rule_series(&self, domain: &str, rule: &Rule) -> Result<Arc<RuleSeries>, MetricsError> {
        let made = self
            .rule_labels
            .configured(domain, &rule.path, rule.index, || {
                self.new_rule_series(domain, &rule.path, class_names(rule), (false, sheds(rule)))
                    .map(Arc::new)
            })?;
        match made {
            Some(series) => Ok(series),
            None => self.folded_series(domain),
        }
    }

    /// The series of `label`, made from request values (a `detailed_metric` label, an Envoy
    /// limit override's path) and counted for the rule labelled `owner`, if any: its own while
    /// the budget has room, the domain's `rule="other"` series after.
    pub fn value_series(
        &self,
        domain: &str,
        label: &str,
        owner: Option<&str>,
    ) -> Result<Arc<RuleSeries>, MetricsError> {
        let made = self.rule_labels.spare(domain, label, owner, || {
            self.new_rule_series(domain, label, std::iter::empty(), (false, false))
                .map(Arc::new)
        })?;
        match made {
            Some(series) => Ok(series),
            None => self.folded_series(domain),
        }
    }

    fn folded_series(&self, domain: &str) -> Result<Arc<RuleSeries>, MetricsError> {
        if let Some(other) = self.folded.read().get(domain) {
            return Ok(Arc::clone(other));
        }
        let mut folded = self.folded.write();
        if let Some(other) = folded.get(domain) {
            return Ok(Arc::clone(other));
        }
        let other = Arc::new(self.new_rule_series(
            domain,
            FOLDED_RULE_LABEL,
            std::iter::empty(),
            (true, false),
        )?);
        folded.insert(Box::from(domain), Arc::clone(&other));
        Ok(other)
    }

    /// Makes the rule labels follow `rules`, the rule set now in force: the labels of rules
    /// that are gone (or beyond the budget now, or whose classes changed), and the value labels
    /// they owned, are released and their series removed from the registry, which leaves
    /// their places to new rules. Labels of rules that stay keep counting.
    ///
    /// A decision still running on the previous rule set may make a released label again;
    /// the next reload releases it.
    pub fn follow_rules(&self, rules: &RuleSet) {
        let released = self
            .rule_labels
            .follow_rules(rules, |rule, series| series.fits(rule));
        for series in released {
            self.remove_rule_series(&series);
        }
        self.folded.write().retain(|domain, series| {
            let keep = rules.domain(domain).is_some();
            if !keep {
                self.remove_rule_series(series);
            }
            keep
        });
    }

    /// Rule labels admitted now (not counting `other`).
    #[cfg(test)]
    pub fn rule_labels(&self) -> usize {
        self.rule_labels.len()
    }

    fn remove_rule_series(&self, series: &RuleSeries) {
        let (domain, rule) = (&*series.domain, &*series.rule);
        queue::forget_rule(domain, rule);
        forget(&self.per_rule.allowed, &[domain, rule]);
        forget(&self.per_rule.near_limit, &[domain, rule]);
        for reason in [
            RejectReason::Limit,
            RejectReason::Shadow,
            RejectReason::FailurePolicy,
            RejectReason::Shed,
        ] {
            forget(
                &self.per_rule.rejected,
                &[domain, rule, reason.label(), NO_CLASS_LABEL],
            );
        }
        for (class, _) in &series.classes {
            for reason in [
                RejectReason::Limit,
                RejectReason::Shadow,
                RejectReason::Shed,
            ] {
                forget(
                    &self.per_rule.rejected,
                    &[domain, rule, reason.label(), class],
                );
            }
        }
    }

    fn new_rule_series<'c>(
        &self,
        domain: &str,
        rule: &str,
        classes: impl Iterator<Item = &'c str>,
        (folded, sheds): (bool, bool),
    ) -> Result<RuleSeries, MetricsError> {
        let rejected = |reason: RejectReason, class: &str| {
            self.per_rule.rejected.get_metric_with_label_values(&[
                domain,
                rule,
                reason.label(),
                class,
            ])
        };
        let shed = |class: &str| {
            sheds
                .then(|| rejected(RejectReason::Shed, class))
                .transpose()
        };
        let classes = classes
            .map(|class| {
                let series = ClassSeries {
                    rejected_limit: rejected(RejectReason::Limit, class)?,
                    rejected_shadow: rejected(RejectReason::Shadow, class)?,
                    rejected_shed: shed(class)?,
                };
                Ok((Box::from(class), series))
            })
            .collect::<Result<_, MetricsError>>()?;
        Ok(RuleSeries {
            domain: Box::from(domain),
            rule: Box::from(rule),
            classes,
            allowed: self
                .per_rule
                .allowed
                .get_metric_with_label_values(&[domain, rule])?,
            rejected_limit: rejected(RejectReason::Limit, NO_CLASS_LABEL)?,
            rejected_shadow: rejected(RejectReason::Shadow, NO_CLASS_LABEL)?,
            rejected_failure_policy: rejected(RejectReason::FailurePolicy, NO_CLASS_LABEL)?,
            rejected_shed: shed(NO_CLASS_LABEL)?,
            near_limit: self
                .per_rule
                .near_limit
                .get_metric_with_label_values(&[domain, rule])?,
            folded: folded.then(|| self.per_rule.labels_folded.clone()),
        })
    }
}

/// Whether `rule` gets `reason="shed"` series: concurrency rules, the ones that may shed (with
/// or without `shed_above` now: a reload may add it).
fn sheds(rule: &Rule) -> bool {
    rule.concurrency.is_some()
}

/// The names of `rule`'s priority classes whose rejections are counted per class: none for a
/// rule with `detailed_metric`, which counts under per-value labels.
fn class_names(rule: &Rule) -> impl Iterator<Item = &str> {
    rule.priority
        .iter()
        .filter(|_| !rule.detailed_metric)
        .flat_map(|priority| priority.classes.iter().map(|class| class.name.as_str()))
}

/// Removes one series from its family; a series that was never made is no error.
fn forget<B: MetricVecBuilder>(family: &MetricVec<B>, labels: &[&str]) {
    let _ = family.remove_label_values(labels);
}

impl Metrics {
    /// Makes `adjusted` (domain, rule, source, requests_per_unit) the only
    /// `floodgate_effective_limit` series: a rule no longer adjusted loses its series.
    pub fn effective_limits<'a>(
        &self,
        adjusted: impl IntoIterator<Item = (&'a str, &'a str, &'a str, u32)>,
    ) {
        self.per_rule.effective_limit.reset();
        for (domain, rule, source, requests_per_unit) in adjusted {
            if let Ok(gauge) = self
                .per_rule
                .effective_limit
                .get_metric_with_label_values(&[domain, rule, source])
            {
                gauge.set(i64::from(requests_per_unit));
            }
        }
    }
}

/// The process's metrics. `None` only if the registry could not be built (a bug caught by the
/// unit tests): metrics then stay off rather than take the service down.
pub fn global() -> Option<&'static Metrics> {
    static GLOBAL: OnceLock<Option<Metrics>> = OnceLock::new();
    GLOBAL
        .get_or_init(|| match Metrics::new(MAX_RULE_LABELS) {
            Ok(metrics) => Some(metrics),
            Err(error) => {
                tracing::error!("metrics are off: {error}");
                None
            }
        })
        .as_ref()
}

/// A gRPC call answered without a decision (`server::admission`).
pub fn overload_rejected(reason: OverloadReason) {
    if let Some(metrics) = global() {
        metrics.overload_rejected(reason);
    }
}

/// The eviction series of `backend`, for a store to hold (`None`: metrics are off).
pub fn eviction_series(backend: &str) -> Option<EvictionSeries> {
    global().and_then(|metrics| metrics.eviction_series(backend).ok())
}

/// Whether the store is reachable, as last seen (connect, reconnect, health probe).
pub fn store_state(backend: &'static str, up: bool) {
    if let Some(metrics) = global() {
        metrics.store_state(backend, up);
    }
}

/// The rules whose limit is adjusted now (`Metrics::effective_limits`).
pub fn effective_limits<'a>(adjusted: impl IntoIterator<Item = (&'a str, &'a str, &'a str, u32)>) {
    if let Some(metrics) = global() {
        metrics.effective_limits(adjusted);
    }
}

/// The text for `/metrics`.
pub fn render() -> Result<String, MetricsError> {
    match global() {
        Some(metrics) => metrics.render(),
        None => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::test_rules::rules_with_keys;

    fn metrics(max_rule_labels: usize) -> Metrics {
        Metrics::new(max_rule_labels).unwrap_or_else(|error| panic!("{error}"))
    }

    fn render(metrics: &Metrics) -> String {
        metrics.render().unwrap_or_else(|error| panic!("{error}"))
    }

    /// The series of a label made from request values, owned by no rule.
    fn series(metrics: &Metrics, domain: &str, label: &str) -> Arc<RuleSeries> {
        metrics
            .value_series(domain, label, None)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// The series of the rule at `path`.
    fn rule_series(metrics: &Metrics, rules: &RuleSet, path: &str) -> Arc<RuleSeries> {
        let rule = rules
            .all_rules()
            .find(|rule| rule.path == path)
            .unwrap_or_else(|| panic!("no rule {path}"));
        let domain = path.split('.').next().unwrap_or_default();
        metrics
            .rule_series(domain, rule)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn rule_labels_follow_the_rules_in_force() {
        let metrics = metrics(2);
        let first = rules_with_keys(&["a", "b"]);
        metrics.follow_rules(&first);
        rule_series(&metrics, &first, "d.a").allowed();
        rule_series(&metrics, &first, "d.b").allowed();
        assert_eq!(metrics.rule_labels(), 2);
        // `a` is gone, `b` stays, `c` is new: `c` takes `a`'s place.
        let second = rules_with_keys(&["b", "c"]);
        metrics.follow_rules(&second);
        assert_eq!(metrics.rule_labels(), 1);
        let c = rule_series(&metrics, &second, "d.c");
        assert!(!c.is_folded(), "the new rule has a label of its own");
        c.allowed();
        rule_series(&metrics, &second, "d.b").allowed();
        let text = render(&metrics);
        assert!(
            !text.contains("rule=\"d.a\""),
            "released from the registry:\n{text}"
        );
        assert!(text.contains("floodgate_requests_allowed_total{domain=\"d\",rule=\"d.b\"} 2"));
        assert!(text.contains("floodgate_requests_allowed_total{domain=\"d\",rule=\"d.c\"} 1"));
        assert!(!text.contains("domain=\"d\",rule=\"other\""), "{text}");
    }

    #[test]
    fn rules_beyond_the_budget_fold_and_value_labels_get_the_rest() {
        let metrics = metrics(3);
        let rules = rules_with_keys(&["a", "b", "c", "e"]);
        metrics.follow_rules(&rules);
        assert!(!rule_series(&metrics, &rules, "d.c").is_folded());
        assert!(
            rule_series(&metrics, &rules, "d.e").is_folded(),
            "the fourth rule"
        );
        // Three rules hold every place, hit or not.
        assert!(series(&metrics, "d", "d.a_x").is_folded());
        let fewer = rules_with_keys(&["a"]);
        metrics.follow_rules(&fewer);
        assert!(!series(&metrics, "d", "d.a_x").is_folded());
    }

    #[test]
    fn every_metric_is_registered_and_renders() {
        let metrics = metrics(10);
        metrics.call_finished(Decision::Ok, 0.001);
        metrics.reload_succeeded(3);
        metrics.overload_rejected(OverloadReason::InFlight);
        metrics.reload_failed();
        metrics.store_state("memory", true);
        metrics.invalid_request(UNKNOWN_DOMAIN_LABEL);
        let store = metrics
            .store_series("memory")
            .unwrap_or_else(|error| panic!("{error}"));
        store.call(0.000_1, false);
        let evictions = metrics
            .eviction_series("memory")
            .unwrap_or_else(|error| panic!("{error}"));
        evictions.evicted(3);
        evictions.refused_full();
        series(&metrics, "edge", "edge.key").allowed();
        let text = render(&metrics);
        for line in [
            "floodgate_calls_total{decision=\"ok\"} 1",
            "floodgate_calls_total{decision=\"error\"} 0",
            "floodgate_decision_duration_seconds_count 1",
            "floodgate_calls_in_flight 0",
            "floodgate_overload_rejections_total{reason=\"in_flight\"} 1",
            "floodgate_overload_rejections_total{reason=\"deadline\"} 0",
            "floodgate_overload_rejections_total{reason=\"shed\"} 0",
            "floodgate_rules_loaded 3",
            "floodgate_config_load_success_total 1",
            "floodgate_config_load_error_total 1",
            "floodgate_store_up{backend=\"memory\"} 1",
            "floodgate_store_errors_total{backend=\"memory\"} 1",
            "floodgate_store_duration_seconds_count{backend=\"memory\"} 1",
            "floodgate_store_evictions_total{backend=\"memory\"} 3",
            "floodgate_store_full_total{backend=\"memory\"} 1",
            "floodgate_requests_allowed_total{domain=\"edge\",rule=\"edge.key\"} 1",
            "floodgate_requests_rejected_total{class=\"\",domain=\"unknown\",reason=\"invalid_request\",rule=\"none\"} 1",
            "floodgate_metric_labels_folded_total 0",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(text.contains("floodgate_config_last_load_success_timestamp_seconds 1"));
    }

    #[test]
    fn the_in_flight_gauge_follows_the_guards() {
        let metrics = metrics(10);
        let first = metrics.call_started();
        let second = metrics.call_started();
        assert!(render(&metrics).contains("floodgate_calls_in_flight 2"));
        drop(first);
        drop(second);
        assert!(render(&metrics).contains("floodgate_calls_in_flight 0"));
    }

    #[test]
    fn rule_labels_beyond_the_limit_fold_into_other() {
        let metrics = metrics(2);
        let first = series(&metrics, "d", "d.a");
        let second = series(&metrics, "d", "d.b");
        let third = series(&metrics, "d", "d.c");
        let fourth = series(&metrics, "d", "d.e");
        assert!(!first.is_folded() && !second.is_folded());
        assert!(third.is_folded() && fourth.is_folded());
        // Known labels stay themselves.
        assert!(!series(&metrics, "d", "d.a").is_folded());
        third.allowed();
        fourth.rejected(RejectReason::Limit);
        first.allowed();
        let text = render(&metrics);
        assert!(text.contains("floodgate_requests_allowed_total{domain=\"d\",rule=\"other\"} 1"));
        assert!(text.contains(
            "floodgate_requests_rejected_total{class=\"\",domain=\"d\",reason=\"limit\",rule=\"other\"} 1"
        ));
        assert!(text.contains("floodgate_metric_labels_folded_total 2"));
        assert!(!text.contains("rule=\"d.c\""));
    }

    #[test]
    fn decisions_have_the_documented_labels() {
        let labels: Vec<&str> = Decision::ALL.iter().map(|d| d.label()).collect();
        assert_eq!(labels, ["ok", "over_limit", "shadow", "unknown", "error"]);
        for (index, decision) in Decision::ALL.iter().enumerate() {
            assert_eq!(decision.index(), index);
        }
        for (index, reason) in OverloadReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), index);
        }
    }
}
