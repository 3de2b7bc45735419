//! envoyproxy/ratelimit's stats, kept under the reference's statsd names
//! (`ratelimit.service.rate_limit.<key>.<stat>`, `ratelimit.service.config_load_success`, …)
//! for the dashboards and alerts built on the reference. Two sinks read them: the Prometheus
//! listener (`USE_PROMETHEUS`), which maps each name through a statsd_exporter mapping
//! (`PROMETHEUS_MAPPER_YAML`, else the reference's default; `telemetry::reference::exposition`),
//! and statsd (`USE_STATSD`, `telemetry::statsd::sink`), which sends the names as they are.
//! floodgate's `floodgate_*` metrics stay on the debug listener.
//!
//! The core decides what is counted (`core::decision::outcome::reference_counts`) and under which key
//! (`core::decision::outcome::stats_key`); this module adds. Each stat is mapped once, when its key is
//! first admitted, so a scrape only adds up. Off (nothing made, nothing counted) unless
//! [`enable`] was called.
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

use super::exposition::{Exposition, MappedTimer};
use super::mapping::MetricMapper;
use super::named_counter::NamedCounter;
use crate::core::decision::outcome::reference_counts::{reference_counts, ReferenceCounts};
use crate::core::decision::outcome::stats_key::{
    override_stats_key, sanitize_stat_name, stats_key, StatsKey,
};
use crate::core::decision::plan::{DescriptorPlan, LimitSource};
use crate::core::policy::rules::{Rule, RuleSet};
use crate::telemetry::label_budget::LabelBudget;
use crate::telemetry::metrics::{MetricsError, FOLDED_RULE_LABEL, MAX_RULE_LABELS};
use crate::telemetry::record::DecidedCall;

const CONFIG_LOAD_SUCCESS: &str = "ratelimit.service.config_load_success";
const CONFIG_LOAD_ERROR: &str = "ratelimit.service.config_load_error";
const TOTAL_REQUESTS: &str = "ratelimit_server.ShouldRateLimit.total_requests";
const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

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

/// The per-key stats, in the order of [`ReferenceCounts`]' fields.
pub const KEY_STATS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

/// The five counters of one stats key.
#[derive(Debug)]
pub struct KeySeries {
    key: Box<str>,
    counters: [NamedCounter; 5],
}

impl KeySeries {
    fn new(key: &str, mapper: &MetricMapper) -> Self {
        let key = sanitize_stat_name(key);
        let counter = |stat: &str| {
            NamedCounter::new(format!("ratelimit.service.rate_limit.{key}.{stat}"), mapper)
        };
        Self {
            counters: KEY_STATS.map(counter),
            key: key.into_boxed_str(),
        }
    }

    fn add(&self, counts: &ReferenceCounts) {
        let values = [
            counts.total_hits,
            counts.over_limit,
            counts.near_limit,
            counts.within_limit,
            counts.shadow_mode,
        ];
        for (counter, value) in self.counters.iter().zip(values) {
            counter.add(value);
        }
    }

    pub fn counters(&self) -> &[NamedCounter; 5] {
        &self.counters
    }
}

/// What statsd is sent at a flush: every counter's total so far and the response time's.
#[derive(Debug, Default)]
pub struct StatsdSnapshot {
    pub counters: Vec<(Box<str>, u64)>,
    /// `ratelimit_server.ShouldRateLimit.response_time`: calls and the sum of their durations
    /// in milliseconds, as lyft/gostats times them.
    pub response_time_calls: u64,
    pub response_time_milliseconds: f64,
}

/// The reference's stats.
pub struct ReferenceStats {
    config_load_success: NamedCounter,
    config_load_error: NamedCounter,
    should_rate_limit_errors: [NamedCounter; 2],
    total_requests: NamedCounter,
    response_time: MappedTimer,
    keys: LabelBudget<Arc<KeySeries>>,
    /// Every admitted key's series, for the sinks to read.
    live: Mutex<HashMap<Box<str>, Arc<KeySeries>>>,
    /// Each domain's overflow series (`<domain>.other`).
    folded: RwLock<HashMap<Box<str>, Arc<KeySeries>>>,
    mapper: MetricMapper,
}

impl std::fmt::Debug for ReferenceStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceStats")
            .field("max_keys", &self.keys.capacity())
            .finish_non_exhaustive()
    }
}

