//! What an adversarial client tries against a real floodgate process, and what must hold:
//! - requests that send their headers and then stall (half a `/json` body, a gRPC stream with no
//!   message) hold no decision permit, so real calls are still decided;
//! - a slowloris (connections with half-sent headers) is bounded in number per listener, fitted
//!   to the process's descriptor limit, and closed after `--header-timeout-ms`, so gRPC keeps
//!   accepting and the HTTP listener recovers;
//! - idle connections close after `--idle-timeout-ms`, a gRPC client that never speaks HTTP/2
//!   after `--header-timeout-ms`, and a unary call that never sends its message at
//!   `--grpc-default-deadline-ms`;
//! - SIGTERM ends the process after the drain whatever its clients hold open, and SIGHUP right
//!   after the ports open is a reload, not the end of the process;
//! - log lines about client input are paced and cut short; `/rlconfig` can move off the metrics
//!   port; an admin token file others may write is refused.
//!
//! Every client is on 127.0.0.1 and every wait is bounded.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit as common;
use floodgate_testkit::rls;
use floodgate_testkit::{free_port, runtime, tempdir, wait_for_port, Floodgate, Running};
use tonic::codegen::{http, Bytes};

const RULES: &str = "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n";

/// The `/check` request that is decided against `RULES`.
const CHECK: &str = "GET /check HTTP/1.1\r\nHost: floodgate\r\nX-RateLimit-Domain: shop\r\nX-RateLimit-Descriptor: user=alice\r\n\r\n";

fn start(extra: &[&str]) -> (tempfile::TempDir, Floodgate) {
    let temp = tempdir();
    let server = Floodgate::start_with_rules(temp.path(), "rules.yaml", RULES, extra);
    wait_for_port(
        server.debug_port,
        Duration::from_secs(10),
        "floodgate debug",
    );
    (temp, server)
}

/// This test process may need more sockets than a default soft limit allows.
fn raise_own_descriptor_limit(needed: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|current| current >= needed) || limit.current.is_none() {
        return;
    }
    let maximum = limit.maximum.map(|maximum| maximum.max(needed));
    let raised = Rlimit {
        current: maximum,
        maximum,
    };
    setrlimit(Resource::Nofile, raised).unwrap_or_else(|error| {
        panic!("this test needs {needed} descriptors (RLIMIT_NOFILE {limit:?}): {error}")
    });
}

fn connect(port: u16) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(stream)
}

/// One request on a fresh connection: the status line's code, or the error.
fn status_of(port: u16, request: &str) -> Result<u16, String> {
    let mut stream = connect(port).map_err(|error| format!("connect: {error}"))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|error| format!("write: {error}"))?;
    read_status(&mut stream)
}

fn read_status(stream: &mut TcpStream) -> Result<u16, String> {
    let mut head = [0u8; 12];
    stream
        .read_exact(&mut head)
        .map_err(|error| format!("read: {error}"))?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not HTTP: {:?}", String::from_utf8_lossy(&head)))
}

/// Whether the server has closed `stream` (EOF or reset) within `timeout`.
fn closed_within(stream: &mut TcpStream, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut buffer = [0u8; 4096];
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = stream.set_read_timeout(Some(left.max(Duration::from_millis(10))));
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
    false
}

fn shop_call() -> floodgate::proto::RateLimitRequest {
    rls::request("shop", &[&[("user", "alice")]])
}

/// A decision over a fresh gRPC connection: its overall code, or the status.
async fn decided(port: u16) -> Result<i32, tonic::Status> {
    let mut client = rls::connect(&format!("http://127.0.0.1:{port}")).await;
    rls::call(&mut client, shop_call())
        .await
        .map(|response| response.overall_code)
}

/// An HTTP/2 connection to floodgate's gRPC port over the raw h2 client (tonic's client sends
/// every message it is given; an attacker sends none).
async fn h2_connection(port: u16) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .handshake(tcp)
        .await
        .unwrap_or_else(|error| panic!("HTTP/2 handshake: {error}"));
    tokio::spawn(connection);
    send
}

