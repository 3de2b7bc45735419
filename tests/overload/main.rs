//! Overload: load shedding over gRPC and HTTP, priority classes, and adaptive limits fed by
//! Prometheus or pushed.

mod adaptive_concurrency;
mod adaptive_prometheus;
mod adaptive_pushed;
mod overload_http;
mod overload_shedding;
mod priority_classes;
mod self_shedding;
