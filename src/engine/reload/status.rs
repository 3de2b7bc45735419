//! What the reloads have done so far: which version of the rules is live, since when, and the
//! last error. Shown on the debug port and in logs.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// `2026-11-30T10:00:00Z`, UTC, whole seconds.
pub fn rfc3339(time: SystemTime) -> String {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let days = seconds / 86_400;
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timestamps_are_utc_rfc3339() {
        let at = |seconds| UNIX_EPOCH + Duration::from_secs(seconds);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_796_083_210)), "2026-12-01T00:00:10Z");
        assert_eq!(rfc3339(at(4_107_542_399)), "2100-02-28T23:59:59Z");
    }

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
