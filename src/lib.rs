//! floodgate: a rate-limit service for Envoy and Nginx.
//!
//! The core decides and never does I/O; every layer above it is a shell that feeds it requests
//! and carries out what it decided.
//!
//! # Layout
//!
//! Arrows only go down: `cmd → server → engine → {store, telemetry} → core`.
//!
//! * [`cmd`]: the command line — flags, the wiring of each subcommand, text for people.
//! * [`server`]: the wire — listeners, RLS v3 and RLQS over gRPC, HTTP (`/json`, nginx's `/check`), the
//!   admin and debug listeners, health; decodes, asks the engine, encodes. Nothing here decides.
//! * [`engine`]: the live service — the limiter over the rules in force, adjustments, adaptive
//!   limits, reloads, where the configuration comes from, shutdown, background tasks.
//! * [`store`]: where counters and shared values live — memory, Redis (every Redis command).
//! * [`telemetry`]: counting and exporting what the core classified — metrics, traces, logs.
//! * [`core`]: the decisions — the crate `floodgate-core`: configuration, the rule tree, the
//!   algorithms, outcomes, failure policies; pure functions of their inputs and a clock.

pub mod cmd;
pub use floodgate_core as core;
pub mod engine;
pub mod server;
pub mod store;
pub mod telemetry;

/// Envoy's RLS v3 messages: the public API's types, where callers expect them.
pub use server::proto;
