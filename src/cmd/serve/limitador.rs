//! Limitador's limits for `serve`: the file loaded at start (an error stops the start, as a bad
//! rules file does), its counters where the store says (`store::limitador_counters`), its reloads, and its HTTP API when
//! `--limitador-http-addr` is set.

use std::sync::Arc;

use crate::cmd::app_error::AppError;
use crate::cmd::cli::ServeArgs;
use crate::core::decision::charging::Charging;
use crate::engine::limitador::{follow, Limitador};
use crate::engine::shutdown::Shutdown;

use super::store::StorePlan;

/// The limits of `--limitador-limits`, followed until `shutdown`; `None` without the flag.
pub(super) async fn start(
    serve_args: &ServeArgs,
    (plan, charging): (&StorePlan, Charging),
    shutdown: &Shutdown,
) -> Result<Option<Arc<Limitador>>, AppError> {
    let args = &serve_args.limitador;
    let Some(path) = &args.limitador_limits else {
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
    let limitador = Arc::new(Limitador::new(
        limits,
        super::store::limitador_counters(plan, serve_args, charging).await?,
        args.hold_bounds(),
    ));
    tokio::spawn(follow::follow(
        Arc::clone(&limitador),
        path.clone(),
        text,
        shutdown.clone(),
    ));
    if let Some(addr) = args.limitador_http_addr {
        let socket = super::listeners::bind_limitador_http(addr)?;
        tracing::info!(%addr, "serving Limitador's HTTP API");
        tokio::spawn(crate::server::limitador_http::serve(
            socket,
            Arc::clone(&limitador),
            super::listeners::connection_limits(serve_args, false),
            shutdown.clone(),
        ));
    }
    Ok(Some(limitador))
}
