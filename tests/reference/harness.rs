//! What the ported integration cases share: the reference's runtime tree
//! (`RUNTIME_ROOT/ratelimit/config/*.yaml`, as its `test/integration/runtime/current`), the real
//! floodgate binary started from the reference's environment alone — as `floodgate serve` or
//! under the reference's own name (`ratelimit`, the image's `/bin/ratelimit`) — and the answers
//! the reference's tests compare with.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use floodgate::proto::rate_limit_response::rate_limit::Unit;
use floodgate::proto::rate_limit_response::{Code, DescriptorStatus};
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use floodgate_testkit::prom::{scrape, Scrape};
use floodgate_testkit::rls::{self, Client};
use floodgate_testkit::{
    floodgate_bin, free_port, repo_file, serve_command, subdir, wait_for_port, Running,
};

/// How long a started floodgate may take to listen (a debug build on a busy 2-core machine;
/// a Redis Cluster or Sentinel is found first).
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The reference's `RUNTIME_SUBDIRECTORY` in its integration tests.
pub const SUBDIRECTORY: &str = "ratelimit";

/// A temporary `RUNTIME_ROOT` laid out as the reference's `test/integration/runtime/current`:
/// rules in `ratelimit/config/`, files to copy in later beside it in `ratelimit/`.
pub struct RuntimeTree {
    dir: tempfile::TempDir,
}

impl RuntimeTree {
    /// The reference's integration fixtures named in `config` (from
    /// `tests/reference/fixtures/integration/`) as its config directory, and `reload.yaml`
    /// beside it, as in the reference's tree.
    pub fn integration(config: &[&str]) -> Self {
        let fixture =
            |name: &str| fixture_text(&format!("tests/reference/fixtures/integration/{name}"));
        let files: Vec<(&str, String)> = config.iter().map(|name| (*name, fixture(name))).collect();
        let tree = Self::with_rules(&files);
        write(
            &tree.subdirectory().join("reload.yaml"),
            &fixture("reload.yaml"),
        );
        tree
    }

