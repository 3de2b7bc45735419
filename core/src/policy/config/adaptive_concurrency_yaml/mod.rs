//! `adaptive:` beside `concurrency:` (floodgate): `max_in_flight` moves between `min` and `max`
//! with the time the rule's own leases are held (`core::arithmetic::gradient`); no signal to name.
//!
//! ```yaml
//! concurrency: {max_in_flight: 8, lease: request_id, release: {key: phase, value: done}, ttl: 30s}
//! adaptive:
//!   min: 2
//!   max: 200
//!   slo: 300ms          # a ceiling: the p95 held above it lowers the limit
//!   control: gradient   # (default) or aimd: the p95 held against the SLO alone
//!   interval: 1s        # (default)
//!   probe_every: 60s    # gradient: how often the service time is measured again (default)
//! ```

use std::time::Duration;

use serde_yaml::Mapping;

use super::adaptive_yaml::{bounds, common, duration, Common};
use super::keys::floodgate_map;
use super::spec::RuleSpec;
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, wrong_type};
use crate::arithmetic::aimd::{AdaptiveSettings, Control, SignalSource, SignalUnit};
use crate::arithmetic::lease::MAX_IN_FLIGHT;

const KEYS: [&str; 9] = [
    "min",
    "max",
    "interval",
    "slo",
    "control",
    "probe_every",
    // Refused below with their own reason, not as unknown keys.
    "signal",
    "signal_unit",
    "errors",
];
const EXAMPLE: &str = "adaptive: {min: 2, max: 200, slo: 300ms}";
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_PROBE_EVERY: Duration = Duration::from_secs(60);
const MAX_PROBE_EVERY: Duration = Duration::from_secs(3600);

/// Reads `adaptive:` of a descriptor whose rule is `concurrency` (a concurrency rule).
pub(super) fn read_concurrency_adaptive(
    descriptor: &Mapping,
    concurrency: &RuleSpec,
    path: &str,
    walk: &mut FileWalk,
) -> Option<AdaptiveSettings> {
    let value = field(descriptor, "adaptive")?;
    let map = floodgate_map(value, "adaptive", &KEYS, EXAMPLE, path, &mut walk.report)?;
    let mut valid = true;
    for key in ["signal", "signal_unit", "errors"] {
        if field(map, key).is_some() {
            walk.report.error(
                path,
                format!(
                    "`adaptive.{key}` has no place on a concurrency rule: its adaptive limit \
                     reads how long its own leases are held, from acquire to release; remove \
                     `{key}`"
                ),
            );
            valid = false;
        }
    }
    let configured = concurrency
        .concurrency
        .as_ref()
        .map(|rule| rule.max_in_flight);
    let Common {
        min,
        max,
        interval,
        slo_ms,
    } = common(map, DEFAULT_INTERVAL, path, walk);
    let control = control(map, path, walk);
    let probe_every = match field(map, "probe_every") {
        Some(value) => duration(
            value,
            "adaptive.probe_every",
            "probe_every: 60s",
            path,
            walk,
        ),
        None => Some(DEFAULT_PROBE_EVERY),
    };
    if max.is_some_and(|max| max > MAX_IN_FLIGHT) {
        walk.report.error(
            path,
            format!(
                "`adaptive.max` is above {MAX_IN_FLIGHT}, the most leases a concurrency rule \
                 holds: lower it"
            ),
        );
        valid = false;
    }
    let (min, max) = bounds(
        min?,
        max?,
        (configured, "concurrency.max_in_flight"),
        path,
        walk,
    )?;
    let interval = interval?;
    let control = match control? {
        Control::Gradient { .. } => Control::Gradient {
            probe_every: probe_intervals(probe_every?, interval, path, walk)?,
        },
        Control::Aimd => Control::Aimd,
    };
    valid.then_some(AdaptiveSettings {
        min,
        max,
        interval,
        slo_ms: slo_ms?,
        signal_unit: SignalUnit::Milliseconds,
        signal: SignalSource::Leases,
        errors: None,
        control,
    })
}

fn control(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<Control> {
    let Some(value) = field(map, "control") else {
        return Some(Control::Gradient { probe_every: 0 });
    };
    match value.as_str() {
        Some("gradient") => Some(Control::Gradient { probe_every: 0 }),
        Some("aimd") => Some(Control::Aimd),
        _ => {
            let message = wrong_type(
                "adaptive.control",
                "gradient (towards the limit where leases start to wait) or aimd (the p95 \
                 against the SLO)",
                &describe(value),
                "control: gradient",
            );
            walk.report.error(path, message);
            None
        }
    }
}

/// `probe_every` in whole intervals: at least 10 (a probe spends two at `min`), at most an
/// hour.
fn probe_intervals(
    every: Duration,
    interval: Duration,
    path: &str,
    walk: &mut FileWalk,
) -> Option<u32> {
    let intervals = every.as_millis() / interval.as_millis().max(1);
    if intervals < 10 || every > MAX_PROBE_EVERY {
        walk.report.error(
            path,
            format!(
                "`adaptive.probe_every` is {every:?}: it must be at least 10 intervals \
                 ({:?}; a probe spends two at `min`) and at most {MAX_PROBE_EVERY:?}",
                interval * 10
            ),
        );
        return None;
    }
    u32::try_from(intervals).ok()
}

#[cfg(test)]
mod tests;
