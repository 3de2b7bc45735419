//! envoyproxy/ratelimit's stats under the names its default statsd → Prometheus mapping gives
//! them (`src/stats/prom/default_mapper.yaml`), for the dashboards and alerts built on the
//! reference: `ratelimit_service_rate_limit_<stat>{domain, key1, key2}`, the config loads,
//! `should_rate_limit` errors, and per gRPC method the requests and their response time.
//! Served on a listener of their own (`USE_PROMETHEUS`) and sent to statsd under the
//! reference's statsd names (`USE_STATSD`, `telemetry::statsd_sink`, which reads these same
//! counters); floodgate's `floodgate_*` metrics stay on the debug listener.
//!
//! The core decides what is counted (`core::outcome::reference_counts`) and under which key
//! (`core::outcome::stats_key`); this module maps the key to its labels as the mapping does
//! and adds. Off (nothing made, nothing counted) unless [`enable`] was called.
//!
//! The mapping splits the sanitized key `<domain>.<key1>[.<key2>…]` at its dots: the first
//! three pieces are the labels and the rest is dropped, so keys that share them share a series.
//! A key of two pieces has no `key2` under the mapping; here it is `key2=""`, which Prometheus
//! stores and queries as no label at all.
//!
//! Keys are admitted through a [`LabelBudget`] as floodgate's own rule labels are: a key
//! without request values under its rule's place, a key with request values (`detailed_metric`,
//! `value_to_metric`, limit overrides) as a spare label; past the budget the hits count under
//! the domain's overflow key `<domain>.other`, so a hostile value cannot grow the series.
//! A rule's own key is resolved at its first decision and kept in a [`ReferenceKeyTable`]
//! swapped with the rules, so most decisions count with no lock and no lookup; keys with
//! request values are built per call (as floodgate's own `detailed_metric` labels are).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry, TextEncoder,
};

use super::label_budget::{Holder, LabelBudget};
use super::metrics::{MetricsError, FOLDED_RULE_LABEL, MAX_RULE_LABELS};
use super::record::DecidedCall;
use crate::core::outcome::reference_counts::{reference_counts, ReferenceCounts};
use crate::core::outcome::stats_key::{
    override_stats_key, sanitize_stat_name, stats_key, StatsKey,
};
use crate::core::plan::{DescriptorPlan, LimitSource};
use crate::core::rules::{Rule, RuleSet};

/// The gRPC method the reference's server stats name (`ratelimit_server.<method>.*`).
pub const SHOULD_RATE_LIMIT: &str = "ShouldRateLimit";

/// Why a ShouldRateLimit call failed, as the reference names it
/// (`ratelimit.service.call.should_rate_limit.<err_type>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrType {
    /// The store failed (the reference's `redis_error`, whatever the store).
    Store,
    /// Anything else the call was refused for (an invalid request, no configuration).
    Service,
}

impl ErrType {
    fn label(self) -> &'static str {
        match self {
            ErrType::Store => "redis_error",
            ErrType::Service => "service_error",
        }
    }
}

/// `domain`, `key1`, `key2` of one mapped series.
type Labels = [Box<str>; 3];

/// The five counters of one mapped series `{domain, key1, key2}`.
#[derive(Debug)]
pub struct KeySeries {
    labels: Labels,
    total_hits: IntCounter,
    over_limit: IntCounter,
    near_limit: IntCounter,
    within_limit: IntCounter,
    shadow_mode: IntCounter,
}

impl KeySeries {
    fn add(&self, counts: &ReferenceCounts) {
        for (counter, value) in [
            (&self.total_hits, counts.total_hits),
            (&self.over_limit, counts.over_limit),
            (&self.near_limit, counts.near_limit),
            (&self.within_limit, counts.within_limit),
            (&self.shadow_mode, counts.shadow_mode),
        ] {
            if value > 0 {
                counter.inc_by(value);
            }
        }
    }
}

