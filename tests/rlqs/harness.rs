//! What the RLQS tests share: floodgate on a chosen gRPC port (so a restart keeps it), Envoy
//! on the guide's bootstrap pointed at it, and paced load whose answers are kept by time.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::{
    floodgate_bin, free_port, patient_redis_deadline, repo_file, subdir, wait_for_port, Running,
};

/// Rules of domain `edge` with one limit of `per_second` on every value of `tenant`.
pub fn tenant_rules(per_second: u32) -> String {
    format!(
        "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: second, requests_per_unit: {per_second}}}\n"
    )
}

/// A floodgate with [`tenant_rules`] and `extra` flags, and one Envoy in front of it (with its
/// log file).
pub fn one_envoy(
    dir: &Path,
    per_second: u32,
    extra: &[&str],
) -> (Running, Envoy, std::path::PathBuf) {
    let grpc = free_port();
    let floodgate = start_floodgate(dir, &tenant_rules(per_second), grpc, extra);
    let (envoy, log) = start_envoy(dir, "envoy", grpc);
    (floodgate, envoy, log)
}

/// floodgate serving `rules` (domain `edge`) with its gRPC listener on `grpc_port`.
pub fn start_floodgate(dir: &Path, rules: &str, grpc_port: u16, extra: &[&str]) -> Running {
    let rules_dir = subdir(dir, "rules");
    std::fs::write(rules_dir.join("edge.yaml"), rules)
        .unwrap_or_else(|error| panic!("cannot write the rules: {error}"));
    let mut command = Command::new(floodgate_bin());
    command
        .arg("serve")
        .arg("--config")
        .arg(&rules_dir)
        .arg("--grpc-addr")
        .arg(format!("127.0.0.1:{grpc_port}"))
        .arg("--http-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(extra)
        .env("LOG_LEVEL", "debug");
    patient_redis_deadline(&mut command);
    let process = Running::spawn("floodgate", &mut command, dir);
    wait_for_port(grpc_port, Duration::from_secs(20), "floodgate");
    process
}

/// Envoy on `deploy/envoy/rlqs.yaml`, its RLQS cluster at `grpc_port`, logging the filter's
/// work (reports, assignments, abandons) at debug level into `dir/name/envoy.log`.
pub fn start_envoy(dir: &Path, name: &str, grpc_port: u16) -> (Envoy, std::path::PathBuf) {
    start_envoy_with(dir, name, grpc_port, |bootstrap| bootstrap)
}

/// [`start_envoy`] on the guide's bootstrap as `edit` changes it.
pub fn start_envoy_with(
    dir: &Path,
    name: &str,
    grpc_port: u16,
    edit: impl FnOnce(String) -> String,
) -> (Envoy, std::path::PathBuf) {
    let path = repo_file("deploy/envoy/rlqs.yaml");
    let template = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let template = edit(template);
    let (edge, admin) = (free_port(), free_port());
    let bootstrap = template
        .replace("port_value: 10000", &format!("port_value: {edge}"))
        .replace("port_value: 9903", &format!("port_value: {admin}"))
        .replace("port_value: 8081", &format!("port_value: {grpc_port}"));
    let own = subdir(dir, name);
    let envoy = Envoy::start_with_args(
        &bootstrap,
        "rlqs.yaml",
        &own,
        &[edge],
        &["--component-log-level", "rate_limit_quota:debug"],
    );
    (envoy, own.join("envoy.log"))
}

/// Requests sent at a set rate (changeable while running) with one header, each answer kept
/// with the time it came.
pub struct Load {
    answers: Arc<Mutex<Vec<(Instant, u16)>>>,
    millis_per_second: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    pub fn start(port: u16, header: (&str, &str), per_second: f64) -> Load {
        Self::with_headers(port, &[header], per_second)
    }

    /// [`Load::start`] with several headers on every request.
    pub fn with_headers(port: u16, headers: &[(&str, &str)], per_second: f64) -> Load {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let rate = Arc::new(AtomicU64::new((per_second * 1000.0) as u64));
        let stop = Arc::new(AtomicBool::new(false));
        let headers: String = headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}\r\n"))
            .collect();
        let thread = {
            let (answers, rate, stop) = (answers.clone(), rate.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut client = KeepAlive::new(port);
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep(next - now);
                    }
                    let per_second = rate.load(Ordering::Relaxed).max(1) as f64 / 1000.0;
                    next += Duration::from_secs_f64(1.0 / per_second);
                    // Behind by more than a second (a stalled host): do not burst to catch up.
                    next = next.max(Instant::now() - Duration::from_secs(1));
                    let status = client.get(&headers);
                    lock(&answers).push((Instant::now(), status));
                }
            })
        };
        Load {
            answers,
            millis_per_second: rate,
            stop,
            thread: Some(thread),
        }
    }

    pub fn set_rate(&self, per_second: f64) {
        self.millis_per_second
            .store((per_second * 1000.0) as u64, Ordering::Relaxed);
    }

    /// Answers with `status` and all answers, from `from` to `to`.
    pub fn count(&self, from: Instant, to: Instant, status: u16) -> (usize, usize) {
        let answers = lock(&self.answers);
        let within: Vec<u16> = answers
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, status)| *status)
            .collect();
        (
            within.iter().filter(|s| **s == status).count(),
            within.len(),
        )
    }

    /// Requests admitted (200) per second from `from` to `to`.
    pub fn admitted_rate(&self, from: Instant, to: Instant) -> f64 {
        let (admitted, _) = self.count(from, to, 200);
        admitted as f64 / (to - from).as_secs_f64()
    }

    /// Requests answered (any status) per second from `from` to `to`: what was offered.
    pub fn offered_rate(&self, from: Instant, to: Instant) -> f64 {
        let (_, all) = self.count(from, to, 200);
        all as f64 / (to - from).as_secs_f64()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// HTTP/1.1 on one kept-alive connection: Envoy holds a connection it was asked to close
/// for its delayed_close_timeout (1 s) after answering, so one connection per request would
/// pace the load at one request a second.
struct KeepAlive {
    port: u16,
    connection: Option<BufReader<TcpStream>>,
}

impl KeepAlive {
    fn new(port: u16) -> Self {
        Self {
            port,
            connection: None,
        }
    }

    /// The status of `GET /` with `headers` (each line with its CRLF); 0 if the request
    /// failed (the connection is made anew for the next).
    fn get(&mut self, headers: &str) -> u16 {
        match self.try_get(headers) {
            Ok(status) => status,
            Err(_) => {
                self.connection = None;
                0
            }
        }
    }

    fn try_get(&mut self, headers: &str) -> std::io::Result<u16> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => {
                let stream = TcpStream::connect(("127.0.0.1", self.port))?;
                stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                self.connection.insert(BufReader::new(stream))
            }
        };
        let request = format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n");
        connection.get_mut().write_all(request.as_bytes())?;
        let mut line = String::new();
        connection.read_line(&mut line)?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no status line: {line:?}")))?;
        let mut length = 0usize;
        loop {
            line.clear();
            if connection.read_line(&mut line)? == 0 {
                return Err(std::io::Error::other("closed in the headers"));
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((key, number)) = header.split_once(':') {
                if key.eq_ignore_ascii_case("content-length") {
                    length = number.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        connection.read_exact(&mut body)?;
        Ok(status)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits (bounded) until `condition` holds, checking every 100 ms; panics with `what`.
pub fn wait_until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sleeps until `at` (at once if it has passed).
pub fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// `file`'s text once it contains `needle` `times` times, or panics after `timeout`.
pub fn wait_for_log(file: &Path, needle: &str, times: usize, timeout: Duration) -> String {
    let mut text = String::new();
    wait_until(
        timeout,
        &format!("{times}× '{needle}' in {}", file.display()),
        || {
            text = std::fs::read_to_string(file).unwrap_or_default();
            text.matches(needle).count() >= times
        },
    );
    text
}
