//! Which statsd_exporter mapping the reference's Prometheus listener (`USE_PROMETHEUS`) serves
//! its stats under: `PROMETHEUS_MAPPER_YAML` and `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`.

use super::app_error::AppError;
use super::cli::ServeArgs;
use crate::telemetry::reference::mapping::MetricMapper;

/// The mapping `USE_PROMETHEUS` serves the reference's stats under: `PROMETHEUS_MAPPER_YAML`,
/// or the reference's default (with `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` applied, as the
/// reference applies it to its default only). A file that does not exist leaves the default
/// (logged: the reference's mount of it is optional); one that is there but wrong stops the
/// start, so a mistake in it shows at the rollout rather than as dark dashboards.
pub fn prometheus_mapper(args: &ServeArgs) -> Result<MetricMapper, AppError> {
    let default = || MetricMapper::reference_default(args.prometheus_response_time_as_milliseconds);
    let Some(path) = &args.prometheus_mapper_yaml else {
        return Ok(default());
    };
    if !path.exists() {
        tracing::warn!(
            path = %path.display(),
            "PROMETHEUS_MAPPER_YAML names no file: serving the reference's default mapping"
        );
        return Ok(default());
    }
    let mapper = MetricMapper::from_file(path).map_err(|error| {
        AppError::Usage(format!(
            "PROMETHEUS_MAPPER_YAML: {error} (fix the file, or unset the variable for the \
             reference's default mapping)"
        ))
    })?;
    tracing::info!(
        path = %path.display(),
        mappings = mapper.mapping_count(),
        "serving the reference's stats under PROMETHEUS_MAPPER_YAML's mapping"
    );
    if args.prometheus_response_time_as_milliseconds {
        tracing::warn!(
            "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS applies to the default mapping only; \
             PROMETHEUS_MAPPER_YAML's own scale is used"
        );
    }
    Ok(mapper)
}
