//! Test harness for floodgate's integration tests: start real processes (floodgate, Envoy,
//! nginx, redis-server) on free loopback ports, talk plain HTTP/1.1 and gRPC to them, and stop
//! them by pid when the test ends. One module per peer or concern; what every test needs (ports,
//! temporary directories, the floodgate process) is here at the root.

pub mod adaptive;
pub mod caddy;
pub mod chromium;
pub mod delay_proxy;
pub mod envoy;
pub mod envoy_gateway;
pub mod faketime;
pub mod generated_rules;
pub mod http;
pub mod in_process;
pub mod netns;
pub mod netns_redis;
pub mod nginx;
pub mod openssl_ca;
pub mod ops;
pub mod otlp;
pub mod prom;
pub mod prometheus;
pub mod redis;
pub mod rls;
pub mod status;
pub mod testca;
pub mod xds;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A temporary directory for one test's files and logs, removed when dropped.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"))
}

/// The directory `root/name`, created: one process's files and logs apart from another's.
pub fn subdir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|error| panic!("cannot create {}: {error}", dir.display()));
    dir
}

/// `root/config`, made, with one `<domain>.yaml` per (domain, rules) of `files`: floodgate's
/// `--config` directory.
pub fn rules_dir(root: &Path, files: impl IntoIterator<Item = (String, String)>) -> PathBuf {
    let config = subdir(root, "config");
    for (domain, rules) in files {
        let file = config.join(format!("{domain}.yaml"));
        std::fs::write(&file, rules)
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", file.display()));
    }
    config
}

/// A two-thread tokio runtime for a test's async clients (a blocking test drives it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"))
}

/// Where [`free_port`] looks: below the kernel's ephemeral range (32768–60999 by default), so
/// the client sockets of tests running beside this one, which take ephemeral ports, cannot take
/// the port between the check and the server's bind.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// How many ports this process has handed out.
static PORTS_HANDED_OUT: AtomicU32 = AtomicU32::new(0);

/// The lock files of the ports this process has handed out, held until it exits.
static PORTS_RESERVED: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// A free TCP port on 127.0.0.1, never the same twice in one test process (two tests that each
/// ask for one cannot be handed the same) nor in two test processes running at once: the next
/// one of [`TEST_PORTS`] that binds and that no other test process has reserved, starting at an
/// offset of the process id so that two test processes at once start apart.
pub fn free_port() -> u16 {
    let span = u32::from(TEST_PORTS.end - TEST_PORTS.start);
    let offset = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let turn = PORTS_HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let candidate = TEST_PORTS.start + ((offset + turn) % span) as u16;
        if TcpListener::bind(("127.0.0.1", candidate)).is_ok() && reserve(candidate) {
            return candidate;
        }
    }
    panic!("no free port on 127.0.0.1 in {TEST_PORTS:?}")
}

/// Takes `port` for this process, unless another test process has: between a port's check and
/// its server's bind, a second suite running beside this one (another checkout's, a fuzzer's)
/// could otherwise hand out the same port, and a test would then talk to that suite's server.
/// An exclusive lock on a file per port, released by the kernel when the process ends. Where
/// no lock file can be made, the check that the port binds is all there is.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("floodgate-test-ports");
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{port}.lock")))
    });
    let Ok(file) = file else {
        return true;
    };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            PORTS_RESERVED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(file);
            true
        }
        Err(rustix::io::Errno::WOULDBLOCK) => false,
        Err(_) => true,
    }
}

/// Waits until something accepts connections on `port`, or panics after `timeout`.
pub fn wait_for_port(port: u16, timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on 127.0.0.1:{port} within {timeout:?}");
}

/// A child process killed (by pid) when dropped.
pub struct Running {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Running {
    pub fn spawn(name: &str, command: &mut Command, log_dir: &Path) -> Running {
        let log = log_dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log)
            .unwrap_or_else(|error| panic!("cannot create {}: {error}", log.display()));
        let log_err = log_file
            .try_clone()
            .unwrap_or_else(|error| panic!("cannot clone log handle: {error}"));
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name} ({command:?}): {error}"));
        Running {
            name: name.to_owned(),
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit; returns its exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        self.exit_within(timeout)
    }

