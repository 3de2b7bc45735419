//! The held answers' metrics (`engine::waiting`): how many wait now, and how many found the
//! process holding all it may (`--max-waiting`); per rule (its labels within the rule label
//! budget), how many wait now for their turn in its queue, how long each admitted request
//! waits and how many its queue refused.
//! Registered in the global registry on first use, as `telemetry::connections`.

use std::sync::OnceLock;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

use super::{global, MetricsError, RuleSeries};
use crate::core::ground::time::{Micros, MICROS_PER_SECOND};

/// Waits run from a few ms to a minute (`core::arithmetic::algorithm::MAX_QUEUE_WAIT`).
const WAIT_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

struct QueueSeries {
    waiting: IntGauge,
    rule_waiting: IntGaugeVec,
    wait_seconds: HistogramVec,
    refused: IntCounterVec,
    refused_full: IntCounter,
}

impl QueueSeries {
    fn register() -> Result<Option<Self>, MetricsError> {
        let Some(metrics) = global() else {
            return Ok(None);
        };
        let registry = metrics.registry();
        let waiting = IntGauge::new(
            "floodgate_queue_waiting",
            "Answers held now until their request's turn (leaky buckets with `queue: true`).",
        )?;
        let rule_waiting = IntGaugeVec::new(
            Opts::new(
                "floodgate_queue_rule_waiting",
                "Answers held now until their request's turn, by domain and rule: the queueing \
                 rules that gave the request a later turn (one request under each of them).",
            ),
            &["domain", "rule"],
        )?;
        let wait_seconds = HistogramVec::new(
            HistogramOpts::new(
                "floodgate_queue_wait_seconds",
                "How long each request a queueing rule admitted waits for its turn (0 when \
                 answered at once), by domain and rule.",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
            &["domain", "rule"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "floodgate_queue_refused_total",
                "Descriptors a queueing rule refused at once: its queue full, or the turn past \
                 max_wait_ms, the caller's deadline or --max-waiting; by domain and rule.",
            ),
            &["domain", "rule"],
        )?;
        let refused_full = IntCounter::with_opts(Opts::new(
            "floodgate_queue_refused_full_total",
            "Requests under a queueing rule that found the process holding --max-waiting \
             answers: answered at once, refused if they would have waited.",
        ))?;
        registry.register(Box::new(waiting.clone()))?;
        registry.register(Box::new(rule_waiting.clone()))?;
        registry.register(Box::new(wait_seconds.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(refused_full.clone()))?;
        Ok(Some(Self {
            waiting,
            rule_waiting,
            wait_seconds,
            refused,
            refused_full,
        }))
    }
}

fn series() -> Option<&'static QueueSeries> {
    static SERIES: OnceLock<Option<QueueSeries>> = OnceLock::new();
    SERIES
        .get_or_init(|| match QueueSeries::register() {
            Ok(series) => series,
            Err(error) => {
                tracing::error!("queue metrics are off: {error}");
                None
            }
        })
        .as_ref()
}

/// The queueing rules that gave one call's answer a later turn: their waiting gauges, by rule
/// label (once each, however many of the call's descriptors a rule queued). They count the
/// answer only while it is held ([`answer_held`]).
#[derive(Debug, Default)]
pub struct WaitingRules {
    gauges: Vec<(Box<str>, IntGauge)>,
}

impl WaitingRules {
    /// `rule` queued a descriptor of the call.
    fn add(&mut self, rule: &RuleSeries, series: &QueueSeries) {
        let (domain, label) = rule.labels();
        if self.gauges.iter().any(|(held, _)| **held == *label) {
            return;
        }
        if let Ok(gauge) = series
            .rule_waiting
            .get_metric_with_label_values(&[domain, label])
        {
            self.gauges.push((Box::from(label), gauge));
        }
    }

    fn add_to_each(&self, delta: i64) {
        for (_, gauge) in &self.gauges {
            gauge.add(delta);
        }
    }
}

/// An answer held; its gauges go down when this is dropped (sent, its caller gone, or the
/// process stopping). A rule label released meanwhile (`forget_rule`) leaves its gauge out of
/// the registry: going down there reaches no series, and a label made again starts at 0.
pub struct HeldAnswer {
    gauge: Option<IntGauge>,
    rules: WaitingRules,
}

impl Drop for HeldAnswer {
    fn drop(&mut self) {
        if let Some(gauge) = &self.gauge {
            gauge.dec();
        }
        self.rules.add_to_each(-1);
    }
}

/// An answer held for its turn, counted as waiting (in all and under each of `rules`) until
/// the guard is dropped.
pub fn answer_held(rules: WaitingRules) -> HeldAnswer {
    let gauge = series().map(|series| series.waiting.clone());
    if let Some(gauge) = &gauge {
        gauge.inc();
    }
    rules.add_to_each(1);
    HeldAnswer { gauge, rules }
}

/// A descriptor the queueing rule of `rule` admitted, to be answered after `wait` µs; a rule
/// that made it wait joins the call's `waiting` rules.
pub fn rule_admitted(rule: &RuleSeries, wait: Micros, waiting: &mut WaitingRules) {
    let Some(series) = series() else {
        return;
    };
    let (domain, label) = rule.labels();
    if let Ok(histogram) = series
        .wait_seconds
        .get_metric_with_label_values(&[domain, label])
    {
        histogram.observe(wait as f64 / MICROS_PER_SECOND as f64);
    }
    if wait > 0 {
        waiting.add(rule, series);
    }
}

/// A descriptor the queueing rule of `rule` refused.
pub fn rule_refused(rule: &RuleSeries) {
    let (domain, label) = rule.labels();
    if let Some(Ok(counter)) = series().map(|series| {
        series
            .refused
            .get_metric_with_label_values(&[domain, label])
    }) {
        counter.inc();
    }
}

/// Removes the series of a rule label that was released (`Metrics::follow_rules`).
pub(super) fn forget_rule(domain: &str, rule: &str) {
    if let Some(series) = series() {
        let _ = series.rule_waiting.remove_label_values(&[domain, rule]);
        let _ = series.wait_seconds.remove_label_values(&[domain, rule]);
        let _ = series.refused.remove_label_values(&[domain, rule]);
    }
}

/// A request under a queueing rule that found the process holding all the answers it may.
pub fn refused_full() {
    if let Some(series) = series() {
        series.refused_full.inc();
    }
}
