//! The pure core: configuration, the descriptor rule tree, the algorithms and the request
//! semantics. Nothing here does I/O or reads a clock; the shells around it do.

pub mod algorithm;
pub mod config;
#[cfg(floodgate_stub)]
pub mod headers;
pub mod key;
#[cfg(floodgate_stub)]
pub mod plan;
pub mod request;
#[cfg(floodgate_stub)]
pub mod response;
pub mod rules;
pub mod time;
pub mod unit;
pub mod verdict;
#[cfg(floodgate_stub)]
mod rules_stub;
