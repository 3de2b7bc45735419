//! The command line: flags, wiring of the layers below for each subcommand, and text for people.

pub mod check;
pub mod cli;
pub mod config_location;
pub mod explain_text;
pub mod runtime;
pub mod serve;
pub mod validate;