    /// Waits up to `timeout` for the process to exit on its own; its exit status, or `None`
    /// if it still runs (it is killed when dropped).
    pub fn exit_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// The log of a process that should refuse to start: it must exit with an error within
    /// `timeout` (one still running is reported, and killed when dropped).
    pub fn log_of_a_refused_start(&mut self, timeout: Duration) -> String {
        let status = self.exit_within(timeout);
        let log = self.log_text();
        assert!(
            status.is_some_and(|status| !status.success()),
            "{} should have exited with an error: {status:?}\n{log}",
            self.name
        );
        log
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it contains `needle`, or as it is after `timeout`.
    pub fn log_once_it_says(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log_text();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The flags that turn the admin API on: `token` in `dir/admin-token` (an existing file is
/// kept, so a second instance shares it) and a free loopback port. The flags, then the port.
pub fn admin_api(dir: &Path, token: &str) -> (Vec<String>, u16) {
    let token_file = dir.join("admin-token");
    if !token_file.exists() {
        std::fs::write(&token_file, format!("{token}\n"))
            .unwrap_or_else(|error| panic!("write {}: {error}", token_file.display()));
    }
    let port = free_port();
    let flags = vec![
        "--admin-token-file".to_owned(),
        token_file.display().to_string(),
        "--admin-addr".to_owned(),
        format!("127.0.0.1:{port}"),
    ];
    (flags, port)
}

/// The repository's root: this crate lives in its `testkit/` directory.
fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("{} has no parent", env!("CARGO_MANIFEST_DIR")))
}

/// A file of this repository, by its path from the repository's root.
pub fn repo_file(relative: &str) -> PathBuf {
    repo_root().join(relative)
}

/// The floodgate binary cargo built for these tests. `CARGO_BIN_EXE_floodgate` is only known
/// when compiling the package's own integration tests (this crate is a library), so it is read
/// at run time where cargo sets it, and otherwise found beside the running test binary: cargo
/// builds the package's binaries before its integration tests, into the directory above
/// `deps/`, where the test binaries are.
pub fn floodgate_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_floodgate") {
        return PathBuf::from(path);
    }
    let test_binary =
        std::env::current_exe().unwrap_or_else(|error| panic!("current_exe: {error}"));
    let bin = test_binary
        .parent()
        .and_then(Path::parent)
        .map(|profile_dir| profile_dir.join("floodgate"))
        .unwrap_or_else(|| panic!("no profile directory above {}", test_binary.display()));
    assert!(
        bin.is_file(),
        "{} missing: run the tests with cargo test, which builds it",
        bin.display()
    );
    bin
}

/// The Envoy 1.40 binary: `$FLOODGATE_ENVOY`, the project's `.venv/bin/envoy`, or `envoy` on PATH.
/// Missing Envoy fails the test: `scripts/install-peers.sh` installs it.
pub fn envoy_bin() -> PathBuf {
    if let Ok(path) = std::env::var("FLOODGATE_ENVOY") {
        return PathBuf::from(path);
    }
    let venv = repo_file(".venv/bin/envoy");
    if venv.exists() {
        return venv;
    }
    which("envoy").unwrap_or_else(|| {
        panic!("Envoy 1.40 not found: run scripts/install-peers.sh (or set FLOODGATE_ENVOY)")
    })
}

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    })
}

/// The addresses a floodgate under test listens on.
pub struct Floodgate {
    pub process: Running,
    pub grpc_port: u16,
    pub http_port: u16,
    pub debug_port: u16,
}

/// A ShouldRateLimit descriptor of `entries` (key, value), with no hits or limit of its own.
pub fn descriptor(entries: &[(&str, &str)]) -> floodgate::proto::RateLimitDescriptor {
    floodgate::proto::RateLimitDescriptor {
        entries: entries
            .iter()
            .map(
                |(key, value)| floodgate::proto::rate_limit_descriptor::Entry {
                    key: (*key).to_owned(),
                    value: (*value).to_owned(),
                },
            )
            .collect(),
        ..Default::default()
    }
}

/// `floodgate serve` with its gRPC, HTTP and debug listeners on free loopback ports (returned in
/// that order); the caller adds the rest of the command line and the environment.
pub fn serve_command() -> (Command, (u16, u16, u16)) {
    let ports = (free_port(), free_port(), free_port());
    let mut command = Command::new(floodgate_bin());
    command
        .arg("serve")
        .arg("--grpc-addr")
        .arg(format!("127.0.0.1:{}", ports.0))
        .arg("--http-addr")
        .arg(format!("127.0.0.1:{}", ports.1))
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{}", ports.2));
    patient_redis_deadline(&mut command);
    (command, ports)
}

