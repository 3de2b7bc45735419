//! RLQS's metrics (`server::rlqs`): streams open and how they ended, usage reports, buckets
//! tracked, buckets abandoned, and assignments pushed between reports. No label comes from a
//! report: domains and bucket ids are Envoy's to choose, so they would make series without
//! bound.

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

use super::metrics::{global, MetricsError};

struct QuotaSeries {
    streams: IntGauge,
    closed: IntCounterVec,
    reports: IntCounter,
    buckets: IntGauge,
    abandoned: IntCounter,
    pushes: IntCounter,
    exchanges: IntCounterVec,
}

impl QuotaSeries {
    fn register() -> Result<Option<Self>, MetricsError> {
        let Some(metrics) = global() else {
            return Ok(None);
        };
        let registry = metrics.registry();
        let streams = IntGauge::new(
            "floodgate_rlqs_streams",
            "RLQS streams open (one per Envoy and domain).",
        )?;
        let closed = IntCounterVec::new(
            Opts::new(
                "floodgate_rlqs_streams_closed_total",
                "RLQS streams ended, by reason: client (Envoy ended it or went away), \
                 invalid_argument (a malformed report), resource_exhausted (a bound), shutdown.",
            ),
            &["reason"],
        )?;
        let reports = IntCounter::new(
            "floodgate_rlqs_reports_total",
            "RLQS usage reports received: answered, or held (a restart's grace, a first \
             exchange) and answered by a push.",
        )?;
        let buckets = IntGauge::new(
            "floodgate_rlqs_buckets",
            "RLQS buckets tracked, all domains together, as of the last report.",
        )?;
        let abandoned = IntCounter::new(
            "floodgate_rlqs_buckets_abandoned_total",
            "RLQS buckets abandoned on an Envoy (AbandonAction) after --rlqs-abandon-after-seconds \
             without requests.",
        )?;
        let pushes = IntCounter::new(
            "floodgate_rlqs_assignments_pushed_total",
            "RLQS assignments sent to an Envoy between its reports, because another Envoy \
             joined its bucket or the demands on it moved.",
        )?;
        let exchanges = IntCounterVec::new(
            Opts::new(
                "floodgate_rlqs_exchanges_total",
                "Exchanges of RLQS demand with the other floodgates sharing the Redis \
                 (--rlqs-exchange-ms), by result: ok, or error (each bucket stays divided as \
                 the last exchange that succeeded left it).",
            ),
            &["result"],
        )?;
        registry.register(Box::new(streams.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        registry.register(Box::new(reports.clone()))?;
        registry.register(Box::new(buckets.clone()))?;
        registry.register(Box::new(abandoned.clone()))?;
        registry.register(Box::new(pushes.clone()))?;
        registry.register(Box::new(exchanges.clone()))?;
        Ok(Some(Self {
            streams,
            closed,
            reports,
            buckets,
            abandoned,
            pushes,
            exchanges,
        }))
    }
}

fn series() -> Option<&'static QuotaSeries> {
    static SERIES: OnceLock<Option<QuotaSeries>> = OnceLock::new();
    SERIES
        .get_or_init(|| match QuotaSeries::register() {
            Ok(series) => series,
            Err(error) => {
                tracing::error!("RLQS metrics are off: {error}");
                None
            }
        })
        .as_ref()
}

/// An open RLQS stream; counted closed with the reason given to [`OpenStream::close`] (or
/// `client` when dropped without one).
pub struct OpenStream {
    reason: &'static str,
}

impl OpenStream {
    pub fn close(mut self, reason: &'static str) {
        self.reason = reason;
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if let Some(series) = series() {
            series.streams.dec();
            if let Ok(counter) = series.closed.get_metric_with_label_values(&[self.reason]) {
                counter.inc();
            }
        }
    }
}

pub fn stream_opened() -> OpenStream {
    if let Some(series) = series() {
        series.streams.inc();
    }
    OpenStream { reason: "client" }
}

/// One report received (answered or held): `abandoned` of its buckets abandoned, `buckets`
/// tracked after it.
pub fn report_answered(abandoned: usize, buckets: usize) {
    if let Some(series) = series() {
        series.reports.inc();
        series
            .abandoned
            .inc_by(u64::try_from(abandoned).unwrap_or(u64::MAX));
        series
            .buckets
            .set(i64::try_from(buckets).unwrap_or(i64::MAX));
    }
}

/// `assignments` sent to one Envoy between its reports.
pub fn pushed(assignments: usize) {
    if let Some(series) = series() {
        series
            .pushes
            .inc_by(u64::try_from(assignments).unwrap_or(u64::MAX));
    }
}

/// One exchange of demand with the other floodgates, and whether it succeeded.
pub fn exchanged(ok: bool) {
    if let Some(series) = series() {
        let result = if ok { "ok" } else { "error" };
        if let Ok(counter) = series.exchanges.get_metric_with_label_values(&[result]) {
            counter.inc();
        }
    }
}
