//! The pure core: configuration, the descriptor rule tree, the algorithms and the request
//! semantics. Nothing here does I/O or reads a clock; the shells around it do.

pub mod adjustment;
pub mod aimd;
pub mod algorithm;
pub mod calendar;
pub mod charging;
pub mod config;
pub mod describe;
pub mod dynamic_metadata;
pub mod error_codes;
pub mod explain;
pub mod failure;
pub mod gradient;
pub mod headers;
pub mod http_check;
pub mod hybrid;
pub mod key;
pub mod lease;
pub mod metadata;
pub mod outcome;
pub mod overload;
pub mod plan;
pub mod priority;
pub mod quota;
pub mod reference_cache;
pub mod request;
pub mod response;
pub mod rules;
pub mod semantics;
pub mod shed;
pub mod status;
pub mod time;
pub mod unit;
pub mod verdict;
