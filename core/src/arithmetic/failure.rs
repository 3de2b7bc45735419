//! What to do when the store cannot decide, and when to stop asking it: the failure policy
//! and the circuit breaker, as pure state. The shells (limiter, Redis store) read the clock and
//! apply what these say.

use std::fmt;

/// What a request gets when the store fails (`--redis-failure-policy`, a domain's
/// `failure_policy:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailurePolicy {
    /// gRPC UNAVAILABLE (HTTP 503): Envoy's `failure_mode_deny` decides, as with
    /// envoyproxy/ratelimit, which has no policy of its own. The default, for that reason.
    #[default]
    Error,
    /// Admit: answer OK without limits.
    FailOpen,
    /// Reject: answer OVER_LIMIT with the header [`UNAVAILABLE_HEADER`].
    FailClosed,
    /// Decide with counters in this process, on the same rules, until the store is back.
    Local,
}

/// The response header a fail-closed answer carries; its value names the store (`redis`).
pub const UNAVAILABLE_HEADER: &str = "x-floodgate-unavailable";

impl FailurePolicy {
    pub const ALL: [FailurePolicy; 4] = [
        FailurePolicy::Error,
        FailurePolicy::FailOpen,
        FailurePolicy::FailClosed,
        FailurePolicy::Local,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FailurePolicy::Error => "error",
            FailurePolicy::FailOpen => "fail_open",
            FailurePolicy::FailClosed => "fail_closed",
            FailurePolicy::Local => "local",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|policy| policy.name() == text)
    }

    /// The policy of a request whose domain says `domain_policy`, under the global `default`.
    pub fn for_domain(domain_policy: Option<Self>, default: Self) -> Self {
        domain_policy.unwrap_or(default)
    }

    /// What the shell does with a request the store failed.
    pub fn action(self) -> FailureAction {
        match self {
            FailurePolicy::Error => FailureAction::Unavailable,
            FailurePolicy::FailOpen => FailureAction::Admit,
            FailurePolicy::FailClosed => FailureAction::Reject,
            FailurePolicy::Local => FailureAction::DecideLocally,
        }
    }

    /// What the shell does with a request the store failed, given what it has: `local` needs
    /// an in-process store beside the shared one (otherwise the call fails as under `error`),
    /// and `--shadow-mode` (`global_shadow`) answers OK to everything, a failed store included.
    pub fn resolve(self, has_local_store: bool, global_shadow: bool) -> FailureAction {
        match self.action() {
            FailureAction::DecideLocally if !has_local_store => FailureAction::Unavailable,
            FailureAction::Reject if global_shadow => FailureAction::Admit,
            action => action,
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure policy '{0}': use error, fail_open, fail_closed or local")]
pub struct UnknownFailurePolicy(pub String);

impl std::str::FromStr for FailurePolicy {
    type Err = UnknownFailurePolicy;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text).ok_or_else(|| UnknownFailurePolicy(text.to_owned()))
    }
}

/// What the shell does with one request the store failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Fail the call (gRPC UNAVAILABLE, HTTP 503).
    Unavailable,
    /// Answer OK, no limit shown.
    Admit,
    /// Answer OVER_LIMIT on every limited descriptor, with [`UNAVAILABLE_HEADER`].
    Reject,
    /// Ask the in-process store instead.
    DecideLocally,
}

/// Milliseconds on the shell's monotonic clock.
pub type Millis = u64;

/// Whether to call the store now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Closed: call.
    Call,
    /// Open, and this call is the probe of this interval: call, and report how it went.
    Probe,
    /// Open: fail at once without calling.
    Refuse,
}

/// A change of the breaker's state, for the one log line each gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Opened { consecutive_failures: u32 },
    Closed,
}

/// A circuit breaker: after `threshold` consecutive failures it opens, refusing calls without
/// making them, except one probe per `probe_interval`; the first success closes it again.
///
/// A probe that never reports (its caller went away) does not wedge the breaker: the next
/// interval simply lets another probe through.
#[derive(Debug, Clone)]
pub struct Breaker {
    threshold: u32,
    probe_interval: Millis,
    consecutive_failures: u32,
    /// `Some(next probe time)` while open.
    open_until_probe: Option<Millis>,
}

