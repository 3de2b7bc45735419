//! Envoy 1.40 under test: a bootstrap (its ports already moved to free ones) written to the
//! test's directory, one worker, ready once its listeners accept, stopped by pid when dropped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{envoy_bin, free_port, repo_file, wait_for_port, Running};

/// How long Envoy may take to open its listeners (a debug-built floodgate shares the cores).
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Envoy {
    _process: Running,
    /// The first listener: where the test sends its requests.
    pub port: u16,
}

impl Envoy {
    /// Writes `bootstrap` to `dir/file_name` and starts Envoy on it, ready once every port of
    /// `listeners` accepts connections; the first of them is `port`.
    pub fn start(bootstrap: &str, file_name: &str, dir: &Path, listeners: &[u16]) -> Envoy {
        Self::start_with_args(bootstrap, file_name, dir, listeners, &[])
    }

    /// `start`, with `extra` added to Envoy's command line (`--file-flush-interval-msec 100`
    /// for a test that reads an access log: Envoy writes files every 10 s by default).
    pub fn start_with_args(
        bootstrap: &str,
        file_name: &str,
        dir: &Path,
        listeners: &[u16],
        extra: &[&str],
    ) -> Envoy {
        let path = dir.join(file_name);
        std::fs::write(&path, bootstrap)
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
        let mut command = Command::new(envoy_bin());
        command
            .arg("-c")
            .arg(&path)
            .arg("--disable-hot-restart")
            .arg("--log-level")
            .arg("warn")
            .arg("--concurrency")
            .arg("1")
            .args(extra);
        let process = Running::spawn("envoy", &mut command, dir);
        for &port in listeners {
            wait_for_port(port, START_TIMEOUT, "envoy");
        }
        let port = *listeners
            .first()
            .unwrap_or_else(|| panic!("Envoy::start needs at least one listener port"));
        Envoy {
            _process: process,
            port,
        }
    }
}

/// A bootstrap of `deploy/envoy/` (`relative` to the repository) that listens on 10000 (the
/// edge) and 10001 (a stand-in upstream), with its admin on 9902 and the rate-limit service on
/// 8081: its text with those moved to free ports and the service's to `rls_port`, and the two
/// listener ports, the edge first.
pub fn deploy_bootstrap(relative: &str, rls_port: u16) -> (String, [u16; 2]) {
    let path = repo_file(relative);
    let template = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let (edge, upstream, admin) = (free_port(), free_port(), free_port());
    let bootstrap = template
        .replace("port_value: 10000", &format!("port_value: {edge}"))
        .replace("port_value: 10001", &format!("port_value: {upstream}"))
        .replace("port_value: 9902", &format!("port_value: {admin}"))
        .replace("port_value: 8081", &format!("port_value: {rls_port}"));
    (bootstrap, [edge, upstream])
}
