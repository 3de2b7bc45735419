//! Helpers for the operations tests (reload, health, TLS, explain): floodgate started with any
//! arguments and environment, the debug port's reload headers, a ConfigMap-style directory,
//! and gRPC calls.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::DescriptorStatus;
use floodgate::proto::{RateLimitDescriptor, RateLimitRequest};

use crate::Running;

/// A floodgate process and its ports.
pub struct Server {
    pub process: Running,
    pub grpc_port: u16,
    pub http_port: u16,
    pub debug_port: u16,
}

impl Server {
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// Sends SIGTERM without waiting for the exit.
    pub fn send_signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.process.pid().to_string())
            .status();
        assert!(
            status.is_ok_and(|status| status.success()),
            "kill -{signal} failed"
        );
    }
}

/// Starts `floodgate serve` with `args` (nothing else but the three listen addresses on free
/// loopback ports) and `env` (LOG_LEVEL is info unless `env` says otherwise).
pub fn start(args: &[&str], env: &[(&str, &str)], log_dir: &Path) -> Server {
    let (mut command, (grpc_port, http_port, debug_port)) = crate::serve_command();
    command.args(args).env("LOG_LEVEL", "info");
    for name in [
        "FLOODGATE_CONFIG",
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
        "RUNTIME_WATCH_ROOT",
        "RUNTIME_IGNOREDOTFILES",
        "GRPC_SERVER_USE_TLS",
        "GRPC_SERVER_TLS_CERT",
        "GRPC_SERVER_TLS_KEY",
        "GRPC_CLIENT_TLS_CACERT",
        "GRPC_CLIENT_TLS_SAN",
    ] {
        command.env_remove(name);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let process = Running::spawn("floodgate", &mut command, log_dir);
    crate::wait_for_port(grpc_port, Duration::from_secs(10), "floodgate");
    crate::wait_for_port(debug_port, Duration::from_secs(10), "floodgate debug port");
    Server {
        process,
        grpc_port,
        http_port,
        debug_port,
    }
}

/// `(version, reload failures)` from the debug port's headers.
pub fn reload_headers(debug_port: u16) -> Option<(u64, u64)> {
    let response = crate::http::get(debug_port, "/rlconfig", &[]).ok()?;
    let number = |name: &str| response.header(name)?.parse::<u64>().ok();
    Some((
        number("floodgate-config-version")?,
        number("floodgate-config-reload-failures")?,
    ))
}

/// Polls `condition` every 10 ms; returns how long it took to hold, or panics after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if condition() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes `text` to `path` atomically (a temporary file renamed over it).
pub fn write_atomically(path: &Path, text: &[u8]) {
    let temporary = path.with_extension("tmp-write");
    std::fs::write(&temporary, text)
        .unwrap_or_else(|error| panic!("write {}: {error}", temporary.display()));
    std::fs::rename(&temporary, path)
        .unwrap_or_else(|error| panic!("rename to {}: {error}", path.display()));
}

/// Replaces the symlink `link` so that it points at `target`, atomically.
pub fn swap_symlink(target: &Path, link: &Path) {
    let mut name = link.file_name().unwrap_or_default().to_os_string();
    name.push("_tmp");
    let temporary = link.with_file_name(name);
    let _ = std::fs::remove_file(&temporary);
    std::os::unix::fs::symlink(target, &temporary)
        .unwrap_or_else(|error| panic!("symlink {}: {error}", temporary.display()));
    std::fs::rename(&temporary, link)
        .unwrap_or_else(|error| panic!("rename to {}: {error}", link.display()));
}

/// A directory updated the way Kubernetes updates a mounted ConfigMap: the files live in a
/// timestamped directory, `..data` points at it, and each file is a symlink through `..data`.
/// An update writes a new timestamped directory and swaps `..data` in one rename.
pub struct ConfigMapDir {
    pub dir: PathBuf,
    generation: u64,
    current: Option<(PathBuf, Vec<String>)>,
}

impl ConfigMapDir {
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|error| panic!("mkdir {}: {error}", dir.display()));
        Self {
            dir: dir.to_path_buf(),
            generation: 0,
            current: None,
        }
    }

    /// Publishes `files` (name, text), in Kubernetes' atomic writer's order: new data
    /// directory, `..data` swapped, new file symlinks, stale ones removed, old data removed.
    pub fn publish(&mut self, files: &[(&str, &str)]) {
        self.generation += 1;
        let name = format!("..2026_11_30_00_00_00.{:09}", self.generation);
        let data = self.dir.join(&name);
        std::fs::create_dir(&data)
            .unwrap_or_else(|error| panic!("mkdir {}: {error}", data.display()));
        for (file, text) in files {
            std::fs::write(data.join(file), text)
                .unwrap_or_else(|error| panic!("write {file}: {error}"));
        }
        swap_symlink(Path::new(&name), &self.dir.join("..data"));
        for (file, _) in files {
            let visible = self.dir.join(file);
            if visible.symlink_metadata().is_err() {
                std::os::unix::fs::symlink(Path::new("..data").join(file), &visible)
                    .unwrap_or_else(|error| panic!("symlink {file}: {error}"));
            }
        }
        let names: Vec<String> = files.iter().map(|(file, _)| (*file).to_owned()).collect();
        if let Some((old_data, old_names)) = self.current.take() {
            for stale in old_names.iter().filter(|old| !names.contains(old)) {
                let _ = std::fs::remove_file(self.dir.join(stale));
            }
            let _ = std::fs::remove_dir_all(old_data);
        }
        self.current = Some((data, names));
    }
}

pub fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: hits,
        ..crate::descriptor(entries)
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

/// `(name, requests_per_unit)` of a status's limit.
pub fn limit_of(status: &DescriptorStatus) -> Option<(String, u32)> {
    status
        .current_limit
        .as_ref()
        .map(|limit| (limit.name.clone(), limit.requests_per_unit))
}

/// A single-thread tokio runtime for blocking tests.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("tokio runtime: {error}"))
}
