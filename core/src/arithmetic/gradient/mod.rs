//! Adaptive concurrency: the gradient controller that moves a concurrency rule's
//! `max_in_flight` from the time its own leases are held (acquire to release), as Envoy's
//! `adaptive_concurrency` filter does for one proxy, here for the rule's shared counter.
//!
//!   base      = the median time held in a probe: an interval at `min`, a limit low enough
//!               that nothing waits upstream (the service time alone), measured first and
//!               again every `probe_every` intervals, after one interval to drain
//!   sample    = the mean time held over the last interval, its slowest 5 % left out
//!   gradient  = min(1, base × 1.05 / sample), at least 0.75
//!   next      = floor(limit × gradient) + headroom,  headroom = max(1, floor(√limit / 3)),
//!               the headroom only while the interval's peak in flight reached half the limit
//!               (an idle rule says nothing about room to grow)
//!   p95 > slo → × 0.9 (at least −1), whatever the gradient: the SLO stays a ceiling
//!
//! Why it settles at the backend's capacity P: past P every extra lease waits for a worker, so
//! a lease is held base × limit / P on average (Little's law), the gradient is about P / limit and
//! next ≈ P + headroom; below P nothing waits, the gradient is 1 and the limit climbs by the
//! headroom each interval. AIMD on the p95 (`core::arithmetic::aimd`, `control: aimd`) settles where the
//! queue upstream is as long as the SLO lets it be instead: with an SLO of 3× the service
//! time, at 2 P or more in flight (it stops growing once the p95 passes 0.7 × the SLO).
//!
//! The mean, not the median: Little's law speaks of the mean whatever order the backend serves
//! its queue in. An upstream whose free worker goes to whoever asks first (a thread pool, not a
//! FIFO) serves most calls at once and makes a few wait long, so its median stays at the
//! service time while a queue builds; the mean sees that queue. The slowest 5 % are left out so
//! that one stalled call does not move the limit; the p95 has its own rule. The 5 % in the
//! gradient is the noise a mean of unqueued calls has; the probe's cost is one interval at
//! `min` (and one draining) every `probe_every`. The 0.75 keeps one bad interval from halving
//! the limit (Envoy's filter allows 0.5). Pure: the shell measures and keeps the state.

use crate::arithmetic::aimd::{AdaptiveSettings, Change, Step};
use crate::ground::time::Micros;

/// The fewest leases a probe needs before its median counts.
pub const MIN_PROBE_SAMPLES: u32 = 3;
/// The most intervals a probe measures before it gives up (a backend slower than the
/// interval yields few releases) and goes back, its base unchanged.
pub const MAX_PROBE_INTERVALS: u32 = 3;
/// `probe_every:` when not written, in intervals.
pub const DEFAULT_PROBE_EVERY: u32 = 30;

/// What one interval's releases said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseSample {
    /// Leases released in the interval (with a known time held).
    pub count: u32,
    /// Their median and 95th percentile time held (µs).
    pub median: Micros,
    pub p95: Micros,
    /// Their mean time held without the slowest 5 % (µs): what steering reads.
    pub trimmed_mean: Micros,
    /// The most leases in flight any call of the interval saw.
    pub peak_in_flight: u32,
}

impl LeaseSample {
    /// The sample of `held` (times held, µs, any order) and the interval's peak in flight.
    pub fn of(held: &mut [Micros], peak_in_flight: u32) -> LeaseSample {
        held.sort_unstable();
        // Nearest rank: the smallest time at least `share` % of the leases were held for.
        let at = |share: usize| -> Micros {
            let rank = (held.len() * share).div_ceil(100).max(1);
            held.get(rank - 1).copied().unwrap_or(0)
        };
        let kept = held.len() - held.len() / 20;
        let sum: i128 = held
            .iter()
            .take(kept)
            .map(|&micros| i128::from(micros))
            .sum();
        let trimmed_mean = match i128::try_from(kept) {
            Ok(kept) if kept > 0 => Micros::try_from(sum / kept).unwrap_or(Micros::MAX),
            _ => 0,
        };
        LeaseSample {
            count: u32::try_from(held.len()).unwrap_or(u32::MAX),
            median: at(50),
            p95: at(95),
            trimmed_mean,
            peak_in_flight,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Steering,
    /// The first probe interval at `min`: leases taken at the old limit end; not measured.
    Draining {
        back_to: u32,
    },
    /// Measuring at `min`, for the `tried`-th interval.
    Measuring {
        back_to: u32,
        tried: u32,
    },
}

/// One rule's gradient controller between intervals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gradient {
    probe_every: u32,
    base: Option<Micros>,
    since_probe: u32,
    phase: Phase,
}

impl Gradient {
    /// A controller that probes first (it knows no base yet) and then every `probe_every`
    /// intervals (at least 2).
    pub fn new(probe_every: u32) -> Gradient {
        Gradient {
            probe_every: probe_every.max(2),
            base: None,
            since_probe: 0,
            phase: Phase::Steering,
        }
    }

    /// The unqueued time held the last probe measured (µs).
    pub fn base(&self) -> Option<Micros> {
        self.base
    }

    /// Whether the limit is at `min` for a probe.
    pub fn probing(&self) -> bool {
        self.phase != Phase::Steering
    }

