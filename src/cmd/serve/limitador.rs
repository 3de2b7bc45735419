//! Limitador's limits for `serve`: the file loaded at start (an error stops the start, as a bad
//! rules file does), its counters in this process, and its reloads.

use std::sync::Arc;

use crate::cmd::app_error::AppError;
use crate::cmd::limitador_args::LimitadorArgs;
use crate::engine::limitador::{follow, limits_file, Limitador};
use crate::engine::shutdown::Shutdown;
use crate::store::held_windows::memory::MemoryHeldWindows;

/// The limits of `--limitador-limits`, followed until `shutdown`; `None` without the flag.
pub(super) fn start(
    args: &LimitadorArgs,
    shutdown: &Shutdown,
) -> Result<Option<Arc<Limitador>>, AppError> {
    let Some(path) = &args.limitador_limits else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|error| {
        AppError::Usage(format!(
            "cannot read Limitador's limits file {} (--limitador-limits): {error}",
            path.display()
        ))
    })?;
    let limits = limits_file::parse(&text, &path.display().to_string())
        .map_err(|error| AppError::Usage(error.to_string()))?;
    tracing::info!(
        path = %path.display(), limits = limits.limit_count(),
        "Limitador's limits loaded"
    );
    let limitador = Arc::new(Limitador::new(
        limits,
        Arc::new(MemoryHeldWindows::default()),
        args.hold_bounds(),
    ));
    tokio::spawn(follow::follow(
        Arc::clone(&limitador),
        path.clone(),
        text,
        shutdown.clone(),
    ));
    Ok(Some(limitador))
}
