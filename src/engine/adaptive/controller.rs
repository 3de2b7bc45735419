//! One adaptive rule's controller: every interval, read the signals, step
//! (`core::arithmetic::aimd::step`), keep the new limit where it is shared, publish it to the limiter.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::prometheus::Prometheus;
use super::shared::{
    keep_lead, read_limit, read_signal, take_lead, write_limit, SharedKeys, SharesLimits,
};
use super::signals::PushedSignals;
use crate::core::arithmetic::aimd::{
    step, AdaptiveSettings, Change, Control, Reading, SignalSource, Step,
};
use crate::core::arithmetic::gradient::{Gradient, LeaseSample};
use crate::engine::limiter::Limiter;
use crate::telemetry::metrics;

/// The longest a Prometheus query may take, whatever the interval.
const MAX_QUERY_TIME: Duration = Duration::from_secs(5);

/// An adaptive rule as the live configuration has it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct AdaptiveRule {
    pub(super) domain: String,
    pub(super) path: String,
    /// `requests_per_unit`: where the limit starts.
    pub(super) configured: u32,
    pub(super) settings: AdaptiveSettings,
}

/// What every controller reads from.
pub(super) struct Sources<S> {
    pub(super) limiter: Arc<Limiter<S>>,
    pub(super) prometheus: Prometheus,
    pub(super) signals: Arc<PushedSignals>,
}

/// Runs one rule's controller until aborted. `current` starts as the limit to begin from (the
/// configured one, or the last one of a controller this one replaces) and follows every step.
pub(super) async fn run<S: SharesLimits>(
    sources: Arc<Sources<S>>,
    rule: AdaptiveRule,
    current: Arc<AtomicU32>,
) {
    let mut controller = Controller {
        keys: sources
            .limiter
            .store()
            .shared_limits()
            .map(|redis| SharedKeys::new(redis.key_prefix(), &rule.domain, &rule.path)),
        signal: rule.settings.signal.to_string(),
        sources,
        gradient: parking_lot::Mutex::new(Gradient::new(match rule.settings.control {
            Control::Gradient { probe_every } => probe_every,
            Control::Aimd => 0,
        })),
        rule,
        current,
        failing: None,
    };
    let sources = Arc::clone(&controller.sources);
    if let (Some(redis), Some(keys)) = (sources.limiter.store().shared_limits(), &controller.keys) {
        match read_limit(redis, keys).await {
            Ok(Some(stored)) => controller.set_current(stored),
            Ok(None) => {}
            Err(error) => controller.failed(format!("cannot read the shared limit: {error}")),
        }
    }
    controller.publish();
    let interval = controller.rule.settings.interval;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        controller.tick().await;
        controller.publish();
    }
}

struct Controller<S> {
    sources: Arc<Sources<S>>,
    rule: AdaptiveRule,
    current: Arc<AtomicU32>,
    /// Where the limit is shared (Redis), if it is.
    keys: Option<SharedKeys>,
    /// `SignalSource`'s text, as the adjustment's source.
    signal: String,
    /// What went wrong last (logged at warn once, then at debug until it recovers).
    failing: Option<String>,
    /// A concurrency rule's gradient controller (`Control::Gradient`).
    gradient: parking_lot::Mutex<Gradient>,
}

impl<S: SharesLimits> Controller<S> {
    fn current(&self) -> u32 {
        self.rule
            .settings
            .clamp(self.current.load(Ordering::Relaxed))
    }

    fn set_current(&self, limit: u32) {
        self.current
            .store(self.rule.settings.clamp(limit), Ordering::Relaxed);
    }

    async fn tick(&mut self) {
        match self.try_tick().await {
            Ok(()) => self.recovered(),
            Err(reason) => self.failed(reason),
        }
    }

    /// One interval's work; `Err` says why the limit could not move as the signal asks.
    async fn try_tick(&self) -> Result<(), String> {
        let sources = Arc::clone(&self.sources);
        let (Some(redis), Some(keys)) = (sources.limiter.store().shared_limits(), &self.keys)
        else {
            let from = self.current();
            let (step, signal) = self.step_from(from).await;
            self.apply(from, &step, "");
            return signal;
        };
        let interval = self.rule.settings.interval;
        let lead = if self.rule.settings.signal == SignalSource::Leases {
            keep_lead(redis, keys, interval * 3).await
        } else {
            take_lead(redis, keys, interval).await
        }
        .map_err(|error| format!("cannot reach the shared limit in Redis: {error}"))?;
        let stored = read_limit(redis, keys)
            .await
            .map_err(|error| format!("cannot read the shared limit: {error}"))?;
        if !lead {
            // The leader measures; what this instance saw of the leases goes.
            if self.rule.settings.signal == SignalSource::Leases {
                self.take_lease_sample();
            }
            // Another instance steps this interval; until it has written once, keep ours.
            if let Some(stored) = stored {
                self.follow(stored);
            }
            return Ok(());
        }
        let from = stored.map_or_else(|| self.current(), |stored| self.rule.settings.clamp(stored));
        let (step, signal) = self.step_from(from).await;
        write_limit(redis, keys, step.limit)
            .await
            .map_err(|error| format!("cannot write the shared limit (kept {from}): {error}"))?;
        self.apply(from, &step, ", shared through Redis");
        signal
    }

