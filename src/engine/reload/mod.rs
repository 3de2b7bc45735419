//! Hot reload of the rules: on a change of the configuration files (or SIGHUP), read them all
//! again, and swap the new rule set in whole, or keep the old one when anything is wrong.
//!
//! * What is watched follows `config_source::location_directories`: a file's directory, a
//!   directory (a mounted ConfigMap swaps its `..data` symlink there), or envoyproxy/ratelimit's
//!   runtime layout (`RUNTIME_WATCH_ROOT=true`: the directory holding the `RUNTIME_ROOT`
//!   symlink, plus the app directory; `false`: the app directory, recursively).
//! * Files are compared with what was read last (by name and SHA-256, not kept whole), so
//!   events about other files, or a swap to identical content, log nothing and change nothing.
//! * Reading is capped (`--max-config-bytes`) and so is the rule count (`--max-rules`): a
//!   configuration over a cap is refused like a broken one, and the rules in force stay.
//! * Rule sets are built, and the ones a reload replaced freed (once the last decision on them
//!   ends), each on a thread of its own that ends with the work (`loader`); from a load's
//!   start until its scratch memory is handed back to the system, a few seconds after it
//!   ends, freed pages go back soon, and otherwise they are kept for requests (`trim`).
//! * One log line per reload: info with the version and counts, or error with every problem
//!   (file and rule path each); then the rule set's warnings.
//! * Counters are not touched: a counter's key is made of the domain, rule path, algorithm and
//!   window, so a rule that is unchanged keeps counting across a reload.

mod loader;
mod status;
#[cfg(test)]
mod tests;
mod trim;
pub mod watch;
mod xds;

use std::sync::Arc;

pub use loader::{Loader, LoaderGone, Retired};
use sha2::{Digest as _, Sha256};
pub use status::{ReloadStatus, RuleSetShape};
pub use trim::{set_freed_pages_switch, FreedPages};
use watch::{DirectoryWatch, WatchTarget};
pub use xds::{load_xds_resources, XdsReloader};

use crate::core::policy::config::{load, ConfigErrors, LoadOptions, SourceFile};
use crate::core::policy::rules::RuleSet;
use crate::engine::config_source::SourceError;
use crate::engine::config_source::{
    location_directories, read_sources, ConfigLocation, DEFAULT_MAX_CONFIG_BYTES,
};
use crate::engine::shutdown::Shutdown;

/// What asked for a reload (logged with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    FileChange,
    /// SIGHUP: reload even when the files look unchanged.
    Signal,
    /// The watch has just started: a file changed between the first read and the watch sent no
    /// event, so the files are compared once with that read. A read that fails says nothing
    /// new (the first load reported it).
    WatchStarted,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::FileChange => "file change",
            Trigger::Signal => "SIGHUP",
            Trigger::WatchStarted => "file change before the watch started",
        }
    }
}

/// The files of one read, by name and SHA-256 of their text: what a reload compares with, at
/// 40 bytes a file instead of the whole text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SourcesDigest(Vec<(String, [u8; 32])>);

impl SourcesDigest {
    fn of(sources: &[SourceFile]) -> Self {
        Self(
            sources
                .iter()
                .map(|source| (source.name.clone(), Sha256::digest(&source.text).into()))
                .collect(),
        )
    }
}

/// Rules that loaded from the files and do not decide yet.
#[must_use = "loaded rules take effect through go_live"]
pub struct Reloaded {
    rules: RuleSet,
    trigger: Trigger,
}

impl Reloaded {
    #[cfg(test)]
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// Swaps the rules in through `install`, and only then records and logs their version:
    /// whoever reads the version on the debug port (an operator, a rollout check, a test) may
    /// rely on every decision after that read being made by these rules.
    pub fn go_live<R>(self, status: &ReloadStatus, install: impl FnOnce(RuleSet) -> R) -> R {
        let trigger = self.trigger;
        swap_in(self.rules, install, |shape| {
            let version = status.record_success(shape);
            tracing::info!(
                trigger = trigger.as_str(),
                version,
                domains = shape.domains,
                rules = shape.rules,
                "configuration reloaded"
            );
        })
    }
}

/// Installs `rules`, then `announce`s them (records their version and logs it), then logs
/// their warnings; returns what `install` did.
fn swap_in<R>(
    rules: RuleSet,
    install: impl FnOnce(RuleSet) -> R,
    announce: impl FnOnce(RuleSetShape),
) -> R {
    let shape = RuleSetShape::of(&rules);
    let warnings = rules.warnings().to_vec();
    let replaced = install(rules);
    announce(shape);
    crate::telemetry::config_loads::reload_succeeded(shape.rules);
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    replaced
}

/// Reads and loads the configuration again, and remembers what it read.
pub struct ConfigReloader {
    location: ConfigLocation,
    options: LoadOptions,
    /// `--max-config-bytes`.
    max_config_bytes: u64,
    /// The files as read at the last attempt (loaded or rejected): the same files again are no
    /// reason to reload, nor to log the same error again.
    last_read: SourcesDigest,
    status: Arc<ReloadStatus>,
    /// What the store cannot decide in a valid rule set (e.g. limits past Redis' exact
    /// arithmetic): a non-empty answer rejects the reload like a configuration error.
    store_check: Option<fn(&RuleSet) -> Vec<String>>,
    /// Where the next rule sets are loaded.
    loader: Loader,
}

