//! Where the configuration is, from the command line and the environment: `--config PATH`, or
//! envoyproxy/ratelimit's `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY` and friends.

use crate::cmd::cli::ConfigArgs;
use crate::engine::config_source::ConfigLocation;

/// Neither `--config` nor the reference's runtime variables say where the rules are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no configuration given: pass --config PATH (a YAML file or a directory), \
     or set RUNTIME_ROOT and RUNTIME_SUBDIRECTORY as for envoyproxy/ratelimit"
)]
pub struct NoConfiguration;

/// Where `serve` and `check --explain` read the configuration: `--config`, else the
/// reference's `RUNTIME_*` variables.
pub fn location(config: &ConfigArgs) -> Result<ConfigLocation, NoConfiguration> {
    if let Some(path) = &config.config {
        return Ok(ConfigLocation::Path(path.clone()));
    }
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (env("RUNTIME_ROOT"), env("RUNTIME_SUBDIRECTORY")) {
        (Some(root), Some(subdirectory)) => Ok(ConfigLocation::Runtime {
            root: root.into(),
            subdirectory: subdirectory.into(),
            app_directory: env("RUNTIME_APPDIRECTORY")
                .unwrap_or_else(|| "config".to_owned())
                .into(),
            watch_root: env("RUNTIME_WATCH_ROOT").is_none_or(|v| parse_bool(&v)),
            ignore_dotfiles: env("RUNTIME_IGNOREDOTFILES").is_some_and(|v| parse_bool(&v)),
        }),
        _ => Err(NoConfiguration),
    }
}

/// Go's `strconv.ParseBool`, which envoyproxy/ratelimit's settings use.
pub(crate) fn parse_bool(text: &str) -> bool {
    matches!(text, "1" | "t" | "T" | "TRUE" | "true" | "True")
}
