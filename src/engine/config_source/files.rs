//! Configuration files on disk and reading them.
//!
//! Two layouts:
//! * a path given on the command line: one file, or every `*.yaml` / `*.yml` directly in a
//!   directory (dot-files skipped, so a mounted Kubernetes ConfigMap, whose files are symlinks
//!   into `..data`, is read once);
//! * envoyproxy/ratelimit's runtime layout (`RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`,
//!   `RUNTIME_APPDIRECTORY`, `RUNTIME_WATCH_ROOT`, `RUNTIME_IGNOREDOTFILES`; reference §1.1):
//!   every file, whatever its extension, under `root/subdirectory/app_directory`, recursively.
//!
//! Files are named by their path in errors (the reference names them by a runtime key such as
//! `config.basic.yaml`; a path says where to look).

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use crate::core::policy::config::SourceFile;

/// The default of `--max-config-bytes`: 3 MiB of YAML, 25 000 to 35 000 rules as operators
/// write them (85 to 125 bytes per rule).
///
/// Derived from `scripts/bench-rules-memory.sh` (docs/benchmarks.md, "Memory per rule"): a
/// reload of 20 000 rules in 2.5 MB of YAML peaked 50 MiB above the idle process, so about
/// 20 MiB per MiB of YAML (the parser holds a whole file's events and tree for a moment, and
/// the rules in force stay beside the new ones). The deployment in `deploy/` allows 128 MiB:
/// 12 MiB idle, 46 MiB for its 400 000 counters (FLOODGATE_MAX_KEYS), 60 MiB for a reload of
/// 3 MiB, and 10 MiB to spare.
pub const DEFAULT_MAX_CONFIG_BYTES: u64 = 3 * 1024 * 1024;

/// Where to read the configuration from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigLocation {
    /// A YAML file, or a directory whose `*.yaml` / `*.yml` files (not in subdirectories)
    /// are read.
    Path(PathBuf),
    /// envoyproxy/ratelimit's runtime directories: `root/subdirectory/app_directory` and
    /// everything below it.
    Runtime {
        /// `RUNTIME_ROOT` (the reference's default is `/srv/runtime_data/current`).
        root: PathBuf,
        /// `RUNTIME_SUBDIRECTORY`.
        subdirectory: PathBuf,
        /// `RUNTIME_APPDIRECTORY` (the reference's default is `config`).
        app_directory: PathBuf,
        /// `RUNTIME_WATCH_ROOT`: reload when `root` (a symlink) is swapped, rather than when a
        /// file in the app directory changes. Reading is the same either way.
        watch_root: bool,
        /// `RUNTIME_IGNOREDOTFILES`: skip files and directories whose name starts with `.`.
        /// Without it a mounted ConfigMap is read twice (its files and `..2024_…/`), which the
        /// loader reports as a duplicate domain, as the reference does.
        ignore_dotfiles: bool,
    },
}

/// Why the configuration files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(
        "{}: no such file or directory (or a symlink to nothing): check the configuration path \
         (--config, or RUNTIME_ROOT / RUNTIME_SUBDIRECTORY / RUNTIME_APPDIRECTORY)",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error(
        "{}: cannot be read ({source}): check that floodgate's user may read it",
        path.display()
    )]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{}: not UTF-8 text (the first invalid byte is at offset {offset}): save the file as \
         UTF-8",
        path.display()
    )]
    NotUtf8 { path: PathBuf, offset: usize },
    #[error(
        "{}: neither a file nor a directory: point at a YAML file or a directory of them",
        path.display()
    )]
    NotFileOrDirectory { path: PathBuf },
    #[error(
        "{}: the configuration files hold {bytes} bytes, over the cap of {cap} bytes: raise it \
         with --max-config-bytes (FLOODGATE_MAX_CONFIG_BYTES) and the memory limit with it \
         (a reload takes about 40 MiB of memory per MiB of YAML at its peak), or split the \
         rules among more instances",
        path.display()
    )]
    TooLarge {
        /// The file or directory read.
        path: PathBuf,
        /// What the files hold (at least: counting stops at the file that crosses the cap).
        bytes: u64,
        cap: u64,
    },
}

