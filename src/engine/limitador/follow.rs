//! Reloads Limitador's limits file when it changes, as the YAML rules are: the file's
//! directory is watched (files are replaced, not edited: a ConfigMap swaps a symlink), the file
//! read again and, when its text changed, compiled and put in force. A file that does not load
//! leaves the limits in force as they were, and says why.

use std::path::PathBuf;
use std::sync::Arc;

use super::limits_file::{LimitSet, LimitsFileError};
use super::{limits_file, Limitador};
use crate::engine::reload::watch::{parent_directory, DirectoryWatch, WatchTarget};
use crate::engine::reload::{Loader, LoaderGone};
use crate::engine::shutdown::Shutdown;

/// Follows the file at `path` into `limitador` until shutdown; `loaded` is the text in force.
pub async fn follow(limitador: Arc<Limitador>, path: PathBuf, loaded: String, shutdown: Shutdown) {
    let mut watch = DirectoryWatch::new("Limitador limits file");
    let targets = [WatchTarget {
        directory: parent_directory(&path),
        recursive: false,
    }];
    watch.ensure(&targets);
    let mut in_force = loaded;
    // A change made between the first load and the watch is seen by no event: look once.
    if let Some(text) = reload(&limitador, &path, &in_force).await {
        in_force = text;
    }
    loop {
        tokio::select! {
            () = watch.changed() => {}
            () = shutdown.clone().fired() => return,
        }
        watch.ensure(&targets);
        if let Some(text) = reload(&limitador, &path, &in_force).await {
            in_force = text;
        }
    }
}

/// Reads the file again and puts it in force when its text changed and it loads; the text put
/// in force, if any.
async fn reload(limitador: &Limitador, path: &std::path::Path, in_force: &str) -> Option<String> {
    let text = match read_off_the_workers(path).await {
        Ok(text) => text,
        Err(error) => {
            tracing::warn!(
                path = %path.display(), %error,
                "cannot read Limitador's limits file; the limits in force stay"
            );
            return None;
        }
    };
    if text == in_force {
        return None;
    }
    let (parsed, text) = match parse_on_a_loader(text, path).await {
        Ok(parsed) => parsed,
        Err(gone) => {
            tracing::warn!("{gone}; Limitador's limits in force stay");
            return None;
        }
    };
    match parsed {
        Ok(limits) => {
            tracing::info!(
                path = %path.display(), limits = limits.limit_count(),
                "Limitador's limits reloaded"
            );
            limitador.replace_limits(limits);
            Some(text)
        }
        Err(error) => {
            tracing::warn!("{error}; the limits in force stay");
            None
        }
    }
}

/// The file's text, read on the runtime's blocking pool: a mounted volume can be slow, and a
/// worker waiting on it would hold up the decisions queued behind it.
async fn read_off_the_workers(path: &std::path::Path) -> std::io::Result<String> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
        .await
        .unwrap_or_else(|stopped| Err(std::io::Error::other(stopped)))
}

/// Parses `text` as the rules are loaded (`reload::Loader`): on a thread of its own, with what
/// the parse frees, and the limits it replaces, handed back to the system soon after. Gives the
/// text back with the result.
pub async fn parse_on_a_loader(
    text: String,
    path: &std::path::Path,
) -> Result<(Result<LimitSet, LimitsFileError>, String), LoaderGone> {
    let name = path.display().to_string();
    Loader
        .run(move || (limits_file::parse(&text, &name), text))
        .await
}
