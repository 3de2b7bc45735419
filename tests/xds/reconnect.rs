//! The management server goes away and comes back on the same port: floodgate keeps deciding
//! with the rules in force meanwhile, reconnects with its backoff, announces the version in
//! force on the new stream, and takes what the new server pushes.

use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::xds::XdsServer;

use crate::harness::{bounded, decided, hourly, resource, start, until, NODE, STEP};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reconnected_to_and_the_rules_in_force_answer_meanwhile() {
    bounded(async {
        let server = XdsServer::start(None).await;
        let port = server.port();
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource("edge", "edge", vec![hourly("client", 10)])],
        );
        let floodgate = start(
            port,
            &[
                ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms"),
                ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "400ms"),
                ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
                ("XDS_CLIENT_BACKOFF_JITTER", "false"),
                ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "100ms"),
            ],
        );
        let url = floodgate.grpc_url();
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 9));

        server.stop().await;
        until(STEP, "floodgate notices the stream ended", || {
            floodgate
                .log()
                .contains("the rules in force stay, reconnecting")
        })
        .await;
        let (_, metrics) = floodgate.debug_page("/metrics");
        assert!(metrics.contains("floodgate_xds_connected 0"), "{metrics}");
        // Down for a while: the rules in force decide, the counter keeps counting.
        for remaining in [8, 7, 6] {
            assert_eq!(
                decided(&url, "edge", "client", "a").await,
                (Code::Ok, remaining)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }

        let server = XdsServer::start_on(port, None).await;
        server.set_snapshot(
            NODE,
            "v2",
            vec![resource(
                "edge",
                "edge",
                vec![hourly("client", 10), hourly("new", 1)],
            )],
        );
        let first = server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        assert_eq!(first.node_id(), NODE, "a new stream names the node again");
        assert_eq!(first.request.version_info, "v1", "and the version in force");
        assert_eq!(first.request.response_nonce, "");
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v2"))
            .await;
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 5));
        assert_eq!(decided(&url, "edge", "new", "a").await, (Code::Ok, 0));
        let (_, metrics) = floodgate.debug_page("/metrics");
        assert!(metrics.contains("floodgate_xds_connected 1"), "{metrics}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_snapshot_on_a_new_stream_is_acknowledged_without_a_reload() {
    bounded(async {
        let server = XdsServer::start(None).await;
        let port = server.port();
        let rules = || vec![resource("edge", "edge", vec![hourly("client", 10)])];
        server.set_snapshot(NODE, "v1", rules());
        let floodgate = start(port, &[]);
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        server.stop().await;

        let server = XdsServer::start_on(port, None).await;
        server.set_snapshot(NODE, "v1", rules());
        // go-control-plane sends a new stream the whole snapshot even at the same version.
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        let (_, page) = floodgate.debug_page("/rlconfig");
        assert!(
            page.starts_with("# config version 1 (xds "),
            "not loaded again: {page}"
        );
    })
    .await;
}
