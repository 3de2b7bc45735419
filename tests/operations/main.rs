//! Running floodgate: admin overrides and counters, health and drain, metrics (and Envoy Gateway's dashboard),
//! OTLP tracing (floodgate's, and the reference's at the `ratelimit` door), reloads, and memory (rules and eviction).

mod admin_counters;
mod admin_overrides;
mod freed_pages;
mod health_drain;
mod health_store;
mod memory_eviction;
mod metrics_prometheus;
mod metrics_reference_names;
mod prometheus_dashboard;
mod queue_metrics;
mod reload_modes;
mod reload_under_traffic;
mod rules_memory;
mod statsd_reference_names;
mod status_page;
mod tracing_otlp;
mod tracing_reference;
