//! One fault test's processes: a network namespace and veth pair of its own, redis-server
//! inside it, optionally the delaying proxy on the host in front of it, and floodgate on the
//! host with one domain per failure policy. Dropped in that order reversed: floodgate first
//! (nothing then sends to the namespace), the namespace last.

use std::io::Write;
use std::time::Duration;

use floodgate_testkit::delay_proxy::DelayProxy;
use floodgate_testkit::netns::{self, NetNamespace};
use floodgate_testkit::netns_redis::NamespacedRedis;
use floodgate_testkit::{wait_for_port, Floodgate};
use tokio::sync::{Mutex, MutexGuard};

/// The store's deadline for these tests (`--redis-timeout-ms`). Not the 25 ms default: on 2
/// shared cores a debug floodgate misses 25 ms now and then without any fault, and the tests
/// must tell the faults they make from the machine's.
pub const TIMEOUT_MS: u64 = 100;

/// The tests take turns: two floodgates under load at once on 2 cores would measure each
/// other, not the network.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// The domains, one per failure policy, with their `failure_policy:` line.
pub const DOMAINS: [(&str, Policy); 4] = [
    // No `failure_policy:`: the global default, `error`.
    ("d_error", Policy::Error),
    ("d_open", Policy::FailOpen),
    ("d_closed", Policy::FailClosed),
    ("d_local", Policy::Local),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Error,
    FailOpen,
    FailClosed,
    Local,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Error => "error",
            Policy::FailOpen => "fail_open",
            Policy::FailClosed => "fail_closed",
            Policy::Local => "local",
        }
    }

    fn rules_line(self) -> String {
        match self {
            Policy::Error => String::new(),
            other => format!("failure_policy: {}\n", other.name()),
        }
    }
}

/// One counter per domain, never over its limit: what Redis stores for it is the count of
/// requests it charged. A calendar month, so the window turns at most once a month (a turn
/// during a test is seen and said).
fn rules(domain: &str, policy: Policy) -> String {
    format!(
        "domain: {domain}\n{}descriptors:\n  \
         - key: user\n    rate_limit: {{unit: month, requests_per_unit: 1000000000, algorithm: fixed_window}}\n",
        policy.rules_line()
    )
}

/// How floodgate reaches Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Across the veth pair, straight to the namespace's address.
    Direct,
    /// Through the delaying proxy on the host, which reaches the namespace across the pair.
    Proxy,
}

pub struct Setup {
    pub floodgate: Floodgate,
    pub proxy: Option<DelayProxy>,
    pub redis: NamespacedRedis,
    pub netns: NetNamespace,
    _dir: tempfile::TempDir,
    _alone: MutexGuard<'static, ()>,
}

impl Setup {
    /// Everything up and answering, or `None` (after saying why) where this environment cannot
    /// make network namespaces and `CI` is not `true`.
    pub async fn start(path: Path) -> Option<Setup> {
        let alone = ONE_AT_A_TIME.lock().await;
        if let Err(reason) = netns::require() {
            // Past the test harness's capture (print! would be hidden for a passing test).
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {}: network namespaces are unavailable here: {reason}",
                std::thread::current()
                    .name()
                    .unwrap_or("a network fault test")
            );
            return None;
        }
        let netns = NetNamespace::create()
            .unwrap_or_else(|error| panic!("cannot make the test's namespace: {error}"));
        let redis = NamespacedRedis::start(&netns);
        let proxy = match path {
            Path::Direct => None,
            Path::Proxy => Some(DelayProxy::start(redis.addr()).await),
        };
        let url = proxy.as_ref().map_or_else(|| redis.url(), DelayProxy::url);
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
        let config = floodgate_testkit::rules_dir(
            dir.path(),
            DOMAINS.map(|(domain, policy)| (domain.to_owned(), rules(domain, policy))),
        );
        let timeout = TIMEOUT_MS.to_string();
        let config_dir = config.clone();
        let log_dir = dir.path().to_path_buf();
        // Floodgate::start blocks (it waits for the port): off the runtime's threads, which
        // the proxy needs meanwhile.
        let floodgate = tokio::task::spawn_blocking(move || {
            let floodgate = Floodgate::start(
                &config_dir,
                &[
                    "--store",
                    "redis",
                    "--redis-url",
                    &url,
                    "--redis-timeout-ms",
                    &timeout,
                ],
                &log_dir,
            );
            wait_for_port(
                floodgate.http_port,
                Duration::from_secs(10),
                "floodgate HTTP",
            );
            floodgate
        })
        .await
        .unwrap_or_else(|error| panic!("starting floodgate: {error}"));
        Some(Setup {
            floodgate,
            proxy,
            redis,
            netns,
            _dir: dir,
            _alone: alone,
        })
    }

    pub fn proxy(&self) -> &DelayProxy {
        self.proxy
            .as_ref()
            .unwrap_or_else(|| panic!("this setup has no proxy (Path::Proxy)"))
    }
}
