//! What every xDS test needs: floodgate started as a process against the test management
//! server (env-driven, as a deployment configures it), rules as `RateLimitConfig` resources,
//! ShouldRateLimit calls, and waits that end.

use std::future::Future;
use std::process::Command;
use std::time::{Duration, Instant};

use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::xds::rate_limit_config;
use floodgate_testkit::{ratelimit_command, rls, serve_command, tempdir, wait_for_port, Running};

/// The node id the tests' floodgates announce and their snapshots are set for.
pub const NODE: &str = "floodgate-test";

/// One wait for something floodgate or the server does.
pub const STEP: Duration = Duration::from_secs(10);

/// A whole test.
const TEST_TIMEOUT: Duration = Duration::from_secs(90);

/// Every variable an xDS floodgate reads, removed from what the test process inherited.
const XDS_VARIABLES: [&str; 22] = [
    "FLOODGATE_CONFIG",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "CONFIG_TYPE",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
    "XDS_CLIENT_BACKOFF_JITTER",
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "MERGE_DOMAIN_CONFIG",
];

/// Runs `test`, failing it when it takes longer than [`TEST_TIMEOUT`].
pub async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .unwrap_or_else(|_| panic!("the test did not end within {TEST_TIMEOUT:?}"))
}

/// A floodgate following an xDS server, its ports and its directory (logs).
pub struct XdsFloodgate {
    pub process: Running,
    pub grpc_port: u16,
    pub http_port: u16,
    pub debug_port: u16,
    /// Holds the log until the test ends.
    _dir: tempfile::TempDir,
}

/// `floodgate serve` with `CONFIG_TYPE=GRPC_XDS_SOTW` towards 127.0.0.1:`xds_port` as node
/// [`NODE`], short pauses (100 ms, at most 1 s), and `env` on top; not waited for.
pub fn spawn(xds_port: u16, env: &[(&str, &str)]) -> XdsFloodgate {
    let dir = tempdir();
    let (mut command, (grpc_port, http_port, debug_port)) = serve_command();
    xds_environment(&mut command, xds_port);
    command.envs(env.iter().copied());
    let process = Running::spawn("floodgate", &mut command, dir.path());
    XdsFloodgate {
        process,
        grpc_port,
        http_port,
        debug_port,
        _dir: dir,
    }
}

/// The binary started as `ratelimit` (the reference's answers) with the xDS environment, the
/// memory store, no statsd to send to, and `env` on top; ready once it listens.
pub fn start_at_the_door(xds_port: u16, env: &[(&str, &str)]) -> XdsFloodgate {
    let dir = tempdir();
    let (mut command, (grpc_port, http_port, debug_port)) = ratelimit_command(dir.path());
    xds_environment(&mut command, xds_port);
    command
        .env("BACKEND_TYPE", "memory")
        .env("USE_STATSD", "false")
        .envs(env.iter().copied());
    let process = Running::spawn("ratelimit", &mut command, dir.path());
    let floodgate = XdsFloodgate {
        process,
        grpc_port,
        http_port,
        debug_port,
        _dir: dir,
    };
    floodgate.wait_listening();
    floodgate
}

/// [`spawn`], then waits for the gRPC and debug ports.
pub fn start(xds_port: u16, env: &[(&str, &str)]) -> XdsFloodgate {
    let floodgate = spawn(xds_port, env);
    floodgate.wait_listening();
    floodgate
}

/// The environment of an xDS floodgate, on `command`.
pub fn xds_environment(command: &mut Command, xds_port: u16) {
    for name in XDS_VARIABLES {
        command.env_remove(name);
    }
    command
        .env("LOG_LEVEL", "info")
        .env("CONFIG_TYPE", "GRPC_XDS_SOTW")
        .env(
            "CONFIG_GRPC_XDS_SERVER_URL",
            format!("127.0.0.1:{xds_port}"),
        )
        .env("CONFIG_GRPC_XDS_NODE_ID", NODE)
        .env("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "100ms")
        .env("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms")
        .env("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s");
}

impl XdsFloodgate {
    pub fn wait_listening(&self) {
        wait_for_port(self.grpc_port, STEP, "floodgate gRPC");
        wait_for_port(self.debug_port, STEP, "floodgate debug");
    }

    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    pub fn log(&self) -> String {
        self.process.log_text()
    }

    /// The debug port's `path`: status and body.
    pub fn debug_page(&self, path: &str) -> (u16, String) {
        let response = floodgate_testkit::http::get(self.debug_port, path, &[])
            .unwrap_or_else(|error| panic!("GET {path}: {error}\n{}", self.log()));
        (response.status, response.body)
    }

    /// `/healthcheck`'s status.
    pub fn healthcheck(&self) -> u16 {
        floodgate_testkit::http::get(self.http_port, "/healthcheck", &[])
            .map(|response| response.status)
            .unwrap_or_else(|error| panic!("GET /healthcheck: {error}\n{}", self.log()))
    }
}

/// A rule: `key` (any value) limited to `requests_per_unit` an hour.
pub fn hourly(key: &str, requests_per_unit: u32) -> RateLimitDescriptor {
    RateLimitDescriptor {
        key: key.to_owned(),
        rate_limit: Some(RateLimitPolicy {
            unit: RateLimitUnit::Hour as i32,
            requests_per_unit,
            ..RateLimitPolicy::default()
        }),
        ..RateLimitDescriptor::default()
    }
}

/// A `RateLimitConfig` resource named `name` for `domain`.
pub fn resource(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> Any {
    rate_limit_config(&RateLimitConfig {
        name: name.to_owned(),
        domain: domain.to_owned(),
        descriptors,
    })
}

/// One ShouldRateLimit call of descriptor `key=value` in `domain`: the overall code and the
/// descriptor's `limit_remaining`, or the gRPC error's message.
pub async fn decide(
    url: &str,
    domain: &str,
    key: &str,
    value: &str,
) -> Result<(Code, u32), String> {
    let mut client = rls::connect(url).await;
    let response = rls::call(&mut client, rls::request(domain, &[&[(key, value)]]))
        .await
        .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?;
    let code = Code::try_from(response.overall_code)
        .unwrap_or_else(|_| panic!("unknown code {}", response.overall_code));
    let remaining = response
        .statuses
        .first()
        .map(|status| status.limit_remaining)
        .unwrap_or_default();
    Ok((code, remaining))
}

/// [`decide`], which must answer.
pub async fn decided(url: &str, domain: &str, key: &str, value: &str) -> (Code, u32) {
    decide(url, domain, key, value)
        .await
        .unwrap_or_else(|error| panic!("ShouldRateLimit {domain} {key}={value}: {error}"))
}

/// Polls `condition` every 20 ms until it holds; panics after `timeout` saying `what`.
pub async fn until(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sets `resources` as the snapshot `version` of [`NODE`] and waits for floodgate's ACK of it
/// (sent once the rules are in force).
pub async fn push(server: &floodgate_testkit::xds::XdsServer, version: &str, resources: Vec<Any>) {
    server.set_snapshot(NODE, version, resources);
    server
        .wait_for_request(STEP, |seen| seen.is_ack_of(version))
        .await;
}
