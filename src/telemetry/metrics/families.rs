//! floodgate's metric families, registered one group at a time: the calls, the configuration
//! loads, the store, the per-rule decisions, and the build. Names, help texts and labels are
//! what dashboards and alerts read (`deploy/`, docs/operations.md): change none lightly.

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use super::{MetricsError, OverloadReason};
use crate::core::decision::outcome::Decision;

/// Latency buckets in seconds: a memory decision takes microseconds, a Redis one about a
/// millisecond, a stuck store up to its deadline.
const LATENCY_BUCKETS: [f64; 17] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Registers `metric` in `registry` and hands it back.
pub(super) fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: M,
) -> Result<M, MetricsError> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

/// The calls: how each ended, how long it took, how many are in flight, and those answered
/// without a decision.
pub(super) struct CallFamilies {
    /// One series per [`Decision`], in the order of `Decision::index`.
    pub by_decision: [IntCounter; 5],
    pub seconds: Histogram,
    pub in_flight: IntGauge,
    /// One series per [`OverloadReason`], in the order of its index.
    pub overload_rejections: [IntCounter; 3],
}

impl CallFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let calls = register(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "floodgate_calls_total",
                    "ShouldRateLimit calls (gRPC and HTTP) by how they ended.",
                ),
                &["decision"],
            )?,
        )?;
        let call = |decision: Decision| calls.get_metric_with_label_values(&[decision.label()]);
        let seconds = register(
            registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "floodgate_decision_duration_seconds",
                    "Time to decide one call: validation, rule lookup, store and answer.",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
            )?,
        )?;
        let in_flight = register(
            registry,
            IntGauge::new(
                "floodgate_calls_in_flight",
                "Calls being decided right now.",
            )?,
        )?;
        Ok(Self {
            by_decision: [
                call(Decision::Ok)?,
                call(Decision::OverLimit)?,
                call(Decision::Shadow)?,
                call(Decision::Unknown)?,
                call(Decision::Error)?,
            ],
            seconds,
            in_flight,
            overload_rejections: overload_rejections(registry)?,
        })
    }
}

/// `floodgate_overload_rejections_total`, one series per [`OverloadReason`].
fn overload_rejections(registry: &Registry) -> Result<[IntCounter; 3], MetricsError> {
    let family = register(
        registry,
        IntCounterVec::new(
            Opts::new(
                "floodgate_overload_rejections_total",
                "gRPC and HTTP calls answered without a decision to protect floodgate: \
                 in_flight (beyond --max-in-flight, answered by --overload-answer), \
                 shed (past --shed-above, answered by --overload-answer) or deadline \
                 (the caller's grpc-timeout passed first, DEADLINE_EXCEEDED).",
            ),
            &["reason"],
        )?,
    )?;
    let overload = |reason: OverloadReason| family.get_metric_with_label_values(&[reason.label()]);
    Ok([
        overload(OverloadReason::InFlight)?,
        overload(OverloadReason::Deadline)?,
        overload(OverloadReason::Shed)?,
    ])
}

/// The configuration loads: the rules in force, loads swapped in and refused, and when.
pub(super) struct ConfigFamilies {
    pub rules_loaded: IntGauge,
    pub load_success: IntCounter,
    pub load_error: IntCounter,
    pub last_good_load: Gauge,
}

impl ConfigFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, MetricsError> {
        Ok(Self {
            rules_loaded: register(
                registry,
                IntGauge::new(
                    "floodgate_rules_loaded",
                    "Rules (descriptors with rate_limit or rate_limits) in the configuration in \
                     force.",
                )?,
            )?,
            load_success: register(
                registry,
                IntCounter::new(
                    "floodgate_config_load_success_total",
                    "Configuration loads (the first and every reload) that were swapped in.",
                )?,
            )?,
            load_error: register(
                registry,
                IntCounter::new(
                    "floodgate_config_load_error_total",
                    "Configuration reloads refused because of errors (the previous rules stay).",
                )?,
            )?,
            last_good_load: register(
                registry,
                Gauge::new(
                    "floodgate_config_last_load_success_timestamp_seconds",
                    "When the configuration in force was loaded (Unix seconds).",
                )?,
            )?,
        })
    }
}

