//! The command line: flags, wiring of the layers below for each subcommand, and text for people.

/// The exit code of a command line floodgate cannot use (BSD's `EX_USAGE`): a wrong flag, a
/// malformed descriptor, no configuration given. Not 2, which `check` answers for OVER_LIMIT.
pub const EXIT_USAGE: u8 = 64;

pub mod app_error;
pub mod check;
pub mod cli;
pub(crate) mod config_location;
pub mod counters;
pub(crate) mod door_arguments;
pub(crate) mod explain_text;
pub mod front_door;
pub(crate) mod hybrid_settings;
pub mod limitador_args;
pub mod output;
pub(crate) mod prometheus_settings;
pub mod reference_counters;
pub mod reference_env;
pub mod runtime;
pub mod semantics_args;
pub mod semantics_settings;
pub mod serve;
pub(crate) mod serve_source;
pub mod setting_values;
pub(crate) mod statsd_settings;
pub mod trace_settings;
pub mod validate;
pub(crate) mod xds_settings;
