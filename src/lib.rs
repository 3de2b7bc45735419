//! floodgate: a rate-limit service for Envoy and Nginx.
//!
//! `core` decides and never does I/O; everything else is a thin shell around it.

pub mod adaptive;
pub mod adjustments;
pub mod app;
pub mod check;
pub mod cli;
pub mod config_source;
pub mod core;
pub mod describe;
pub mod explain;
pub mod limiter;
pub mod proto;
pub mod reload;
pub mod runtime;
pub mod server;
pub mod store;
pub mod telemetry;
