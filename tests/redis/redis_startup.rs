//! The first connection to Redis, as envoyproxy/ratelimit makes it (`REDIS_STARTUP_*`): a Redis
//! that is not up yet is waited for, with a growing delay, instead of ending the process, and
//! meanwhile the ports refuse connections as the reference's (not yet open) do; the wait can be
//! bounded and is cut short by SIGTERM; settings that cannot work end it at once. Limitador's
//! limits, counted in Redis too, wait with the store, and their HTTP API refuses meanwhile.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::http::request;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{floodgate_bin, free_port, serve_command, tempdir, wait_for_port, Running};

const RULES: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// `floodgate serve --store redis` on `redis_url` with the rules above and `env`; its gRPC,
/// HTTP and debug ports.
fn start(
    dir: &std::path::Path,
    redis_url: &str,
    env: &[(&str, &str)],
) -> (Running, (u16, u16, u16)) {
    start_with(dir, redis_url, env, &[])
}

/// [`start`], with more `serve` arguments.
fn start_with(
    dir: &std::path::Path,
    redis_url: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Running, (u16, u16, u16)) {
    let config = dir.join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write rules: {error}"));
    let (mut command, ports) = serve_command();
    command
        .arg("--config")
        .arg(&config)
        .args(["--store", "redis", "--redis-url", redis_url])
        .args(["--redis-connect-timeout-ms", "200", "--drain-seconds", "0"])
        .args(args)
        .envs(env.iter().copied());
    (Running::spawn("floodgate", &mut command, dir), ports)
}

/// Limitador's limits: 1 a minute per user.
const LIMITADOR_LIMITS: &str = "
- namespace: shop
  max_value: 1
  seconds: 60
  conditions: []
  variables:
  - descriptors[0].user
";

/// How a connection to 127.0.0.1:`port` ends: `Ok` if accepted, else the error's kind.
fn connect(port: u16) -> Result<(), ErrorKind> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map(drop)
        .map_err(|error| error.kind())
}

fn check(grpc_port: u16) -> Option<i32> {
    Command::new(floodgate_bin())
        .args(["check", "--addr", &format!("127.0.0.1:{grpc_port}")])
        .args(["--domain", "edge", "client=ada"])
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate check: {error}"))
        .status
        .code()
}

const QUICK_RETRY: [(&str, &str); 2] = [
    ("REDIS_STARTUP_INITIAL_INTERVAL", "100ms"),
    ("REDIS_STARTUP_MAX_INTERVAL", "200ms"),
];

#[test]
fn a_redis_that_is_not_up_yet_is_waited_for_then_decides() {
    let dir = tempdir();
    let mut redis = RedisServer::start();
    redis.kill();
    let (mut floodgate, (grpc, http, debug)) = start(dir.path(), &redis.url(), &QUICK_RETRY);
    let log = floodgate.log_once_it_says("retrying in", Duration::from_secs(10));
    assert!(log.contains("retrying in"), "{log}");
    // Several attempts, and the process is still there.
    let log = floodgate.log_once_it_says("attempt=3", Duration::from_secs(10));
    assert!(log.contains("attempt=3"), "{log}");
    assert_eq!(floodgate.exit_within(Duration::ZERO), None, "{log}");
    // Nothing could answer yet: a caller is refused at once rather than left waiting.
    for port in [grpc, http, debug] {
        assert_eq!(
            connect(port),
            Err(ErrorKind::ConnectionRefused),
            "port {port}\n{log}"
        );
    }

    redis.restart();
    let log = floodgate.log_once_it_says("connected to Redis", Duration::from_secs(10));
    assert!(log.contains("connected to Redis"), "{log}");
    for port in [grpc, http, debug] {
        wait_for_port(
            port,
            Duration::from_secs(10),
            "floodgate, once Redis answered",
        );
    }
    assert_eq!(check(grpc), Some(0), "{}", floodgate.log_text());
    assert_eq!(
        check(grpc),
        Some(2),
        "the limit of 1 per hour, counted in Redis"
    );
}

