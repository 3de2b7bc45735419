//! What the reloads have done so far: where the rules come from, which version of them is
//! live, since when, and the last error. Shown on the debug port, in metrics and in logs.

use crate::core::ground::calendar::rfc3339;
use std::fmt;
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::core::policy::rules::RuleSet;

/// The reload history of one process. Shared (in an `Arc`) by the reloader, which writes it,
/// and the debug listener, which shows it.
#[derive(Debug)]
pub struct ReloadStatus {
    state: Mutex<StatusSnapshot>,
}

/// Where the rules come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// Files (`--config`, or the reference's `RUNTIME_*`).
    Files,
    /// An xDS management server (`CONFIG_TYPE=GRPC_XDS_SOTW`).
    Xds {
        /// `host:port`.
        server: String,
        /// The `version_info` of the snapshot in force; `None` before the first.
        version: Option<String>,
    },
}

impl ConfigOrigin {
    /// The `source` label of `floodgate_config_source_info`.
    pub fn label(&self) -> &'static str {
        match self {
            ConfigOrigin::Files => "file",
            ConfigOrigin::Xds { .. } => "xds",
        }
    }

    /// The version the source gave the rules in force: the xDS `version_info`, or for files
    /// floodgate's own count.
    pub fn version_of(&self, count: u64) -> Option<String> {
        match self {
            ConfigOrigin::Files => Some(count.to_string()),
            ConfigOrigin::Xds { version, .. } => version.clone(),
        }
    }
}

/// What the status shows of a rule set: taken before the set is swapped in (which moves it),
/// recorded after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleSetShape {
    pub domains: usize,
    pub rules: usize,
}

impl RuleSetShape {
    pub fn of(rules: &RuleSet) -> Self {
        Self {
            domains: rules.domains().count(),
            rules: rules.rule_count(),
        }
    }
}

/// A copy of the status at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSnapshot {
    pub origin: ConfigOrigin,
    /// 1 for the rules loaded at start, one more for every rule set swapped in since (over
    /// xDS: 0 until the first snapshot is accepted).
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
    /// The status right after the first load of files.
    pub fn new(rules: &RuleSet) -> Self {
        crate::telemetry::config_source::live_version(ConfigOrigin::Files.label(), "1");
        Self {
            state: Mutex::new(StatusSnapshot {
                origin: ConfigOrigin::Files,
                version: 1,
                loaded_at: SystemTime::now(),
                domains: rules.domains().count(),
                rules: rules.rule_count(),
                failures: 0,
                last_error: None,
            }),
        }
    }

    /// The status of a process whose first load of files failed (`message`): version 1 of no
    /// rules, the failure recorded, no source version live.
    pub fn first_load_failed(message: String) -> Self {
        let status = Self {
            state: Mutex::new(StatusSnapshot {
                origin: ConfigOrigin::Files,
                version: 1,
                loaded_at: SystemTime::now(),
                domains: 0,
                rules: 0,
                failures: 0,
                last_error: None,
            }),
        };
        status.record_failure(message);
        status
    }

    /// The status of rules that come from the xDS management server at `server`, before the
    /// first snapshot: version 0, no rules.
    pub fn awaiting_xds(server: String) -> Self {
        Self {
            state: Mutex::new(StatusSnapshot {
                origin: ConfigOrigin::Xds {
                    server,
                    version: None,
                },
                version: 0,
                loaded_at: SystemTime::now(),
                domains: 0,
                rules: 0,
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

    /// Records a rule set just swapped in (never before: an answer that names a version is
    /// decided by it); returns its version.
    pub(crate) fn record_success(&self, shape: RuleSetShape) -> u64 {
        self.record(shape, None)
    }

    /// Records a rule set from the xDS snapshot of `source_version` just swapped in; returns
    /// floodgate's version of it.
    pub(crate) fn record_xds_success(&self, shape: RuleSetShape, source_version: &str) -> u64 {
        self.record(shape, Some(source_version))
    }

    fn record(&self, shape: RuleSetShape, source_version: Option<&str>) -> u64 {
        let mut state = self.state.lock();
        state.version += 1;
        state.loaded_at = SystemTime::now();
        state.domains = shape.domains;
        state.rules = shape.rules;
        if let (ConfigOrigin::Xds { version, .. }, Some(given)) =
            (&mut state.origin, source_version)
        {
            *version = Some(given.to_owned());
        }
        if let Some(live) = state.origin.version_of(state.version) {
            crate::telemetry::config_source::live_version(state.origin.label(), &live);
        }
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
/// last at …: <error>`; over xDS, `config version 3 (xds 10.0.0.7:18000, version "v7"), …`.
impl fmt::Display for StatusSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config version {}", self.version)?;
        if let ConfigOrigin::Xds { server, version } = &self.origin {
            match version {
                Some(version) => write!(f, " (xds {server}, version {version:?})")?,
                None => write!(f, " (xds {server}, no snapshot accepted yet)")?,
            }
        }
        write!(
            f,
            ", loaded {}: {} domains, {} rules",
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
                match (self.latest_rejected(), &self.origin) {
                    (false, _) => "",
                    (true, ConfigOrigin::Files) => " (the files on disk are not live)",
                    (true, ConfigOrigin::Xds { .. }) => " (the snapshot pushed last is not live)",
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
        assert_eq!(
            status.record_success(RuleSetShape::of(&RuleSet::default())),
            2
        );
        let snapshot = status.snapshot();
        assert_eq!(snapshot.failures, 1);
        assert!(!snapshot.latest_rejected());
        assert!(snapshot
            .to_string()
            .starts_with("config version 2, loaded "));
    }

    #[test]
    fn xds_status_names_the_server_and_its_version() {
        let status = ReloadStatus::awaiting_xds("xds.internal:18000".to_owned());
        assert!(status
            .snapshot()
            .to_string()
            .starts_with("config version 0 (xds xds.internal:18000, no snapshot accepted yet), "));
        assert_eq!(
            status.record_xds_success(RuleSetShape::of(&RuleSet::default()), "v7"),
            1
        );
        status.record_failure("xds:edge: edge.k: bad".into());
        let shown = status.snapshot().to_string();
        assert!(
            shown.starts_with("config version 1 (xds xds.internal:18000, version \"v7\"), ")
                && shown.ends_with("(the snapshot pushed last is not live): xds:edge: edge.k: bad"),
            "{shown}"
        );
        assert_eq!(
            status.snapshot().origin.version_of(1).as_deref(),
            Some("v7")
        );
    }
}
