//! Where the rules in force came from, and how the xDS subscription fares:
//! `floodgate_config_source_info{source, version}` (1 for the live source and version: `file`
//! with floodgate's reload count, `xds` with the management server's `version_info`),
//! `floodgate_xds_connected` and `floodgate_xds_rejected_total`.

use std::sync::{Mutex, OnceLock, PoisonError};

use prometheus::{IntCounter, IntGauge, IntGaugeVec, Opts};

use super::metrics::{global, MetricsError};

struct ConfigSourceSeries {
    info: IntGaugeVec,
    /// The labels `info` carries now, removed when the version changes.
    live: Mutex<Option<[String; 2]>>,
    connected: IntGauge,
    rejected: IntCounter,
}

impl ConfigSourceSeries {
    fn register() -> Result<Option<Self>, MetricsError> {
        let Some(metrics) = global() else {
            return Ok(None);
        };
        let info = IntGaugeVec::new(
            Opts::new(
                "floodgate_config_source_info",
                "1 for where the rules in force came from (source: file or xds) and their \
                 version (file: floodgate's load count, as /rlconfig shows it; xds: the \
                 management server's version_info).",
            ),
            &["source", "version"],
        )?;
        let connected = IntGauge::new(
            "floodgate_xds_connected",
            "1 while a stream to the xDS management server is open (CONFIG_TYPE=GRPC_XDS_SOTW).",
        )?;
        let rejected = IntCounter::new(
            "floodgate_xds_rejected_total",
            "xDS responses refused with a NACK (a bad resource; the rules in force stay), \
             repeats of the same rejected snapshot included.",
        )?;
        let registry = metrics.registry();
        registry.register(Box::new(info.clone()))?;
        registry.register(Box::new(connected.clone()))?;
        registry.register(Box::new(rejected.clone()))?;
        Ok(Some(Self {
            info,
            live: Mutex::new(None),
            connected,
            rejected,
        }))
    }
}

fn series() -> Option<&'static ConfigSourceSeries> {
    static SERIES: OnceLock<Option<ConfigSourceSeries>> = OnceLock::new();
    SERIES
        .get_or_init(|| match ConfigSourceSeries::register() {
            Ok(series) => series,
            Err(error) => {
                tracing::error!("config source metrics are off: {error}");
                None
            }
        })
        .as_ref()
}

/// The rules in force are `version` from `source` (`file` or `xds`).
pub fn live_version(source: &str, version: &str) {
    let Some(series) = series() else {
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
    if let Some(series) = series() {
        series.connected.set(i64::from(open));
    }
}

/// A NACK was sent.
pub fn xds_rejected() {
    if let Some(series) = series() {
        series.rejected.inc();
    }
}
