//! One of the reference's counters under its statsd name, with the Prometheus name and labels
//! the mapping in force makes of it: what the stats count into and both sinks read.

use std::sync::atomic::{AtomicU64, Ordering};

use super::mapping::{Mapped, MetricMapper, StatKind};

/// One counter under its statsd name, with what the mapping makes of it.
#[derive(Debug)]
pub struct NamedCounter {
    pub statsd_name: Box<str>,
    pub mapped: Mapped,
    value: AtomicU64,
}

impl NamedCounter {
    pub(super) fn new(statsd_name: String, mapper: &MetricMapper) -> Self {
        let mapped = mapper.map(&statsd_name, StatKind::Counter);
        Self {
            statsd_name: statsd_name.into_boxed_str(),
            mapped,
            value: AtomicU64::new(0),
        }
    }

    pub(super) fn add(&self, value: u64) {
        if value > 0 {
            self.value.fetch_add(value, Ordering::Relaxed);
        }
    }

    pub fn value(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}
