//! The live service: the state that changes while floodgate serves — the limiter over the rules
//! in force, operators' adjustments, adaptive limits, reloads of the configuration and where it
//! comes from, the shutdown signal, and the background tasks that keep it all current.

pub(crate) mod adaptive;
pub(crate) mod adjustment_set;
pub(crate) mod config_source;
pub(crate) mod counters;
pub mod heavy_hitters;
pub mod heavy_hitters_sync;
pub mod lease_timings;
pub mod limitador;
pub mod limiter;
pub(crate) mod observers;
pub(crate) mod overrides;
pub(crate) mod reload;
pub mod rlqs;
pub mod self_shedding;
pub mod shutdown;
pub(crate) mod tasks;
#[cfg(test)]
mod test_rules;
pub mod waiting;

/// How the binary, which chooses the allocator, learns when loads free their scratch memory.
pub use reload::{set_freed_pages_switch, FreedPages};
