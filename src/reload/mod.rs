//! Hot reload of the rules: on a change of the configuration files (or SIGHUP), read them all
//! again, and swap the new rule set in whole, or keep the old one when anything is wrong.
//!
//! * What is watched follows `config_source::location_directories`: a file's directory, a
//!   directory (a mounted ConfigMap swaps its `..data` symlink there), or envoyproxy/ratelimit's
//!   runtime layout (`RUNTIME_WATCH_ROOT=true`: the directory holding the `RUNTIME_ROOT`
//!   symlink, plus the app directory; `false`: the app directory, recursively).
//! * Files are compared with what was read last, so events about other files, or a swap to
//!   identical content, log nothing and change nothing.
//! * One log line per reload: info with the version and counts, or error with every problem
//!   (file and rule path each); then the rule set's warnings.
//! * Counters are not touched: a counter's key is made of the domain, rule path, algorithm and
//!   window, so a rule that is unchanged keeps counting across a reload.

mod status;
#[cfg(test)]
mod tests;
pub mod watch;

use std::path::PathBuf;
use std::sync::Arc;

pub use status::{rfc3339, ReloadFailure, ReloadStatus, StatusSnapshot};
use watch::{DirectoryWatch, WatchTarget};

use crate::config_source::{location_directories, read_sources, ConfigLocation};
use crate::core::config::{load, LoadOptions, SourceFile};
use crate::core::rules::RuleSet;
use crate::server::shutdown::Shutdown;

/// What asked for a reload (logged with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    FileChange,
    /// SIGHUP: reload even when the files look unchanged.
    Signal,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::FileChange => "file change",
            Trigger::Signal => "SIGHUP",
        }
    }
}

/// Reads and loads the configuration again, and remembers what it read.
pub struct ConfigReloader {
    location: ConfigLocation,
    options: LoadOptions,
    /// The files as read at the last attempt (loaded or rejected): the same files again are no
    /// reason to reload, nor to log the same error again.
    last_read: Vec<SourceFile>,
    status: Arc<ReloadStatus>,
    /// What the store cannot decide in a valid rule set (e.g. limits past Redis' exact
    /// arithmetic): a non-empty answer rejects the reload like a configuration error.
    store_check: Option<fn(&RuleSet) -> Vec<String>>,
}

impl ConfigReloader {
    /// `sources` are the files the live rules were loaded from.
    pub fn new(
        location: ConfigLocation,
        options: LoadOptions,
        sources: Vec<SourceFile>,
        status: Arc<ReloadStatus>,
    ) -> Self {
        Self {
            location,
            options,
            last_read: sources,
            status,
            store_check: None,
        }
    }

    /// Rejects reloads whose rules `check` finds problems in.
    pub fn with_store_check(mut self, check: fn(&RuleSet) -> Vec<String>) -> Self {
        self.store_check = Some(check);
        self
    }

    pub fn status(&self) -> &Arc<ReloadStatus> {
        &self.status
    }

    /// The directories to watch for this location.
    pub fn watch_targets(&self) -> Vec<WatchTarget> {
        let app_directory = match &self.location {
            ConfigLocation::Runtime {
                root,
                subdirectory,
                app_directory,
                ..
            } => Some(root.join(subdirectory).join(app_directory)),
            ConfigLocation::Path(_) => None,
        };
        location_directories(&self.location)
            .into_iter()
            .map(|directory| WatchTarget {
                // Only the runtime app directory loads nested files.
                recursive: app_directory.as_ref() == Some(&directory),
                directory,
            })
            .collect()
    }

    /// One reload attempt. Returns the rule set to swap in, or `None` when the files are
    /// unchanged or wrong (then the live rules stay). Logs one line, except when unchanged.
    pub fn reload(&mut self, trigger: Trigger) -> Option<RuleSet> {
        let sources = match read_sources(&self.location) {
            Ok(sources) => sources,
            Err(error) => {
                let version = self.status.record_failure(error.to_string());
                crate::telemetry::metrics::reload_failed();
                tracing::error!(
                    trigger = trigger.as_str(),
                    live_version = version,
                    "configuration reload failed, keeping version {version}: {error}"
                );
                // Whatever is read next is worth a try.
                self.last_read.clear();
                return None;
            }
        };
        if trigger == Trigger::FileChange && sources == self.last_read {
            tracing::debug!("configuration files unchanged; nothing to reload");
            return None;
        }
        let loaded = load(&sources, &self.options)
            .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>());
        let loaded = match (loaded, self.store_check) {
            (Ok(rules), Some(check)) => {
                let problems = check(&rules);
                if problems.is_empty() {
                    Ok(rules)
                } else {
                    Err(problems)
                }
            }
            (loaded, _) => loaded,
        };
        self.last_read = sources;
        match loaded {
            Ok(rules) => {
                let version = self.status.record_success(&rules);
                crate::telemetry::metrics::reload_succeeded(rules.rule_count());
                tracing::info!(
                    trigger = trigger.as_str(),
                    version,
                    domains = rules.domains().count(),
                    rules = rules.rule_count(),
                    "configuration reloaded"
                );
                for warning in rules.warnings() {
                    tracing::warn!("{warning}");
                }
                Some(rules)
            }
            Err(listed) => {
                let version = self.status.record_failure(listed.join("\n"));
                crate::telemetry::metrics::reload_failed();
                tracing::error!(
                    trigger = trigger.as_str(),
                    live_version = version,
                    errors = listed.len(),
                    "configuration reload rejected, keeping version {version}: {}",
                    listed.join("; ")
                );
                None
            }
        }
    }
}

/// Reloads on file changes and `hangup` (SIGHUP) until `shutdown`; `install` swaps a new rule
/// set in.
pub async fn run(
    mut reloader: ConfigReloader,
    install: impl Fn(RuleSet) + Send + 'static,
    mut hangup: Hangup,
    shutdown: Shutdown,
) {
    let targets = reloader.watch_targets();
    let mut watch = DirectoryWatch::new("configuration");
    watch.ensure(&targets);
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        let trigger = tokio::select! {
            () = &mut stop => return,
            () = watch.changed() => Trigger::FileChange,
            () = hangup.recv() => Trigger::Signal,
        };
        watch.ensure(&targets);
        // Reading files blocks; keep it off the threads that answer requests.
        let attempt = tokio::task::spawn_blocking(move || {
            let rules = reloader.reload(trigger);
            (reloader, rules)
        })
        .await;
        match attempt {
            Ok((back, rules)) => {
                reloader = back;
                if let Some(rules) = rules {
                    install(rules);
                }
            }
            Err(error) => {
                tracing::error!(%error, "the configuration reloader stopped; restart floodgate to reload");
                return;
            }
        }
    }
}

/// SIGHUP, where there are signals; otherwise never. Made before the ports open: until a
/// handler is installed, SIGHUP's default action ends the process.
pub struct Hangup {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

pub fn hangup_signal() -> Hangup {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let signal = match signal(SignalKind::hangup()) {
            Ok(signal) => Some(signal),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; reloads follow file changes only");
                None
            }
        };
        Hangup { signal }
    }
    #[cfg(not(unix))]
    Hangup {}
}

impl Hangup {
    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = self.signal.as_mut() {
            if signal.recv().await.is_some() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }
}

/// The file or directory a location reads, for messages.
pub fn location_label(location: &ConfigLocation) -> PathBuf {
    match location {
        ConfigLocation::Path(path) => path.clone(),
        ConfigLocation::Runtime {
            root,
            subdirectory,
            app_directory,
            ..
        } => root.join(subdirectory).join(app_directory),
    }
}
