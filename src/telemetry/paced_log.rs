//! Log lines that clients can cause: at most one per interval, and what the client sent cut
//! short and escaped. Without both, one client refused a thousand times a second with an 8 KB
//! header writes megabytes of log a second, and can forge log lines with newlines.

use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::core::arithmetic::failure::LogPace;

/// How much of a client's text a log line carries.
pub const CLIENT_TEXT_CHARS: usize = 160;

/// One kind of log line, written at most once per interval.
pub struct PacedLog {
    pace: Mutex<LogPace>,
}

impl PacedLog {
    pub const fn every(interval: Duration) -> Self {
        Self {
            pace: Mutex::new(LogPace::new(interval.as_millis() as u64)),
        }
    }

    /// `Some(lines left out since the last one)` when a line may be written now.
    pub fn allow(&self) -> Option<u64> {
        static START: OnceLock<Instant> = OnceLock::new();
        let now = u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis())
            .unwrap_or(u64::MAX);
        match self.pace.lock() {
            Ok(mut pace) => pace.allow(now),
            Err(poisoned) => poisoned.into_inner().allow(now),
        }
    }
}

/// A client's text for a log line: its first [`CLIENT_TEXT_CHARS`] characters, escaped, and
/// how much was left out.
pub struct ClientText<'a>(pub &'a str);

impl fmt::Display for ClientText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chars = self.0.char_indices();
        for (_, c) in chars.by_ref().take(CLIENT_TEXT_CHARS) {
            for escaped in c.escape_debug() {
                f.write_fmt(format_args!("{escaped}"))?;
            }
        }
        if let Some((cut, _)) = chars.next() {
            write!(f, "…({} more bytes)", self.0.len() - cut)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_client_text_is_cut_and_control_characters_escaped() {
        let long = "x".repeat(8_192);
        let shown = ClientText(&long).to_string();
        assert!(shown.len() < 200, "{} bytes", shown.len());
        assert!(shown.ends_with(&format!("…({} more bytes)", 8_192 - CLIENT_TEXT_CHARS)));
        assert_eq!(ClientText("a\nb").to_string(), "a\\nb");
        assert_eq!(ClientText("short").to_string(), "short");
    }

    #[test]
    fn a_paced_line_is_allowed_once_per_interval() {
        let log = PacedLog::every(Duration::from_secs(3_600));
        assert_eq!(log.allow(), Some(0));
        assert_eq!(log.allow(), None);
        assert_eq!(log.allow(), None);
    }
}
