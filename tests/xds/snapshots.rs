//! Snapshots that load: the first one decides, an update changes limits live while a counter of
//! an unchanged rule keeps its count, and the node, its metadata and the additional headers
//! reach the server; `/rlconfig`, the debug headers and the metrics say where the rules came
//! from and which version is live.

use envoy_types::pb::google::protobuf::value::Kind;
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::xds::{XdsServer, RATE_LIMIT_CONFIG_TYPE};

use crate::harness::{bounded, decided, hourly, push, resource, start, NODE, STEP};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_snapshot_loads_decides_and_is_acknowledged() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource("edge-rules", "edge", vec![hourly("client", 2)])],
        );
        let floodgate = start(server.port(), &[]);
        let url = floodgate.grpc_url();
        assert_eq!(decided(&url, "edge", "client", "ada").await, (Code::Ok, 1));
        assert_eq!(decided(&url, "edge", "client", "ada").await, (Code::Ok, 0));
        assert_eq!(
            decided(&url, "edge", "client", "ada").await.0,
            Code::OverLimit
        );

        let first = server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        assert_eq!(first.node_id(), NODE);
        assert_eq!(first.request.type_url, RATE_LIMIT_CONFIG_TYPE);
        assert_eq!(first.request.version_info, "");
        assert!(first.request.resource_names.is_empty());
        let ack = server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        assert_eq!(ack.request.response_nonce, "1");
        assert!(
            ack.request.node.is_none(),
            "only the stream's first request names the node"
        );

        let (status, page) = floodgate.debug_page("/rlconfig");
        assert_eq!(status, 200);
        assert!(
            page.starts_with("# config version 1 (xds 127.0.0.1:"),
            "{page}"
        );
        assert!(page.contains("version \"v1\""), "{page}");
        assert!(page.contains("(from xds:edge-rules)"), "{page}");
        let headers = floodgate_testkit::http::get(floodgate.debug_port, "/rlconfig", &[])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(headers.header("floodgate-config-source"), Some("xds"));
        assert_eq!(
            headers.header("floodgate-config-source-version"),
            Some("v1")
        );
        let (_, metrics) = floodgate.debug_page("/metrics");
        assert!(
            metrics.contains("floodgate_config_source_info{source=\"xds\",version=\"v1\"} 1"),
            "{metrics}"
        );
        assert!(metrics.contains("floodgate_xds_connected 1"), "{metrics}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_changes_limits_live_and_unchanged_rules_keep_counting() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource(
                "edge",
                "edge",
                vec![hourly("steady", 5), hourly("tuned", 1)],
            )],
        );
        let floodgate = start(server.port(), &[]);
        let url = floodgate.grpc_url();
        for remaining in [4, 3, 2] {
            assert_eq!(
                decided(&url, "edge", "steady", "a").await,
                (Code::Ok, remaining)
            );
        }
        assert_eq!(decided(&url, "edge", "tuned", "a").await, (Code::Ok, 0));
        assert_eq!(decided(&url, "edge", "tuned", "a").await.0, Code::OverLimit);

        push(
            &server,
            "v2",
            vec![
                resource(
                    "edge",
                    "edge",
                    vec![hourly("steady", 5), hourly("tuned", 10)],
                ),
                resource("api", "api", vec![hourly("key", 1)]),
            ],
        )
        .await;
        // The unchanged rule kept its three hits; the retuned one kept its one hit (a counter's
        // key is domain, rule path, algorithm and window, not the limit) under its new limit;
        // the new domain is there.
        assert_eq!(decided(&url, "edge", "steady", "a").await, (Code::Ok, 1));
        assert_eq!(decided(&url, "edge", "tuned", "a").await, (Code::Ok, 8));
        assert_eq!(decided(&url, "api", "key", "x").await, (Code::Ok, 0));
        let (_, page) = floodgate.debug_page("/rlconfig");
        assert!(page.starts_with("# config version 2 (xds "), "{page}");
        assert!(
            page.contains("version \"v2\"") && page.contains("(from xds:api)"),
            "{page}"
        );
        let (_, metrics) = floodgate.debug_page("/metrics");
        assert!(
            metrics.contains("floodgate_config_source_info{source=\"xds\",version=\"v2\"} 1")
                && !metrics.contains("version=\"v1\""),
            "{metrics}"
        );

        // A domain the snapshot no longer has is gone.
        push(
            &server,
            "v3",
            vec![resource("edge", "edge", vec![hourly("steady", 5)])],
        )
        .await;
        assert_eq!(decided(&url, "api", "key", "x").await.0, Code::Ok);
        assert_eq!(decided(&url, "edge", "steady", "a").await, (Code::Ok, 0));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_its_metadata_and_the_additional_headers_reach_the_server() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_snapshot(
            "edge-7",
            "v1",
            vec![resource("edge", "edge", vec![hourly("k", 1)])],
        );
        let floodgate = start(
            server.port(),
            &[
                ("CONFIG_GRPC_XDS_NODE_ID", "edge-7"),
                (
                    "CONFIG_GRPC_XDS_NODE_METADATA",
                    "cluster=eu-west,zone=b,ignored",
                ),
                (
                    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                    "X-Team:edge,x-token:s3cret",
                ),
            ],
        );
        let first = server.wait_for_request(STEP, |seen| seen.stream == 1).await;
        assert_eq!(first.node_id(), "edge-7");
        assert_eq!(first.header("x-team"), Some("edge"));
        assert_eq!(first.header("x-token"), Some("s3cret"));
        let node = first.request.node.clone().unwrap_or_default();
        let fields = node.metadata.unwrap_or_default().fields;
        let text = |name: &str| match fields.get(name).and_then(|value| value.kind.clone()) {
            Some(Kind::StringValue(text)) => Some(text),
            _ => None,
        };
        assert_eq!(text("cluster").as_deref(), Some("eu-west"));
        assert_eq!(text("zone").as_deref(), Some("b"));
        assert_eq!(fields.len(), 2, "{fields:?}");
        assert_eq!(node.user_agent_name, "floodgate");
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        let log = floodgate.log();
        assert!(log.contains("\"ignored\" has no '='"), "{log}");
        assert!(!log.contains("s3cret"), "a header value was logged:\n{log}");
    })
    .await;
}
