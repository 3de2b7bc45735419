//! Real `redis-server` processes for the Redis store's tests: each on a free loopback port
//! (never 6379), with no persistence, stopped by pid when dropped. Plus small builders for
//! counters and a connection to inspect what the store wrote.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::decision::key::counter_key;
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::time::Clock;
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::rules::MatchedLevel;
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::{RedisOptions, RedisStore, Topology};
use floodgate::store::{Decided, Store, StoreError};
use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::Rng;

const REDIS_SERVER: &str = "redis-server";

/// The `--redis-batch-max` values the store's tests run with where they drive it: one script
/// call per request, and calls that carry several.
pub const BATCH_MAXES: [usize; 2] = [1, 8];

/// How long a fresh server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// One redis-server process.
pub struct RedisServer {
    port: u16,
    extra_args: Vec<String>,
    /// Added to the server's environment (e.g. `faketime::FakeClock::env`).
    env: Vec<(String, String)>,
    /// The `--requirepass` password, which `query_text` then gives redis-cli.
    password: Option<String>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--name value` arguments.
    pub fn start_with(extra_args: &[&str]) -> Self {
        first_start(REDIS_SERVER, || Self::spawned(owned(extra_args)))
    }

    /// Starts a server with `env` added to its environment (libfaketime's, for one).
    pub fn start_with_env(env: &[(String, String)]) -> Self {
        first_start(REDIS_SERVER, || {
            Self::spawned_with(Vec::new(), env.to_vec())
        })
    }

    /// Starts a server that asks clients for `password` (`--requirepass`), with `extra_args`.
    pub fn start_with_password(password: &str, extra_args: &[&str]) -> Self {
        let mut args = vec!["--requirepass", password];
        args.extend_from_slice(extra_args);
        Self::start_with(&args)
    }

    /// Starts a server that also accepts TLS on a second free port (returned), with `tls_args`
    /// (`--tls-cert-file`, …) added; `port()` stays plain, for readiness and `inspector()`.
    pub fn start_tls(tls_args: &[&str]) -> (Self, u16) {
        first_start(&format!("{REDIS_SERVER} with TLS"), || {
            let tls_port = free_port();
            let mut extra_args = vec!["--tls-port".to_owned(), tls_port.to_string()];
            extra_args.extend(owned(tls_args));
            Self::spawned(extra_args).map(|server| (server, tls_port))
        })
    }

    /// A server on a free port, answering PING.
    fn spawned(extra_args: Vec<String>) -> Result<Self, String> {
        Self::spawned_with(extra_args, Vec::new())
    }

    fn spawned_with(extra_args: Vec<String>, env: Vec<(String, String)>) -> Result<Self, String> {
        let password = extra_args
            .windows(2)
            .find(|pair| pair[0] == "--requirepass")
            .map(|pair| pair[1].clone());
        let mut server = Self {
            port: free_port(),
            extra_args,
            env,
            password,
            child: None,
            dir: tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}")),
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new(REDIS_SERVER);
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(name, value)| (name, value)));
        let child = spawn_until_pong(&mut command, self.port, &self.dir.path().join("redis.log"))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL, without credentials (a password is for the client to add).
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
        connect_url(&self.url(), "inspect redis").await
    }

    /// The same, or the error, for a server that may be dropping its clients (a master being
    /// demoted in a failover closes every connection, even one still in its handshake).
    pub async fn try_inspector(&self) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        try_connect_url(&self.url()).await
    }

    /// The server's clients (`CLIENT LIST`), one line each, the connection asking included
    /// (its line says `cmd=client`).
    pub async fn client_list(&self) -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut self.inspector().await)
            .await
            .unwrap_or_else(|error| panic!("CLIENT LIST: {error}"));
        list.lines().map(str::to_owned).collect()
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

    /// A store whose script calls decide up to `batch_max` requests.
    pub async fn batching_store(
        &self,
        clock: Option<Arc<dyn Clock>>,
        batch_max: usize,
    ) -> RedisStore {
        let mut options = self.options(clock);
        options.batch_max = batch_max;
        RedisStore::connect(&options)
            .await
            .unwrap_or_else(|error| panic!("cannot connect the store: {error}"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

pub use crate::free_port;

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

/// `attempt` until it starts something, a few times: a port found free can be taken before
/// the server binds it.
fn first_start<T>(what: &str, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let mut last_error = String::new();
    for _ in 0..5 {
        match attempt() {
            Ok(started) => return started,
            Err(error) => last_error = error,
        }
    }
    panic!("cannot start {what}: {last_error}");
}

/// Runs `command` with stdout and stderr appended to `log_path`.
fn spawn_logged(command: &mut Command, log_path: &Path) -> Result<Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|error| format!("cannot open {}: {error}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|error| error.to_string())?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .spawn()
        .map_err(|error| format!("cannot run {command:?}: {error}"))
}

/// Runs `command` (logging to `log_path`) until it answers PING on `port`; the child, or why
/// not (it exited, or stayed silent past START_TIMEOUT and was killed).
fn spawn_until_pong(command: &mut Command, port: u16, log_path: &Path) -> Result<Child, String> {
    let mut child = spawn_logged(command, log_path)?;
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            return Err(format!("exited with {status}: {log}"));
        }
        if ping(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("no PONG on port {port} within {START_TIMEOUT:?}"))
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
        share: floodgate::core::arithmetic::algorithm::Share::FULL,
    }
}

/// Every algorithm, with a quota of `limit` per `window` that admits exactly `limit` hits on a
/// fresh counter (leaky bucket: burst = limit − 1).
pub fn quota_admitting(algorithm: Algorithm, limit: u32, unit: Unit) -> Quota {
    let quota = Quota::new(limit, unit).with_algorithm(algorithm);
    match algorithm {
        Algorithm::TokenBucket => quota.with_burst(limit),
        Algorithm::LeakyBucket => quota.with_burst(limit.saturating_sub(1)),
        _ => quota,
    }
}

/// Rules of `domain` with one descriptor per algorithm, keyed by the algorithm's name, each
/// admitting exactly `limit` per `unit` on a fresh counter (the bursts of `quota_admitting`;
/// `leaky_bucket` is GCRA, nginx's `limit_req`: burst `limit − 1` admits `limit` at once).
pub fn every_algorithm_rules(domain: &str, limit: u32, unit: Unit) -> String {
    let unit_name = unit.name().to_ascii_lowercase();
    let mut rules = format!("domain: {domain}\ndescriptors:\n");
    for algorithm in Algorithm::ALL {
        let name = algorithm.name();
        let burst = quota_admitting(algorithm, limit, unit)
            .burst
            .map(|burst| format!(", burst: {burst}"))
            .unwrap_or_default();
        rules.push_str(&format!(
            "  - key: {name}\n    rate_limit: {{unit: {unit_name}, requests_per_unit: {limit}, \
             algorithm: {name}{burst}}}\n"
        ));
    }
    rules
}

/// A step's requests, each with global shadow mode one time in twenty, for a store deciding up
/// to `batch_max` per call: one when each is a call of its own (so seeded sequences stay what
/// they were), else a burst of 1 to `batch_max` to make at once (`decide_together`).
pub fn burst<T>(
    rng: &mut StdRng,
    batch_max: usize,
    mut request: impl FnMut(&mut StdRng) -> T,
) -> Vec<(T, bool)> {
    let size = if batch_max > 1 {
        rng.random_range(1..=batch_max)
    } else {
        1
    };
    (0..size)
        .map(|_| (request(rng), rng.random_bool(0.05)))
        .collect()
}

/// `requests` (counters, global shadow) made to `store` at once: polled in order, so they
/// reach it in this order and a batching store may decide them in one call. The answers, in
/// order.
pub async fn decide_together(
    store: &RedisStore,
    requests: &[(Vec<Counter>, bool)],
) -> Vec<Result<Decided, StoreError>> {
    join_all(
        requests
            .iter()
            .map(|(counters, global_shadow)| store.decide(counters, *global_shadow)),
    )
    .await
}

/// `requests` decided by `memory` one after the other, as a batch must decide them.
pub fn decide_in_turn(memory: &MemoryStore, requests: &[(Vec<Counter>, bool)]) -> Vec<Decided> {
    requests
        .iter()
        .map(|(counters, global_shadow)| {
            memory
                .decide_now(counters, *global_shadow)
                .unwrap_or_else(|error| panic!("the memory store failed: {error}"))
        })
        .collect()
}

/// The decision script calls (`EVALSHA`) the server behind `inspector` has run so far (`INFO
/// commandstats`).
pub async fn script_calls(inspector: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(inspector, "evalsha").await
}

/// The calls of `command` (lower case, as `INFO commandstats` names it) the server behind
/// `inspector` has run so far.
pub async fn command_calls(
    inspector: &mut redis::aio::MultiplexedConnection,
    command: &str,
) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("INFO commandstats failed: {error}"));
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// `floodgate serve` flags for the Redis store at `url`, with the tests' patient deadline
/// ([`crate::PATIENT_REDIS_TIMEOUT_MS`]) as a flag, for starts that do not go through
/// [`crate::serve_command`], then `extra`.
pub fn store_flags<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec![
        "--store",
        "redis",
        "--redis-url",
        url,
        "--redis-timeout-ms",
        crate::PATIENT_REDIS_TIMEOUT_MS,
    ];
    flags.extend_from_slice(extra);
    flags
}

