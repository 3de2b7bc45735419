//! envoyproxy/ratelimit's stats: counted under its statsd names ([`stats`], one
//! [`named_counter`] each), named for Prometheus by a statsd_exporter mapping ([`mapping`]) and
//! served the way the reference's Prometheus listener serves them ([`exposition`]). statsd
//! (`telemetry::statsd`) reads the same counters.

pub(crate) mod exposition;
pub(crate) mod mapping;
pub(crate) mod named_counter;
pub(crate) mod stats;