    /// Reads the signals and steps from `from`; the second value is why the latency signal is
    /// missing, if it is.
    async fn step_from(&self, from: u32) -> (Step, Result<(), String>) {
        let settings = &self.rule.settings;
        if settings.signal == SignalSource::Leases {
            return self.step_from_leases(from);
        }
        let (domain, rule) = (&self.rule.domain, &self.rule.path);
        let p95 = self.read(&settings.signal).await;
        let errors = match &settings.errors {
            Some(condition) => {
                let ratio = self.read(&condition.source).await;
                metrics::adaptive_error_ratio(domain, rule, ratio.as_ref().ok().copied());
                ratio
            }
            None => Err("no error condition".to_owned()),
        };
        let latency_seconds = p95
            .as_ref()
            .ok()
            .map(|value| settings.signal_unit.to_millis(*value) / 1000.0);
        metrics::adaptive_latency(domain, rule, latency_seconds);
        let step = step(settings, from, &p95, &errors);
        let signal = p95
            .map(|_| ())
            .map_err(|reason| format!("no latency signal: {reason}"));
        (step, signal)
    }

    /// A concurrency rule's step, from the times its leases were held since the last one.
    fn step_from_leases(&self, from: u32) -> (Step, Result<(), String>) {
        let settings = &self.rule.settings;
        let sample = self.take_lease_sample();
        let p95_seconds = (sample.count > 0).then(|| sample.p95 as f64 / 1_000_000.0);
        metrics::adaptive_latency(&self.rule.domain, &self.rule.path, p95_seconds);
        match settings.control {
            Control::Gradient { .. } => {
                (self.gradient.lock().step(settings, from, &sample), Ok(()))
            }
            Control::Aimd => {
                let p95 = match p95_seconds {
                    Some(seconds) => Ok(seconds * 1000.0),
                    None => Err("no lease released in the interval".to_owned()),
                };
                let step = step(settings, from, &p95, &Err("no error condition".to_owned()));
                (step, Ok(()))
            }
        }
    }

    fn take_lease_sample(&self) -> LeaseSample {
        let timings = self.sources.limiter.lease_timings();
        let (mut held, peak) = timings
            .take(&self.rule.domain, &self.rule.path)
            .unwrap_or_default();
        LeaseSample::of(&mut held, peak)
    }

    async fn read(&self, source: &SignalSource) -> Reading {
        let interval = self.rule.settings.interval;
        match source {
            SignalSource::Prometheus { url, query } => {
                let timeout = (interval / 2).min(MAX_QUERY_TIME);
                self.sources.prometheus.query(url, query, timeout).await
            }
            SignalSource::Pushed { name } => match self.sources.limiter.store().shared_limits() {
                Some(redis) => read_signal(redis, name).await,
                None => self.sources.signals.read(name, interval * 2),
            },
            SignalSource::Leases => Err("the leases are not read as a signal".to_owned()),
        }
    }

    /// Takes `step`'s limit and says so: info for a change, debug for a hold.
    fn apply(&self, from: u32, step: &Step, how: &str) {
        self.set_current(step.limit);
        let (domain, rule) = (&self.rule.domain, &self.rule.path);
        metrics::adaptive_step(domain, rule, step.change.label());
        if step.change == Change::Hold {
            tracing::debug!(%domain, %rule, limit = step.limit, why = %step.why, "adaptive limit held");
        } else {
            tracing::info!(
                %domain, %rule, from, to = step.limit, why = %step.why,
                "adaptive limit of {rule}: {from} → {} ({}{how})", step.limit, step.why
            );
        }
    }

    /// Takes the limit another instance stored.
    fn follow(&self, stored: u32) {
        let (from, to) = (self.current(), self.rule.settings.clamp(stored));
        self.set_current(to);
        if from != to {
            let (domain, rule) = (&self.rule.domain, &self.rule.path);
            tracing::info!(
                %domain, %rule, from, to,
                "adaptive limit of {rule}: {from} → {to} (stepped by another instance)"
            );
        }
    }

    /// The limit holds; the first failure of a run is a warning, the rest debug lines.
    fn failed(&mut self, reason: String) {
        let (domain, rule) = (&self.rule.domain, &self.rule.path);
        if self.failing.is_none() {
            tracing::warn!(%domain, %rule, "adaptive limit of {rule} held: {reason}");
        } else {
            tracing::debug!(%domain, %rule, "adaptive limit of {rule} held: {reason}");
        }
        self.failing = Some(reason);
    }

    fn recovered(&mut self) {
        if let Some(reason) = self.failing.take() {
            let (domain, rule) = (&self.rule.domain, &self.rule.path);
            tracing::info!(%domain, %rule, "adaptive limit of {rule} steps again (after: {reason})");
        }
    }

    /// Puts the current limit in force in this process.
    fn publish(&self) {
        let limit = self.current();
        self.sources.limiter.adjustments().set_adaptive(
            &self.rule.domain,
            &self.rule.path,
            u64::from(limit),
            &self.signal,
        );
        metrics::adaptive_limit(&self.rule.domain, &self.rule.path, limit);
    }
}
