//! Adaptive (AIMD) limits: what a rule's `adaptive:` says, and the controller's step.
//!
//! Every interval the shell reads a latency signal (a p95) and, optionally, an error ratio, and
//! asks [`step`] for the next effective limit:
//! * p95 above the SLO: multiply by 0.9 (at least −1), never below `min`;
//! * p95 below 0.7 × SLO and the error ratio at most `max_ratio` (or no error condition):
//!   multiply by 1.05 (at least +1), never above `max`;
//! * otherwise, or when a signal is missing: hold, and say why.
//!
//! Decreasing is multiplicative and increasing gentle so that an overloaded upstream is relieved
//! within a few intervals while recovery probes slowly. Integer arithmetic (`× 9 / 10`,
//! `× 105 / 100`, rounded down) keeps every step exact and the same on every instance. Pure:
//! the signal values come in, the shell does the querying.

use std::fmt;
use std::time::Duration;

/// The most an interval may be: a controller slower than this would never catch an overload.
pub const MAX_INTERVAL: Duration = Duration::from_secs(300);
/// The least an interval may be (tests use it; production wants 10–30 s).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// `interval:` when not written.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// Below this share of the SLO the latency counts as healthy (room to grow).
pub const HEALTHY_SHARE_OF_SLO: f64 = 0.7;

/// The unit a latency signal's numbers are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalUnit {
    /// Envoy's `upstream_rq_time` histograms.
    Milliseconds,
    /// Prometheus conventions (`*_duration_seconds`).
    Seconds,
}

impl SignalUnit {
    pub const NAMES: [&'static str; 2] = ["ms", "s"];

    pub fn parse(text: &str) -> Option<SignalUnit> {
        match text {
            "ms" => Some(SignalUnit::Milliseconds),
            "s" => Some(SignalUnit::Seconds),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SignalUnit::Milliseconds => "ms",
            SignalUnit::Seconds => "s",
        }
    }

    /// A value in this unit, in milliseconds.
    pub fn to_millis(self, value: f64) -> f64 {
        match self {
            SignalUnit::Milliseconds => value,
            SignalUnit::Seconds => value * 1000.0,
        }
    }
}

/// Where a signal's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SignalSource {
    /// A Prometheus instant query (`GET {url}/api/v1/query?query=…`) that yields one number.
    Prometheus { url: String, query: String },
    /// The last value POSTed to the admin API's `/v1/signals/{name}`.
    Pushed { name: String },
    /// A concurrency rule's own leases: how long each was held, acquire to release, as this
    /// instance saw them (`core::arithmetic::gradient`). No query, nothing to push.
    Leases,
}

impl fmt::Display for SignalSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignalSource::Prometheus { url, .. } => write!(f, "prometheus {url}"),
            SignalSource::Pushed { name } => write!(f, "pushed {name}"),
            SignalSource::Leases => f.write_str("leases"),
        }
    }
}

/// The optional "few errors" condition for growing.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorCondition {
    /// Yields an error ratio (0 to 1).
    pub source: SignalSource,
    /// Growing is allowed only at or below this ratio.
    pub max_ratio: f64,
}

/// A rule's `adaptive:` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveSettings {
    /// The effective limit never goes below this (≥ 1).
    pub min: u32,
    /// …nor above this.
    pub max: u32,
    /// How often the controller steps.
    pub interval: Duration,
    /// The target p95, in milliseconds.
    pub slo_ms: f64,
    /// The unit of the latency signal's values.
    pub signal_unit: SignalUnit,
    /// The latency (p95) signal.
    pub signal: SignalSource,
    pub errors: Option<ErrorCondition>,
    /// How a step is taken.
    pub control: Control,
}

/// The control law of an adaptive limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// [`step`]: down when the p95 is above the SLO, up when well below it.
    Aimd,
    /// `core::arithmetic::gradient` (concurrency rules): towards the limit at which leases start to
    /// queue, measuring the unqueued latency in a probe every `probe_every` intervals.
    Gradient { probe_every: u32 },
}

impl Control {
    pub fn name(self) -> &'static str {
        match self {
            Control::Aimd => "aimd",
            Control::Gradient { .. } => "gradient",
        }
    }
}

impl AdaptiveSettings {
    /// `current` brought within `[min, max]` (a reload may have moved the bounds).
    pub fn clamp(&self, current: u32) -> u32 {
        current.clamp(self.min, self.max.max(self.min))
    }
}

/// A signal value, or why there is none (failed query, empty result, stale push, NaN…).
pub type Reading = Result<f64, String>;

/// Which way a step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Decrease,
    Increase,
    Hold,
}

impl Change {
    pub fn label(self) -> &'static str {
        match self {
            Change::Decrease => "decrease",
            Change::Increase => "increase",
            Change::Hold => "hold",
        }
    }
}

/// One controller step: the next limit and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub limit: u32,
    pub change: Change,
    /// For the log line: the signal, the threshold it was compared with, and any bound hit.
    pub why: String,
}

