//! floodgate: a rate-limit service for Envoy and Nginx.
//!
//! `core` decides and never does I/O; everything else is a thin shell around it.

pub mod core;
