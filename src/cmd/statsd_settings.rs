//! Whether and where the reference's stats go to statsd: `USE_STATSD` (on by the reference's
//! default under the `ratelimit` front door, off for `floodgate serve`), `USE_DOG_STATSD`, and
//! the flags beside them.

use super::app_error::AppError;
use super::cli::ServeArgs;
use super::front_door::FrontDoor;
use super::reference_env::go_duration;
use crate::telemetry::statsd::mogrifiers::Mogrifiers;
use crate::telemetry::statsd::options::{parse_extra_tags, StatsdOptions};

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
    let mogrifiers = Mogrifiers::from_env(&args.use_dog_statsd_mogrifiers, |name| {
        std::env::var(name).ok()
    })
    .map_err(|error| AppError::Usage(error.to_string()))?;
    if !args.use_dog_statsd && !mogrifiers.is_empty() {
        tracing::warn!("USE_DOG_STATSD_MOGRIFIERS applies to DogStatsD only (USE_DOG_STATSD=true)");
    }
    Ok(Some(StatsdOptions {
        host: args.statsd_host.clone(),
        port: args.statsd_port,
        protocol: args.statsd_protocol,
        dog: args.use_dog_statsd,
        extra_tags,
        mogrifiers,
        flush_interval,
    }))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn options(flags: &[&str], door: FrontDoor) -> Option<StatsdOptions> {
        let line = Line::try_parse_from(std::iter::once("floodgate").chain(flags.iter().copied()))
            .unwrap_or_else(|error| panic!("{error}"));
        statsd_options(&line.serve, door).unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn on_by_default_as_ratelimit_off_for_serve_unless_asked_for() {
        // The process's own USE_STATSD / USE_DOG_STATSD would decide instead of the defaults.
        if std::env::var_os("USE_STATSD").is_some() || std::env::var_os("USE_DOG_STATSD").is_some()
        {
            return;
        }
        let reference = options(&[], FrontDoor::Reference);
        assert_eq!(
            reference.map(|options| (options.host, options.port, options.flush_interval)),
            Some((
                "localhost".to_owned(),
                8125,
                std::time::Duration::from_secs(10)
            ))
        );
        assert_eq!(options(&[], FrontDoor::Floodgate), None);
        assert_eq!(options(&["--use-statsd=false"], FrontDoor::Reference), None);
        let dog = options(
            &[
                "--use-dog-statsd",
                "--extra-tags=b:2,a:1",
                "--stats-flush-interval=1m30s",
            ],
            FrontDoor::Floodgate,
        );
        assert_eq!(
            dog.map(|options| (options.dog, options.extra_tags, options.flush_interval)),
            Some((
                true,
                vec![
                    ("a".to_owned(), "1".to_owned()),
                    ("b".to_owned(), "2".to_owned())
                ],
                std::time::Duration::from_secs(90)
            ))
        );
        let line = Line::try_parse_from(["floodgate", "--stats-flush-interval=soon"])
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(statsd_options(&line.serve, FrontDoor::Reference).is_err());
    }
}
