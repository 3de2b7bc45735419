//! Whether and where the reference's stats go to statsd: `USE_STATSD` (on by the reference's
//! default under the `ratelimit` front door, off for `floodgate serve`), `USE_DOG_STATSD`, and
//! the flags beside them.

use super::cli::ServeArgs;
use super::front_door::FrontDoor;
use super::reference_env::go_duration;
use super::serve::AppError;
use crate::telemetry::statsd_options::{parse_extra_tags, StatsdOptions};

/// The statsd sink's settings, `None` when it is off.
pub fn statsd_options(
    args: &ServeArgs,
    door: FrontDoor,
) -> Result<Option<StatsdOptions>, AppError> {
    let on = args.use_dog_statsd || args.use_statsd.unwrap_or(door == FrontDoor::Reference);
    if !on {
        return Ok(None);
    }
    let extra_tags =
        parse_extra_tags(&args.extra_tags).map_err(|error| AppError::Usage(error.to_string()))?;
    let flush_interval = go_duration(&args.stats_flush_interval)
        .filter(|interval| !interval.is_zero())
        .ok_or_else(|| {
            AppError::Usage(format!(
                "STATS_FLUSH_INTERVAL must be a positive Go duration such as 10s or 500ms, not {:?}",
                args.stats_flush_interval
            ))
        })?;
    Ok(Some(StatsdOptions {
        host: args.statsd_host.clone(),
        port: args.statsd_port,
        protocol: args.statsd_protocol,
        dog: args.use_dog_statsd,
        extra_tags,
        flush_interval,
    }))
}