/// The reference's stats and the registry they are served from.
pub struct ReferenceStats {
    registry: Registry,
    /// `total_hits`, `over_limit`, `near_limit`, `within_limit`, `shadow_mode`.
    families: [IntCounterVec; 5],
    config_load_success: IntCounter,
    config_load_error: IntCounter,
    should_rate_limit_error: IntCounterVec,
    total_requests: IntCounter,
    response_time: Histogram,
    /// Observe milliseconds (`PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`), as the reference's
    /// mapping without its `scale: 0.001` does; the name stays `…_seconds`.
    response_time_as_milliseconds: bool,
    keys: LabelBudget<Arc<KeySeries>>,
    /// Each mapped series with how many admitted keys count in it: removed from the registry
    /// when the last goes.
    mapped: Mutex<HashMap<Labels, (usize, Arc<KeySeries>)>>,
    /// Each domain's overflow series (`<domain>.other`).
    folded: RwLock<HashMap<Box<str>, Arc<KeySeries>>>,
}

impl std::fmt::Debug for ReferenceStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceStats")
            .field("max_keys", &self.keys.capacity())
            .finish_non_exhaustive()
    }
}

const STATS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

impl ReferenceStats {
    /// A fresh registry admitting at most `max_keys` stats keys.
    pub fn new(max_keys: usize, response_time_as_milliseconds: bool) -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let family = |stat: &str| -> Result<IntCounterVec, MetricsError> {
            let vec = IntCounterVec::new(
                Opts::new(
                    format!("ratelimit_service_rate_limit_{stat}"),
                    format!("envoyproxy/ratelimit's {stat}, in hits, by stats key."),
                ),
                &["domain", "key1", "key2"],
            )?;
            registry.register(Box::new(vec.clone()))?;
            Ok(vec)
        };
        let families = [
            family(STATS[0])?,
            family(STATS[1])?,
            family(STATS[2])?,
            family(STATS[3])?,
            family(STATS[4])?,
        ];
        let counter = |name: &str, help: &str| -> Result<IntCounter, MetricsError> {
            let counter = IntCounter::new(name, help)?;
            registry.register(Box::new(counter.clone()))?;
            Ok(counter)
        };
        let config_load_success = counter(
            "ratelimit_service_config_load_success",
            "Configurations loaded and swapped in.",
        )?;
        let config_load_error = counter(
            "ratelimit_service_config_load_error",
            "Configurations refused; the previous one stays in force.",
        )?;
        let should_rate_limit_error = IntCounterVec::new(
            Opts::new(
                "ratelimit_service_should_rate_limit_error",
                "ShouldRateLimit calls that failed, by envoyproxy/ratelimit's error type.",
            ),
            &["err_type"],
        )?;
        registry.register(Box::new(should_rate_limit_error.clone()))?;
        let total_requests_vec = IntCounterVec::new(
            Opts::new("ratelimit_service_total_requests", "gRPC calls by method."),
            &["grpc_method"],
        )?;
        registry.register(Box::new(total_requests_vec.clone()))?;
        let response_time_vec = HistogramVec::new(
            HistogramOpts::new(
                "ratelimit_service_response_time_seconds",
                "gRPC call duration by method, in seconds.",
            ),
            &["grpc_method"],
        )?;
        registry.register(Box::new(response_time_vec.clone()))?;
        // Both errors are shown from the start, as the reference makes them at start.
        for err_type in [ErrType::Store, ErrType::Service] {
            should_rate_limit_error.get_metric_with_label_values(&[err_type.label()])?;
        }
        Ok(Self {
            total_requests: total_requests_vec
                .get_metric_with_label_values(&[SHOULD_RATE_LIMIT])?,
            response_time: response_time_vec.get_metric_with_label_values(&[SHOULD_RATE_LIMIT])?,
            response_time_as_milliseconds,
            registry,
            families,
            config_load_success,
            config_load_error,
            should_rate_limit_error,
            keys: LabelBudget::new(max_keys),
            mapped: Mutex::new(HashMap::new()),
            folded: RwLock::new(HashMap::new()),
        })
    }

    /// The text for the reference-names listener.
    pub fn render(&self) -> Result<String, MetricsError> {
        Ok(TextEncoder::new().encode_to_string(&self.registry.gather())?)
    }

    /// The counters as they are now, for the statsd sink (`telemetry::statsd_sink`).
    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }

    /// Whether `response_time` observes milliseconds rather than seconds.
    pub fn response_time_as_milliseconds(&self) -> bool {
        self.response_time_as_milliseconds
    }

    /// Adds `counts` to the series of `key`, as a decision under it would.
    #[cfg(test)]
    pub(crate) fn add_for_test(&self, key: &str, counts: &ReferenceCounts) {
        let series = self
            .mapped_series(key)
            .unwrap_or_else(|error| panic!("{error}"));
        series.add(counts);
    }

    pub fn config_loaded(&self, ok: bool) {
        if ok {
            self.config_load_success.inc();
        } else {
            self.config_load_error.inc();
        }
    }

    /// One ShouldRateLimit gRPC call answered (or failed) after `seconds`.
    pub fn grpc_call(&self, seconds: f64) {
        self.total_requests.inc();
        let value = if self.response_time_as_milliseconds {
            seconds * 1000.0
        } else {
            seconds
        };
        self.response_time.observe(value);
    }

    pub fn should_rate_limit_error(&self, err_type: ErrType) {
        if let Ok(counter) = self
            .should_rate_limit_error
            .get_metric_with_label_values(&[err_type.label()])
        {
            counter.inc();
        }
    }

    /// Adds one decided call's counts to the series of its descriptors' stats keys; `table`
    /// holds those of the keys that are their rule's path (for `call.rules`).
    pub fn record_call(&self, table: &ReferenceKeyTable, call: &DecidedCall<'_>) {
        let statuses = call.plan.descriptors.iter().zip(&call.response.statuses);
        for (index, (descriptor_plan, _)) in statuses.enumerate() {
            let Some(counts) = reference_counts(
                call.plan,
                descriptor_plan,
                call.decided,
                call.near_limit_ratio,
            ) else {
                continue;
            };
            match self.series_of(table, call, index, descriptor_plan) {
                Some(SeriesRef::Table(series)) => series.add(&counts),
                Some(SeriesRef::Made(series)) => series.add(&counts),
                None => {}
            }
        }
    }

    fn series_of<'t>(
        &self,
        table: &'t ReferenceKeyTable,
        call: &DecidedCall<'_>,
        index: usize,
        descriptor_plan: &DescriptorPlan<'_>,
    ) -> Option<SeriesRef<'t>> {
        let domain = call.request.domain.as_str();
        let descriptor = call.request.descriptors.get(index)?;
        let DescriptorPlan::Limited { limit, .. } = descriptor_plan else {
            return None;
        };
        let made = match limit {
            LimitSource::Override { .. } => {
                let key = override_stats_key(domain, descriptor);
                self.keys
                    .spare(domain, &key, None, || self.mapped_series(&key))
            }
            LimitSource::Rule(rule) | LimitSource::Adjusted { rule, .. } => {
                match self.rule_key(call, rule, descriptor) {
                    Some(StatsKey::Values(key)) => {
                        self.keys
                            .spare(domain, &key, Some(&rule.path), || self.mapped_series(&key))
                    }
                    // No request value in the key: the rule's own series, resolved at its
                    // first decision and kept in the table (no lock, no lookup after).
                    _ => {
                        return table
                            .slots
                            .get(rule.index)?
                            .get_or_init(|| self.rule_series(domain, rule))
                            .as_deref()
                            .map(SeriesRef::Table);
                    }
                }
            }
        };
        self.admitted(domain, made).map(SeriesRef::Made)
    }

    /// The series of `rule`'s own key: its place in the budget, or the overflow key.
    fn rule_series(&self, domain: &str, rule: &Rule) -> Option<Arc<KeySeries>> {
        let made = self.keys.configured(domain, &rule.path, rule.index, || {
            self.mapped_series(&rule.path)
        });
        self.admitted(domain, made)
    }

    /// An admitted key's series, the domain's overflow series when the budget had no place.
    fn admitted(
        &self,
        domain: &str,
        made: Result<Option<Arc<KeySeries>>, MetricsError>,
    ) -> Option<Arc<KeySeries>> {
        match made {
            Ok(Some(series)) => Some(series),
            Ok(None) => self.folded_series(domain),
            Err(error) => {
                tracing::warn!("no reference stats series: {error}");
                None
            }
        }
    }

    /// The stats key of `rule` for `descriptor` when it may hold request values; `None` when
    /// it is the rule's path (most rules: no lookup, no allocation).
    fn rule_key<'r>(
        &self,
        call: &DecidedCall<'r>,
        rule: &Rule,
        descriptor: &crate::core::request::Descriptor,
    ) -> Option<StatsKey<'r>> {
        let may_hold_values =
            rule.detailed_metric || rule.config_path.iter().any(|level| level.value_to_metric);
        if !may_hold_values {
            return None;
        }
        let domain_rules = call.rules.domain(&call.request.domain)?;
        let matched = domain_rules.lookup(&descriptor.entries)?;
        Some(stats_key(&domain_rules.name, &matched, &descriptor.entries))
    }

    /// The series of `key` as the default mapping labels it, shared with the other keys that
    /// map to the same labels.
    fn mapped_series(&self, key: &str) -> Result<Arc<KeySeries>, MetricsError> {
        let labels = mapped_labels(key);
        let mut mapped = self.mapped.lock();
        if let Some((users, series)) = mapped.get_mut(&labels) {
            *users += 1;
            return Ok(Arc::clone(series));
        }
        let series = Arc::new(self.new_series(labels.clone())?);
        mapped.insert(labels, (1, Arc::clone(&series)));
        Ok(series)
    }

    fn new_series(&self, labels: Labels) -> Result<KeySeries, MetricsError> {
        let values = [&*labels[0], &*labels[1], &*labels[2]];
        let [total_hits, over_limit, near_limit, within_limit, shadow_mode] = &self.families;
        Ok(KeySeries {
            total_hits: total_hits.get_metric_with_label_values(&values)?,
            over_limit: over_limit.get_metric_with_label_values(&values)?,
            near_limit: near_limit.get_metric_with_label_values(&values)?,
            within_limit: within_limit.get_metric_with_label_values(&values)?,
            shadow_mode: shadow_mode.get_metric_with_label_values(&values)?,
            labels,
        })
    }

    fn folded_series(&self, domain: &str) -> Option<Arc<KeySeries>> {
        if let Some(series) = self.folded.read().get(domain) {
            return Some(Arc::clone(series));
        }
        let mut folded = self.folded.write();
        if let Some(series) = folded.get(domain) {
            return Some(Arc::clone(series));
        }
        let key = format!("{domain}.{FOLDED_RULE_LABEL}");
        let series = self
            .new_series(mapped_labels(&key))
            .inspect_err(|error| tracing::warn!("no reference stats overflow series: {error}"))
            .ok()?;
        let series = Arc::new(series);
        folded.insert(Box::from(domain), Arc::clone(&series));
        Some(series)
    }

    /// Makes the admitted keys follow `rules`, the rule set now in force, as floodgate's own
    /// rule labels do (`Metrics::follow_rules`): keys of rules that are gone are released and
    /// their series removed once no other key counts in them.
    pub fn follow_rules(&self, rules: &RuleSet) {
        let in_force = |domain: &str, path: &str| {
            rules
                .domain(domain)
                .and_then(|domain| domain.rule_by_path(path))
        };
        let released = self.keys.follow(
            rules.rule_count(),
            |domain, label, holder, _| match holder {
                Holder::Configured => in_force(domain, label)
                    .is_some_and(|rule| self.keys.admits_position(rule.index)),
                Holder::Spare { owner: Some(owner) } => in_force(domain, owner).is_some(),
                Holder::Spare { owner: None } => rules.domain(domain).is_some(),
            },
        );
        let mut mapped = self.mapped.lock();
        for series in released {
            let Some((users, _)) = mapped.get_mut(&series.labels) else {
                continue;
            };
            *users -= 1;
            if *users == 0 {
                mapped.remove(&series.labels);
                self.forget(&series.labels);
            }
        }
        drop(mapped);
        self.folded.write().retain(|domain, series| {
            let keep = rules.domain(domain).is_some();
            if !keep {
                self.forget(&series.labels);
            }
            keep
        });
    }

    fn forget(&self, labels: &Labels) {
        let values = [&*labels[0], &*labels[1], &*labels[2]];
        for family in &self.families {
            // Absent already is fine: nothing to remove.
            let _ = family.remove_label_values(&values);
        }
    }
}