impl ReferenceStats {
    /// Fresh stats admitting at most `max_keys` stats keys, mapped for Prometheus by `mapper`.
    pub fn new(max_keys: usize, mapper: MetricMapper) -> Result<Self, MetricsError> {
        let counter = |name: &str| NamedCounter::new(name.to_owned(), &mapper);
        let error = |err_type: ErrType| {
            counter(&format!(
                "ratelimit.service.call.should_rate_limit.{}",
                err_type.label()
            ))
        };
        Ok(Self {
            config_load_success: counter(CONFIG_LOAD_SUCCESS),
            config_load_error: counter(CONFIG_LOAD_ERROR),
            should_rate_limit_errors: [error(ErrType::Store), error(ErrType::Service)],
            total_requests: counter(TOTAL_REQUESTS),
            response_time: MappedTimer::new(RESPONSE_TIME, &mapper)?,
            keys: LabelBudget::new(max_keys),
            live: Mutex::new(HashMap::new()),
            folded: RwLock::new(HashMap::new()),
            mapper,
        })
    }

    /// The Prometheus text for the reference-names listener.
    pub fn render(&self) -> Result<String, MetricsError> {
        let mut exposition = Exposition::default();
        for counter in self.fixed_counters() {
            exposition.counter(counter);
        }
        for series in self.all_series() {
            for counter in series.counters() {
                exposition.counter(counter);
            }
        }
        exposition.timer(&self.response_time);
        exposition.render()
    }

    /// Every counter's total under its statsd name, for the statsd sink.
    pub fn statsd_snapshot(&self) -> StatsdSnapshot {
        let mut counters: Vec<(Box<str>, u64)> = self
            .fixed_counters()
            .map(|counter| (counter.statsd_name.clone(), counter.value()))
            .collect();
        for series in self.all_series() {
            for counter in series.counters() {
                counters.push((counter.statsd_name.clone(), counter.value()));
            }
        }
        let (calls, milliseconds) = self.response_time.totals();
        StatsdSnapshot {
            counters,
            response_time_calls: calls,
            response_time_milliseconds: milliseconds,
        }
    }

    fn fixed_counters(&self) -> impl Iterator<Item = &NamedCounter> {
        [
            &self.config_load_success,
            &self.config_load_error,
            &self.total_requests,
        ]
        .into_iter()
        .chain(&self.should_rate_limit_errors)
    }

