//! Watching directories for changes, debounced: the shared trigger of configuration reloads
//! and certificate reloads.
//!
//! Directories are watched rather than files because files are replaced, not edited: editors
//! and `mv` rename over them, and Kubernetes swaps the `..data` symlink of a mounted ConfigMap
//! or Secret. A directory reached through a symlink that gets swapped (envoyproxy/ratelimit's
//! `RUNTIME_ROOT`) is watched again where it now points (`DirectoryWatch::ensure`).
//!
//! A change only says "look again"; the caller re-reads and compares, so events about
//! unrelated files cost a read, never a reload.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Quiet time after the last event before a batch is reported: a ConfigMap update or an
/// editor's save is several events within a few milliseconds.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Longest a batch waits for quiet, so a steady stream of events cannot hold a reload back
/// (a change must be live within a second).
const MAX_BATCH_DELAY: Duration = Duration::from_millis(400);

/// A directory to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchTarget {
    pub directory: PathBuf,
    /// Also everything below it (envoyproxy/ratelimit's runtime layout loads nested files).
    pub recursive: bool,
}

/// What a directory resolved to when its watch was set.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Watched {
    canonical: PathBuf,
    /// Device and inode: a directory deleted and made again at the same path is another one,
    /// and its old watch sees nothing.
    identity: (u64, u64),
    recursive: bool,
}

/// Watches directories and reports debounced batches of changes.
pub struct DirectoryWatch {
    /// `None` when the platform watcher could not be created: changes are then not seen (a
    /// reload can still be asked for with SIGHUP).
    watcher: Option<RecommendedWatcher>,
    watched: HashMap<PathBuf, Watched>,
    /// Directories whose watch failed and was logged, so a missing directory is said once.
    failed: HashSet<PathBuf>,
    changes: Arc<Notify>,
    /// Names the watcher in logs (`configuration`, `gRPC TLS certificate`).
    what: &'static str,
}

impl DirectoryWatch {
    pub fn new(what: &'static str) -> Self {
        let changes = Arc::new(Notify::new());
        let signal = Arc::clone(&changes);
        let handler = move |event: notify::Result<Event>| match event {
            Ok(event) if is_change(&event.kind) => signal.notify_one(),
            Ok(_) => {}
            // An error (such as a full event queue) may hide a change: look again.
            Err(error) => {
                tracing::debug!(%error, "file watch error");
                signal.notify_one();
            }
        };
        let watcher = match notify::recommended_watcher(handler) {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "cannot watch files: the {what} is not reloaded on change (SIGHUP still reloads)"
                );
                None
            }
        };
        Self {
            watcher,
            watched: HashMap::new(),
            failed: HashSet::new(),
            changes,
            what,
        }
    }

    /// Watches every target, again if it now resolves to another directory than when its watch
    /// was set (a swapped symlink on the way). Call before reading the files, so a change made
    /// after the read is always seen.
    pub fn ensure(&mut self, targets: &[WatchTarget]) {
        let Some(watcher) = self.watcher.as_mut() else {
            return;
        };
        for target in targets {
            let wanted = std::fs::canonicalize(&target.directory)
                .ok()
                .and_then(|canonical| {
                    let identity = identity(&canonical)?;
                    Some(Watched {
                        canonical,
                        identity,
                        recursive: target.recursive,
                    })
                });
            if wanted.is_some() && self.watched.get(&target.directory) == wanted.as_ref() {
                continue;
            }
            if self.watched.remove(&target.directory).is_some() {
                let _ = watcher.unwatch(&target.directory);
            }
            let mode = if target.recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            match (wanted, watcher.watch(&target.directory, mode)) {
                (Some(watched), Ok(())) => {
                    tracing::debug!(directory = %target.directory.display(), "watching");
                    self.failed.remove(&target.directory);
                    self.watched.insert(target.directory.clone(), watched);
                }
                (_, result) => {
                    if self.failed.insert(target.directory.clone()) {
                        let reason = match result {
                            Err(error) => error.to_string(),
                            Ok(()) => "it does not exist".to_owned(),
                        };
                        tracing::warn!(
                            directory = %target.directory.display(),
                            "cannot watch the directory ({reason}): changes to the {} there are \
                             not seen until it can be watched",
                            self.what
                        );
                    }
                }
            }
        }
    }

    /// Waits for the next batch of changes: the first event, then until events stop for
    /// `DEBOUNCE` (at most `MAX_BATCH_DELAY`).
    pub async fn changed(&self) {
        self.changes.notified().await;
        let deadline = Instant::now() + MAX_BATCH_DELAY;
        loop {
            let quiet = tokio::time::sleep(DEBOUNCE);
            tokio::select! {
                () = self.changes.notified() => {
                    if Instant::now() >= deadline {
                        return;
                    }
                }
                () = quiet => return,
            }
        }
    }
}

#[cfg(unix)]
fn identity(directory: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(directory).ok()?;
    Some((metadata.dev(), metadata.ino()))
}

#[cfg(not(unix))]
fn identity(directory: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(directory).ok().map(|_| (0, 0))
}

/// Everything but reads: opening a file to read it (which the reload itself does) is no
/// change, closing one written to is.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The directory of a file (`.` for a bare file name).
pub fn parent_directory(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opening_is_no_change_but_writing_is() {
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Read
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_change(&EventKind::Create(
            notify::event::CreateKind::Any
        )));
        assert!(is_change(&EventKind::Any));
    }

    #[tokio::test]
    async fn a_burst_of_events_is_one_batch() {
        let watch = DirectoryWatch {
            watcher: None,
            watched: HashMap::new(),
            failed: HashSet::new(),
            changes: Arc::new(Notify::new()),
            what: "test",
        };
        for _ in 0..5 {
            watch.changes.notify_one();
        }
        let started = std::time::Instant::now();
        watch.changed().await;
        assert!(started.elapsed() >= DEBOUNCE);
        // Nothing is left over: the next batch waits for a new event.
        let next = tokio::time::timeout(Duration::from_millis(50), watch.changed()).await;
        assert!(next.is_err());
    }

    #[test]
    fn a_bare_file_name_is_in_the_current_directory() {
        assert_eq!(parent_directory(Path::new("a.yaml")), PathBuf::from("."));
        assert_eq!(
            parent_directory(Path::new("/x/a.yaml")),
            PathBuf::from("/x")
        );
    }
}
