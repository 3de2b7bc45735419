//! The listeners' connection metrics (`server::connections`): how many are open, how many were
//! turned away at `--max-connections`, and how many were closed for breaking a time bound.

use std::sync::OnceLock;

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use super::metrics::{global, MetricsError};

struct ConnectionSeries {
    open: IntGaugeVec,
    refused: IntCounterVec,
    closed: IntCounterVec,
}

impl ConnectionSeries {
    fn register() -> Result<Option<Self>, MetricsError> {
        let Some(metrics) = global() else {
            return Ok(None);
        };
        let registry = metrics.registry();
        let open = IntGaugeVec::new(
            Opts::new(
                "floodgate_connections_open",
                "Connections open on each listener (grpc, http, debug, admin, debug_pages).",
            ),
            &["listener"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "floodgate_connections_refused_total",
                "Connections closed as soon as accepted because the listener held \
                 --max-connections.",
            ),
            &["listener"],
        )?;
        let closed = IntCounterVec::new(
            Opts::new(
                "floodgate_connections_closed_total",
                "Connections floodgate closed itself, by reason: idle, header_timeout, \
                 handshake_timeout, stalled, shutdown.",
            ),
            &["listener", "reason"],
        )?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        Ok(Some(Self {
            open,
            refused,
            closed,
        }))
    }
}

fn series() -> Option<&'static ConnectionSeries> {
    static SERIES: OnceLock<Option<ConnectionSeries>> = OnceLock::new();
    SERIES
        .get_or_init(|| match ConnectionSeries::register() {
            Ok(series) => series,
            Err(error) => {
                tracing::error!("connection metrics are off: {error}");
                None
            }
        })
        .as_ref()
}

/// An open connection of `listener`; the gauge goes down when this is dropped.
pub struct OpenConnection {
    gauge: Option<prometheus::IntGauge>,
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(gauge) = &self.gauge {
            gauge.dec();
        }
    }
}

pub fn connection_opened(listener: &str) -> OpenConnection {
    let gauge = series().and_then(|s| s.open.get_metric_with_label_values(&[listener]).ok());
    if let Some(gauge) = &gauge {
        gauge.inc();
    }
    OpenConnection { gauge }
}

pub fn connection_refused(listener: &str) {
    if let Some(Ok(counter)) = series().map(|s| s.refused.get_metric_with_label_values(&[listener]))
    {
        counter.inc();
    }
}

pub fn connection_closed(listener: &str, reason: &str) {
    if let Some(Ok(counter)) =
        series().map(|s| s.closed.get_metric_with_label_values(&[listener, reason]))
    {
        counter.inc();
    }
}
