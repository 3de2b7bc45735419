//! floodgate: a rate-limit service for Envoy and Nginx.
//!
//! `core` decides and never does I/O; everything else is a thin shell around it.

pub mod core;
#[cfg(floodgate_stub)]
pub mod app;
#[cfg(floodgate_stub)]
pub mod check;
#[cfg(floodgate_stub)]
pub mod cli;
#[cfg(floodgate_stub)]
#[path = "config_source_stub.rs"]
pub mod config_source;
#[cfg(floodgate_stub)]
pub mod describe;
#[cfg(floodgate_stub)]
pub mod limiter;
pub mod proto;
#[cfg(floodgate_stub)]
pub mod server;
#[cfg(floodgate_stub)]
pub mod store;
#[cfg(floodgate_stub)]
pub mod telemetry;
