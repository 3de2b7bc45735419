//! libfaketime (`LD_PRELOAD`, Debian's `faketime`, installed by `scripts/install-peers.sh`) for
//! processes whose wall clock a test sets: a fixed skew, or a clock the test moves forward while
//! the process runs (a timestamp file re-read at every clock reading), so a test can cross a
//! window boundary without waiting for it. The monotonic clock stays real
//! (`FAKETIME_DONT_FAKE_MONOTONIC`): timers, timeouts and tokio are not disturbed.
//!
//! Only for floodgate: Debian's redis-server (jemalloc) does not start under libfaketime
//! (jemalloc's start reads the clock inside libfaketime's own start), so a test that moves the
//! clock decides on the memory store, which reads floodgate's wall clock.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// libfaketime's preload library: `$FLOODGATE_LIBFAKETIME`, or where Debian's `libfaketime`
/// puts it (an architecture directory under /usr/lib).
pub fn libfaketime() -> PathBuf {
    if let Ok(path) = std::env::var("FLOODGATE_LIBFAKETIME") {
        return PathBuf::from(path);
    }
    let mut candidates = vec![
        PathBuf::from("/usr/lib/faketime"),
        PathBuf::from("/usr/local/lib/faketime"),
    ];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        candidates.extend(entries.flatten().map(|entry| entry.path().join("faketime")));
    }
    candidates
        .into_iter()
        .map(|dir| dir.join("libfaketime.so.1"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime.so.1 not found: run scripts/install-peers.sh (Debian package \
                 faketime) or set FLOODGATE_LIBFAKETIME"
            )
        })
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
        // A rename, so that a process never reads a half-written offset.
        let temporary = self.file.with_extension("tmp");
        std::fs::write(&temporary, format!("+{}\n", self.offset_seconds))
            .unwrap_or_else(|error| panic!("write {}: {error}", temporary.display()));
        std::fs::rename(&temporary, &self.file)
            .unwrap_or_else(|error| panic!("rename to {}: {error}", self.file.display()));
    }

    /// The environment that puts a process on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".to_owned(), libfaketime().display().to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE".to_owned(),
                self.file.display().to_string(),
            ),
            // Read the file at every clock reading: an advance is seen at once.
            ("FAKETIME_NO_CACHE".to_owned(), "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
        ]
    }
}
