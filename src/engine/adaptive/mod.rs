//! Adaptive limits: the shell around `core::arithmetic::aimd`. One controller task per rule with
//! `adaptive:` steps its limit every interval from a latency signal (a Prometheus query or a
//! value pushed to the admin API) and publishes it through the limiter's runtime adjustments
//! (`crate::engine::adjustment_set`), where decisions, `/rlconfig` and `current_limit` see it. An
//! operator's override still wins over it.
//!
//! * `controller`: one rule's loop (signals → step → shared value → limiter); a concurrency
//!   rule's signal is its own leases (`engine::lease_timings`, `core::arithmetic::gradient`);
//! * `prometheus`: the instant query; `signals` and `push`: pushed values and their route;
//! * `shared`: where the limit lives between steps (in the process, or in Redis for every
//!   instance).
//!
//! The supervisor here follows reloads: once a second it compares the live rules with the
//! running controllers, starts the new ones, stops those whose rule is gone (their rule falls
//! back to its configured limit) and restarts those whose settings changed, from the limit they
//! had reached (brought within the new bounds).

mod controller;
mod prometheus;
pub mod shared;
pub mod signals;

use std::collections::HashMap;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::core::arithmetic::aimd::SignalSource;
use crate::core::policy::rules::RuleSet;
use crate::engine::limiter::Limiter;
use crate::engine::shutdown::Shutdown;
use crate::telemetry::metrics;
use controller::{AdaptiveRule, Sources};
pub use prometheus::Prometheus;
use shared::SharesLimits;
use signals::PushedSignals;

/// How often the supervisor looks for a reload.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Runs the controllers of `limiter`'s adaptive rules until shutdown, following reloads.
/// `signals` is what the admin API's `POST /v1/signals/{name}` fills; `admin` says whether
/// that API is on (without it, a pushed signal never arrives: said at every load).
///
/// The signal names of the rules loaded now are known when this returns, before the future
/// is first polled: the admin API may answer a push before the spawned task first runs, and
/// that push must not be refused as a signal no rule reads.
pub fn run<S: SharesLimits>(
    limiter: Arc<Limiter<S>>,
    signals: Arc<PushedSignals>,
    admin: bool,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> {
    let sources = Arc::new(Sources {
        limiter,
        prometheus: Prometheus::new(),
        signals,
    });
    let mut supervisor = Supervisor {
        sources,
        admin,
        seen: None,
        running: HashMap::new(),
    };
    let first = supervisor.adopt_new_rules();
    async move {
        if let Some(wanted) = first {
            supervisor.match_controllers(wanted).await;
        }
        supervisor.follow_until(shutdown).await;
    }
}

struct Supervisor<S> {
    sources: Arc<Sources<S>>,
    /// Whether the admin API (and so `POST /v1/signals/{name}`) is on.
    admin: bool,
    /// The rule set the controllers were last matched with.
    seen: Option<Arc<RuleSet>>,
    /// By (domain, rule path).
    running: HashMap<(String, String), Running>,
}

struct Running {
    rule: AdaptiveRule,
    /// The controller's current limit.
    current: Arc<AtomicU32>,
    task: JoinHandle<()>,
}

impl Running {
    /// Stops the controller and waits until it has: one still running could publish its limit
    /// after the rule's adaptive value was cleared, and that value would then stay.
    async fn stop(self) -> u32 {
        self.task.abort();
        let _ = self.task.await;
        self.current.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The adaptive rules of one rule set, by (domain, rule path).
type AdaptiveRules = HashMap<(String, String), AdaptiveRule>;

impl<S: SharesLimits> Supervisor<S> {
    /// Looks for a reload once a second until shutdown, then stops every controller.
    async fn follow_until(mut self, shutdown: Shutdown) {
        let mut ticks = tokio::time::interval(RELOAD_CHECK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stop = shutdown.fired();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = ticks.tick() => {
                    if let Some(wanted) = self.adopt_new_rules() {
                        self.match_controllers(wanted).await;
                    }
                }
            }
        }
        for (_, controller) in self.running.drain() {
            controller.stop().await;
        }
    }

    /// The live rules' adaptive rules if they changed since the last look, with their pushed
    /// signals and timed leases already announced (no waiting: see `run`).
    fn adopt_new_rules(&mut self) -> Option<AdaptiveRules> {
        let wanted = self.new_rules()?;
        self.expect_signals(&wanted);
        self.watch_leases(&wanted);
        Some(wanted)
    }

    /// Stops the controllers of rules no longer wanted and starts or restarts the others.
    async fn match_controllers(&mut self, wanted: AdaptiveRules) {
        self.stop_gone(&wanted).await;
        for (key, rule) in wanted {
            self.keep_or_start(key, rule).await;
        }
    }

    /// The adaptive rules of the live rule set, unless it is the one last matched.
    fn new_rules(&mut self) -> Option<AdaptiveRules> {
        let rules = self.sources.limiter.rules();
        if self
            .seen
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, &rules))
        {
            return None;
        }
        let wanted = adaptive_rules(&rules);
        self.seen = Some(rules);
        Some(wanted)
    }

    /// Tells the pushed signals which names the rules read, and says when nothing can push
    /// them.
    fn expect_signals(&self, wanted: &AdaptiveRules) {
        let pushed = pushed_names(wanted);
        if !self.admin && !pushed.is_empty() {
            let mut names: Vec<&str> = pushed.keys().map(String::as_str).collect();
            names.sort_unstable();
            tracing::warn!(
                "adaptive rules read pushed signals ({}), but the admin API is off: start with \
                 --admin-token-file so that POST /v1/signals/{{name}} can deliver them; until \
                 then those limits hold",
                names.join(", ")
            );
        }
        self.sources.signals.set_known(pushed);
    }

    /// Times the leases of the rules whose signal they are, and only those.
    fn watch_leases(&self, wanted: &AdaptiveRules) {
        let timed: Vec<(String, String)> = wanted
            .values()
            .filter(|rule| rule.settings.signal == SignalSource::Leases)
            .map(|rule| (rule.domain.clone(), rule.path.clone()))
            .collect();
        self.sources.limiter.lease_timings().watch_only(&timed);
    }

    /// Stops the controllers whose rule is no longer adaptive; their rule falls back to its
    /// configured limit.
    async fn stop_gone(&mut self, wanted: &AdaptiveRules) {
        let gone: Vec<(String, String)> = self
            .running
            .keys()
            .filter(|key| !wanted.contains_key(*key))
            .cloned()
            .collect();
        for key in gone {
            if let Some(controller) = self.running.remove(&key) {
                controller.stop().await;
                let (domain, path) = key;
                self.sources
                    .limiter
                    .adjustments()
                    .clear_adaptive(&domain, &path);
                metrics::adaptive_forget(&domain, &path);
                tracing::info!(%domain, rule = %path, "adaptive limit of {path} stopped: the rule is no longer adaptive");
            }
        }
    }

    /// Leaves `rule`'s controller running if its settings are the same; otherwise starts one,
    /// from the limit the old one had reached or from the configured limit.
    async fn keep_or_start(&mut self, key: (String, String), rule: AdaptiveRule) {
        let start = match self.running.remove(&key) {
            Some(controller) if controller.rule == rule => {
                self.running.insert(key, controller);
                return;
            }
            Some(controller) => {
                let reached = controller.stop().await;
                tracing::info!(
                    domain = %rule.domain, rule = %rule.path,
                    "adaptive limit of {}: settings changed, controller restarted from {reached}",
                    rule.path
                );
                reached
            }
            None => {
                tracing::info!(
                    domain = %rule.domain, rule = %rule.path,
                    min = rule.settings.min, max = rule.settings.max,
                    signal = %rule.settings.signal,
                    "adaptive limit of {} started at {}", rule.path, rule.configured
                );
                rule.configured
            }
        };
        let current = Arc::new(AtomicU32::new(rule.settings.clamp(start)));
        let task = tokio::spawn(controller::run(
            Arc::clone(&self.sources),
            rule.clone(),
            Arc::clone(&current),
        ));
        self.running.insert(
            key,
            Running {
                rule,
                current,
                task,
            },
        );
    }
}

