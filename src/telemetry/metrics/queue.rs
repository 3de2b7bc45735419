//! The held answers' metrics (`engine::waiting`): how many wait now, and how many found the
//! process holding all it may (`--max-waiting`); per rule (its labels within the rule label
//! budget), how long each admitted request waits for its turn and how many its queue refused.
//! Registered in the global registry on first use, as `telemetry::connections`.

use std::sync::OnceLock;

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts};

use super::{global, MetricsError, RuleSeries};
use crate::core::ground::time::{Micros, MICROS_PER_SECOND};

/// Waits run from a few ms to a minute (`core::arithmetic::algorithm::MAX_QUEUE_WAIT`).
const WAIT_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

struct QueueSeries {
    waiting: IntGauge,
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
        registry.register(Box::new(wait_seconds.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(refused_full.clone()))?;
        Ok(Some(Self {
            waiting,
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

/// An answer held; the gauge goes down when this is dropped (sent, or its caller gone).
pub struct HeldAnswer {
    gauge: Option<IntGauge>,
}

impl Drop for HeldAnswer {
    fn drop(&mut self) {
        if let Some(gauge) = &self.gauge {
            gauge.dec();
        }
    }
}

/// An answer held for its turn, counted as waiting until the guard is dropped.
pub fn answer_held() -> HeldAnswer {
    let gauge = series().map(|series| series.waiting.clone());
    if let Some(gauge) = &gauge {
        gauge.inc();
    }
    HeldAnswer { gauge }
}

/// A descriptor the queueing rule of `rule` admitted, to be answered after `wait` µs.
pub fn rule_admitted(rule: &RuleSeries, wait: Micros) {
    let (domain, label) = rule.labels();
    if let Some(Ok(histogram)) = series().map(|series| {
        series
            .wait_seconds
            .get_metric_with_label_values(&[domain, label])
    }) {
        histogram.observe(wait as f64 / MICROS_PER_SECOND as f64);
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
