//! The error `floodgate serve` ends with: what went wrong and whether the command line was at
//! fault (its exit code). Apart from `serve`, so the settings it reads can answer with it.

use std::net::SocketAddr;

use crate::cmd::config_location::LocationError;
use crate::cmd::serve_source::FirstRulesError;
use crate::cmd::setting_values::SettingError;
use crate::engine::reload;
use crate::server;
use crate::server::tls;
use crate::store::redis::StartupError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    Usage(String),
    /// The thread that loads configurations is gone (it panicked): not the user's doing.
    #[error("{0}")]
    Loader(String),
    #[error("cannot read the configuration: {0}")]
    Source(#[from] crate::engine::config_source::SourceError),
    #[error("the configuration has errors:\n{0}")]
    Config(#[from] crate::core::policy::config::ConfigErrors),
    #[error(
        "cannot listen on {addr} for the {listener} listener: {source}{hint} \
         (choose another address with {setting})"
    )]
    Bind {
        addr: SocketAddr,
        listener: &'static str,
        setting: &'static str,
        hint: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Location(#[from] LocationError),
    #[error(transparent)]
    Setting(#[from] SettingError),
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[error("gRPC TLS: {0}")]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    RedisStartup(StartupError),
    #[error("admin API: {0}")]
    AdminToken(#[from] crate::server::admin::AdminTokenError),
    #[error("TLS to the xDS management server: {0}")]
    XdsTls(#[from] crate::engine::config_source::xds::XdsTlsError),
}

impl From<FirstRulesError> for AppError {
    fn from(error: FirstRulesError) -> Self {
        match error {
            FirstRulesError::Usage(message) => Self::Usage(message),
            FirstRulesError::Location(error) => Self::Location(error),
            FirstRulesError::XdsTls(error) => Self::XdsTls(error),
            FirstRulesError::FirstLoad(error) => error.into(),
        }
    }
}

impl AppError {
    /// Whether the command line was wrong (exit code `cmd::EXIT_USAGE`).
    pub fn is_usage(&self) -> bool {
        match self {
            AppError::Usage(_) | AppError::Location(_) | AppError::Setting(_) => true,
            AppError::Tls(error) => error.is_usage(),
            _ => false,
        }
    }
}

impl From<reload::FirstLoadError> for AppError {
    fn from(error: reload::FirstLoadError) -> Self {
        match error {
            reload::FirstLoadError::Source(error) => Self::Source(error),
            reload::FirstLoadError::Config(errors) => Self::Config(errors),
            reload::FirstLoadError::Loader(gone) => Self::Loader(gone.to_string()),
        }
    }
}