/// Every rule with `adaptive:`, by (domain, rule path).
fn adaptive_rules(rules: &RuleSet) -> AdaptiveRules {
    let mut found = HashMap::new();
    for domain in rules.domains() {
        for rule in domain.rules() {
            let Some(settings) = &rule.adaptive else {
                continue;
            };
            // A concurrency rule's limit is its in-flight maximum.
            let configured = match (&rule.concurrency, rule.limits.first()) {
                (Some(concurrency), _) => concurrency.max_in_flight,
                (None, Some(quota)) => quota.requests_per_unit,
                (None, None) => continue,
            };
            found.insert(
                (domain.name.clone(), rule.path.clone()),
                AdaptiveRule {
                    domain: domain.name.clone(),
                    path: rule.path.clone(),
                    configured,
                    settings: (**settings).clone(),
                },
            );
        }
    }
    found
}

/// The pushed signals the rules read (latency and error signals alike), each with how long a
/// value stays fresh: two intervals of the slowest rule reading it.
fn pushed_names(rules: &AdaptiveRules) -> HashMap<String, Duration> {
    let mut names: HashMap<String, Duration> = HashMap::new();
    for rule in rules.values() {
        let errors = rule.settings.errors.as_ref().map(|errors| &errors.source);
        for source in std::iter::once(&rule.settings.signal).chain(errors) {
            if let SignalSource::Pushed { name } = source {
                let fresh = rule.settings.interval * 2;
                let entry = names.entry(name.clone()).or_default();
                *entry = (*entry).max(fresh);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::config::load_valid;
    use crate::engine::limiter::LimiterSettings;
    use crate::engine::shutdown;
    use crate::engine::test_rules::memory_store;

    const PUSHED: &str = "domain: shop\n\
                          descriptors:\n\
                          \x20 - key: pool\n\
                          \x20   rate_limit: {unit: hour, requests_per_unit: 20}\n\
                          \x20   adaptive: {min: 10, max: 40, interval: 1s, slo: 250ms, \
                          signal_unit: ms, signal: {pushed: checkout_p95}}\n";

    #[test]
    fn the_loaded_rules_signals_are_known_before_the_supervisor_first_runs() {
        let rules = load_valid("shop.yaml", PUSHED);
        let limiter = Arc::new(Limiter::new(
            rules,
            memory_store(),
            LimiterSettings::default(),
        ));
        let signals = Arc::new(PushedSignals::default());
        let (_trigger, shutdown) = shutdown::channel();
        let supervisor = run(limiter, Arc::clone(&signals), true, shutdown);
        assert_eq!(
            signals.push("checkout_p95", 900.0),
            Ok(Duration::from_secs(2)),
            "a push that reaches the admin API before the supervisor's task runs is accepted"
        );
        drop(supervisor);
    }
}
