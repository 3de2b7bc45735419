//! The adaptive controllers' series (`floodgate_adaptive_*`), one set per adaptive rule, and
//! the functions `engine::adaptive` records them through.

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::families::register;
use super::{global, MetricsError};

/// The adaptive controllers' series (`crate::engine::adaptive`), one set per adaptive rule.
pub(super) struct AdaptiveSeries {
    limit: IntGaugeVec,
    latency: GaugeVec,
    error_ratio: GaugeVec,
    steps: IntCounterVec,
}

impl AdaptiveSeries {
    pub(super) fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let rule_labels = ["domain", "rule"];
        Ok(Self {
            limit: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "floodgate_adaptive_limit",
                        "The adaptive controller's limit (requests_per_unit) of a rule with \
                         `adaptive:`; an override still wins over it (floodgate_effective_limit).",
                    ),
                    &rule_labels,
                )?,
            )?,
            latency: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "floodgate_adaptive_latency_seconds",
                        "The latency signal (p95) an adaptive rule last read, in seconds; NaN \
                         when it could not be read.",
                    ),
                    &rule_labels,
                )?,
            )?,
            error_ratio: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "floodgate_adaptive_error_ratio",
                        "The error ratio an adaptive rule with `errors:` last read; NaN when it \
                         could not be read.",
                    ),
                    &rule_labels,
                )?,
            )?,
            steps: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "floodgate_adaptive_steps_total",
                        "Adaptive controller steps by outcome: decrease, increase or hold.",
                    ),
                    &["domain", "rule", "change"],
                )?,
            )?,
        })
    }

    fn forget(&self, domain: &str, rule: &str) {
        let labels = [domain, rule];
        let _ = self.limit.remove_label_values(&labels);
        let _ = self.latency.remove_label_values(&labels);
        let _ = self.error_ratio.remove_label_values(&labels);
        for change in ["decrease", "increase", "hold"] {
            let _ = self.steps.remove_label_values(&[domain, rule, change]);
        }
    }
}

fn adaptive_series() -> Option<&'static AdaptiveSeries> {
    global().map(|metrics| &metrics.adaptive)
}

/// The adaptive controller of `rule` set its limit.
pub fn adaptive_limit(domain: &str, rule: &str, limit: u32) {
    let labels = [domain, rule];
    if let Some(Ok(gauge)) =
        adaptive_series().map(|s| s.limit.get_metric_with_label_values(&labels))
    {
        gauge.set(i64::from(limit));
    }
}

/// The latency an adaptive rule read (`None`: no reading).
pub fn adaptive_latency(domain: &str, rule: &str, seconds: Option<f64>) {
    let labels = [domain, rule];
    if let Some(Ok(gauge)) =
        adaptive_series().map(|s| s.latency.get_metric_with_label_values(&labels))
    {
        gauge.set(seconds.unwrap_or(f64::NAN));
    }
}

/// The error ratio an adaptive rule read (`None`: no reading).
pub fn adaptive_error_ratio(domain: &str, rule: &str, ratio: Option<f64>) {
    let labels = [domain, rule];
    if let Some(Ok(gauge)) =
        adaptive_series().map(|s| s.error_ratio.get_metric_with_label_values(&labels))
    {
        gauge.set(ratio.unwrap_or(f64::NAN));
    }
}

/// One controller step of `rule` (`change`: decrease, increase, hold).
pub fn adaptive_step(domain: &str, rule: &str, change: &str) {
    let labels = [domain, rule, change];
    if let Some(Ok(counter)) =
        adaptive_series().map(|s| s.steps.get_metric_with_label_values(&labels))
    {
        counter.inc();
    }
}

/// `rule` is no longer adaptive: its series go.
pub fn adaptive_forget(domain: &str, rule: &str) {
    if let Some(series) = adaptive_series() {
        series.forget(domain, rule);
    }
}
