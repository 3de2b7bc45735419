//! Where the configuration is, from the command line and the environment: `--config PATH`, or
//! envoyproxy/ratelimit's `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY` and friends.

use crate::cmd::cli::ConfigArgs;
use crate::cmd::setting_values::{env_bool, SettingError};
use crate::engine::config_source::ConfigLocation;

/// Neither `--config` nor the reference's runtime variables say where the rules are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no configuration given: pass --config PATH (a YAML file or a directory), \
     or set RUNTIME_ROOT and RUNTIME_SUBDIRECTORY as for envoyproxy/ratelimit"
)]
pub struct NoConfiguration;

/// Why the configuration's location is not known (a usage error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    #[error(transparent)]
    NoConfiguration(#[from] NoConfiguration),
    /// `RUNTIME_WATCH_ROOT` or `RUNTIME_IGNOREDOTFILES` is not a boolean.
    #[error(transparent)]
    Setting(#[from] SettingError),
}

/// Where `serve` and `check --explain` read the configuration: `--config`, else the
/// reference's `RUNTIME_*` variables.
pub fn location(config: &ConfigArgs) -> Result<ConfigLocation, LocationError> {
    if let Some(path) = &config.config {
        return Ok(ConfigLocation::Path(path.clone()));
    }
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let set = |name: &str| std::env::var(name).ok();
    match (env("RUNTIME_ROOT"), env("RUNTIME_SUBDIRECTORY")) {
        (Some(root), Some(subdirectory)) => Ok(ConfigLocation::Runtime {
            root: root.into(),
            subdirectory: subdirectory.into(),
            app_directory: env("RUNTIME_APPDIRECTORY")
                .unwrap_or_else(|| "config".to_owned())
                .into(),
            watch_root: env_bool("RUNTIME_WATCH_ROOT", set)?.unwrap_or(true),
            ignore_dotfiles: env_bool("RUNTIME_IGNOREDOTFILES", set)?.unwrap_or(false),
        }),
        _ => Err(NoConfiguration.into()),
    }
}
