//! What the reloads have done so far: which version of the rules is live, since when, and the
//! last error. Shown on the debug port and in logs.

use crate::core::time::rfc3339;
use std::fmt;
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::core::rules::RuleSet;

/// The reload history of one process. Shared (in an `Arc`) by the reloader, which writes it,
/// and the debug listener, which shows it.
#[derive(Debug)]
pub struct ReloadStatus {
    state: Mutex<StatusSnapshot>,
}

/// A copy of the status at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSnapshot {
    /// 1 for the rules loaded at start, one more for every rule set swapped in since.
    pub version: u64,
    /// When the live version was loaded.
    pub loaded_at: SystemTime,
    pub domains: usize,
    pub rules: usize,
    /// Reloads that were rejected (the rules before them stayed live).
    pub failures: u64,
    /// The most recent rejected reload; it may be older than the live version.
    pub last_error: Option<ReloadFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadFailure {
    pub at: SystemTime,
    /// Every problem, one per line, each naming the file and the rule path.
    pub message: String,
}

impl ReloadStatus {
    /// The status right after the first load.
    pub fn new(rules: &RuleSet) -> Self {
        Self {
            state: Mutex::new(StatusSnapshot {
                version: 1,
                loaded_at: SystemTime::now(),
                domains: rules.domains().count(),
                rules: rules.rule_count(),
                failures: 0,
                last_error: None,
            }),
        }
    }

    pub fn snapshot(&self) -> StatusSnapshot {
        self.state.lock().clone()
    }

    /// The live version.
    pub fn version(&self) -> u64 {
        self.state.lock().version
    }

    /// Records a rule set about to be swapped in; returns its version.
    pub(crate) fn record_success(&self, rules: &RuleSet) -> u64 {
        let mut state = self.state.lock();
        state.version += 1;
        state.loaded_at = SystemTime::now();
        state.domains = rules.domains().count();
        state.rules = rules.rule_count();
        state.version
    }

    /// Records a rejected reload; returns the version that stays live.
    pub(crate) fn record_failure(&self, message: String) -> u64 {
        let mut state = self.state.lock();
        state.failures += 1;
        state.last_error = Some(ReloadFailure {
            at: SystemTime::now(),
            message,
        });
        state.version
    }
}

impl StatusSnapshot {
    /// Whether the latest reload was rejected (the live rules are older than the files).
    pub fn latest_rejected(&self) -> bool {
        self.last_error
            .as_ref()
            .is_some_and(|error| error.at >= self.loaded_at)
    }
}

/// `config version 3, loaded 2026-11-30T10:00:00Z: 2 domains, 7 rules; 1 reload rejected, the
/// last at …: <error>`.
impl fmt::Display for StatusSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "config version {}, loaded {}: {} domains, {} rules",
            self.version,
            rfc3339(self.loaded_at),
            self.domains,
            self.rules
        )?;
        if let Some(error) = &self.last_error {
            let first_line = error.message.lines().next().unwrap_or_default();
            write!(
                f,
                "; {} reload(s) rejected, the last at {}{}: {first_line}",
                self.failures,
                rfc3339(error.at),
                if self.latest_rejected() {
                    " (the files on disk are not live)"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_successes_and_failures_keep_the_version() {
        let status = ReloadStatus::new(&RuleSet::default());
        assert_eq!(status.version(), 1);
        assert_eq!(
            status.record_failure("a.yaml: d: bad\nb.yaml: e: worse".into()),
            1
        );
        let snapshot = status.snapshot();
        assert!(snapshot.latest_rejected());
        assert!(
            snapshot.to_string().contains("a.yaml: d: bad"),
            "{snapshot}"
        );
        assert!(!snapshot.to_string().contains("worse"), "{snapshot}");
        assert_eq!(status.record_success(&RuleSet::default()), 2);
        let snapshot = status.snapshot();
        assert_eq!(snapshot.failures, 1);
        assert!(!snapshot.latest_rejected());
        assert!(snapshot
            .to_string()
            .starts_with("config version 2, loaded "));
    }
}