/// The deadline per Redis decision, in milliseconds, that the tests' floodgates get instead of
/// floodgate's 25 ms default: on two shared cores running the whole suite, a debug floodgate
/// misses 25 ms now and then with nothing wrong, and a test about something else fails on it.
pub const PATIENT_REDIS_TIMEOUT_MS: &str = "2000";

/// [`PATIENT_REDIS_TIMEOUT_MS`] for the floodgate `command` starts, set through the reference's
/// `REDIS_TIMEOUT`, which both doors read last: a test's own `--redis-timeout-ms`,
/// `FLOODGATE_REDIS_TIMEOUT_MS` or `REDIS_TIMEOUT` still wins, as the deadline tests need.
pub fn patient_redis_deadline(command: &mut Command) {
    command.env("REDIS_TIMEOUT", format!("{PATIENT_REDIS_TIMEOUT_MS}ms"));
}

/// The binary under envoyproxy/ratelimit's name (a `ratelimit` link in `dir`, as `/bin/ratelimit`
/// in the image) with the reference's environment: the rules under `RUNTIME_ROOT=dir`,
/// `RUNTIME_SUBDIRECTORY=.` (so in `dir/config/`), the gRPC, HTTP and debug listeners on free
/// loopback ports (returned in that order).
pub fn ratelimit_command(dir: &Path) -> (Command, (u16, u16, u16)) {
    let link = dir.join("ratelimit");
    std::os::unix::fs::symlink(floodgate_bin(), &link)
        .unwrap_or_else(|error| panic!("cannot link {}: {error}", link.display()));
    let ports = (free_port(), free_port(), free_port());
    let mut command = Command::new(&link);
    command
        .env("RUNTIME_ROOT", dir)
        .env("RUNTIME_SUBDIRECTORY", ".");
    reference_listeners(&mut command, ports);
    patient_redis_deadline(&mut command);
    (command, ports)
}

/// The reference's listener variables: gRPC, HTTP and debug on loopback at `ports`, in that
/// order.
pub fn reference_listeners(command: &mut Command, ports: (u16, u16, u16)) {
    command
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", ports.0.to_string())
        .env("HOST", "127.0.0.1")
        .env("PORT", ports.1.to_string())
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", ports.2.to_string());
}

impl Floodgate {
    /// Starts `floodgate serve --config <config>` plus `extra` flags on free ports.
    pub fn start(config: &Path, extra: &[&str], log_dir: &Path) -> Floodgate {
        Self::start_with_env(config, extra, &[], log_dir)
    }

    /// `start`, with `env` added to floodgate's environment (e.g. libfaketime's `LD_PRELOAD`).
    pub fn start_with_env(
        config: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
        log_dir: &Path,
    ) -> Floodgate {
        let (mut command, (grpc_port, http_port, debug_port)) = serve_command();
        command
            .arg("--config")
            .arg(config)
            .args(extra)
            .env("LOG_LEVEL", "debug")
            .envs(env.iter().copied());
        let process = Running::spawn("floodgate", &mut command, log_dir);
        wait_for_port(grpc_port, Duration::from_secs(10), "floodgate");
        Floodgate {
            process,
            grpc_port,
            http_port,
            debug_port,
        }
    }

    /// Writes `rules` to `dir/file_name` and starts floodgate on it, ready on gRPC and HTTP.
    pub fn start_with_rules(dir: &Path, file_name: &str, rules: &str, extra: &[&str]) -> Floodgate {
        let config = dir.join(file_name);
        std::fs::write(&config, rules).unwrap_or_else(|error| panic!("write config: {error}"));
        let floodgate = Floodgate::start(&config, extra, dir);
        wait_for_port(
            floodgate.http_port,
            Duration::from_secs(10),
            "floodgate HTTP",
        );
        floodgate
    }

    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_port_handed_out_is_reserved_against_other_test_processes() {
        let port = super::free_port();
        // A second lock on the port's file, from another open of it, is what another process
        // would try: it must fail while this process holds the port.
        assert!(!super::reserve(port), "port {port} was handed out twice");
        assert_ne!(super::free_port(), port);
    }
}
