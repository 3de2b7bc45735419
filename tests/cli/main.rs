//! The command line: `floodgate explain` and the configuration files shipped in `config/`.

mod config_files;
mod explain_cli;
