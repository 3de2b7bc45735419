//! Counting and reporting: per stage and per traffic class (legitimate or bot, and each
//! `--mix` class of the legitimate traffic), counts in atomics and latencies in an
//! HdrHistogram (1 µs to 60 s, 3 significant digits).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;

use crate::schedule::Stage;

const HIGHEST_MICROS: u64 = 60_000_000;

fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, HIGHEST_MICROS, 3)
        .map_err(|error| format!("cannot create a latency histogram: {error:?}"))
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    OverLimit,
    Error,
}

/// One traffic class within one stage.
#[derive(Debug)]
pub struct ClassStats {
    sent: AtomicU64,
    ok: AtomicU64,
    over_limit: AtomicU64,
    error: AtomicU64,
    shed: AtomicU64,
    latency: Mutex<Histogram<u64>>,
}

impl ClassStats {
    fn new(template: &Histogram<u64>) -> Self {
        Self {
            sent: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            over_limit: AtomicU64::new(0),
            error: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            latency: Mutex::new(template.clone()),
        }
    }

    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    pub fn shed(&self) {
        self.shed.fetch_add(1, Ordering::Relaxed);
    }

    /// A finished request; errors are counted but their latency is not recorded (a
    /// timeout would otherwise set the maximum).
    pub fn finished(&self, outcome: Outcome, latency: Duration) {
        let counter = match outcome {
            Outcome::Ok => &self.ok,
            Outcome::OverLimit => &self.over_limit,
            Outcome::Error => &self.error,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome != Outcome::Error {
            let micros = u64::try_from(latency.as_micros())
                .unwrap_or(u64::MAX)
                .max(1);
            self.latency.lock().saturating_record(micros);
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Ordering::Relaxed),
            ok: self.ok.load(Ordering::Relaxed),
            over_limit: self.over_limit.load(Ordering::Relaxed),
            error: self.error.load(Ordering::Relaxed),
            shed: self.shed.load(Ordering::Relaxed),
            latency: self.latency.lock().clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct Snapshot {
    sent: u64,
    ok: u64,
    over_limit: u64,
    error: u64,
    shed: u64,
    latency: Histogram<u64>,
}

impl Snapshot {
    fn empty(template: &Histogram<u64>) -> Self {
        Self {
            sent: 0,
            ok: 0,
            over_limit: 0,
            error: 0,
            shed: 0,
            latency: template.clone(),
        }
    }

    fn merge(&mut self, other: &Snapshot) {
        self.sent += other.sent;
        self.ok += other.ok;
        self.over_limit += other.over_limit;
        self.error += other.error;
        self.shed += other.shed;
        // Same bounds on both sides, so adding cannot fail; saturate if it ever did.
        if self.latency.add(&other.latency).is_err() {
            for value in other.latency.iter_recorded() {
                self.latency
                    .saturating_record_n(value.value_iterated_to(), value.count_at_value());
            }
        }
    }

    fn figures(&self, seconds: f64) -> Figures {
        let completed = self.ok + self.over_limit + self.error;
        let h = &self.latency;
        let empty = h.is_empty();
        let at = |q: f64| (!empty).then(|| h.value_at_quantile(q));
        Figures {
            sent: self.sent,
            completed,
            achieved_rps: if seconds > 0.0 {
                (self.ok + self.over_limit) as f64 / seconds
            } else {
                0.0
            },
            ok: self.ok,
            over_limit: self.over_limit,
            error: self.error,
            shed: self.shed,
            p50_us: at(0.50),
            p90_us: at(0.90),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: (!empty).then(|| h.max()),
            mean_us: (!empty).then(|| h.mean()),
        }
    }
}

/// The figures of one class over one stage (or the total), as printed and written.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub sent: u64,
    /// Answered or failed.
    pub completed: u64,
    /// Answers (OK or OVER_LIMIT; errors excluded) per second.
    pub achieved_rps: f64,
    pub ok: u64,
    pub over_limit: u64,
    pub error: u64,
    pub shed: u64,
    pub p50_us: Option<u64>,
    pub p90_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub p999_us: Option<u64>,
    pub max_us: Option<u64>,
    pub mean_us: Option<f64>,
}

/// Counters of one stage.
#[derive(Debug)]
pub struct StageStats {
    /// All legitimate traffic, every `--mix` class included.
    pub legit: ClassStats,
    pub bot: ClassStats,
    /// Each `--mix` class apart, in the order given (empty without a mix).
    pub mix: Vec<ClassStats>,
    /// Worst lateness of the dispatcher behind its schedule (the generator starved of CPU).
    lag_max_us: AtomicU64,
}

impl StageStats {
    pub fn lag(&self, lag: Duration) {
        let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        self.lag_max_us.fetch_max(micros, Ordering::Relaxed);
    }
}

/// Everything recorded during a run.
#[derive(Debug)]
pub struct Recorder {
    pub stages: Vec<StageStats>,
    template: Histogram<u64>,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Recorder {
    /// `mix_classes`: how many `--mix` classes are counted apart.
    pub fn new(stages: usize, mix_classes: usize) -> Result<Self, String> {
        let template = histogram()?;
        Ok(Self {
            stages: (0..stages)
                .map(|_| StageStats {
                    legit: ClassStats::new(&template),
                    bot: ClassStats::new(&template),
                    mix: (0..mix_classes)
                        .map(|_| ClassStats::new(&template))
                        .collect(),
                    lag_max_us: AtomicU64::new(0),
                })
                .collect(),
            template,
            errors: Mutex::new(BTreeMap::new()),
        })
    }

    /// Counts an error by kind (kept apart from the stage counters, for diagnosis).
    pub fn error_kind(&self, kind: String) {
        *self.errors.lock().entry(kind).or_insert(0) += 1;
    }

    /// The figures; `elapsed` is how far into the plan sending went, so stages cut short
    /// by the request cap count only the time they ran. `mix` names the `--mix` classes
    /// (name, weight) in the order they were counted.
    pub fn report(
        &self,
        plan: &[Stage],
        elapsed: Duration,
        with_bots: bool,
        mix: &[(String, u32)],
    ) -> Report {
        let mut total_legit = Snapshot::empty(&self.template);
        let mut total_bot = Snapshot::empty(&self.template);
        let mut total_mix = vec![Snapshot::empty(&self.template); mix.len()];
        let mut total_seconds = 0.0;
        let mut stages = Vec::with_capacity(plan.len());
        for (index, (stage, stats)) in plan.iter().zip(&self.stages).enumerate() {
            let seconds = elapsed
                .saturating_sub(stage.start)
                .min(stage.duration)
                .as_secs_f64();
            total_seconds += seconds;
            let legit = stats.legit.snapshot();
            let bot = stats.bot.snapshot();
            let classes: Vec<Snapshot> = stats.mix.iter().map(ClassStats::snapshot).collect();
            stages.push(StageReport {
                index: index + 1,
                start_s: stage.start.as_secs_f64(),
                duration_s: seconds,
                target_from_rps: stage.from,
                target_to_rps: stage.to,
                target_mean_rps: stage.mean_target(),
                generator_lag_max_us: stats.lag_max_us.load(Ordering::Relaxed),
                legit: legit.figures(seconds),
                bot: with_bots.then(|| bot.figures(seconds)),
                classes: mix_figures(mix, &classes, seconds),
            });
            total_legit.merge(&legit);
            total_bot.merge(&bot);
            for (total, class) in total_mix.iter_mut().zip(&classes) {
                total.merge(class);
            }
        }
        // Requests the plan asked for over the time it ran.
        let target_total = plan
            .iter()
            .map(|s| {
                let ran = elapsed
                    .saturating_sub(s.start)
                    .min(s.duration)
                    .as_secs_f64();
                s.from.map(|_| s.arrivals_by(ran))
            })
            .sum::<Option<f64>>();
        Report {
            stages,
            total: TotalReport {
                duration_s: total_seconds,
                target_mean_rps: target_total.map(|n| {
                    if total_seconds > 0.0 {
                        n / total_seconds
                    } else {
                        0.0
                    }
                }),
                legit: total_legit.figures(total_seconds),
                bot: with_bots.then(|| total_bot.figures(total_seconds)),
                classes: mix_figures(mix, &total_mix, total_seconds),
            },
            errors: self.errors.lock().clone(),
        }
    }
}

fn mix_figures(mix: &[(String, u32)], snapshots: &[Snapshot], seconds: f64) -> Vec<MixFigures> {
    mix.iter()
        .zip(snapshots)
        .map(|((name, weight), snapshot)| MixFigures {
            name: name.clone(),
            weight: *weight,
            figures: snapshot.figures(seconds),
        })
        .collect()
}

/// The figures of one `--mix` class.
#[derive(Debug, Clone, Serialize)]
pub struct MixFigures {
    pub name: String,
    pub weight: u32,
    #[serde(flatten)]
    pub figures: Figures,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub index: usize,
    pub start_s: f64,
    pub duration_s: f64,
    pub target_from_rps: Option<f64>,
    pub target_to_rps: Option<f64>,
    pub target_mean_rps: Option<f64>,
    pub generator_lag_max_us: u64,
    pub legit: Figures,
    pub bot: Option<Figures>,
    /// The `--mix` classes (part of `legit`), absent without a mix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<MixFigures>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TotalReport {
    pub duration_s: f64,
    pub target_mean_rps: Option<f64>,
    pub legit: Figures,
    pub bot: Option<Figures>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<MixFigures>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub stages: Vec<StageReport>,
    pub total: TotalReport,
    /// Errors by kind (gRPC status code, timeout, unexpected overall code).
    pub errors: BTreeMap<String, u64>,
}

fn rate(value: f64) -> String {
    if value >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn micros(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn target(from: Option<f64>, to: Option<f64>) -> String {
    match (from, to) {
        (Some(from), Some(to)) if (from - to).abs() < f64::EPSILON => rate(from),
        (Some(from), Some(to)) => format!("{}→{}", rate(from), rate(to)),
        _ => "max".to_owned(),
    }
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        // Wide enough for the longest --mix class name.
        let width = self
            .total
            .classes
            .iter()
            .map(|class| class.name.chars().count() + 2)
            .max()
            .unwrap_or(0)
            .max(6);
        let _ = writeln!(
            out,
            "{:<7} {:<width$} {:>7} {:>13} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>6} {:>8}",
            "stage",
            "class",
            "secs",
            "target/s",
            "achieved/s",
            "p50µs",
            "p90µs",
            "p99µs",
            "maxµs",
            "ok",
            "over_limit",
            "error",
            "shed"
        );
        let mut row = |stage: &str, class: &str, secs: f64, target: &str, f: &Figures| {
            let _ = writeln!(
                out,
                "{:<7} {:<width$} {:>7.1} {:>13} {:>10} {:>8} {:>8} {:>8} {:>9} {:>9} {:>10} {:>6} {:>8}",
                stage,
                class,
                secs,
                target,
                rate(f.achieved_rps),
                micros(f.p50_us),
                micros(f.p90_us),
                micros(f.p99_us),
                micros(f.max_us),
                f.ok,
                f.over_limit,
                f.error,
                f.shed
            );
        };
        for stage in &self.stages {
            let name = stage.index.to_string();
            let goal = target(stage.target_from_rps, stage.target_to_rps);
            row(&name, "legit", stage.duration_s, &goal, &stage.legit);
            for class in &stage.classes {
                let label = format!("  {}", class.name);
                row(&name, &label, stage.duration_s, "", &class.figures);
            }
            if let Some(bot) = &stage.bot {
                row(&name, "bot", stage.duration_s, "", bot);
            }
        }
        let goal = self
            .total
            .target_mean_rps
            .map_or_else(|| "max".to_owned(), |mean| format!("{} avg", rate(mean)));
        row(
            "total",
            "legit",
            self.total.duration_s,
            &goal,
            &self.total.legit,
        );
        for class in &self.total.classes {
            let label = format!("  {}", class.name);
            row("total", &label, self.total.duration_s, "", &class.figures);
        }
        if let Some(bot) = &self.total.bot {
            row("total", "bot", self.total.duration_s, "", bot);
        }
        let lag = self
            .stages
            .iter()
            .map(|s| s.generator_lag_max_us)
            .max()
            .unwrap_or(0);
        if lag > 0 {
            let _ = writeln!(out, "generator lag behind schedule: max {lag} µs");
        }
        if !self.errors.is_empty() {
            let kinds: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            let _ = writeln!(out, "errors by kind: {}", kinds.join(", "));
        }
        out
    }
}