impl ConfigReloader {
    /// `sources` are the files the live rules were loaded from.
    pub fn new(
        location: ConfigLocation,
        options: LoadOptions,
        sources: &[SourceFile],
        status: Arc<ReloadStatus>,
    ) -> Self {
        Self {
            location,
            options,
            max_config_bytes: DEFAULT_MAX_CONFIG_BYTES,
            last_read: SourcesDigest::of(sources),
            status,
            store_check: None,
            loader: Loader,
        }
    }

    /// Reads at most `bytes` of configuration (`--max-config-bytes`).
    pub fn with_max_config_bytes(mut self, bytes: u64) -> Self {
        self.max_config_bytes = bytes;
        self
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

    /// One reload attempt. Returns the rule set to swap in ([`Reloaded::go_live`]), or `None`
    /// when the files are unchanged or wrong (then the live rules stay, and a wrong one is
    /// logged).
    pub fn reload(&mut self, trigger: Trigger) -> Option<Reloaded> {
        let sources = match read_sources(&self.location, self.max_config_bytes) {
            Ok(sources) => sources,
            Err(_) if trigger == Trigger::WatchStarted => return None,
            Err(error) => {
                let version = self.status.record_failure(error.to_string());
                crate::telemetry::config_loads::reload_failed();
                tracing::error!(
                    trigger = trigger.as_str(),
                    live_version = version,
                    "configuration reload failed, keeping version {version}: {error}"
                );
                // Whatever is read next is worth a try.
                self.last_read = SourcesDigest::default();
                return None;
            }
        };
        let digest = SourcesDigest::of(&sources);
        if trigger != Trigger::Signal && digest == self.last_read {
            tracing::debug!("configuration files unchanged; nothing to reload");
            return None;
        }
        let loaded = load(&sources, &self.options)
            .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>());
        // The texts are not needed any more: free them before the rule set is swapped in.
        drop(sources);
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
        self.last_read = digest;
        match loaded {
            Ok(rules) => Some(Reloaded { rules, trigger }),
            Err(listed) => {
                let version = self.status.record_failure(listed.join("\n"));
                crate::telemetry::config_loads::reload_failed();
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

/// Why the first load failed.
#[derive(Debug, thiserror::Error)]
pub enum FirstLoadError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Loader(#[from] LoaderGone),
}

/// The first load, on a loader thread: the rules, and the reloader that follows them (its
/// status at version 1).
pub async fn load_first(
    loader: &Loader,
    location: ConfigLocation,
    options: LoadOptions,
    max_config_bytes: u64,
) -> Result<(RuleSet, ConfigReloader), FirstLoadError> {
    let loader_handle = *loader;
    loader
        .run(move || {
            let sources = read_sources(&location, max_config_bytes)?;
            let rules = load(&sources, &options)?;
            let status = Arc::new(ReloadStatus::new(&rules));
            let mut reloader = ConfigReloader::new(location, options, &sources, status)
                .with_max_config_bytes(max_config_bytes);
            reloader.loader = loader_handle;
            Ok((rules, reloader))
        })
        .await?
}

/// The first load of a process that starts without one if it must (envoyproxy/ratelimit's
/// behaviour, and its `FORCE_START_WITHOUT_INITIAL_CONFIG`): the rules, or why there are none
/// yet. The reloader follows the files either way, so fixed files load at their next change
/// (or SIGHUP); unchanged broken files are not read again, as after a rejected reload.
pub async fn load_first_or_wait(
    loader: &Loader,
    location: ConfigLocation,
    options: LoadOptions,
    max_config_bytes: u64,
) -> Result<(Result<RuleSet, FirstLoadError>, ConfigReloader), LoaderGone> {
    let loader_handle = *loader;
    loader
        .run(move || {
            let (first, sources) = match read_sources(&location, max_config_bytes) {
                Ok(sources) => match load(&sources, &options) {
                    Ok(rules) => (Ok(rules), sources),
                    Err(errors) => (Err(FirstLoadError::Config(errors)), sources),
                },
                Err(error) => (Err(FirstLoadError::Source(error)), Vec::new()),
            };
            let status = match &first {
                Ok(rules) => Arc::new(ReloadStatus::new(rules)),
                Err(error) => Arc::new(ReloadStatus::first_load_failed(error.to_string())),
            };
            let mut reloader = ConfigReloader::new(location, options, &sources, status)
                .with_max_config_bytes(max_config_bytes);
            reloader.loader = loader_handle;
            (first, reloader)
        })
        .await
}

/// Reloads on file changes and `hangup` (SIGHUP) until `shutdown`, each on a loader thread;
/// `install` swaps a new rule set in and returns the one it replaced, which is freed on one too.
pub async fn run(
    mut reloader: ConfigReloader,
    install: impl Fn(RuleSet) -> Box<dyn Retired> + Send + 'static,
    mut hangup: Hangup,
    shutdown: Shutdown,
) {
    let loader = reloader.loader;
    let targets = reloader.watch_targets();
    let mut watch = DirectoryWatch::new("configuration");
    watch.ensure(&targets);
    let mut catch_up = Some(Trigger::WatchStarted);
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        let trigger = match catch_up.take() {
            Some(trigger) => trigger,
            None => tokio::select! {
                () = &mut stop => return,
                () = watch.changed() => Trigger::FileChange,
                () = hangup.recv() => Trigger::Signal,
            },
        };
        watch.ensure(&targets);
        // Reading files blocks; keep it off the threads that answer requests.
        let attempt = loader
            .run(move || {
                let rules = reloader.reload(trigger);
                (reloader, rules)
            })
            .await;
        match attempt {
            Ok((back, rules)) => {
                reloader = back;
                if let Some(reloaded) = rules {
                    loader.retire(reloaded.go_live(reloader.status(), &install));
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
