//! Real `redis-server` processes for the Redis store's tests: each on a free loopback port
//! (never 6379), with no persistence, stopped by pid when dropped. Plus small builders for
//! counters and a connection to inspect what the store wrote.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::core::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::key::counter_key;
use floodgate::core::plan::Counter;
use floodgate::core::rules::{Entry, MatchedLevel};
use floodgate::core::time::Clock;
use floodgate::core::verdict::Role;
use floodgate::store::redis::{RedisOptions, RedisStore};

const REDIS_SERVER: &str = "redis-server";

/// How long a fresh server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// One redis-server process.
pub struct RedisServer {
    port: u16,
    extra_args: Vec<String>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments.
    pub fn start_with(extra_args: &[&str]) -> Self {
        let mut last_error = String::new();
        // A port found free can be taken before the server binds it: try a few.
        for _ in 0..5 {
            let mut server = Self {
                port: free_port(),
                extra_args: extra_args.iter().map(|arg| (*arg).to_owned()).collect(),
                child: None,
                dir: tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}")),
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("cannot start {REDIS_SERVER}: {last_error}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join("redis.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| format!("cannot open {}: {error}", log_path.display()))?;
        let log_err = log.try_clone().map_err(|error| error.to_string())?;
        let child = Command::new(REDIS_SERVER)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .map_err(|error| format!("cannot run {REDIS_SERVER}: {error}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                self.child = None;
                return Err(format!("exited with {status}: {log}"));
            }
            if ping(self.port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        Err(format!(
            "no PONG on port {} within {START_TIMEOUT:?}",
            self.port
        ))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(Child::id)
            .unwrap_or_else(|| panic!("redis-server on port {} is not running", self.port))
    }

    /// SIGSTOP: the server keeps its socket but answers nothing.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// Kills the server (its data is gone: no persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "-CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn()
            .unwrap_or_else(|error| panic!("cannot restart redis-server: {error}"));
    }

    /// A connection for inspecting and poking the server directly.
    pub async fn inspector(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(self.url())
            .unwrap_or_else(|error| panic!("bad URL {}: {error}", self.url()));
        client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|error| panic!("cannot inspect redis on {}: {error}", self.port))
    }

    /// Options for a store on this server with a generous deadline (debug builds on a busy
    /// 2-core machine), deciding with `clock` when given.
    pub fn options(&self, clock: Option<Arc<dyn Clock>>) -> RedisOptions {
        let mut options = RedisOptions::new(self.url());
        options.timeout = Duration::from_secs(2);
        options.test_clock = clock;
        options
    }

    pub async fn store(&self, clock: Option<Arc<dyn Clock>>) -> RedisStore {
        RedisStore::connect(&self.options(clock))
            .await
            .unwrap_or_else(|error| panic!("cannot connect the store: {error}"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|error| panic!("cannot find a free port: {error}"))
}

fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    // A server with a password answers -NOAUTH: it is up all the same.
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok()
        && (&reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH"))
}

fn signal(pid: u32, which: &str) {
    let status = Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status();
    if !status.is_ok_and(|status| status.success()) {
        panic!("kill {which} {pid} failed");
    }
}

/// Every key under `pattern`, by SCAN.
pub async fn scan_keys(
    connection: &mut redis::aio::MultiplexedConnection,
    pattern: &str,
) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(connection)
            .await
            .unwrap_or_else(|error| panic!("SCAN failed: {error}"));
        keys.extend(batch);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

/// The identity of a counter of rule `domain.key` for `value`, as the planner builds it.
pub fn identity(
    domain: &str,
    key: &str,
    value: &str,
    limit_index: usize,
    quota: &Quota,
) -> Vec<u8> {
    let entries = [Entry::new(key, value)];
    let levels = [MatchedLevel::Exact];
    counter_key(
        domain,
        &format!("{domain}.{key}_{value}"),
        limit_index,
        quota,
        &entries,
        &levels,
    )
}

pub fn counter(descriptor: usize, key: &[u8], quota: &Quota, hits: Hits, role: Role) -> Counter {
    Counter {
        descriptor,
        key: key.to_vec(),
        quota: quota.clone(),
        hits,
        role,
    }
}

/// Every algorithm, with a quota of `limit` per `window` that admits exactly `limit` hits on a
/// fresh counter (leaky bucket: burst = limit − 1).
pub fn quota_admitting(
    algorithm: Algorithm,
    limit: u32,
    unit: floodgate::core::unit::Unit,
) -> Quota {
    let quota = Quota::new(limit, unit).with_algorithm(algorithm);
    match algorithm {
        Algorithm::TokenBucket => quota.with_burst(limit),
        Algorithm::LeakyBucket => quota.with_burst(limit.saturating_sub(1)),
        _ => quota,
    }
}
