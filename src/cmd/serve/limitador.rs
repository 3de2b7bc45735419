//! Limitador's limits for `serve`: the file loaded at start, before anything waits on Redis (an
//! error stops the start, as a bad rules file does), then its counters where the store says
//! (`store::limitador_counters`, once the store is ready) and its reloads. Its HTTP API
//! (`--limitador-http-addr`) is bound with the other ports and answers once the limiter does.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cmd::app_error::AppError;
use crate::cmd::cli::ServeArgs;
use crate::core::decision::charging::Charging;
use crate::engine::limitador::limits_file::LimitSet;
use crate::engine::limitador::{follow, Limitador};
use crate::engine::shutdown::Shutdown;

use super::store::LimitadorCounting;

/// Limitador's limits file, read and compiled, not yet counting.
pub(super) struct LimitadorFile {
    path: PathBuf,
    limits: LimitSet,
    /// The text loaded, so that the file's follower reloads only what changed.
    text: String,
}

/// The limits of `--limitador-limits`; `None` without the flag.
pub(super) async fn load(serve_args: &ServeArgs) -> Result<Option<LimitadorFile>, AppError> {
    let Some(path) = &serve_args.limitador.limitador_limits else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|error| {
        AppError::Usage(format!(
            "cannot read Limitador's limits file {} (--limitador-limits): {error}",
            path.display()
        ))
    })?;
    let (parsed, text) = follow::parse_on_a_loader(text, path)
        .await
        .map_err(|gone| AppError::Loader(gone.to_string()))?;
    let limits = parsed.map_err(|error| AppError::Usage(error.to_string()))?;
    tracing::info!(
        path = %path.display(), limits = limits.limit_count(),
        "Limitador's limits loaded"
    );
    Ok(Some(LimitadorFile {
        path: path.clone(),
        limits,
        text,
    }))
}

impl LimitadorFile {
    /// The limits counting where `counting` says, followed until `shutdown`.
    pub(super) async fn start(
        self,
        serve_args: &ServeArgs,
        (counting, charging): (LimitadorCounting, Charging),
        shutdown: &Shutdown,
    ) -> Result<Arc<Limitador>, AppError> {
        let counters = super::store::limitador_counters(counting, serve_args, charging).await?;
        let limitador = Arc::new(Limitador::new(
            self.limits,
            counters,
            serve_args.limitador.hold_bounds(),
        ));
        tokio::spawn(follow::follow(
            Arc::clone(&limitador),
            self.path,
            self.text,
            shutdown.clone(),
        ));
        Ok(limitador)
    }
}