/// A ShouldRateLimit stream with headers (and `grpc_timeout`, if any) and no message. The
/// response future answers when floodgate gives up on it.
fn stalled_call(
    send: &mut h2::client::SendRequest<Bytes>,
    port: u16,
    grpc_timeout: Option<&str>,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut request = http::Request::post(format!(
        "http://127.0.0.1:{port}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    if let Some(timeout) = grpc_timeout {
        request = request.header("grpc-timeout", timeout);
    }
    let request = request
        .body(())
        .unwrap_or_else(|error| panic!("request: {error}"));
    send.send_request(request, false)
        .unwrap_or_else(|error| panic!("send: {error}"))
}

fn log_lines_containing(server: &Floodgate, needle: &str) -> usize {
    server
        .process
        .log_text()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

fn metric(server: &Floodgate, name: &str, labels: &str) -> f64 {
    let text = common::http::get(server.debug_port, "/metrics", &[])
        .map(|response| response.body)
        .unwrap_or_default();
    let series = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// 1100 `/json` requests with 1 byte of a 1000-byte body and 1100 gRPC calls with headers and
/// no message, against the default 1024 permits: before, every real call was refused
/// (UNAVAILABLE, 503) until the stalled ones gave up; now they hold no permit.
#[test]
fn stalled_requests_hold_no_permit_and_real_calls_are_decided() {
    const STALLED: usize = 1_100;
    raise_own_descriptor_limit(4_096);
    // Long bounds: the stalled requests stay stalled for the whole test.
    let (_temp, server) = start(&[
        "--body-timeout-ms",
        "60000",
        "--grpc-default-deadline-ms",
        "60000",
        "--max-connections",
        "2000",
    ]);
    let mut half_bodies = Vec::with_capacity(STALLED);
    for _ in 0..STALLED {
        let mut stream = connect(server.http_port).unwrap_or_else(|error| panic!("{error}"));
        stream
            .write_all(b"POST /json HTTP/1.1\r\nHost: floodgate\r\nContent-Length: 1000\r\n\r\n{")
            .unwrap_or_else(|error| panic!("write: {error}"));
        half_bodies.push(stream);
    }
    runtime().block_on(async {
        let mut streams = Vec::with_capacity(STALLED);
        // Two connections: the listener allows 2048 streams on each.
        for _ in 0..2 {
            let mut send = h2_connection(server.grpc_port).await;
            for _ in 0..STALLED / 2 {
                send = send
                    .ready()
                    .await
                    .unwrap_or_else(|error| panic!("ready: {error}"));
                streams.push(stalled_call(&mut send, server.grpc_port, None));
            }
        }
        // Give floodgate time to see every stalled stream and body.
        tokio::time::sleep(Duration::from_millis(500)).await;
        for _ in 0..3 {
            assert_eq!(
                decided(server.grpc_port)
                    .await
                    .map_err(|status| status.to_string()),
                Ok(1),
                "a real ShouldRateLimit call is decided (OK)"
            );
        }
        drop(streams);
    });
    assert_eq!(
        status_of(server.http_port, CHECK),
        Ok(200),
        "/check is decided"
    );
    let body = r#"{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}"#;
    let json = format!(
        "POST /json HTTP/1.1\r\nHost: floodgate\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(
        status_of(server.http_port, &json),
        Ok(200),
        "/json is decided"
    );
    assert_eq!(
        metric(
            &server,
            "floodgate_overload_rejections_total",
            "reason=\"in_flight\""
        ),
        0.0,
        "nothing was shed"
    );
    drop(half_bodies);
}

/// 1500 connections with half-sent headers against a floodgate whose descriptor limit is 1024:
/// before, every connection stayed open (40 s and more), the process ran out of descriptors
/// and new gRPC connections failed, with nothing logged. Now each listener holds a bounded
/// share of the limit, the excess is closed and logged, gRPC keeps accepting, and the
/// half-sent ones are closed after `--header-timeout-ms`.
#[test]
fn a_slowloris_is_bounded_and_cut_off_and_grpc_keeps_accepting() {
    const ATTACK: usize = 1_500;
    raise_own_descriptor_limit(4_096);
    let temp = tempdir();
    let config = temp.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let (grpc_port, http_port, debug_port) = (free_port(), free_port(), free_port());
    let mut command = Command::new("prlimit");
    command
        .arg("--nofile=1024:1024")
        .arg("--")
        .arg(common::floodgate_bin())
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .args(["--grpc-addr", &format!("127.0.0.1:{grpc_port}")])
        .args(["--http-addr", &format!("127.0.0.1:{http_port}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{debug_port}")]);
    let process = Running::spawn("floodgate", &mut command, temp.path());
    wait_for_port(grpc_port, Duration::from_secs(10), "floodgate");
    wait_for_port(http_port, Duration::from_secs(10), "floodgate HTTP");
    let server = Floodgate {
        process,
        grpc_port,
        http_port,
        debug_port,
    };

    let mut attack = Vec::with_capacity(ATTACK);
    for _ in 0..ATTACK {
        // The kernel completes the handshake before floodgate sees the connection; a write to
        // one floodgate already closed may fail, which is the point.
        if let Ok(mut stream) = connect(http_port) {
            let _ = stream.write_all(b"GET /check HTTP/1.1\r\nHost: floodgate\r\nX-Slow: ");
            attack.push(stream);
        }
    }
    let runtime = runtime();
    assert_eq!(
        runtime
            .block_on(decided(grpc_port))
            .map_err(|status| status.to_string()),
        Ok(1),
        "gRPC accepts and decides during the slowloris"
    );
    let log = server.process.log_text();
    assert!(
        log.contains("RLIMIT_NOFILE"),
        "the lowered bound is logged:\n{log}"
    );
    assert!(
        log_lines_containing(&server, "listener at --max-connections") >= 1,
        "the bound being hit is logged:\n{log}"
    );
    // 1024 descriptors less the reserve, shared by three listeners.
    let bound = (1024.0 - 128.0) / 3.0_f64;
    let open = metric(&server, "floodgate_connections_open", "listener=\"http\"");
    assert!(open <= bound.floor(), "{open} HTTP connections open");
    let refused = metric(
        &server,
        "floodgate_connections_refused_total",
        "listener=\"http\"",
    );
    assert!(refused >= 500.0, "{refused} connections refused");

    // Every half-sent connection is closed: at once (beyond the bound) or at the header timeout.
    let deadline = Instant::now() + Duration::from_secs(20);
    for stream in &mut attack {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            closed_within(stream, left),
            "a half-sent connection still open 20 s after the attack began"
        );
    }
    assert_eq!(status_of(http_port, CHECK), Ok(200), "HTTP serves again");
    assert!(
        metric(
            &server,
            "floodgate_connections_closed_total",
            "listener=\"http\",reason=\"header_timeout\""
        ) >= 1.0
    );
}

#[test]
fn idle_connections_are_closed_and_busy_ones_kept() {
    let (_temp, server) = start(&["--idle-timeout-ms", "1500", "--header-timeout-ms", "1000"]);
    // A keep-alive connection used every 300 ms for 3 s stays the same connection.
    let mut busy = connect(server.http_port).unwrap_or_else(|error| panic!("{error}"));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        busy.write_all(CHECK.as_bytes())
            .unwrap_or_else(|error| panic!("a busy connection was closed: {error}"));
        let mut answer = vec![0u8; 2048];
        let read = busy
            .read(&mut answer)
            .unwrap_or_else(|error| panic!("read: {error}"));
        assert!(
            answer[..read].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&answer[..read])
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Then left alone: closed.
    assert!(
        closed_within(&mut busy, Duration::from_secs(10)),
        "an idle keep-alive connection stayed open"
    );
    // A connection that never sends anything is idle from the start.
    let mut silent = connect(server.http_port).unwrap_or_else(|error| panic!("{error}"));
    assert!(closed_within(&mut silent, Duration::from_secs(10)));
    // A gRPC client that never speaks HTTP/2.
    let mut mute = connect(server.grpc_port).unwrap_or_else(|error| panic!("{error}"));
    assert!(
        closed_within(&mut mute, Duration::from_secs(10)),
        "a gRPC connection without HTTP/2 stayed open"
    );
    // A gRPC client idle past the timeout gets GOAWAY, and simply reconnects.
    runtime().block_on(async {
        let mut client = rls::connect(&server.grpc_url()).await;
        assert!(rls::call(&mut client, shop_call()).await.is_ok());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut again = Err(tonic::Status::unknown("not called"));
        // The first call may race the GOAWAY; the client reconnects for the next.
        for _ in 0..3 {
            again = rls::call(&mut client, shop_call()).await;
            if again.is_ok() {
                break;
            }
        }
        assert!(again.is_ok(), "{again:?}");
    });
    assert!(
        metric(
            &server,
            "floodgate_connections_closed_total",
            "listener=\"http\",reason=\"idle\""
        ) >= 1.0
    );
    assert!(
        metric(
            &server,
            "floodgate_connections_closed_total",
            "listener=\"grpc\",reason=\"handshake_timeout\""
        ) >= 1.0
    );
}

#[test]
fn a_unary_call_without_its_message_ends_at_the_default_deadline() {
    let (_temp, server) = start(&["--grpc-default-deadline-ms", "1000"]);
    let status = runtime().block_on(async {
        let mut send = h2_connection(server.grpc_port).await;
        let (response, _body) = stalled_call(&mut send, server.grpc_port, None);
        let response = tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .unwrap_or_else(|_| panic!("a call without its message was never answered"))
            .unwrap_or_else(|error| panic!("response: {error}"));
        response
            .headers()
            .get("grpc-status")
            .and_then(|status| status.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    });
    assert_eq!(status, "4", "DEADLINE_EXCEEDED");
}

/// Before, SIGTERM with one unfinished request left the process serving nothing and never
/// exiting; Kubernetes then waited the grace period and killed it.
#[test]
fn sigterm_ends_the_process_whatever_its_clients_hold_open() {
    // Bounds longer than the test: only shutdown closes these.
    let (_temp, mut server) = start(&[
        "--drain-seconds",
        "1",
        "--header-timeout-ms",
        "120000",
        "--body-timeout-ms",
        "120000",
        "--idle-timeout-ms",
        "120000",
        "--grpc-default-deadline-ms",
        "120000",
    ]);
    let mut half_headers = connect(server.http_port).unwrap_or_else(|error| panic!("{error}"));
    half_headers
        .write_all(b"GET /check HTTP/1.1\r\nHost: floodgate\r\nX-Slow: ")
        .unwrap_or_else(|error| panic!("write: {error}"));
    let mut half_body = connect(server.http_port).unwrap_or_else(|error| panic!("{error}"));
    half_body
        .write_all(b"POST /json HTTP/1.1\r\nHost: floodgate\r\nContent-Length: 1000\r\n\r\n{")
        .unwrap_or_else(|error| panic!("write: {error}"));
    let runtime = runtime();
    let held = runtime.block_on(async {
        let mut send = h2_connection(server.grpc_port).await;
        let stalled = stalled_call(&mut send, server.grpc_port, None);
        // An open health Watch stream too: streams have no deadline.
        let channel = tonic::transport::Channel::from_shared(server.grpc_url())
            .unwrap_or_else(|error| panic!("{error}"))
            .connect()
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let watch = health
            .watch(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap_or_else(|status| panic!("watch: {status}"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        (send, stalled, watch)
    });
    let sent = Instant::now();
    let status = server.process.terminate(Duration::from_secs(15));
    let took = sent.elapsed();
    let status = status.unwrap_or_else(|| {
        panic!(
            "still running 15 s after SIGTERM:\n{}",
            server.process.log_text()
        )
    });
    assert!(status.success(), "exit status {status}");
    // Drain (1 s) + the close grace (3 s) + start-up slack; generous on a shared machine.
    assert!(
        took < Duration::from_secs(12),
        "exited {took:?} after SIGTERM"
    );
    drop(held);
    let _ = half_headers.shutdown(Shutdown::Both);
    let _ = half_body.shutdown(Shutdown::Both);
}

/// The handlers used to be installed a few milliseconds after the ports opened, and SIGHUP's
/// default action ends a process.
#[test]
fn sighup_right_after_the_ports_open_is_a_reload_not_the_end() {
    let temp = tempdir();
    let config = temp.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let (mut command, (grpc_port, http_port, debug_port)) = common::serve_command();
    command.arg("--config").arg(&config);
    let mut process = Running::spawn("floodgate", &mut command, temp.path());
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", grpc_port)).is_err() {
        assert!(Instant::now() < deadline, "floodgate never listened");
        std::thread::sleep(Duration::from_millis(1));
    }
    for _ in 0..5 {
        let _ = Command::new("kill")
            .args(["-HUP", &process.pid().to_string()])
            .status();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        process.exit_within(Duration::from_millis(500)).is_none(),
        "floodgate died of SIGHUP:\n{}",
        process.log_text()
    );
    let server = Floodgate {
        process,
        grpc_port,
        http_port,
        debug_port,
    };
    wait_for_port(http_port, Duration::from_secs(10), "floodgate HTTP");
    assert_eq!(status_of(server.http_port, CHECK), Ok(200));
}

/// One client refused 300 times with an 8 KB header used to write one 8 KB warning each time.
#[test]
fn refusals_of_client_input_are_logged_paced_and_short() {
    let (_temp, server) = start(&[]);
    let before = server.process.log_text().len();
    let garbage = "x".repeat(8_192);
    let request = format!(
        "GET /check HTTP/1.1\r\nHost: floodgate\r\nConnection: close\r\nX-RateLimit-Domain: shop\r\nX-RateLimit-Descriptor: {garbage}\r\n\r\n"
    );
    for _ in 0..300 {
        assert_eq!(status_of(server.http_port, &request), Ok(400));
    }
    let lines = log_lines_containing(&server, "check request refused");
    assert!((1..=2).contains(&lines), "{lines} refusal lines");
    let grown = server.process.log_text().len().saturating_sub(before);
    assert!(grown < 16_384, "the log grew by {grown} bytes");
}

#[test]
fn the_rules_can_move_off_the_metrics_port() {
    let pages_port = free_port();
    let pages_addr = format!("127.0.0.1:{pages_port}");
    let (_temp, server) = start(&["--debug-pages-addr", &pages_addr]);
    wait_for_port(pages_port, Duration::from_secs(10), "debug pages");
    let get = |port: u16, path: &str| {
        common::http::get(port, path, &[]).unwrap_or_else(|error| panic!("GET {path}: {error}"))
    };
    assert_eq!(get(server.debug_port, "/metrics").status, 200);
    assert_eq!(get(server.debug_port, "/rlconfig").status, 404);
    let rules = get(pages_port, "/rlconfig");
    assert_eq!(rules.status, 200);
    assert!(rules.body.contains("shop.user"), "{}", rules.body);
    assert_eq!(get(pages_port, "/metrics").status, 404);
    // Without the flag both stay on the debug port, as the reference has them.
    let (_temp, plain) = start(&[]);
    assert_eq!(get(plain.debug_port, "/rlconfig").status, 200);
}

#[cfg(unix)]
#[test]
fn an_admin_token_file_others_may_write_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let temp = tempdir();
    let config = temp.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let token = temp.path().join("token");
    std::fs::write(&token, "secret\n").unwrap_or_else(|error| panic!("write: {error}"));
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o666))
        .unwrap_or_else(|error| panic!("chmod: {error}"));
    let serve_with_token = |name: &str| {
        let (mut command, (grpc_port, _, _)) = common::serve_command();
        command
            .arg("--config")
            .arg(&config)
            .arg("--admin-token-file")
            .arg(&token)
            .args(["--admin-addr", &format!("127.0.0.1:{}", free_port())]);
        (Running::spawn(name, &mut command, temp.path()), grpc_port)
    };
    let (mut refused, _) = serve_with_token("refused");
    let status = refused
        .exit_within(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("started with a world-writable token file"));
    assert!(!status.success());
    let log = refused.log_text();
    assert!(
        log.contains("writable by its group and others") && log.contains("chmod 600"),
        "{log}"
    );

    // 0644, as Kubernetes mounts a Secret by default: served, with a warning.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644))
        .unwrap_or_else(|error| panic!("chmod: {error}"));
    let (warned, grpc_port) = serve_with_token("warned");
    wait_for_port(grpc_port, Duration::from_secs(10), "floodgate");
    let log = warned.log_text();
    assert!(log.contains("readable by every user"), "{log}");
}
