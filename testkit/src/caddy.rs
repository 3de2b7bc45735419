//! Caddy 2.6 under test (Debian's `caddy`): a Caddyfile written to the test's directory, run in
//! the foreground with its state kept there, ready once its site's port accepts, stopped by pid
//! when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{wait_for_port, which, Running};

/// How long Caddy may take to open its listener.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The caddy binary: `$FLOODGATE_CADDY` or `caddy` on PATH. Missing caddy fails the test:
/// `scripts/install-peers.sh` installs it.
pub fn caddy_bin() -> PathBuf {
    if let Ok(path) = std::env::var("FLOODGATE_CADDY") {
        return PathBuf::from(path);
    }
    which("caddy").unwrap_or_else(|| {
        panic!("caddy not found: run scripts/install-peers.sh (or set FLOODGATE_CADDY)")
    })
}

pub struct Caddy {
    _process: Running,
    /// The site's port.
    pub port: u16,
}

impl Caddy {
    /// Writes `caddyfile` to `dir/Caddyfile` and runs it; `port` is the site's port.
    pub fn start(caddyfile: &str, dir: &Path, port: u16) -> Caddy {
        let path = dir.join("Caddyfile");
        std::fs::write(&path, caddyfile)
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
        let mut command = Command::new(caddy_bin());
        command
            .arg("run")
            .arg("--config")
            .arg(&path)
            .arg("--adapter")
            .arg("caddyfile")
            // Caddy keeps its state (certificates, autosaved config) under these.
            .env("XDG_DATA_HOME", dir)
            .env("XDG_CONFIG_HOME", dir)
            .env("HOME", dir);
        let process = Running::spawn("caddy", &mut command, dir);
        wait_for_port(port, START_TIMEOUT, "caddy");
        Caddy {
            _process: process,
            port,
        }
    }
}
