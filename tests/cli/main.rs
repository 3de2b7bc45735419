//! The command line: `check --explain`, the configuration files shipped in `config/`, and what a
//! new user meets first (exit codes, errors that say what to fix).

mod config_files;
mod door_arguments;
mod explain_cli;
mod front_door;
mod limitador_limits;
mod newcomer;
mod settings;