/// The next effective limit after `current`, given the latency `p95` (in the settings' signal
/// unit) and, when the settings have an error condition, the error ratio `errors`.
pub fn step(settings: &AdaptiveSettings, current: u32, p95: &Reading, errors: &Reading) -> Step {
    let current = settings.clamp(current);
    let hold = |why: String| Step {
        limit: current,
        change: Change::Hold,
        why,
    };
    let p95_ms = match p95 {
        Ok(value) if value.is_finite() && *value >= 0.0 => settings.signal_unit.to_millis(*value),
        Ok(value) => return hold(format!("no usable latency signal: it reads {value}")),
        Err(reason) => return hold(format!("no latency signal: {reason}")),
    };
    let slo = settings.slo_ms;
    if p95_ms > slo {
        // Rounded down, so at least −1 whenever current ≥ 1.
        let lowered = u64::from(current) * 9 / 10;
        let limit = u32::try_from(lowered).unwrap_or(current).max(settings.min);
        let why = format!("p95 {} > slo {}", millis(p95_ms), millis(slo));
        return moved(current, limit, Change::Decrease, why, "min");
    }
    let healthy = slo * HEALTHY_SHARE_OF_SLO;
    if p95_ms >= healthy {
        return hold(format!(
            "p95 {} between 0.7 × slo ({}) and slo ({})",
            millis(p95_ms),
            millis(healthy),
            millis(slo)
        ));
    }
    let mut why = format!("p95 {} < 0.7 × slo ({})", millis(p95_ms), millis(healthy));
    if let Some(condition) = &settings.errors {
        match errors {
            Ok(ratio) if ratio.is_finite() && *ratio <= condition.max_ratio => {
                why.push_str(&format!(
                    ", errors {} ≤ {}",
                    percent(*ratio),
                    percent(condition.max_ratio)
                ));
            }
            Ok(ratio) if ratio.is_finite() => {
                return hold(format!(
                    "{why} but errors {} > {}",
                    percent(*ratio),
                    percent(condition.max_ratio)
                ))
            }
            Ok(ratio) => return hold(format!("{why} but the error ratio reads {ratio}")),
            Err(reason) => return hold(format!("{why} but no error signal: {reason}")),
        }
    }
    let raised = (u64::from(current) * 105 / 100).max(u64::from(current) + 1);
    let limit = u32::try_from(raised)
        .unwrap_or(u32::MAX)
        .min(settings.max.max(settings.min));
    moved(current, limit, Change::Increase, why, "max")
}

/// A step towards `limit`, or a hold when a bound left no room.
fn moved(current: u32, limit: u32, change: Change, why: String, bound: &str) -> Step {
    if limit == current {
        return Step {
            limit,
            change: Change::Hold,
            why: format!("{why}, already at {bound}"),
        };
    }
    Step { limit, change, why }
}

fn millis(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}ms")
    } else {
        format!("{value:.2}ms")
    }
}