/// Each rule's own-key series for one rule set, as `record::RuleSeriesTable` holds floodgate's:
/// one slot per rule at its [`Rule::index`], filled at the rule's first decision; it lives as
/// long as its rule set (both are swapped together).
#[derive(Debug, Default)]
pub struct ReferenceKeyTable {
    /// `None` inside: the series could not be made (logged).
    slots: Box<[OnceLock<Option<Arc<KeySeries>>>]>,
}

impl ReferenceKeyTable {
    /// A table for `rules`; empty when the reference's stats are off.
    pub fn build(rules: &RuleSet, stats: Option<&ReferenceStats>) -> Self {
        let slots = match stats {
            Some(_) => (0..rules.rule_count()).map(|_| OnceLock::new()).collect(),
            None => Box::default(),
        };
        Self { slots }
    }
}

/// A key's series: borrowed from the table for a rule's own key, owned for keys made per call.
enum SeriesRef<'t> {
    Table(&'t KeySeries),
    Made(Arc<KeySeries>),
}

/// The labels the default mapping gives the stats of `key`: `domain`, `key1`, `key2` are the
/// first three dot-separated pieces of the sanitized key (`key2` empty for a key of two).
pub fn mapped_labels(key: &str) -> Labels {
    let sanitized = sanitize_stat_name(key);
    let mut pieces = sanitized.split('.');
    let mut next = || Box::from(pieces.next().unwrap_or(""));
    [next(), next(), next()]
}

