//! The held answers' metrics (`engine::waiting`): how many wait now, how long each waited, and
//! how many were refused because the process held all it may (`--max-waiting`).

use std::sync::OnceLock;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntGauge, Opts};

use super::metrics::{global, MetricsError};

/// Waits run from a few ms to a minute (`core::arithmetic::algorithm::MAX_QUEUE_WAIT`).
const WAIT_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

struct QueueSeries {
    waiting: IntGauge,
    wait_seconds: Histogram,
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
        let wait_seconds = Histogram::with_opts(
            HistogramOpts::new(
                "floodgate_queue_wait_seconds",
                "How long each held answer waited for its turn.",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
        )?;
        let refused_full = IntCounter::with_opts(Opts::new(
            "floodgate_queue_refused_full_total",
            "Requests under a queueing rule that found the process holding --max-waiting \
             answers: answered at once, refused if they would have waited.",
        ))?;
        registry.register(Box::new(waiting.clone()))?;
        registry.register(Box::new(wait_seconds.clone()))?;
        registry.register(Box::new(refused_full.clone()))?;
        Ok(Some(Self {
            waiting,
            wait_seconds,
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

/// An answer held `seconds` for its turn, counted as waiting until the guard is dropped.
pub fn answer_held(seconds: f64) -> HeldAnswer {
    let series = series();
    if let Some(series) = series {
        series.wait_seconds.observe(seconds);
        series.waiting.inc();
    }
    HeldAnswer {
        gauge: series.map(|series| series.waiting.clone()),
    }
}

/// A request under a queueing rule that found the process holding all the answers it may.
pub fn refused_full() {
    if let Some(series) = series() {
        series.refused_full.inc();
    }
}