/// Reads every configuration file of `location`, in a stable order (sorted by name, directory
/// by directory), at most `max_bytes` in all.
///
/// The cap is checked before anything is read (the files' sizes) and kept while reading (a
/// file that grows meanwhile is read no further than the cap), so a file far too large is
/// refused without being read into memory.
///
/// A `Runtime` location with an empty `root` or `subdirectory` has no files, which loads as a
/// configuration without domains: the reference's "nil loader" does the same.
pub fn read_sources(
    location: &ConfigLocation,
    max_bytes: u64,
) -> Result<Vec<SourceFile>, SourceError> {
    let paths = match location {
        ConfigLocation::Path(path) => files_at_path(path)?,
        ConfigLocation::Runtime {
            ignore_dotfiles, ..
        } => match runtime_app_directory(location) {
            Some(directory) => {
                let mut files = Vec::new();
                let mut visited = HashSet::new();
                walk_directory(&directory, *ignore_dotfiles, &mut visited, &mut files)?;
                files
            }
            None => Vec::new(),
        },
    };
    let too_large = |bytes| SourceError::TooLarge {
        path: location_path(location),
        bytes,
        cap: max_bytes,
    };
    let mut listed: u64 = 0;
    for path in &paths {
        let size = fs::metadata(path)
            .map_err(|error| io_error(path, error))?
            .len();
        listed = listed.saturating_add(size);
    }
    if listed > max_bytes {
        return Err(too_large(listed));
    }
    let mut left = max_bytes;
    let mut files = Vec::with_capacity(paths.len());
    for path in &paths {
        let file = read_file(path, left).map_err(|error| match error {
            ReadError::Source(error) => error,
            // It grew since it was listed.
            ReadError::Over => {
                let now = fs::metadata(path).map_or(0, |metadata| metadata.len());
                too_large((max_bytes - left).saturating_add(now).max(max_bytes + 1))
            }
        })?;
        left -= u64::try_from(file.text.len()).unwrap_or(u64::MAX).min(left);
        files.push(file);
    }
    Ok(files)
}