/// How long `redis-cli --cluster create` and the nodes' agreement on it may take.
const CLUSTER_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A Redis Cluster of masters without replicas: `redis-server --cluster-enabled yes` processes
/// (each with its own directory, port and bus port), joined by `redis-cli --cluster create`.
/// Stopped by pid when dropped, like every `RedisServer`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// With `start_tls`: each node's TLS port (clients get these from `CLUSTER SLOTS` over TLS).
    pub tls_ports: Vec<u16>,
}

impl RedisCluster {
    /// Starts `masters` nodes (3 or more: `redis-cli` refuses fewer) and waits until every
    /// node reports `cluster_state:ok` and knows every other.
    pub fn start(masters: usize) -> Self {
        Self::start_nodes(masters, None, None)
    }

    /// `start`, every node asking clients for `password` (`--requirepass`, as
    /// envoyproxy/ratelimit's own test cluster does).
    pub fn start_with_password(masters: usize, password: &str) -> Self {
        Self::start_nodes(masters, None, Some(password))
    }

    /// `start`, every node also serving TLS (and the cluster bus over TLS) with `tls_args`
    /// (`--tls-cert-file`, …, as `RedisServer::start_tls`); the plain ports stay, for
    /// `redis-cli --cluster create` and inspection.
    pub fn start_tls(masters: usize, tls_args: &[&str]) -> Self {
        Self::start_nodes(masters, Some(tls_args), None)
    }