static GLOBAL: OnceLock<Option<ReferenceStats>> = OnceLock::new();

/// Turns the reference's stats on for this process (`USE_PROMETHEUS`, `USE_STATSD`); called
/// once at start, before the limiter is built.
pub fn enable(response_time_as_milliseconds: bool) -> Option<&'static ReferenceStats> {
    GLOBAL
        .get_or_init(
            || match ReferenceStats::new(MAX_RULE_LABELS, response_time_as_milliseconds) {
                Ok(stats) => Some(stats),
                Err(error) => {
                    tracing::error!("envoyproxy/ratelimit's stats are off: {error}");
                    None
                }
            },
        )
        .as_ref()
}

/// The reference's stats, when [`enable`]d.
pub fn global() -> Option<&'static ReferenceStats> {
    GLOBAL.get().and_then(Option::as_ref)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_the_first_three_pieces_of_the_sanitized_key() {
        let labels = |key: &str| mapped_labels(key).map(String::from);
        assert_eq!(labels("d.k_v"), ["d", "k_v", ""]);
        assert_eq!(labels("d.a_1.b_2.c_3"), ["d", "a_1", "b_2"]);
        assert_eq!(
            labels("d.remote_address_10.0.0.1.path"),
            ["d", "remote_address_10_0_0_1", "path"]
        );
        assert_eq!(labels("d.k_a:b"), ["d", "k_a_b", ""]);
    }

    fn rules(yaml: &str) -> RuleSet {
        let file = crate::core::config::SourceFile {
            name: "inline".to_owned(),
            text: yaml.to_owned(),
        };
        crate::core::config::load(&[file], &crate::core::config::LoadOptions::default())
            .unwrap_or_else(|errors| panic!("{errors}"))
    }

    /// Admits `key` as `rules`' rule `path` would, and counts one hit there.
    fn hit(stats: &ReferenceStats, rules: &RuleSet, path: &str, key: &str) {
        let Some(rule) = rules
            .domain("d")
            .and_then(|domain| domain.rule_by_path(path))
        else {
            panic!("{path} should be a rule");
        };
        let made = if key == path {
            stats
                .keys
                .configured("d", path, rule.index, || stats.mapped_series(key))
        } else {
            stats
                .keys
                .spare("d", key, Some(path), || stats.mapped_series(key))
        };
        let series = match made {
            Ok(Some(series)) => series,
            _ => stats
                .folded_series("d")
                .unwrap_or_else(|| panic!("an overflow series")),
        };
        series.add(&ReferenceCounts {
            total_hits: 1,
            ..ReferenceCounts::default()
        });
    }

    #[test]
    fn keys_past_the_budget_fold_and_a_reload_releases_the_keys_of_rules_gone() {
        let both = rules(
            "domain: d\ndescriptors:\n  - key: a\n    value_to_metric: true\n    \
             rate_limit: {unit: hour, requests_per_unit: 9}\n  - key: b\n    \
             rate_limit: {unit: hour, requests_per_unit: 9}\n",
        );
        let stats = ReferenceStats::new(3, false).unwrap_or_else(|error| panic!("{error}"));
        stats.follow_rules(&both);
        hit(&stats, &both, "d.b", "d.b");
        // Two rules leave one place for keys with values.
        hit(&stats, &both, "d.a", "d.a_1");
        hit(&stats, &both, "d.a", "d.a_2");
        let text = stats.render().unwrap_or_default();
        let total = |key1: &str| {
            format!(
                "ratelimit_service_rate_limit_total_hits{{domain=\"d\",key1=\"{key1}\",key2=\"\"}} 1"
            )
        };
        for key1 in ["b", "a_1", "other"] {
            assert!(text.contains(&total(key1)), "{key1} in\n{text}");
        }
        assert!(!text.contains("a_2"), "{text}");

        // `d.a` is gone: its keys leave the scrape, and their place is free again.
        let only_b = rules(
            "domain: d\ndescriptors:\n  - key: b\n    \
             rate_limit: {unit: hour, requests_per_unit: 9}\n",
        );
        stats.follow_rules(&only_b);
        let text = stats.render().unwrap_or_default();
        assert!(!text.contains("a_1"), "{text}");
        assert!(text.contains(&total("b")), "{text}");
    }

    #[test]
    fn response_time_is_in_seconds_unless_milliseconds_are_asked_for() {
        let sum = |as_milliseconds: bool| {
            let stats =
                ReferenceStats::new(1, as_milliseconds).unwrap_or_else(|error| panic!("{error}"));
            stats.grpc_call(0.25);
            let text = stats.render().unwrap_or_default();
            let prefix =
                "ratelimit_service_response_time_seconds_sum{grpc_method=\"ShouldRateLimit\"} ";
            text.lines()
                .find_map(|line| line.strip_prefix(prefix))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no sum in\n{text}"))
        };
        assert_eq!(sum(false), "0.25");
        assert_eq!(sum(true), "250");
    }

    #[test]
    fn the_families_render_with_the_mappings_names() {
        let stats = ReferenceStats::new(4, false).unwrap_or_else(|error| panic!("{error}"));
        stats.config_loaded(true);
        stats.grpc_call(0.002);
        stats.should_rate_limit_error(ErrType::Store);
        let series = stats
            .mapped_series("d.k_v")
            .unwrap_or_else(|error| panic!("{error}"));
        series.add(&ReferenceCounts {
            total_hits: 3,
            within_limit: 3,
            ..ReferenceCounts::default()
        });
        let text = stats.render().unwrap_or_default();
        for line in [
            "ratelimit_service_config_load_success 1",
            "ratelimit_service_config_load_error 0",
            "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1",
            "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 0",
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 1",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 1",
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k_v\",key2=\"\"} 3",
            "ratelimit_service_rate_limit_within_limit{domain=\"d\",key1=\"k_v\",key2=\"\"} 3",
            "# TYPE ratelimit_service_rate_limit_over_limit counter",
            "# TYPE ratelimit_service_response_time_seconds histogram",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
