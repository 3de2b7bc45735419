//! The reference's stats as the Prometheus listener serves them (`USE_PROMETHEUS`): each
//! statsd name through the statsd_exporter mapping in force ([`super::mapping`]), the series
//! that map alike added up, as statsd_exporter adds the events of one series; then the
//! process's own metrics (`process_resident_memory_bytes` and the rest), which the reference's
//! Go client serves on the same listener and Envoy Gateway's dashboard reads.
//!
//! A name two stats map to with different types keeps the first and drops the other, as
//! statsd_exporter counts a conflict and drops the event.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::core::Collector as _;
use prometheus::proto::{self, MetricFamily, MetricType};
use prometheus::{Histogram, HistogramOpts, TextEncoder};

use super::mapping::{Mapped, MappedMetric, MetricMapper, Observer, StatKind};
use super::named_counter::NamedCounter;
use crate::telemetry::metrics::MetricsError;
use crate::telemetry::paced_log::PacedLog;

static CONFLICT: PacedLog = PacedLog::every(std::time::Duration::from_secs(600));

type Labels = Vec<(String, String)>;

/// One family being put together: its type and help, and each label set's value.
struct Family {
    kind: MetricType,
    help: String,
    values: BTreeMap<Labels, f64>,
}

/// The families of one scrape.
#[derive(Default)]
pub struct Exposition {
    families: BTreeMap<String, Family>,
    observed: Vec<MetricFamily>,
}

impl Exposition {
    /// Adds `counter`'s value to the series its mapping names (nothing when it is dropped).
    pub fn counter(&mut self, counter: &NamedCounter) {
        let Mapped::Metric(metric) = &counter.mapped else {
            return;
        };
        let family = self
            .families
            .entry(metric.name.clone())
            .or_insert_with(|| Family {
                kind: MetricType::COUNTER,
                help: help(metric, &counter.statsd_name),
                values: BTreeMap::new(),
            });
        if family.kind != MetricType::COUNTER {
            conflict(&metric.name, &counter.statsd_name);
            return;
        }
        *family.values.entry(metric.labels.clone()).or_default() += counter.value() as f64;
    }

    /// Adds `timer`'s histogram or summary.
    pub fn timer(&mut self, timer: &MappedTimer) {
        let Some(family) = timer.family() else {
            return;
        };
        if self.families.contains_key(family.name()) {
            conflict(family.name(), &timer.statsd_name);
            return;
        }
        self.observed.push(family);
    }

    /// The text exposition, the process's metrics last.
    pub fn render(self) -> Result<String, MetricsError> {
        let mut families: Vec<MetricFamily> = self
            .families
            .into_iter()
            .map(|(name, family)| family.into_proto(name))
            .collect();
        families.extend(self.observed);
        families.extend(process_families());
        Ok(TextEncoder::new().encode_to_string(&families)?)
    }
}

impl Family {
    fn into_proto(self, name: String) -> MetricFamily {
        let mut family = MetricFamily::default();
        family.set_name(name);
        family.set_help(self.help);
        family.set_field_type(self.kind);
        for (labels, value) in self.values {
            let mut metric = proto::Metric::from_label(label_pairs(&labels));
            let mut counter = proto::Counter::default();
            counter.set_value(value);
            metric.set_counter(counter);
            family.mut_metric().push(metric);
        }
        family
    }
}

fn label_pairs(labels: &[(String, String)]) -> Vec<proto::LabelPair> {
    labels
        .iter()
        .map(|(name, value)| {
            let mut pair = proto::LabelPair::default();
            pair.set_name(name.clone());
            pair.set_value(value.clone());
            pair
        })
        .collect()
}

fn help(metric: &MappedMetric, statsd_name: &str) -> String {
    metric
        .help
        .clone()
        .unwrap_or_else(|| format!("envoyproxy/ratelimit's {statsd_name}, mapped."))
}

fn conflict(name: &str, statsd_name: &str) {
    if let Some(left_out) = CONFLICT.allow() {
        tracing::warn!(
            name,
            statsd_name,
            left_out,
            "the Prometheus mapping gives two stats of different types one name: the later is not served"
        );
    }
}

/// A timer under its statsd name: its calls and their sum in milliseconds (what statsd is
/// sent), and the histogram its mapping asks for, observing milliseconds times the mapping's
/// `scale`.
pub struct MappedTimer {
    pub statsd_name: Box<str>,
    calls: AtomicU64,
    /// The sum of the durations in microseconds: whole numbers add without a lock.
    micros: AtomicU64,
    shape: TimerShape,
}

enum TimerShape {
    Dropped,
    Histogram {
        histogram: Histogram,
        scale: f64,
    },
    /// statsd_exporter's quantiles are not kept: the summary has its sum and count.
    Summary(MappedMetric),
}

impl MappedTimer {
    pub fn new(statsd_name: &str, mapper: &MetricMapper) -> Result<Self, MetricsError> {
        let shape = match mapper.map(statsd_name, StatKind::Observer) {
            Mapped::Drop => TimerShape::Dropped,
            Mapped::Metric(metric) => match &metric.observer {
                Observer::Histogram { buckets } => {
                    let opts = HistogramOpts::new(metric.name.clone(), help(&metric, statsd_name))
                        .const_labels(metric.labels.iter().cloned().collect())
                        .buckets(buckets.clone());
                    TimerShape::Histogram {
                        histogram: Histogram::with_opts(opts)?,
                        scale: metric.scale,
                    }
                }
                Observer::Summary { .. } => TimerShape::Summary(metric),
            },
        };
        Ok(Self {
            statsd_name: Box::from(statsd_name),
            calls: AtomicU64::new(0),
            micros: AtomicU64::new(0),
            shape,
        })
    }

    pub fn observe_milliseconds(&self, milliseconds: f64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.micros
            .fetch_add((milliseconds * 1000.0).max(0.0) as u64, Ordering::Relaxed);
        if let TimerShape::Histogram { histogram, scale } = &self.shape {
            histogram.observe(milliseconds * scale);
        }
    }

    /// Calls so far and the sum of their durations in milliseconds.
    pub fn totals(&self) -> (u64, f64) {
        let micros = self.micros.load(Ordering::Relaxed);
        (self.calls.load(Ordering::Relaxed), micros as f64 / 1000.0)
    }

    fn family(&self) -> Option<MetricFamily> {
        match &self.shape {
            TimerShape::Dropped => None,
            TimerShape::Histogram { histogram, .. } => histogram.collect().into_iter().next(),
            TimerShape::Summary(metric) => {
                let (calls, milliseconds) = self.totals();
                let mut summary = proto::Summary::default();
                summary.set_sample_count(calls);
                summary.set_sample_sum(milliseconds * metric.scale);
                let mut one = proto::Metric::from_label(label_pairs(&metric.labels));
                one.set_summary(summary);
                let mut family = MetricFamily::default();
                family.set_name(metric.name.clone());
                family.set_help(help(metric, &self.statsd_name));
                family.set_field_type(MetricType::SUMMARY);
                family.mut_metric().push(one);
                Some(family)
            }
        }
    }
}

/// `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_cpu_seconds_total`,
/// the open and maximum file descriptors, the threads and the start time, read from `/proc`.
fn process_families() -> Vec<MetricFamily> {
    #[cfg(target_os = "linux")]
    {
        prometheus::process_collector::ProcessCollector::for_self().collect()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}