/// The file or directory `location` reads, for messages.
pub fn location_path(location: &ConfigLocation) -> PathBuf {
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

/// The directories a watcher should watch to see configuration changes:
/// * a file: its directory (editors and ConfigMaps replace files by renaming);
/// * a directory: itself (a ConfigMap swaps its `..data` symlink there);
/// * runtime, `watch_root`: the directory holding `root` (where the symlink is swapped, the
///   only change the reference reacts to) and the app directory;
/// * runtime otherwise: the app directory (watch it recursively: nested files are loaded too).
pub fn location_directories(location: &ConfigLocation) -> Vec<PathBuf> {
    match location {
        ConfigLocation::Path(path) if path.is_dir() => vec![path.clone()],
        ConfigLocation::Path(path) => vec![parent_directory(path)],
        ConfigLocation::Runtime {
            root, watch_root, ..
        } => {
            let mut directories = Vec::new();
            if *watch_root {
                directories.push(parent_directory(root));
            }
            directories.extend(runtime_app_directory(location));
            directories
        }
    }
}

fn parent_directory(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `root/subdirectory/app_directory`, or `None` when root or subdirectory is not set.
fn runtime_app_directory(location: &ConfigLocation) -> Option<PathBuf> {
    let ConfigLocation::Runtime {
        root,
        subdirectory,
        app_directory,
        ..
    } = location
    else {
        return None;
    };
    if root.as_os_str().is_empty() || subdirectory.as_os_str().is_empty() {
        return None;
    }
    Some(root.join(subdirectory).join(app_directory))
}

fn files_at_path(path: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let metadata = fs::metadata(path).map_err(|error| io_error(path, error))?;
    if metadata.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !metadata.is_dir() {
        return Err(SourceError::NotFileOrDirectory {
            path: path.to_path_buf(),
        });
    }
    let mut files = Vec::new();
    for (name, entry) in sorted_entries(path)? {
        if name.starts_with('.') || !has_yaml_extension(&name) {
            continue;
        }
        // Follows symlinks: the files of a mounted ConfigMap are symlinks into `..data`.
        let metadata = fs::metadata(&entry).map_err(|error| io_error(&entry, error))?;
        if metadata.is_file() {
            files.push(entry);
        }
    }
    Ok(files)
}

fn has_yaml_extension(name: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| {
            extension.eq_ignore_ascii_case("yaml") || extension.eq_ignore_ascii_case("yml")
        })
}

/// Every file under `directory`, recursively, any extension (as goruntime reads them).
/// Symlinks are followed; a directory reached twice (a symlink loop, or ConfigMap's `..data`
/// next to the directory it points to) is read once.
fn walk_directory(
    directory: &Path,
    ignore_dotfiles: bool,
    visited: &mut HashSet<PathBuf>,
    files: &mut Vec<PathBuf>,
) -> Result<(), SourceError> {
    let canonical = fs::canonicalize(directory).map_err(|error| io_error(directory, error))?;
    if !visited.insert(canonical) {
        return Ok(());
    }
    for (name, entry) in sorted_entries(directory)? {
        if ignore_dotfiles && name.starts_with('.') {
            continue;
        }
        let metadata = fs::metadata(&entry).map_err(|error| io_error(&entry, error))?;
        if metadata.is_dir() {
            walk_directory(&entry, ignore_dotfiles, visited, files)?;
        } else if metadata.is_file() {
            files.push(entry);
        }
    }
    Ok(())
}

/// The entries of a directory with their names, sorted by name.
fn sorted_entries(directory: &Path) -> Result<Vec<(String, PathBuf)>, SourceError> {
    let reader = fs::read_dir(directory).map_err(|error| io_error(directory, error))?;
    let mut entries = Vec::new();
    for entry in reader {
        let entry = entry.map_err(|error| io_error(directory, error))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        entries.push((name, entry.path()));
    }
    entries.sort();
    Ok(entries)
}

enum ReadError {
    Source(SourceError),
    /// The file holds more than it may.
    Over,
}

/// One file, at most `max_bytes` of it (more is [`ReadError::Over`]).
fn read_file(path: &Path, max_bytes: u64) -> Result<SourceFile, ReadError> {
    let failed = |error| ReadError::Source(io_error(path, error));
    let file = fs::File::open(path).map_err(failed)?;
    let expected = file.metadata().map_or(0, |metadata| metadata.len());
    let mut bytes = Vec::with_capacity(usize::try_from(expected.min(max_bytes)).unwrap_or(0));
    // One byte past the cap tells a file that grew from one that ends there.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > max_bytes {
        return Err(ReadError::Over);
    }
    let text = String::from_utf8(bytes).map_err(|error| {
        ReadError::Source(SourceError::NotUtf8 {
            path: path.to_path_buf(),
            offset: error.utf8_error().valid_up_to(),
        })
    })?;
    Ok(SourceFile {
        name: path.display().to_string(),
        text,
    })
}