    fn all_series(&self) -> Vec<Arc<KeySeries>> {
        let mut all: Vec<Arc<KeySeries>> = self.live.lock().values().cloned().collect();
        all.extend(self.folded.read().values().cloned());
        all
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
            self.config_load_success.add(1);
        } else {
            self.config_load_error.add(1);
        }
    }

    /// One ShouldRateLimit gRPC call answered (or failed) after `seconds`.
    pub fn grpc_call(&self, seconds: f64) {
        self.total_requests.add(1);
        self.response_time.observe_milliseconds(seconds * 1000.0);
    }

    pub fn should_rate_limit_error(&self, err_type: ErrType) {
        let [store, service] = &self.should_rate_limit_errors;
        match err_type {
            ErrType::Store => store.add(1),
            ErrType::Service => service.add(1),
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
        descriptor: &crate::core::policy::request::Descriptor,
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

    /// The series of `key`, made and listed for the sinks (the budget admits each key once).
    fn mapped_series(&self, key: &str) -> Result<Arc<KeySeries>, MetricsError> {
        let series = Arc::new(KeySeries::new(key, &self.mapper));
        self.live
            .lock()
            .insert(series.key.clone(), Arc::clone(&series));
        Ok(series)
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
        let series = Arc::new(KeySeries::new(&key, &self.mapper));
        folded.insert(Box::from(domain), Arc::clone(&series));
        Some(series)
    }

    /// Makes the admitted keys follow `rules`, the rule set now in force, as floodgate's own
    /// rule labels do (`Metrics::follow_rules`): keys of rules that are gone are released and
    /// leave the sinks.
    pub fn follow_rules(&self, rules: &RuleSet) {
        let released = self.keys.follow_rules(rules, |_, _| true);
        let mut live = self.live.lock();
        for series in released {
            // Only this very series: a key admitted again meanwhile has a new one.
            if live
                .get(&series.key)
                .is_some_and(|listed| Arc::ptr_eq(listed, &series))
            {
                live.remove(&series.key);
            }
        }
        drop(live);
        self.folded
            .write()
            .retain(|domain, _| rules.domain(domain).is_some());
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

static GLOBAL: OnceLock<Option<ReferenceStats>> = OnceLock::new();

/// Turns the reference's stats on for this process (`USE_PROMETHEUS`, `USE_STATSD`), mapped for
/// Prometheus by `mapper`; called once at start, before the limiter is built.
pub fn enable(mapper: MetricMapper) -> Option<&'static ReferenceStats> {
    GLOBAL
        .get_or_init(move || match ReferenceStats::new(MAX_RULE_LABELS, mapper) {
            Ok(stats) => Some(stats),
            Err(error) => {
                tracing::error!("envoyproxy/ratelimit's stats are off: {error}");
                None
            }
        })
        .as_ref()
}

/// The reference's stats, when [`enable`]d.
pub fn global() -> Option<&'static ReferenceStats> {
    GLOBAL.get().and_then(Option::as_ref)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_stats(max_keys: usize, as_milliseconds: bool) -> ReferenceStats {
        ReferenceStats::new(max_keys, MetricMapper::reference_default(as_milliseconds))
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn rules(yaml: &str) -> RuleSet {
        let file = crate::core::policy::config::SourceFile {
            name: "inline".to_owned(),
            text: yaml.to_owned(),
        };
        crate::core::policy::config::load(
            &[file],
            &crate::core::policy::config::LoadOptions::default(),
        )
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
        let stats = reference_stats(3, false);
        stats.follow_rules(&both);
        hit(&stats, &both, "d.b", "d.b");
        // Two rules leave one place for keys with values.
        hit(&stats, &both, "d.a", "d.a_1");
        hit(&stats, &both, "d.a", "d.a_2");
        let text = stats.render().unwrap_or_default();
        let total = |key1: &str| {
            format!("ratelimit_service_rate_limit_total_hits{{domain=\"d\",key1=\"{key1}\"}} 1")
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
        let sent = stats.statsd_snapshot();
        assert!(
            sent.counters.iter().any(|(name, value)| &**name
                == "ratelimit.service.rate_limit.d.b.total_hits"
                && *value == 1),
            "{sent:?}"
        );
        assert!(
            !sent.counters.iter().any(|(name, _)| name.contains("a_1")),
            "{sent:?}"
        );
    }

    #[test]
    fn response_time_is_in_seconds_unless_milliseconds_are_asked_for() {
        let sum = |as_milliseconds: bool| {
            let stats = reference_stats(1, as_milliseconds);
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
        let stats = reference_stats(4, false);
        stats.config_loaded(true);
        stats.grpc_call(0.002);
        stats.should_rate_limit_error(ErrType::Store);
        stats.add_for_test(
            "d.k_v",
            &ReferenceCounts {
                total_hits: 3,
                within_limit: 3,
                ..ReferenceCounts::default()
            },
        );
        stats.add_for_test(
            "d.a_1.b_2.c_3",
            &ReferenceCounts {
                total_hits: 1,
                ..ReferenceCounts::default()
            },
        );
        stats.add_for_test(
            "d.a_1.b_2.c_4",
            &ReferenceCounts {
                total_hits: 2,
                ..ReferenceCounts::default()
            },
        );
        let text = stats.render().unwrap_or_default();
        for line in [
            "ratelimit_service_config_load_success 1",
            "ratelimit_service_config_load_error 0",
            "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1",
            "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 0",
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 1",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 1",
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k_v\"} 3",
            "ratelimit_service_rate_limit_within_limit{domain=\"d\",key1=\"k_v\"} 3",
            // Deeper keys that share their first three pieces share a series, added up.
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"a_1\",key2=\"b_2\"} 3",
            "# TYPE ratelimit_service_rate_limit_over_limit counter",
            "# TYPE ratelimit_service_response_time_seconds histogram",
            "# TYPE process_resident_memory_bytes gauge",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[test]
    fn a_custom_mapping_names_labels_and_drops() {
        let mapping = "mappings:\n  \
            - match: \"ratelimit.service.rate_limit.*.*.over_limit\"\n    \
              name: \"refused_hits\"\n    labels: {tenant: \"$2\"}\n  \
            - match: \"ratelimit.service.rate_limit.*.*.*\"\n    action: drop\n";
        let mapper =
            MetricMapper::from_yaml(mapping, "test.yaml").unwrap_or_else(|error| panic!("{error}"));
        let stats = ReferenceStats::new(4, mapper).unwrap_or_else(|error| panic!("{error}"));
        stats.add_for_test(
            "d.acme",
            &ReferenceCounts {
                total_hits: 5,
                over_limit: 2,
                ..ReferenceCounts::default()
            },
        );
        stats.config_loaded(true);
        let text = stats.render().unwrap_or_default();
        assert!(text.contains("refused_hits{tenant=\"acme\"} 2"), "{text}");
        assert!(!text.contains("total_hits"), "{text}");
        // Unmapped: the statsd name, escaped, as statsd_exporter exports it.
        assert!(
            text.contains("ratelimit_service_config_load_success 1"),
            "{text}"
        );
        // statsd gets every stat under its own name whatever the mapping.
        let sent = stats.statsd_snapshot();
        assert!(
            sent.counters.iter().any(|(name, value)| &**name
                == "ratelimit.service.rate_limit.d.acme.total_hits"
                && *value == 5),
            "{sent:?}"
        );
    }
}
