//! When requests are due: the open-loop arrival plans as cumulative counts. A dispatcher
//! sends `floor(count(t))` requests by time `t`, so arrivals follow the target rate exactly
//! however late it wakes up.

use std::time::Duration;

use crate::cli::{BotBurst, StageSpec};

/// One stage of a run: what the target rate does over it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    /// When the stage starts, from the start of the measured run.
    pub start: Duration,
    pub duration: Duration,
    /// Target rate (req/s) at the start and the end (linear in between); `None` for a
    /// closed-loop stage, which has no target.
    pub from: Option<f64>,
    pub to: Option<f64>,
}

impl Stage {
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }

    /// Mean target rate over the stage.
    pub fn mean_target(&self) -> Option<f64> {
        Some((self.from? + self.to?) / 2.0)
    }

    /// Requests due within this stage by `t` seconds into it.
    pub fn arrivals_by(&self, t: f64) -> f64 {
        let (Some(from), Some(to)) = (self.from, self.to) else {
            return 0.0;
        };
        let length = self.duration.as_secs_f64();
        let t = t.clamp(0.0, length);
        from * t + (to - from) * t * t / (2.0 * length)
    }
}

/// The legitimate traffic's plan: consecutive stages.
#[derive(Debug, Clone)]
pub struct Plan {
    pub stages: Vec<Stage>,
}

impl Plan {
    /// k6-style ramps: each stage goes linearly from the previous target to its own.
    pub fn ramps(start_rate: f64, specs: &[StageSpec]) -> Self {
        let mut stages = Vec::with_capacity(specs.len());
        let mut start = Duration::ZERO;
        let mut from = start_rate;
        for spec in specs {
            stages.push(Stage {
                start,
                duration: spec.duration,
                from: Some(from),
                to: Some(spec.target),
            });
            start += spec.duration;
            from = spec.target;
        }
        Self { stages }
    }

    /// One stage at a constant rate.
    pub fn constant(rate: f64, duration: Duration) -> Self {
        Self {
            stages: vec![Stage {
                start: Duration::ZERO,
                duration,
                from: Some(rate),
                to: Some(rate),
            }],
        }
    }

    /// One closed-loop stage.
    pub fn closed(duration: Duration) -> Self {
        Self {
            stages: vec![Stage {
                start: Duration::ZERO,
                duration,
                from: None,
                to: None,
            }],
        }
    }

    pub fn total(&self) -> Duration {
        self.stages.last().map_or(Duration::ZERO, Stage::end)
    }

    /// The stage running at `t` (the last one once the plan is over).
    pub fn stage_at(&self, t: Duration) -> usize {
        self.stages
            .iter()
            .position(|stage| t < stage.end())
            .unwrap_or(self.stages.len().saturating_sub(1))
    }

    /// Requests due by `t` from the start of the run.
    pub fn arrivals_by(&self, t: Duration) -> f64 {
        let mut total = 0.0;
        for stage in &self.stages {
            if t <= stage.start {
                break;
            }
            total += stage.arrivals_by(t.saturating_sub(stage.start).as_secs_f64());
        }
        total
    }
}

/// Bot bursts: RATE during the last DURATION of every EVERY-long window, until `end`.
#[derive(Debug, Clone, Copy)]
pub struct Bursts {
    pub burst: BotBurst,
    pub end: Duration,
}

impl Bursts {
    /// Bot requests due by `t`.
    pub fn arrivals_by(&self, t: Duration) -> f64 {
        let t = t.min(self.end).as_secs_f64();
        let every = self.burst.every.as_secs_f64();
        let length = self.burst.duration.as_secs_f64();
        let windows = (t / every).floor();
        let into_window = t - windows * every;
        let in_burst = (into_window - (every - length)).max(0.0);
        self.burst.rate * (windows * length + in_burst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn ramps_integrate_linearly() {
        let plan = Plan::ramps(
            0.0,
            &[
                StageSpec {
                    duration: secs(30.0),
                    target: 200.0,
                },
                StageSpec {
                    duration: secs(60.0),
                    target: 1000.0,
                },
                StageSpec {
                    duration: secs(30.0),
                    target: 0.0,
                },
            ],
        );
        assert_eq!(plan.total(), secs(120.0));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(plan.arrivals_by(secs(15.0)), 0.5 * 15.0 * 100.0));
        assert!(close(plan.arrivals_by(secs(30.0)), 3000.0));
        assert!(close(plan.arrivals_by(secs(90.0)), 3000.0 + 36_000.0));
        assert!(close(
            plan.arrivals_by(secs(120.0)),
            3000.0 + 36_000.0 + 15_000.0
        ));
        assert!(close(plan.arrivals_by(secs(500.0)), 54_000.0));
        assert_eq!(plan.stage_at(secs(0.0)), 0);
        assert_eq!(plan.stage_at(secs(30.0)), 1);
        assert_eq!(plan.stage_at(secs(119.9)), 2);
        assert_eq!(plan.stage_at(secs(200.0)), 2);
        assert_eq!(plan.stages[1].mean_target(), Some(600.0));
    }

    #[test]
    fn constant_rate() {
        let plan = Plan::constant(1000.0, secs(10.0));
        assert!((plan.arrivals_by(secs(2.5)) - 2500.0).abs() < 1e-6);
        assert!((plan.arrivals_by(secs(20.0)) - 10_000.0).abs() < 1e-6);
        assert_eq!(Plan::closed(secs(5.0)).arrivals_by(secs(3.0)), 0.0);
    }

    #[test]
    fn bursts_fill_the_end_of_each_period() {
        let bursts = Bursts {
            burst: BotBurst {
                rate: 5000.0,
                duration: secs(2.0),
                every: secs(10.0),
            },
            end: secs(25.0),
        };
        assert_eq!(bursts.arrivals_by(secs(7.9)), 0.0);
        assert!((bursts.arrivals_by(secs(9.0)) - 5000.0).abs() < 1e-6);
        assert!((bursts.arrivals_by(secs(10.0)) - 10_000.0).abs() < 1e-6);
        assert!((bursts.arrivals_by(secs(17.0)) - 10_000.0).abs() < 1e-6);
        assert!((bursts.arrivals_by(secs(30.0)) - 20_000.0).abs() < 1e-6);
    }
}