fn io_error(path: &Path, error: io::Error) -> SourceError {
    if error.kind() == io::ErrorKind::NotFound {
        SourceError::Missing {
            path: path.to_path_buf(),
        }
    } else {
        SourceError::Unreadable {
            path: path.to_path_buf(),
            source: error,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use tempfile::TempDir;

    use super::*;

    fn temp_dir() -> TempDir {
        match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(error) => panic!("cannot create a temporary directory: {error}"),
        }
    }

    fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            if let Err(error) = fs::create_dir_all(parent) {
                panic!("mkdir {}: {error}", parent.display());
            }
        }
        if let Err(error) = fs::write(path, text) {
            panic!("write {}: {error}", path.display());
        }
    }

    fn link(target: &str, at: &Path) {
        if let Err(error) = symlink(target, at) {
            panic!("symlink {}: {error}", at.display());
        }
    }

    fn names(location: &ConfigLocation, base: &Path) -> Vec<String> {
        match read_sources(location, DEFAULT_MAX_CONFIG_BYTES) {
            Ok(files) => files
                .iter()
                .map(|file| {
                    Path::new(&file.name)
                        .strip_prefix(base)
                        .map_or(file.name.clone(), |relative| relative.display().to_string())
                })
                .collect(),
            Err(error) => panic!("read_sources failed: {error}"),
        }
    }

    /// A mounted ConfigMap: the data in a timestamped directory, `..data` pointing at it, and
    /// each file a symlink through `..data`.
    fn configmap(directory: &Path) {
        write(
            &directory.join("..2026_11_30_00_00_00.000/rules.yaml"),
            "domain: edge\n",
        );
        link("..2026_11_30_00_00_00.000", &directory.join("..data"));
        link("..data/rules.yaml", &directory.join("rules.yaml"));
    }

    #[test]
    fn a_file_path_reads_that_file() {
        let dir = temp_dir();
        let file = dir.path().join("only.conf");
        write(&file, "domain: a\n");
        let location = ConfigLocation::Path(file.clone());
        let Ok(files) = read_sources(&location, DEFAULT_MAX_CONFIG_BYTES) else {
            panic!("should read");
        };
        assert_eq!(
            files,
            vec![SourceFile {
                name: file.display().to_string(),
                text: "domain: a\n".to_owned()
            }]
        );
    }

    #[test]
    fn a_directory_reads_its_yaml_files_sorted_without_dotfiles_or_subdirectories() {
        let dir = temp_dir();
        for name in [
            "b.yml",
            "a.yaml",
            "C.YAML",
            ".hidden.yaml",
            "notes.md",
            "sub/x.yaml",
        ] {
            write(&dir.path().join(name), "domain: x\n");
        }
        let location = ConfigLocation::Path(dir.path().to_path_buf());
        assert_eq!(
            names(&location, dir.path()),
            vec!["C.YAML", "a.yaml", "b.yml"]
        );
    }

    #[test]
    fn a_configmap_directory_is_read_once_through_its_symlinks() {
        let dir = temp_dir();
        configmap(dir.path());
        let location = ConfigLocation::Path(dir.path().to_path_buf());
        let Ok(files) = read_sources(&location, DEFAULT_MAX_CONFIG_BYTES) else {
            panic!("should read");
        };
        assert_eq!(files.len(), 1);
        assert_eq!(
            files[0].name,
            dir.path().join("rules.yaml").display().to_string()
        );
        assert_eq!(files[0].text, "domain: edge\n");
    }

    fn runtime(root: &Path, watch_root: bool, ignore_dotfiles: bool) -> ConfigLocation {
        ConfigLocation::Runtime {
            root: root.to_path_buf(),
            subdirectory: PathBuf::from("ratelimit"),
            app_directory: PathBuf::from("config"),
            watch_root,
            ignore_dotfiles,
        }
    }

    #[test]
    fn runtime_reads_every_file_under_the_app_directory_recursively() {
        let dir = temp_dir();
        let app = dir.path().join("ratelimit/config");
        for name in ["b.yaml", "a.txt", "nested/deeper/c.yaml", ".dot.yaml"] {
            write(&app.join(name), "domain: x\n");
        }
        write(&dir.path().join("ratelimit/other/d.yaml"), "domain: y\n");
        for watch_root in [true, false] {
            let location = runtime(dir.path(), watch_root, false);
            assert_eq!(
                names(&location, &app),
                vec![".dot.yaml", "a.txt", "b.yaml", "nested/deeper/c.yaml"]
            );
        }
        let location = runtime(dir.path(), true, true);
        assert_eq!(
            names(&location, &app),
            vec!["a.txt", "b.yaml", "nested/deeper/c.yaml"]
        );
    }

    #[test]
    fn runtime_reads_a_configmap_twice_unless_dotfiles_are_ignored() {
        let dir = temp_dir();
        configmap(&dir.path().join("ratelimit/config"));
        let app = dir.path().join("ratelimit/config");
        // As in the reference (issue #367): the timestamped directory and the symlinked file.
        assert_eq!(
            names(&runtime(dir.path(), false, false), &app),
            vec!["..2026_11_30_00_00_00.000/rules.yaml", "rules.yaml"]
        );
        assert_eq!(
            names(&runtime(dir.path(), false, true), &app),
            vec!["rules.yaml"]
        );
    }

    #[test]
    fn runtime_survives_a_symlink_loop() {
        let dir = temp_dir();
        let app = dir.path().join("ratelimit/config");
        write(&app.join("a.yaml"), "domain: a\n");
        link("..", &app.join("loop"));
        assert_eq!(
            names(&runtime(dir.path(), false, true), &app),
            vec!["a.yaml"]
        );
    }

    #[test]
    fn runtime_without_root_or_subdirectory_has_no_files() {
        let location = ConfigLocation::Runtime {
            root: PathBuf::from("/srv/runtime_data/current"),
            subdirectory: PathBuf::new(),
            app_directory: PathBuf::from("config"),
            watch_root: true,
            ignore_dotfiles: false,
        };
        assert!(
            matches!(read_sources(&location, DEFAULT_MAX_CONFIG_BYTES), Ok(files) if files.is_empty())
        );
    }

    #[test]
    fn a_missing_path_is_named_in_the_error() {
        let dir = temp_dir();
        let missing = dir.path().join("nope.yaml");
        let error = match read_sources(
            &ConfigLocation::Path(missing.clone()),
            DEFAULT_MAX_CONFIG_BYTES,
        ) {
            Err(error) => error,
            Ok(_) => panic!("should fail"),
        };
        assert!(matches!(error, SourceError::Missing { .. }));
        let message = error.to_string();
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
        assert!(message.contains("--config"), "{message}");
        let runtime_missing = runtime(dir.path(), true, false);
        assert!(matches!(
            read_sources(&runtime_missing, DEFAULT_MAX_CONFIG_BYTES),
            Err(SourceError::Missing { .. })
        ));
    }

    #[test]
    fn a_broken_symlink_in_a_directory_is_an_error_naming_it() {
        let dir = temp_dir();
        link("gone.yaml", &dir.path().join("broken.yaml"));
        match read_sources(
            &ConfigLocation::Path(dir.path().to_path_buf()),
            DEFAULT_MAX_CONFIG_BYTES,
        ) {
            Err(SourceError::Missing { path }) => assert!(path.ends_with("broken.yaml")),
            other => panic!("expected Missing, got {other:?}"),
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_refused_with_the_offset() {
        let dir = temp_dir();
        let file = dir.path().join("latin1.yaml");
        if let Err(error) = fs::write(&file, b"domain: caf\xe9\n") {
            panic!("write: {error}");
        }
        match read_sources(&ConfigLocation::Path(file), DEFAULT_MAX_CONFIG_BYTES) {
            Err(error @ SourceError::NotUtf8 { offset: 11, .. }) => {
                assert!(error.to_string().contains("UTF-8"));
            }
            other => panic!("expected NotUtf8, got {other:?}"),
        }
    }

    #[test]
    fn an_unreadable_directory_is_reported() {
        let dir = temp_dir();
        // A file where a directory is expected cannot be listed.
        let file = dir.path().join("ratelimit");
        write(&file, "x");
        let location = runtime(dir.path(), false, false);
        assert!(read_sources(&location, DEFAULT_MAX_CONFIG_BYTES).is_err());
    }

    #[test]
    fn directories_to_watch() {
        let dir = temp_dir();
        let file = dir.path().join("a.yaml");
        write(&file, "domain: a\n");
        assert_eq!(
            location_directories(&ConfigLocation::Path(file)),
            vec![dir.path().to_path_buf()]
        );
        assert_eq!(
            location_directories(&ConfigLocation::Path(dir.path().to_path_buf())),
            vec![dir.path().to_path_buf()]
        );
        assert_eq!(
            location_directories(&ConfigLocation::Path(PathBuf::from("rules.yaml"))),
            vec![PathBuf::from(".")]
        );
        let root = dir.path().join("current");
        let app = root.join("ratelimit/config");
        assert_eq!(
            location_directories(&runtime(&root, true, false)),
            vec![dir.path().to_path_buf(), app.clone()]
        );
        assert_eq!(
            location_directories(&runtime(&root, false, false)),
            vec![app]
        );
    }
}