    /// `files` (name, text) as the config directory.
    pub fn with_rules<T: AsRef<str>>(files: &[(&str, T)]) -> Self {
        let tree = Self {
            dir: floodgate_testkit::tempdir(),
        };
        let config = subdir(&tree.subdirectory(), "config");
        for (name, text) in files {
            write(&config.join(name), text.as_ref());
        }
        tree
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("runtime")
    }

    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY`.
    pub fn subdirectory(&self) -> PathBuf {
        self.root().join(SUBDIRECTORY)
    }

    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    pub fn config_dir(&self) -> PathBuf {
        self.subdirectory().join("config")
    }

    /// A directory of its own for `name`'s logs.
    pub fn log_dir(&self, name: &str) -> PathBuf {
        subdir(&self.dir.path().join("logs"), name)
    }
}

/// A file of the repository, as text.
pub fn fixture_text(relative: &str) -> String {
    let path = repo_file(relative);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

/// How the binary is started: the two ways a deployment runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// `floodgate serve`, the listeners given as flags.
    Serve,
    /// Under the reference's name, no subcommand, the listeners given as the reference's
    /// `GRPC_HOST`/`GRPC_PORT`, `HOST`/`PORT`, `DEBUG_HOST`/`DEBUG_PORT`.
    Ratelimit,
}

/// A floodgate process started from the reference's environment.
pub struct Reference {
    pub process: Running,
    pub grpc_port: u16,
    pub debug_port: u16,
}

/// The reference's integration settings (its `defaultSettings()`): the runtime tree, TCP
/// sockets, no statsd, a Redis deadline; then `env`. Ready once its gRPC and debug ports accept.
pub fn start(entry: Entry, tree: &RuntimeTree, name: &str, env: &[(&str, &str)]) -> Reference {
    let (process, ports) = spawn_on_ports(entry, tree, name, env);
    let reference = Reference {
        process,
        grpc_port: ports.0,
        debug_port: ports.2,
    };
    wait_for_port(reference.grpc_port, START_TIMEOUT, name);
    wait_for_port(reference.debug_port, START_TIMEOUT, name);
    reference
}

/// The same process, not waited for (one that must refuse to start).
pub fn spawn(entry: Entry, tree: &RuntimeTree, name: &str, env: &[(&str, &str)]) -> Running {
    spawn_on_ports(entry, tree, name, env).0
}

fn spawn_on_ports(
    entry: Entry,
    tree: &RuntimeTree,
    name: &str,
    env: &[(&str, &str)],
) -> (Running, (u16, u16, u16)) {
    let (mut command, ports) = command(entry, tree, name);
    command
        .env("RUNTIME_ROOT", tree.root())
        .env("RUNTIME_SUBDIRECTORY", SUBDIRECTORY)
        .env("RUNTIME_APPDIRECTORY", "config")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("USE_STATSD", "false")
        // The reference's default REDIS_TIMEOUT is 10 s; floodgate's own 25 ms is too short for a
        // debug build on a busy 2-core machine.
        .env("REDIS_TIMEOUT", "2s")
        .env("LOG_LEVEL", "debug")
        .envs(env.iter().copied());
    (
        Running::spawn(name, &mut command, &tree.log_dir(name)),
        ports,
    )
}

/// The command for `entry` with the environment emptied (the reference's variables only, none
/// inherited from the test's) and the listeners on free loopback ports (gRPC, HTTP, debug).
fn command(entry: Entry, tree: &RuntimeTree, name: &str) -> (Command, (u16, u16, u16)) {
    let (mut command, ports) = match entry {
        Entry::Serve => serve_command(),
        Entry::Ratelimit => {
            let link = tree.log_dir(name).join("ratelimit");
            if !link.exists() {
                std::os::unix::fs::symlink(floodgate_bin(), &link)
                    .unwrap_or_else(|error| panic!("cannot link {}: {error}", link.display()));
            }
            (Command::new(link), (free_port(), free_port(), free_port()))
        }
    };
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    if entry == Entry::Ratelimit {
        floodgate_testkit::reference_listeners(&mut command, ports);
    }
    (command, ports)
}

impl Reference {
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    pub async fn client(&self) -> Client {
        rls::connect(&self.grpc_url()).await
    }

    pub fn metrics(&self) -> Scrape {
        scrape(self.debug_port)
    }
}

/// The sum of the samples of `name` whose labels include every one of `labels`.
pub fn counted(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .all(name)
        .iter()
        .filter(|sample| {
            labels
                .iter()
                .all(|(key, value)| sample.labels.get(*key).map(String::as_str) == Some(*value))
        })
        .map(|sample| sample.value)
        .sum()
}

/// The reference's `common.NewRateLimitRequest(domain, descriptors, hitsAddend)`.
pub fn request(
    domain: &str,
    descriptors: &[&[(&str, &str)]],
    hits_addend: u32,
) -> RateLimitRequest {
    RateLimitRequest {
        hits_addend,
        ..rls::request(domain, descriptors)
    }
}

/// One call that must be answered.
pub async fn call(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    let what = format!("{request:?}");
    rls::call(client, request)
        .await
        .unwrap_or_else(|status| panic!("{what}: {status}"))
}

pub fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

/// What the reference's `newDescriptorStatus(code, requestsPerUnit, unit, limitRemaining, _)`
/// builds; the duration is checked to lie within the window rather than copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub code: Code,
    pub limit: Option<(u32, Unit)>,
    pub remaining: u32,
}

/// A status with a limit.
pub fn limited(code: Code, requests_per_unit: u32, unit: Unit, remaining: u32) -> Expected {
    Expected {
        code,
        limit: Some((requests_per_unit, unit)),
        remaining,
    }
}

/// A status with no limit: no rule matched (`{Code: OK}` in the reference's tests).
pub const NO_LIMIT: Expected = Expected {
    code: Code::Ok,
    limit: None,
    remaining: 0,
};

fn unit_seconds(unit: Unit) -> i64 {
    match unit {
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3_600,
        Unit::Day => 86_400,
        Unit::Week => 7 * 86_400,
        Unit::Month => 30 * 86_400,
        Unit::Year => 365 * 86_400,
        Unit::Unknown => 0,
    }
}

/// The answer's (code, limit, remaining) of one status, and for a limited one a
/// `duration_until_reset` within the window (floodgate rounds it up, so never 0).
pub fn assert_status(status: &DescriptorStatus, expected: Expected, context: &str) {
    let actual = Expected {
        code: Code::try_from(status.code).unwrap_or(Code::Unknown),
        limit: status.current_limit.as_ref().map(|limit| {
            (
                limit.requests_per_unit,
                Unit::try_from(limit.unit).unwrap_or(Unit::Unknown),
            )
        }),
        remaining: status.limit_remaining,
    };
    assert_eq!(actual, expected, "{context}: {status:?}");
    match expected.limit {
        Some((_, unit)) => {
            let reset = reset_seconds(status);
            assert!(
                (1..=unit_seconds(unit)).contains(&reset),
                "{context}: duration_until_reset {reset} s for a {unit:?} window"
            );
        }
        None => assert!(
            status.duration_until_reset.is_none(),
            "{context}: {status:?}"
        ),
    }
}

/// The whole answer: its overall code and one status per descriptor, in order.
pub fn assert_response(
    response: &RateLimitResponse,
    code: Code,
    statuses: &[Expected],
    context: &str,
) {
    assert_eq!(overall(response), code, "{context}: {response:?}");
    assert_eq!(
        response.statuses.len(),
        statuses.len(),
        "{context}: {response:?}"
    );
    for (index, (status, expected)) in response.statuses.iter().zip(statuses).enumerate() {
        assert_status(status, *expected, &format!("{context}, status {index}"));
    }
}

pub fn reset_seconds(status: &DescriptorStatus) -> i64 {
    status
        .duration_until_reset
        .as_ref()
        .map_or(0, |duration| duration.seconds)
}

/// A value no earlier call used: the reference's tests take a random integer for a fresh
/// counter.
pub fn fresh_value() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static TAKEN: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{nanos}-{}", TAKEN.fetch_add(1, Ordering::Relaxed))
}

/// Returns once the wall clock is at least `SEQUENCE_ROOM` away from the next minute, waiting
/// for that minute to begin if it is not: a sequence that must fall inside one per-minute window
/// (the reference's tests hope it does) then cannot be cut by a window turning over. Redis
/// decides with the machine's clock too (`TIME`), so this holds for both stores.
pub async fn clear_of_a_minute_boundary() {
    const SEQUENCE_ROOM: Duration = Duration::from_secs(10);
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into_minute = Duration::from_millis((since_epoch.as_millis() % 60_000) as u64);
    let left = Duration::from_secs(60).saturating_sub(into_minute);
    if left < SEQUENCE_ROOM {
        tokio::time::sleep(left + Duration::from_millis(100)).await;
    }
}