    /// The limit for the next interval, from `current` and what the last interval's releases
    /// said.
    pub fn step(
        &mut self,
        settings: &AdaptiveSettings,
        current: u32,
        sample: &LeaseSample,
    ) -> Step {
        let current = settings.clamp(current);
        match self.phase {
            Phase::Draining { back_to } => {
                self.phase = Phase::Measuring { back_to, tried: 1 };
                step_to(current, settings.min, "probe: draining at min".to_owned())
            }
            Phase::Measuring { back_to, tried } => {
                self.measure(settings, current, sample, (back_to, tried))
            }
            Phase::Steering => {
                if self.base.is_none() || self.since_probe >= self.probe_every {
                    self.phase = Phase::Draining { back_to: current };
                    let why = match self.base {
                        None => "probe: no service time measured yet, one interval at min to \
                                 drain and one to measure"
                            .to_owned(),
                        Some(base) => format!(
                            "probe: measuring the service time again (was {}), at min for two \
                             intervals",
                            millis(base)
                        ),
                    };
                    return step_to(current, settings.min, why);
                }
                self.since_probe += 1;
                self.steer(settings, current, sample)
            }
        }
    }

    fn measure(
        &mut self,
        settings: &AdaptiveSettings,
        current: u32,
        sample: &LeaseSample,
        (back_to, tried): (u32, u32),
    ) -> Step {
        let back_to = settings.clamp(back_to);
        if sample.count >= MIN_PROBE_SAMPLES {
            self.base = Some(sample.median.max(1));
            self.phase = Phase::Steering;
            self.since_probe = 0;
            let why = format!(
                "probe done: service time {} (median of {} leases), back to {back_to}",
                millis(sample.median),
                sample.count
            );
            return step_to(current, back_to, why);
        }
        if tried >= MAX_PROBE_INTERVALS {
            self.phase = Phase::Steering;
            self.since_probe = 0;
            let why = format!(
                "probe gave up: {} leases released in {tried} intervals at min (fewer than \
                 {MIN_PROBE_SAMPLES}), back to {back_to}",
                sample.count
            );
            return step_to(current, back_to, why);
        }
        self.phase = Phase::Measuring {
            back_to,
            tried: tried + 1,
        };
        step_to(
            current,
            settings.min,
            format!("probe: {} leases released, measuring on", sample.count),
        )
    }

    fn steer(&self, settings: &AdaptiveSettings, current: u32, sample: &LeaseSample) -> Step {
        let Some(base) = self.base else {
            return step_to(current, current, "no service time measured".to_owned());
        };
        if sample.count == 0 {
            return step_to(
                current,
                current,
                "no lease released in the interval".to_owned(),
            );
        }
        let p95_ms = micros_to_ms(sample.p95);
        if p95_ms > settings.slo_ms {
            let lowered = (u64::from(current) * 9 / 10).min(u64::from(current.saturating_sub(1)));
            let limit = u32::try_from(lowered).unwrap_or(current).max(settings.min);
            let why = format!("p95 {} > slo {}", millis(sample.p95), ms(settings.slo_ms));
            return step_to(current, limit, why);
        }
        let allowed = i128::from(base) * 105 / 100;
        let held = i128::from(sample.trimmed_mean.max(1));
        let scaled = (i128::from(current) * allowed / held).min(i128::from(current));
        // At most a quarter off per interval: one slow interval (a stalled host, a GC pause
        // upstream) costs a little capacity, a lasting slowdown still halves it in 3 steps.
        let floor = i128::from(current) * 3 / 4;
        let mut next = u64::try_from(scaled.max(floor)).unwrap_or(u64::from(current));
        let busy = u64::from(sample.peak_in_flight) * 2 >= u64::from(current);
        if busy {
            next += u64::from(headroom(current));
        }
        let bound = u64::from(settings.max.max(settings.min));
        let limit = u32::try_from(next.min(bound))
            .unwrap_or(settings.max)
            .max(settings.min);
        let mut why = format!(
            "mean {} against service time {}",
            millis(sample.trimmed_mean),
            millis(base)
        );
        if !busy {
            why.push_str(&format!(
                ", {} at most in flight (under half the limit): no room sought",
                sample.peak_in_flight
            ));
        }
        step_to(current, limit, why)
    }
}

/// How much the limit may grow in one interval: √limit / 3, at least 1 (small: past the
/// capacity the limit settles at about capacity + headroom).
pub fn headroom(limit: u32) -> u32 {
    let root = f64::from(limit).sqrt().floor();
    // At most 2^16: the conversion cannot fail.
    (u32::try_from(root as u64).unwrap_or(1) / 3).max(1)
}

fn step_to(from: u32, limit: u32, why: String) -> Step {
    let change = match limit.cmp(&from) {
        std::cmp::Ordering::Less => Change::Decrease,
        std::cmp::Ordering::Greater => Change::Increase,
        std::cmp::Ordering::Equal => Change::Hold,
    };
    Step { limit, change, why }
}

fn micros_to_ms(micros: Micros) -> f64 {
    // Exact enough: the SLO is compared in ms, times held are far below 2^53 µs.
    micros as f64 / 1000.0
}

fn millis(micros: Micros) -> String {
    ms(micros_to_ms(micros))
}

fn ms(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}ms")
    } else {
        format!("{value:.2}ms")
    }
}

#[cfg(test)]
mod tests;
