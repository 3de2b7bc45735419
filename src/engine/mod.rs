//! The live service: the state that changes while floodgate serves — the limiter over the rules
//! in force, operators' adjustments, adaptive limits, reloads of the configuration and where it
//! comes from, the shutdown signal, and the background tasks that keep it all current.

pub mod adaptive;
pub mod adjustment_set;
pub mod config_source;
pub mod limiter;
pub mod observers;
pub mod overrides_sync;
pub mod reload;
pub mod shutdown;
pub mod tasks;