impl Breaker {
    /// `threshold` 0 means never open.
    pub fn new(threshold: u32, probe_interval: Millis) -> Self {
        Self {
            threshold,
            probe_interval,
            consecutive_failures: 0,
            open_until_probe: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.open_until_probe.is_some()
    }

    pub fn gate(&mut self, now: Millis) -> Gate {
        match self.open_until_probe {
            None => Gate::Call,
            Some(next_probe) if now >= next_probe => {
                self.open_until_probe = Some(now.saturating_add(self.probe_interval));
                Gate::Probe
            }
            Some(_) => Gate::Refuse,
        }
    }

    pub fn succeeded(&mut self) -> Option<Transition> {
        self.consecutive_failures = 0;
        self.open_until_probe.take().map(|_| Transition::Closed)
    }

    pub fn failed(&mut self, now: Millis) -> Option<Transition> {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if self.threshold == 0 || self.is_open() || self.consecutive_failures < self.threshold {
            return None;
        }
        self.open_until_probe = Some(now.saturating_add(self.probe_interval));
        Some(Transition::Opened {
            consecutive_failures: self.consecutive_failures,
        })
    }
}

/// At most one log line per `interval`: a store that fails every request must not flood the
/// log.
#[derive(Debug, Clone)]
pub struct LogPace {
    interval: Millis,
    next: Millis,
    suppressed: u64,
}

impl LogPace {
    pub const fn new(interval: Millis) -> Self {
        Self {
            interval,
            next: 0,
            suppressed: 0,
        }
    }

    /// `Some(lines suppressed since the last one)` when a line may be written now.
    pub fn allow(&mut self, now: Millis) -> Option<u64> {
        if now < self.next {
            self.suppressed = self.suppressed.saturating_add(1);
            return None;
        }
        self.next = now.saturating_add(self.interval);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_needs_a_local_store_and_global_shadow_admits_what_fail_closed_rejects() {
        use FailureAction::*;
        assert_eq!(FailurePolicy::Local.resolve(true, false), DecideLocally);
        assert_eq!(FailurePolicy::Local.resolve(false, false), Unavailable);
        assert_eq!(FailurePolicy::FailClosed.resolve(false, false), Reject);
        assert_eq!(FailurePolicy::FailClosed.resolve(true, true), Admit);
        assert_eq!(FailurePolicy::FailOpen.resolve(false, true), Admit);
        assert_eq!(FailurePolicy::Error.resolve(true, true), Unavailable);
        assert_eq!(FailurePolicy::Local.resolve(true, true), DecideLocally);
    }

    #[test]
    fn names_round_trip_and_the_domain_overrides_the_default() {
        for policy in FailurePolicy::ALL {
            assert_eq!(policy.name().parse::<FailurePolicy>(), Ok(policy));
        }
        assert!("open".parse::<FailurePolicy>().is_err());
        assert_eq!(FailurePolicy::default(), FailurePolicy::Error);
        assert_eq!(
            FailurePolicy::for_domain(Some(FailurePolicy::Local), FailurePolicy::FailOpen),
            FailurePolicy::Local
        );
        assert_eq!(
            FailurePolicy::for_domain(None, FailurePolicy::FailOpen),
            FailurePolicy::FailOpen
        );
    }

    #[test]
    fn the_breaker_opens_after_the_threshold_and_probes_once_per_interval() {
        let mut breaker = Breaker::new(3, 1000);
        for now in 0..2 {
            assert_eq!(breaker.gate(now), Gate::Call);
            assert_eq!(breaker.failed(now), None);
        }
        assert_eq!(breaker.gate(2), Gate::Call);
        assert_eq!(
            breaker.failed(2),
            Some(Transition::Opened {
                consecutive_failures: 3
            })
        );
        assert_eq!(breaker.gate(500), Gate::Refuse);
        assert_eq!(breaker.gate(1002), Gate::Probe);
        assert_eq!(breaker.gate(1003), Gate::Refuse, "one probe per interval");
        assert_eq!(breaker.failed(1010), None, "already open: no second line");
        // The probe's caller went away: the next interval probes again.
        assert_eq!(breaker.gate(2002), Gate::Probe);
        assert_eq!(breaker.succeeded(), Some(Transition::Closed));
        assert_eq!(breaker.gate(2003), Gate::Call);
        assert_eq!(breaker.succeeded(), None);
    }

    #[test]
    fn a_success_resets_the_count_and_zero_never_opens() {
        let mut breaker = Breaker::new(2, 1000);
        assert_eq!(breaker.failed(0), None);
        assert_eq!(breaker.succeeded(), None);
        assert_eq!(breaker.failed(1), None);
        assert!(!breaker.is_open());
        let mut never = Breaker::new(0, 1000);
        for now in 0..100 {
            assert_eq!(never.failed(now), None);
        }
        assert_eq!(never.gate(100), Gate::Call);
    }

    #[test]
    fn the_log_pace_lets_one_line_through_per_interval() {
        let mut pace = LogPace::new(10_000);
        assert_eq!(pace.allow(0), Some(0));
        assert_eq!(pace.allow(1), None);
        assert_eq!(pace.allow(9_999), None);
        assert_eq!(pace.allow(10_000), Some(2));
        assert_eq!(pace.allow(10_001), None);
    }
}
