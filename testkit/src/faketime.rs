//! libfaketime (Debian's `faketime`, installed by `scripts/install-peers.sh`) for processes under
//! test: where its preload library is, and wall clocks a test sets while they run: frozen at an
//! instant ([`FakeClock`]) or real time moved forward by whole seconds ([`MovableClock`]), so a
//! test crosses a month end or a window boundary without waiting for it.
//!
//! Both keep the fake time in a file (`FAKETIME_TIMESTAMP_FILE`) that libfaketime reads at every
//! clock call (`FAKETIME_NO_CACHE`), so one test moves the clocks of floodgate and redis-server
//! together, between calls, without restarting them. A frozen instant
//! (`"2028-02-29 23:59:58"`, UTC) makes every answer exact: no wall time passes between two
//! calls, so nothing depends on how fast the machine is. The monotonic clock stays real
//! (`FAKETIME_DONT_FAKE_MONOTONIC`): tokio's and Redis's timers keep running.
//!
//! Debian's redis-server allocates with jemalloc, which reads the clock while libfaketime is
//! still initializing and then cannot start (libfaketime's issue #130, unfixed). glibc's
//! `libc_malloc_debug.so.0`, preloaded first, serves `malloc` to the whole process from glibc,
//! so jemalloc is not initialized inside libfaketime's initialization; redis-server then runs
//! (its jemalloc statistics still answer). floodgate needs no such help, and gets it harmlessly.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// libfaketime's preload library: `$FLOODGATE_LIBFAKETIME`, or where Debian's `libfaketime`
/// puts it (an architecture directory under /usr/lib).
pub fn library() -> PathBuf {
    let mut dirs = vec![
        PathBuf::from("/usr/lib/faketime"),
        PathBuf::from("/usr/local/lib/faketime"),
    ];
    dirs.extend(architecture_dirs().map(|dir| dir.join("faketime")));
    find_library(
        "FLOODGATE_LIBFAKETIME",
        "libfaketime.so.1",
        dirs,
        "run scripts/install-peers.sh (Debian package faketime)",
    )
}

/// glibc's `libc_malloc_debug.so.0` (glibc 2.34 and later): `$FLOODGATE_LIBC_MALLOC_DEBUG`, or
/// next to libc.
fn glibc_malloc() -> PathBuf {
    let mut dirs = vec![PathBuf::from("/lib"), PathBuf::from("/usr/lib")];
    dirs.extend(architecture_dirs());
    find_library(
        "FLOODGATE_LIBC_MALLOC_DEBUG",
        "libc_malloc_debug.so.0",
        dirs,
        "it comes with glibc 2.34 or later",
    )
}

/// `$variable` when set, else `file` in the first of `dirs` that holds it.
fn find_library(variable: &str, file: &str, dirs: Vec<PathBuf>, hint: &str) -> PathBuf {
    if let Ok(path) = std::env::var(variable) {
        return PathBuf::from(path);
    }
    dirs.into_iter()
        .map(|dir| dir.join(file))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{file} not found ({hint}): set {variable} to its path"))
}

/// /usr/lib's architecture directories (`x86_64-linux-gnu`, …).
fn architecture_dirs() -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("libc.so.6").is_file() || path.join("faketime").is_dir())
}

/// `LD_PRELOAD` for a process on a fake clock: glibc's allocator first (for redis-server), then
/// libfaketime.
fn preload() -> String {
    format!("{} {}", glibc_malloc().display(), library().display())
}

/// A wall clock shared by every process started with [`FakeClock::env`].
pub struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// A clock in `dir`, frozen at `utc` (`YYYY-MM-DD hh:mm:ss`, UTC).
    pub fn frozen_at(dir: &Path, utc: &str) -> Self {
        let clock = Self {
            file: dir.join("faketime.rc"),
        };
        clock.freeze_at(utc);
        clock
    }

    /// Stops every process's clock at `utc` (`YYYY-MM-DD hh:mm:ss`, UTC) from their next clock
    /// call on. The file is replaced whole (a rename), so no reader sees half of it.
    pub fn freeze_at(&self, utc: &str) {
        replace_file(&self.file, &format!("{utc}\n"));
    }

    /// The environment that puts a process on this clock. The file's times are read in the
    /// process's time zone, hence `TZ=UTC`.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = clock_env(&self.file);
        env.push(("TZ".to_owned(), "UTC".to_owned()));
        env
    }
}

/// A wall clock shared by the processes started with [`MovableClock::env`]: real time plus an
/// offset in whole seconds, kept in a file that libfaketime reads at every clock reading, so
/// [`MovableClock::advance`] moves every such process at once.
pub struct MovableClock {
    file: PathBuf,
    offset_seconds: u64,
}

impl MovableClock {
    /// A clock in `dir` whose time is `second_of_minute` seconds into a minute now, so that a
    /// test has the rest of that minute before a per-minute window turns over by itself.
    pub fn at_second_of_minute(dir: &Path, second_of_minute: u64) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let offset_seconds = (second_of_minute + 60 - now % 60) % 60;
        let clock = Self {
            file: dir.join("faketime"),
            offset_seconds,
        };
        clock.write();
        clock
    }

    /// Moves the clock `seconds` forward for every process that uses it.
    pub fn advance(&mut self, seconds: u64) {
        self.offset_seconds += seconds;
        self.write();
    }

    fn write(&self) {
        replace_file(&self.file, &format!("+{}\n", self.offset_seconds));
    }

    /// The environment that puts a process on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        clock_env(&self.file)
    }
}

/// Replaces `file` whole (a rename), so that no process on the clock reads half of it.
fn replace_file(file: &Path, text: &str) {
    let next = file.with_extension("next");
    std::fs::write(&next, text).unwrap_or_else(|error| panic!("write {}: {error}", next.display()));
    std::fs::rename(&next, file)
        .unwrap_or_else(|error| panic!("rename to {}: {error}", file.display()));
}

/// The environment of a process whose wall clock is what `file` says, re-read at every clock
/// reading (a change is seen at once), its monotonic clock real.
fn clock_env(file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".to_owned(), preload()),
        (
            "FAKETIME_TIMESTAMP_FILE".to_owned(),
            file.display().to_string(),
        ),
        ("FAKETIME_NO_CACHE".to_owned(), "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
    ]
}
