//! Before the first snapshot, as envoyproxy/ratelimit: with `FORCE_START_WITHOUT_INITIAL_CONFIG`
//! floodgate listens at once, health is SERVING (NOT_SERVING with
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`) and every call fails with "no rate limit
//! configuration loaded"; without it floodgate listens once a snapshot has loaded. And
//! `floodgate validate` checks the snapshot a server sends without acknowledging it.

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::xds::XdsServer;

use crate::harness::{
    bounded, decide, decided, hourly, push, resource, spawn, start, until, xds_environment, NODE,
    STEP,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_to_start_it_serves_health_and_fails_calls_until_the_first_snapshot() {
    bounded(async {
        let server = XdsServer::start(None).await;
        let floodgate = start(
            server.port(),
            &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")],
        );
        let url = floodgate.grpc_url();
        server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        assert_eq!(floodgate.healthcheck(), 200, "SERVING, as the reference");
        let refused = decide(&url, "edge", "client", "a").await;
        assert!(
            refused.as_ref().is_err_and(
                |error| error.starts_with("Unknown: no rate limit configuration loaded")
            ),
            "{refused:?}"
        );
        let (_, page) = floodgate.debug_page("/rlconfig");
        assert!(
            page.starts_with("# config version 0 (xds 127.0.0.1:"),
            "{page}"
        );
        assert!(page.contains("no snapshot accepted yet"), "{page}");

        push(
            &server,
            "v1",
            vec![resource("edge", "edge", vec![hourly("client", 1)])],
        )
        .await;
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 0));

        // SIGHUP reloads files; over xDS it means nothing, and must not end the process.
        let hangup = Command::new("kill")
            .arg("-HUP")
            .arg(floodgate.process.pid().to_string())
            .status();
        assert!(hangup.is_ok_and(|status| status.success()));
        let mut floodgate = floodgate;
        let exited = floodgate.process.exit_within(Duration::from_millis(300));
        assert!(exited.is_none(), "{}", floodgate.log());
        assert_eq!(
            decided(&url, "edge", "client", "a").await.0,
            Code::OverLimit
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_healthy_with_at_least_one_config_loaded_health_waits_for_a_domain() {
    bounded(async {
        let server = XdsServer::start(None).await;
        let floodgate = start(
            server.port(),
            &[
                ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
                ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
            ],
        );
        server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        assert_eq!(floodgate.healthcheck(), 500);
        push(&server, "v1", vec![]).await;
        assert_eq!(
            floodgate.healthcheck(),
            500,
            "a snapshot without domains is not enough"
        );
        push(
            &server,
            "v2",
            vec![resource("edge", "edge", vec![hourly("k", 1)])],
        )
        .await;
        until(STEP, "SERVING", || floodgate.healthcheck() == 200).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_force_start_it_listens_once_a_snapshot_has_loaded() {
    bounded(async {
        let server = XdsServer::start(None).await;
        let floodgate = spawn(server.port(), &[]);
        server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        // A bad first snapshot is NACKed and waited past.
        server.set_snapshot(NODE, "v1", vec![resource("edge", "", vec![hourly("k", 1)])]);
        server.wait_for_request(STEP, |seen| seen.is_nack()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            TcpStream::connect(("127.0.0.1", floodgate.grpc_port)).is_err(),
            "listening before any snapshot loaded"
        );
        server.set_snapshot(
            NODE,
            "v2",
            vec![resource("edge", "edge", vec![hourly("k", 1)])],
        );
        floodgate.wait_listening();
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v2"))
            .await;
        assert_eq!(
            decided(&floodgate.grpc_url(), "edge", "k", "a").await,
            (Code::Ok, 0)
        );
        assert_eq!(floodgate.healthcheck(), 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_while_waiting_for_the_first_snapshot_stops_it() {
    bounded(async {
        let server = XdsServer::start(None).await;
        let mut floodgate = spawn(server.port(), &[]);
        server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        let status = floodgate.process.terminate(STEP);
        assert_eq!(
            status.and_then(|status| status.code()),
            Some(0),
            "{}",
            floodgate.log()
        );
    })
    .await;
}

/// `floodgate validate` against the server: exit code and output.
fn validate(port: u16) -> (Option<i32>, String) {
    let mut command = Command::new(floodgate_testkit::floodgate_bin());
    xds_environment(&mut command, port);
    let output = command
        .arg("validate")
        .output()
        .unwrap_or_else(|error| panic!("floodgate validate: {error}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_checks_a_snapshot_without_acknowledging_it() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_snapshot(
            NODE,
            "v9",
            vec![resource("edge-rules", "edge", vec![hourly("client", 7)])],
        );
        let port = server.port();
        let (code, text) = tokio::task::spawn_blocking(move || validate(port))
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains("version \"v9\", 1 resources, not acknowledged: configuration ok"),
            "{text}"
        );
        assert!(text.contains("domain edge (xds:edge-rules):"), "{text}");
        assert!(
            server
                .requests()
                .iter()
                .all(|seen| seen.request.response_nonce.is_empty()),
            "acknowledged"
        );

        server.set_snapshot(
            NODE,
            "v10",
            vec![resource("edge-rules", "", vec![hourly("client", 7)])],
        );
        let (code, text) = tokio::task::spawn_blocking(move || validate(port))
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(code, Some(1), "{text}");
        assert!(text.contains("xds:edge-rules:"), "{text}");
    })
    .await;
}