fn percent(ratio: f64) -> String {
    format!("{:.2}%", ratio * 100.0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn settings(min: u32, max: u32) -> AdaptiveSettings {
        AdaptiveSettings {
            min,
            max,
            interval: DEFAULT_INTERVAL,
            slo_ms: 250.0,
            signal_unit: SignalUnit::Milliseconds,
            signal: SignalSource::Pushed {
                name: "p95".to_owned(),
            },
            errors: None,
            control: Control::Aimd,
        }
    }

    fn with_errors(max_ratio: f64) -> AdaptiveSettings {
        AdaptiveSettings {
            errors: Some(ErrorCondition {
                source: SignalSource::Pushed {
                    name: "errors".to_owned(),
                },
                max_ratio,
            }),
            ..settings(50, 400)
        }
    }

    const NO_ERRORS: Reading = Err(String::new());

    #[test]
    fn high_latency_takes_ten_percent_off() {
        let step = step(&settings(50, 400), 200, &Ok(300.0), &NO_ERRORS);
        assert_eq!((step.limit, step.change), (180, Change::Decrease));
        assert_eq!(step.why, "p95 300ms > slo 250ms");
    }

    #[test]
    fn decreasing_stops_at_min_and_always_moves_by_at_least_one() {
        let settings = settings(50, 400);
        assert_eq!(step(&settings, 52, &Ok(900.0), &NO_ERRORS).limit, 50);
        let at_min = step(&settings, 50, &Ok(900.0), &NO_ERRORS);
        assert_eq!((at_min.limit, at_min.change), (50, Change::Hold));
        assert!(at_min.why.ends_with("already at min"), "{}", at_min.why);
        let small = self::settings(1, 10);
        assert_eq!(step(&small, 5, &Ok(900.0), &NO_ERRORS).limit, 4);
        assert_eq!(step(&small, 2, &Ok(900.0), &NO_ERRORS).limit, 1);
    }

    #[test]
    fn low_latency_adds_five_percent_at_least_one_up_to_max() {
        let settings = settings(50, 400);
        let step_up = step(&settings, 200, &Ok(100.0), &NO_ERRORS);
        assert_eq!((step_up.limit, step_up.change), (210, Change::Increase));
        assert_eq!(step(&settings, 50, &Ok(100.0), &NO_ERRORS).limit, 52);
        assert_eq!(
            step(&self::settings(1, 9), 3, &Ok(1.0), &NO_ERRORS).limit,
            4
        );
        assert_eq!(step(&settings, 395, &Ok(100.0), &NO_ERRORS).limit, 400);
        let at_max = step(&settings, 400, &Ok(100.0), &NO_ERRORS);
        assert_eq!((at_max.limit, at_max.change), (400, Change::Hold));
    }

    #[test]
    fn latency_between_the_thresholds_holds() {
        let settings = settings(50, 400);
        for p95 in [175.0, 200.0, 250.0] {
            let held = step(&settings, 200, &Ok(p95), &NO_ERRORS);
            assert_eq!((held.limit, held.change), (200, Change::Hold), "{p95}");
        }
    }

    #[test]
    fn seconds_are_read_as_seconds() {
        let settings = AdaptiveSettings {
            signal_unit: SignalUnit::Seconds,
            ..settings(50, 400)
        };
        assert_eq!(step(&settings, 200, &Ok(0.3), &NO_ERRORS).limit, 180);
        assert_eq!(step(&settings, 200, &Ok(0.1), &NO_ERRORS).limit, 210);
        assert_eq!(step(&settings, 200, &Ok(0.2), &NO_ERRORS).limit, 200);
    }

    #[test]
    fn no_signal_holds_and_says_why() {
        let settings = settings(50, 400);
        let failed = step(
            &settings,
            200,
            &Err("query timed out".to_owned()),
            &NO_ERRORS,
        );
        assert_eq!((failed.limit, failed.change), (200, Change::Hold));
        assert_eq!(failed.why, "no latency signal: query timed out");
        for value in [f64::NAN, f64::INFINITY, -1.0] {
            let odd = step(&settings, 200, &Ok(value), &NO_ERRORS);
            assert_eq!((odd.limit, odd.change), (200, Change::Hold), "{value}");
        }
    }

    #[test]
    fn growing_needs_few_errors_when_an_error_condition_is_set() {
        let settings = with_errors(0.01);
        assert_eq!(step(&settings, 200, &Ok(100.0), &Ok(0.005)).limit, 210);
        assert_eq!(step(&settings, 200, &Ok(100.0), &Ok(0.01)).limit, 210);
        let too_many = step(&settings, 200, &Ok(100.0), &Ok(0.05));
        assert_eq!((too_many.limit, too_many.change), (200, Change::Hold));
        assert!(
            too_many.why.contains("errors 5.00% > 1.00%"),
            "{}",
            too_many.why
        );
        let unknown = step(&settings, 200, &Ok(100.0), &Err("empty result".to_owned()));
        assert_eq!(unknown.change, Change::Hold);
        assert!(unknown.why.ends_with("no error signal: empty result"));
        assert_eq!(
            step(&settings, 200, &Ok(100.0), &Ok(f64::NAN)).change,
            Change::Hold
        );
        // High latency lowers the limit whatever the errors say.
        assert_eq!(
            step(&settings, 200, &Ok(300.0), &Err(String::new())).limit,
            180
        );
    }

    #[test]
    fn a_limit_outside_the_bounds_is_brought_back() {
        let settings = settings(50, 400);
        assert_eq!(step(&settings, 1000, &Ok(200.0), &NO_ERRORS).limit, 400);
        assert_eq!(
            step(&settings, 10, &Err(String::new()), &NO_ERRORS).limit,
            50
        );
    }

    fn reading() -> impl Strategy<Value = Reading> {
        prop_oneof![
            (0.0..2000.0f64).prop_map(Ok),
            Just(Ok(f64::NAN)),
            Just(Ok(-5.0)),
            Just(Err("down".to_owned())),
        ]
    }

    proptest! {
        #[test]
        fn every_step_stays_within_the_bounds(
            min in 1u32..10_000,
            span in 0u32..100_000,
            current in any::<u32>(),
            p95 in reading(),
            errors in reading(),
            with_error_condition in any::<bool>(),
        ) {
            let max = min.saturating_add(span);
            let mut settings = settings(min, max);
            if with_error_condition {
                settings = AdaptiveSettings { min, max, ..with_errors(0.01) };
            }
            let next = step(&settings, current, &p95, &errors);
            prop_assert!(next.limit >= min && next.limit <= max, "{next:?}");
            let start = current.clamp(min, max);
            match next.change {
                Change::Decrease => prop_assert!(next.limit < start),
                Change::Increase => prop_assert!(next.limit > start),
                Change::Hold => prop_assert_eq!(next.limit, start),
            }
        }

        #[test]
        fn steps_are_at_most_ten_percent_down_and_five_percent_up(
            current in 50u32..400,
            p95 in 0.0..1000.0f64,
        ) {
            let next = step(&settings(50, 400), current, &Ok(p95), &NO_ERRORS);
            let (current, limit) = (f64::from(current), f64::from(next.limit));
            prop_assert!(limit >= (current * 0.9).floor().min(current - 1.0));
            prop_assert!(limit <= (current * 1.05).floor().max(current + 1.0));
        }
    }
}
