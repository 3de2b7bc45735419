//! Where the rules in force came from, and how the xDS subscription fares:
//! `floodgate_config_source_info{source, version}` (1 for the live source and version: `file`
//! with floodgate's load count, `xds` with the management server's `version_info`), and, once
//! floodgate follows an xDS server, `floodgate_xds_connected` and `floodgate_xds_rejected_total`.

use std::sync::{Mutex, OnceLock, PoisonError};

use prometheus::core::Collector;
use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts};

use super::metrics::{global, MetricsError};

struct SourceSeries {
    info: IntGaugeVec,
    /// The labels `info` carries now, removed when the version changes.
    live: Mutex<Option<[String; 2]>>,
}

/// Registered at the first xDS event only: a file-fed floodgate has no stream to report on.
struct XdsSeries {
    connected: IntGauge,
    rejected: IntCounter,
}

fn registered<C: Collector + Clone + 'static>(collector: C) -> Result<Option<C>, MetricsError> {
    let Some(metrics) = global() else {
        return Ok(None);
    };
    metrics.registry().register(Box::new(collector.clone()))?;
    Ok(Some(collector))
}

fn source_series() -> Option<&'static SourceSeries> {
    static SERIES: OnceLock<Option<SourceSeries>> = OnceLock::new();
    SERIES
        .get_or_init(|| {
            let info = IntGaugeVec::new(
                Opts::new(
                    "floodgate_config_source_info",
                    "1 for where the rules in force came from (source: file or xds) and their \
                     version (file: floodgate's load count, as /rlconfig shows it; xds: the \
                     management server's version_info).",
                ),
                &["source", "version"],
            )
            .map_err(MetricsError::from)
            .and_then(registered);
            match info {
                Ok(info) => info.map(|info| SourceSeries {
                    info,
                    live: Mutex::new(None),
                }),
                Err(error) => {
                    tracing::error!("config source metrics are off: {error}");
                    None
                }
            }
        })
        .as_ref()
}

fn xds_series() -> Option<&'static XdsSeries> {
    static SERIES: OnceLock<Option<XdsSeries>> = OnceLock::new();
    SERIES
        .get_or_init(|| {
            let connected = IntGauge::new(
                "floodgate_xds_connected",
                "1 while a stream to the xDS management server is open \
                 (CONFIG_TYPE=GRPC_XDS_SOTW).",
            )
            .map_err(MetricsError::from)
            .and_then(registered);
            let rejected = IntCounter::new(
                "floodgate_xds_rejected_total",
                "xDS responses refused with a NACK (a bad resource; the rules in force stay), \
                 repeats of the same rejected snapshot included.",
            )
            .map_err(MetricsError::from)
            .and_then(registered);
            match (connected, rejected) {
                (Ok(Some(connected)), Ok(Some(rejected))) => Some(XdsSeries {
                    connected,
                    rejected,
                }),
                (Err(error), _) | (_, Err(error)) => {
                    tracing::error!("xDS metrics are off: {error}");
                    None
                }
                _ => None,
            }
        })
        .as_ref()
}

/// The rules in force are `version` from `source` (`file` or `xds`).
pub fn live_version(source: &str, version: &str) {
    let Some(series) = source_series() else {
        return;
    };
    let labels = [source.to_owned(), version.to_owned()];
    let mut live = series.live.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(old) = live.as_ref().filter(|old| **old != labels) {
        let _ = series.info.remove_label_values(&[&old[0], &old[1]]);
    }
    if let Ok(gauge) = series.info.get_metric_with_label_values(&[source, version]) {
        gauge.set(1);
    }
    *live = Some(labels);
}

/// A stream to the management server opened (`true`) or ended.
pub fn xds_connected(open: bool) {
    if let Some(series) = xds_series() {
        series.connected.set(i64::from(open));
    }
}

/// A NACK was sent.
pub fn xds_rejected() {
    if let Some(series) = xds_series() {
        series.rejected.inc();
    }
}