    fn start_nodes(masters: usize, tls_args: Option<&[&str]>, password: Option<&str>) -> Self {
        let mut nodes = Vec::with_capacity(masters);
        let mut tls_ports = Vec::new();
        for _ in 0..masters {
            // An explicit bus port: the default (port + 10000) can pass 65535.
            let bus_port = free_port().to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus_port,
            ];
            if let Some(password) = password {
                args.extend_from_slice(&["--requirepass", password]);
            }
            match tls_args {
                None => nodes.push(RedisServer::start_with(&args)),
                Some(tls_args) => {
                    args.extend_from_slice(&["--tls-cluster", "yes"]);
                    args.extend_from_slice(tls_args);
                    let (node, tls_port) = RedisServer::start_tls(&args);
                    nodes.push(node);
                    tls_ports.push(tls_port);
                }
            }
        }
        // A TLS cluster bus is joined through the TLS ports: the nodes announce those.
        let mut create = Command::new("redis-cli");
        let ports: Vec<u16> = match tls_args {
            None => nodes.iter().map(RedisServer::port).collect(),
            Some(tls_args) => {
                let ca = tls_args
                    .windows(2)
                    .find(|pair| pair[0] == "--tls-ca-cert-file")
                    .map(|pair| pair[1])
                    .unwrap_or_else(|| panic!("a TLS cluster needs --tls-ca-cert-file"));
                create.args(["--tls", "--cacert", ca]);
                tls_ports.clone()
            }
        };
        if let Some(password) = password {
            create.args(["-a", password, "--no-auth-warning"]);
        }
        create.args(["--cluster", "create"]);
        for port in ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let output = run_bounded(&mut create, CLUSTER_START_TIMEOUT);
        let cluster = Self { nodes, tls_ports };
        let deadline = Instant::now() + CLUSTER_START_TIMEOUT;
        while !cluster.ready() {
            if Instant::now() > deadline {
                panic!("the cluster did not become ready: redis-cli said {output}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    fn ready(&self) -> bool {
        self.nodes.iter().all(|node| {
            let info = node.query_text(&["CLUSTER", "INFO"]).unwrap_or_default();
            info.contains("cluster_state:ok")
                && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
        })
    }

    /// `host:port,host:port,…`, as envoyproxy/ratelimit's REDIS_URL names cluster seeds.
    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The seeds' TLS ports, as `seeds` (after `start_tls`).
    pub fn tls_seeds(&self) -> String {
        self.tls_ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Options for a store on this cluster (generous deadline, as `RedisServer::options`).
    pub fn options(&self, clock: Option<Arc<dyn Clock>>) -> RedisOptions {
        let mut options = RedisOptions::new(self.seeds());
        options.topology = Topology::Cluster;
        options.timeout = Duration::from_secs(2);
        options.connect_timeout = Duration::from_secs(5);
        options.test_clock = clock;
        options
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.nodes[0]
            .query_text(&["CLUSTER", "KEYSLOT", key])
            .and_then(|slot| slot.trim().parse().ok())
            .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key} failed"))
    }

    /// The index (into `nodes`) of the master that serves `slot`.
    pub fn owner_of(&self, slot: u16) -> usize {
        self.nodes
            .iter()
            .position(|node| node.own_slots().iter().any(|range| range.contains(&slot)))
            .unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    /// The keys each node holds, by SCAN on each node itself.
    pub async fn keys_per_node(&self, pattern: &str) -> Vec<Vec<String>> {
        let mut keys = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            keys.push(scan_keys(&mut node.inspector().await, pattern).await);
        }
        keys
    }

    /// `SCRIPT FLUSH` on every node: the next decisions meet `NOSCRIPT`.
    pub fn flush_scripts(&self) {
        for node in &self.nodes {
            let reply = node.query_text(&["SCRIPT", "FLUSH"]);
            assert_eq!(reply.as_deref().map(str::trim), Some("OK"), "SCRIPT FLUSH");
        }
    }
}

impl RedisServer {
    /// One command through `redis-cli`, its output as text (`None` if redis-cli failed).
    pub fn query_text(&self, args: &[&str]) -> Option<String> {
        let mut command = Command::new("redis-cli");
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(password) = &self.password {
            command.args(["-a", password, "--no-auth-warning"]);
        }
        let output = command.args(args).stdin(Stdio::null()).output().ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The slot ranges this cluster node serves (its own `CLUSTER NODES` line).
    pub fn own_slots(&self) -> Vec<std::ops::RangeInclusive<u16>> {
        let nodes = self.query_text(&["CLUSTER", "NODES"]).unwrap_or_default();
        let Some(line) = nodes.lines().find(|line| line.contains("myself")) else {
            return Vec::new();
        };
        line.split_whitespace()
            .skip(8)
            .filter_map(|range| {
                let (start, end) = range.split_once('-').unwrap_or((range, range));
                Some(start.parse().ok()?..=end.parse().ok()?)
            })
            .collect()
    }
}

/// Runs `command` to its end within `timeout` (killed by pid past it); its stdout and stderr.
fn run_bounded(command: &mut Command, timeout: Duration) -> String {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
    let log_path = dir.path().join("output.log");
    let mut child = spawn_logged(command, &log_path).unwrap_or_else(|error| panic!("{error}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(status.success(), "{command:?} failed ({status}): {output}");
    output
}

/// One Redis Sentinel process (`redis-server sentinel.conf --sentinel`) watching one master, on
/// a free loopback port, stopped by pid when dropped.
pub struct SentinelServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl SentinelServer {
    /// Watches the master `name` at 127.0.0.1:`master_port` alone (quorum 1), calling it down
    /// after `down_after_ms` without an answer.
    pub fn start(name: &str, master_port: u16, down_after_ms: u64) -> Self {
        Self::start_with_auth(name, master_port, down_after_ms, None)
    }

    /// `start`, for a master that asks for `master_password` (`sentinel auth-pass`, as
    /// envoyproxy/ratelimit's own test sentinels are configured).
    pub fn start_with_auth(
        name: &str,
        master_port: u16,
        down_after_ms: u64,
        master_password: Option<&str>,
    ) -> Self {
        first_start("a sentinel", || {
            let mut sentinel = Self {
                port: free_port(),
                child: None,
                dir: tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}")),
            };
            sentinel.spawn(name, master_port, down_after_ms, master_password)?;
            Ok(sentinel)
        })
    }

    fn spawn(
        &mut self,
        name: &str,
        master_port: u16,
        down_after_ms: u64,
        master_password: Option<&str>,
    ) -> Result<(), String> {
        // Sentinel rewrites its configuration file: it must be a writable file of its own.
        let config = self.dir.path().join("sentinel.conf");
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
             sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {name} {down_after_ms}\n\
             sentinel failover-timeout {name} {failover_ms}\n\
             sentinel parallel-syncs {name} 1\n",
            port = self.port,
            dir = self.dir.path().display(),
            failover_ms = down_after_ms * 5,
        );
        if let Some(password) = master_password {
            text.push_str(&format!("sentinel auth-pass {name} {password}\n"));
        }
        std::fs::write(&config, text).map_err(|error| format!("cannot write config: {error}"))?;
        let mut command = Command::new(REDIS_SERVER);
        command.arg(&config).arg("--sentinel");
        let log_path = self.dir.path().join("sentinel.log");
        self.child = Some(spawn_until_pong(&mut command, self.port, &log_path)?);
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What the sentinel logged so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }

    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        connect_url(
            &format!("redis://127.0.0.1:{}", self.port),
            "reach the sentinel",
        )
        .await
    }

    /// The port of the master `name` as the sentinel names it now.
    pub async fn master_port(&self, name: &str) -> Option<u16> {
        let mut connection = self.connection().await;
        let address: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(name)
            .query_async(&mut connection)
            .await
            .unwrap_or_else(|error| panic!("SENTINEL get-master-addr-by-name: {error}"));
        address.map(|(_, port)| port)
    }

    /// How many replicas of `name` the sentinel knows and holds up.
    pub async fn healthy_replicas(&self, name: &str) -> usize {
        let mut connection = self.connection().await;
        let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
            .arg("replicas")
            .arg(name)
            .query_async(&mut connection)
            .await
            .unwrap_or_else(|error| panic!("SENTINEL replicas: {error}"));
        replicas
            .iter()
            .filter(|replica| {
                replica.get("flags").is_some_and(|flags| {
                    !flags.contains("s_down") && !flags.contains("disconnected")
                })
            })
            .count()
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SentinelServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A connection to the plain port `port` on 127.0.0.1.
pub async fn connect_to(port: u16) -> redis::aio::MultiplexedConnection {
    connect_url(&format!("redis://127.0.0.1:{port}/0"), "reach redis").await
}

/// A connection to `url`; panics saying it could not `what` (e.g. "reach the sentinel").
pub async fn connect_url(url: &str, what: &str) -> redis::aio::MultiplexedConnection {
    try_connect_url(url)
        .await
        .unwrap_or_else(|error| panic!("cannot {what} on {url}: {error}"))
}

/// A connection to `url`, or why there is none.
pub async fn try_connect_url(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

/// Sleeps past midnight UTC when it is less than two minutes away, so one day window holds
/// the whole test (tests of several processes on day limits, whose counts must not roll over).
pub async fn keep_clear_of_the_day_boundary() {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let until_midnight = 86_400 - since_epoch % 86_400;
    if until_midnight < 120 {
        tokio::time::sleep(Duration::from_secs(until_midnight + 2)).await;
    }
}