#[test]
fn limitadors_limits_wait_for_redis_with_the_store_and_their_http_api_refuses_meanwhile() {
    let dir = tempdir();
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITADOR_LIMITS).unwrap_or_else(|error| panic!("write: {error}"));
    let limitador_port = free_port();
    let limitador_addr = format!("127.0.0.1:{limitador_port}");
    let mut redis = RedisServer::start();
    redis.kill();
    let limits_arg = limits.display().to_string();
    let args = [
        "--limitador-limits",
        limits_arg.as_str(),
        "--limitador-http-addr",
        limitador_addr.as_str(),
    ];
    let (mut floodgate, (grpc, ..)) = start_with(dir.path(), &redis.url(), &QUICK_RETRY, &args);
    // Was: the process ended here, its Limitador counters failing to connect.
    let log = floodgate.log_once_it_says("attempt=3", Duration::from_secs(10));
    assert!(log.contains("attempt=3"), "{log}");
    assert_eq!(floodgate.exit_within(Duration::ZERO), None, "{log}");
    assert_eq!(
        connect(limitador_port),
        Err(ErrorKind::ConnectionRefused),
        "{log}"
    );

    redis.restart();
    let log =
        floodgate.log_once_it_says("Limitador's limits count in Redis", Duration::from_secs(10));
    assert!(log.contains("Limitador's limits count in Redis"), "{log}");
    wait_for_port(
        limitador_port,
        Duration::from_secs(10),
        "Limitador's HTTP API",
    );
    wait_for_port(grpc, Duration::from_secs(10), "floodgate's gRPC port");
    let ann = r#"{"namespace": "shop", "values": {"user": "ann"}, "delta": 1}"#;
    let statuses: Vec<u16> = (0..2)
        .map(|_| {
            request(limitador_port, "POST", "/check_and_report", &[], ann)
                .unwrap_or_else(|error| panic!("POST /check_and_report: {error}"))
                .status
        })
        .collect();
    assert_eq!(statuses, [200, 429], "{}", floodgate.log_text());
}

#[test]
fn the_wait_ends_after_the_reference_max_elapsed_time() {
    let dir = tempdir();
    let mut redis = RedisServer::start();
    redis.kill();
    let mut env = QUICK_RETRY.to_vec();
    env.push(("REDIS_STARTUP_MAX_ELAPSED_TIME", "1s"));
    let (mut floodgate, _) = start(dir.path(), &redis.url(), &env);
    let status = floodgate.exit_within(Duration::from_secs(20));
    let log = floodgate.log_text();
    assert!(
        status.is_some_and(|status| !status.success()),
        "{status:?}\n{log}"
    );
    assert!(log.contains("gave up connecting to Redis after"), "{log}");
}

#[test]
fn sigterm_while_waiting_for_redis_ends_the_process_cleanly() {
    let dir = tempdir();
    let mut redis = RedisServer::start();
    redis.kill();
    let (mut floodgate, _) = start(dir.path(), &redis.url(), &QUICK_RETRY);
    let log = floodgate.log_once_it_says("retrying in", Duration::from_secs(10));
    assert!(log.contains("retrying in"), "{log}");
    let status = floodgate.terminate(Duration::from_secs(10));
    let log = floodgate.log_text();
    assert!(
        status.is_some_and(|status| status.success()),
        "{status:?}\n{log}"
    );
    assert!(log.contains("stopped before Redis answered"), "{log}");
}

#[test]
fn settings_that_cannot_work_end_the_process_at_once() {
    let dir = tempdir();
    let (mut floodgate, _) = start(
        dir.path(),
        "redis://127.0.0.1:6379/0",
        &[("REDIS_TLS", "true")],
    );
    let status = floodgate.exit_within(Duration::from_secs(10));
    let log = floodgate.log_text();
    assert!(
        status.is_some_and(|status| !status.success()),
        "{status:?}\n{log}"
    );
    assert!(
        log.contains("misconfigured") && log.contains("REDIS_TLS"),
        "{log}"
    );
    assert!(!log.contains("retrying in"), "{log}");
}