/// The store, by backend: round trips and their failures, reachability, the memory store's
/// evictions and refusals when full; and the calls a failure policy answered.
pub(super) struct StoreFamilies {
    pub seconds: HistogramVec,
    pub errors: IntCounterVec,
    pub up: IntGaugeVec,
    pub evictions: IntCounterVec,
    pub full: IntCounterVec,
    pub failure_policy_calls: IntCounterVec,
}

impl StoreFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let by_backend = |name: &str, help: &str| {
            register(
                registry,
                IntCounterVec::new(Opts::new(name, help), &["backend"])?,
            )
        };
        Ok(Self {
            seconds: register(
                registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "floodgate_store_duration_seconds",
                        "Time of one store round trip (all counters of one call).",
                    )
                    .buckets(LATENCY_BUCKETS.to_vec()),
                    &["backend"],
                )?,
            )?,
            errors: by_backend(
                "floodgate_store_errors_total",
                "Store round trips that failed (unreachable, timed out, refused).",
            )?,
            up: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "floodgate_store_up",
                        "Whether the store is reachable (1) or not (0), as last seen.",
                    ),
                    &["backend"],
                )?,
            )?,
            evictions: by_backend(
                "floodgate_store_evictions_total",
                "Live counters the memory store forgot before their expiry to make room \
                 under --max-keys (the least used first; never an exhausted one).",
            )?,
            full: by_backend(
                "floodgate_store_full_total",
                "Requests that needed a new counter while the memory store held --max-keys \
                 counters, all exhausted: refused by the store, answered by the failure \
                 policy.",
            )?,
            failure_policy_calls: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "floodgate_failure_policy_calls_total",
                        "Calls the store failed, by the failure policy that answered them \
                         (error, fail_open, fail_closed, local).",
                    ),
                    &["policy"],
                )?,
            )?,
        })
    }
}

/// The decisions per rule (config path): admitted, refused, near the limit, folded under
/// `rule="other"`, and the limits adjusted at run time.
pub(super) struct RuleFamilies {
    pub allowed: IntCounterVec,
    pub rejected: IntCounterVec,
    pub near_limit: IntCounterVec,
    pub labels_folded: IntCounter,
    pub effective_limit: IntGaugeVec,
}

impl RuleFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, MetricsError> {
        let per_rule = |name: &str, help: &str, labels: &[&str]| {
            register(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
        };
        Ok(Self {
            allowed: per_rule(
                "floodgate_requests_allowed_total",
                "Descriptors a rule admitted, by domain and rule (config path).",
                &["domain", "rule"],
            )?,
            rejected: per_rule(
                "floodgate_requests_rejected_total",
                "Descriptors over their limit (reason limit, or shadow when shadow mode \
                 answered OK; class names the priority class refused, empty without \
                 classes), calls refused by the store failure policy, and invalid calls \
                 (rule \"none\").",
                &["domain", "rule", "reason", "class"],
            )?,
            near_limit: per_rule(
                "floodgate_near_limit_total",
                "Hits that took a counter past the near-limit ratio of its limit \
                 (--near-limit-ratio), as envoyproxy/ratelimit's near_limit.",
                &["domain", "rule"],
            )?,
            labels_folded: register(
                registry,
                IntCounter::new(
                    "floodgate_metric_labels_folded_total",
                    "Descriptor decisions recorded under rule=\"other\" because the rule label \
                     limit was reached.",
                )?,
            )?,
            effective_limit: register(
                registry,
                IntGaugeVec::new(
                    Opts::new(
                        "floodgate_effective_limit",
                        "requests_per_unit in force for a rule whose limit is adjusted at run \
                         time, by domain, rule and source (override: the admin API; adaptive: \
                         the adaptive controller). Rules without a series count with their \
                         configured limit.",
                    ),
                    &["domain", "rule", "source"],
                )?,
            )?,
        })
    }
}

/// `floodgate_build_info{version}`, always 1.
pub(super) fn register_build_info(registry: &Registry) -> Result<(), MetricsError> {
    let build_info = register(
        registry,
        IntGaugeVec::new(
            Opts::new("floodgate_build_info", "The running floodgate version."),
            &["version"],
        )?,
    )?;
    build_info
        .get_metric_with_label_values(&[env!("CARGO_PKG_VERSION")])?
        .set(1);
    Ok(())
}
