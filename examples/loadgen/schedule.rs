//! When requests are due: the open-loop arrival plans as cumulative counts. A dispatcher
//! sends `floor(count(t))` requests by time `t`, so arrivals follow the target rate exactly
//! however late it wakes up; or, with Poisson arrivals, at random times whose rate follows
//! the plan.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

use crate::cli::{Arrivals, BotBurst, StageSpec};

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

    /// The target rate `t` seconds into the stage (0 for a closed-loop stage).
    pub fn rate_at(&self, t: f64) -> f64 {
        let (Some(from), Some(to)) = (self.from, self.to) else {
            return 0.0;
        };
        let length = self.duration.as_secs_f64();
        if length <= 0.0 {
            return to;
        }
        from + (to - from) * t.clamp(0.0, length) / length
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

    /// The target rate at `t` (0 once the plan is over).
    pub fn rate_at(&self, t: Duration) -> f64 {
        if t >= self.total() {
            return 0.0;
        }
        let stage = &self.stages[self.stage_at(t)];
        stage.rate_at(t.saturating_sub(stage.start).as_secs_f64())
    }

    /// The highest target rate anywhere in the plan.
    pub fn peak_rate(&self) -> f64 {
        self.stages
            .iter()
            .flat_map(|stage| [stage.from, stage.to])
            .flatten()
            .fold(0.0, f64::max)
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

/// How long until a cumulative count that stands at `arrived` and grows at `rate` per second
/// reaches `count` (`Duration::MAX` while it does not grow).
pub fn until_count(count: u64, arrived: f64, rate: f64) -> Duration {
    if rate <= 0.0 {
        return Duration::MAX;
    }
    let short = count as f64 - arrived;
    Duration::try_from_secs_f64(short.max(0.0) / rate).unwrap_or(Duration::MAX)
}

/// Counts the legitimate requests due, evenly spaced or as a Poisson process.
#[derive(Debug)]
pub struct ArrivalClock {
    arrivals: Arrivals,
    /// Requests sent so far.
    pub sent: u64,
    /// Poisson: arrivals drawn so far, and the time of the next candidate.
    drawn: u64,
    next: Duration,
    peak: f64,
}

impl ArrivalClock {
    pub fn new(arrivals: Arrivals, plan: &Plan, rng: &mut SmallRng) -> Self {
        let peak = plan.peak_rate();
        let mut clock = Self {
            arrivals,
            sent: 0,
            drawn: 0,
            next: Duration::ZERO,
            peak,
        };
        clock.next = clock.candidate_after(Duration::ZERO, rng);
        clock
    }

    /// Requests due by `t`.
    ///
    /// Poisson arrivals of a varying rate are drawn by thinning: candidates come at the
    /// plan's peak rate, and each is kept with probability `rate(t) / peak`.
    pub fn due_by(&mut self, t: Duration, plan: &Plan, rng: &mut SmallRng) -> u64 {
        match self.arrivals {
            Arrivals::Even => plan.arrivals_by(t).floor() as u64,
            Arrivals::Poisson => {
                while self.next <= t {
                    if rng.random::<f64>() * self.peak < plan.rate_at(self.next) {
                        self.drawn += 1;
                    }
                    self.next = self.candidate_after(self.next, rng);
                }
                self.drawn
            }
        }
    }

    /// How long until the next request may be due, from `t`.
    pub fn until_next(&self, t: Duration, plan: &Plan) -> Duration {
        match self.arrivals {
            Arrivals::Even => until_count(self.sent + 1, plan.arrivals_by(t), plan.rate_at(t)),
            Arrivals::Poisson => self.next.saturating_sub(t),
        }
    }

    fn candidate_after(&self, t: Duration, rng: &mut SmallRng) -> Duration {
        if self.peak <= 0.0 {
            return Duration::MAX;
        }
        // An exponential gap: -ln(U) / rate, with U in (0, 1].
        let uniform = 1.0 - rng.random::<f64>();
        let gap = Duration::try_from_secs_f64(-uniform.ln() / self.peak).unwrap_or(Duration::MAX);
        t.saturating_add(gap)
    }
}

/// Bot bursts: RATE during the last DURATION of every EVERY-long window, until `end`.
#[derive(Debug, Clone, Copy)]
pub struct Bursts {
    pub burst: BotBurst,
    pub end: Duration,
}

impl Bursts {
    /// The bots' rate at `t`.
    pub fn rate_at(&self, t: Duration) -> f64 {
        if t >= self.end {
            return 0.0;
        }
        let t = t.as_secs_f64();
        let every = self.burst.every.as_secs_f64();
        let into_window = t - (t / every).floor() * every;
        if into_window >= every - self.burst.duration.as_secs_f64() {
            self.burst.rate
        } else {
            0.0
        }
    }

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
    use rand::SeedableRng;

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
        let bursts = bursts_of_5000_for_2s_every_10s();
        assert_eq!(bursts.arrivals_by(secs(7.9)), 0.0);
        assert!((bursts.arrivals_by(secs(9.0)) - 5000.0).abs() < 1e-6);
        assert!((bursts.arrivals_by(secs(10.0)) - 10_000.0).abs() < 1e-6);
        assert!((bursts.arrivals_by(secs(17.0)) - 10_000.0).abs() < 1e-6);
        assert!((bursts.arrivals_by(secs(30.0)) - 20_000.0).abs() < 1e-6);
    }

    fn bursts_of_5000_for_2s_every_10s() -> Bursts {
        let burst = BotBurst {
            rate: 5000.0,
            duration: secs(2.0),
            every: secs(10.0),
        };
        Bursts {
            burst,
            end: secs(25.0),
        }
    }

    fn one_ramp(from: f64, seconds: f64, to: f64) -> Plan {
        let stage = StageSpec {
            duration: secs(seconds),
            target: to,
        };
        Plan::ramps(from, &[stage])
    }

    /// Sends every request due at steps of `step` through the plan; returns when each left.
    fn drive(arrivals: Arrivals, plan: &Plan, step: Duration) -> Vec<Duration> {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut clock = ArrivalClock::new(arrivals, plan, &mut rng);
        let mut sent = Vec::new();
        let mut t = Duration::ZERO;
        while t <= plan.total() {
            let due = clock.due_by(t, plan, &mut rng);
            while clock.sent < due {
                clock.sent += 1;
                sent.push(t);
            }
            t += step;
        }
        sent
    }

    #[test]
    fn even_arrivals_follow_the_plan_exactly() {
        let plan = Plan::constant(2000.0, secs(1.0));
        let sent = drive(Arrivals::Even, &plan, secs(0.000_1));
        assert_eq!(sent.len(), 2000);
        // One every 500 µs: no two leave within the same 100 µs step.
        assert!(sent
            .windows(2)
            .all(|pair| pair[1] - pair[0] >= secs(0.000_4)));
    }

    #[test]
    fn even_arrivals_say_when_the_next_is_due() {
        let plan = Plan::constant(1000.0, secs(1.0));
        let mut rng = SmallRng::seed_from_u64(1);
        let mut clock = ArrivalClock::new(Arrivals::Even, &plan, &mut rng);
        clock.sent = clock.due_by(secs(0.010_5), &plan, &mut rng);
        assert_eq!(clock.sent, 10);
        let wait = clock.until_next(secs(0.010_5), &plan);
        assert!((wait.as_secs_f64() - 0.000_5).abs() < 1e-9, "{wait:?}");
    }

    #[test]
    fn poisson_arrivals_keep_the_rate_with_exponential_gaps() {
        let plan = Plan::constant(10_000.0, secs(10.0));
        let sent = drive(Arrivals::Poisson, &plan, secs(0.000_01));
        let count = sent.len() as f64;
        // 100,000 expected; a Poisson count's standard deviation is about 316.
        assert!((count - 100_000.0).abs() < 1_600.0, "{count}");
        let gaps: Vec<f64> = sent
            .windows(2)
            .map(|pair| (pair[1] - pair[0]).as_secs_f64())
            .collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        // Exponential gaps: the standard deviation equals the mean (even spacing gives 0).
        let ratio = variance.sqrt() / mean;
        assert!((ratio - 1.0).abs() < 0.05, "{ratio}");
    }

    #[test]
    fn poisson_arrivals_follow_a_ramp() {
        let plan = one_ramp(0.0, 10.0, 20_000.0);
        let sent = drive(Arrivals::Poisson, &plan, secs(0.000_05));
        let first_half = sent.iter().filter(|t| **t < secs(5.0)).count() as f64;
        let second_half = sent.len() as f64 - first_half;
        // The plan's integrals: 25,000 then 75,000.
        assert!((first_half - 25_000.0).abs() < 1_000.0, "{first_half}");
        assert!((second_half - 75_000.0).abs() < 1_500.0, "{second_half}");
    }

    #[test]
    fn rates_at_a_moment() {
        let plan = one_ramp(100.0, 10.0, 300.0);
        assert!((plan.rate_at(secs(5.0)) - 200.0).abs() < 1e-9);
        assert_eq!(plan.rate_at(secs(11.0)), 0.0);
        assert_eq!(plan.peak_rate(), 300.0);
        let bursts = bursts_of_5000_for_2s_every_10s();
        assert_eq!(bursts.rate_at(secs(7.9)), 0.0);
        assert_eq!(bursts.rate_at(secs(8.5)), 5000.0);
        assert_eq!(bursts.rate_at(secs(26.0)), 0.0);
    }
}
