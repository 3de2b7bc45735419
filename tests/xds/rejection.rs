//! Snapshots that do not load: bytes that are no `RateLimitConfig`, and a valid proto with a bad
//! rule, are NACKed with the version in force and an INVALID_ARGUMENT naming the resource and
//! the problem; the rules in force keep answering; go-control-plane's immediate resends of the
//! rejected snapshot (its issue #962) are NACKed after a growing pause, not in a spin, and each
//! rejected version is logged once at error level.

use std::time::Duration;

use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{RateLimitDescriptor, RateLimitPolicy};
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::xds::{NackPolicy, ReceivedRequest, XdsServer, RATE_LIMIT_CONFIG_TYPE};

use crate::harness::{bounded, decided, hourly, push, resource, start, NODE, STEP};

/// google.rpc.Code INVALID_ARGUMENT.
const INVALID_ARGUMENT: i32 = 3;

fn nack_message(seen: &ReceivedRequest) -> String {
    let status = seen
        .request
        .error_detail
        .clone()
        .unwrap_or_else(|| panic!("not a NACK: {seen:?}"));
    assert_eq!(status.code, INVALID_ARGUMENT, "{status:?}");
    status.message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_snapshots_are_nacked_naming_the_resource_and_the_rules_in_force_stay() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource("edge", "edge", vec![hourly("client", 3)])],
        );
        let floodgate = start(server.port(), &[]);
        let url = floodgate.grpc_url();
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 2));

        // Bytes that do not decode.
        let garbage = Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: vec![0xff, 0xff, 0xff],
        };
        server.set_snapshot(
            NODE,
            "v2",
            vec![resource("fine", "other", vec![hourly("k", 1)]), garbage],
        );
        let nack = server
            .wait_for_request(STEP, |seen| {
                seen.is_nack() && seen.request.response_nonce == "2"
            })
            .await;
        assert_eq!(
            nack.request.version_info, "v1",
            "a NACK reports the version in force"
        );
        let message = nack_message(&nack);
        assert!(
            message.contains("xDS resource 2 of 2") && message.contains("cannot be decoded"),
            "{message}"
        );
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 1));
        assert_eq!(
            decided(&url, "other", "k", "a").await.0,
            Code::Ok,
            "nothing of v2 is live"
        );

        // A valid proto with a bad rule: a unit the loader refuses.
        let bad_rule = RateLimitDescriptor {
            key: "path".to_owned(),
            rate_limit: Some(RateLimitPolicy {
                requests_per_unit: 9,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        };
        server.set_snapshot(
            NODE,
            "v3",
            vec![
                resource("edge", "edge", vec![hourly("client", 100)]),
                resource("edge-paths", "paths", vec![bad_rule]),
            ],
        );
        let nack = server
            .wait_for_request(STEP, |seen| {
                seen.is_nack()
                    && seen
                        .request
                        .error_detail
                        .as_ref()
                        .is_some_and(|status| status.message.contains("edge-paths"))
            })
            .await;
        assert_eq!(nack.request.version_info, "v1");
        let message = nack_message(&nack);
        assert!(
            message.starts_with("xds:edge-paths: paths.path: invalid rate limit unit 'UNKNOWN'"),
            "{message}"
        );
        // Still v1's limit of 3, its count kept.
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 0));
        assert_eq!(
            decided(&url, "edge", "client", "a").await.0,
            Code::OverLimit
        );

        // The server resends v3 at once after every NACK: floodgate NACKs the resends after
        // 1 s, 2 s, … (at most the backoff's maximum, 1 s here), so a few, not thousands.
        let before = server.requests_total();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let during = server.requests_total() - before;
        assert!((1..=5).contains(&during), "{during} requests in 3 s");
        let log = floodgate.log();
        assert_eq!(
            log.matches("configuration from xDS rejected (NACK)")
                .count(),
            2,
            "each rejected version (v2, v3) once at error level:\n{log}"
        );
        let (_, metrics) = floodgate.debug_page("/metrics");
        let rejected = metrics
            .lines()
            .find_map(|line| line.strip_prefix("floodgate_xds_rejected_total "))
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or_default();
        assert!(rejected >= 3, "{metrics}");
        let (_, page) = floodgate.debug_page("/rlconfig");
        assert!(
            page.starts_with("# config version 1 (xds ")
                && page.contains("version \"v1\"")
                && page.contains("(the snapshot pushed last is not live): xds:edge-paths"),
            "{page}"
        );

        // A good snapshot ends it.
        push(
            &server,
            "v4",
            vec![resource("edge", "edge", vec![hourly("client", 100)])],
        )
        .await;
        // The rule path, algorithm and window are v1's: its three hits still count.
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 96));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_domain_twice_is_refused_unless_merge_domain_config() {
    bounded(async {
        let twice = || {
            vec![
                resource("edge-a", "edge", vec![hourly("a", 1)]),
                resource("edge-b", "edge", vec![hourly("b", 1)]),
            ]
        };
        let server = XdsServer::start(None).await;
        server.set_snapshot(NODE, "v1", twice());
        let floodgate = start(
            server.port(),
            &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")],
        );
        let nack = server
            .wait_for_request(STEP, ReceivedRequest::is_nack)
            .await;
        let message = nack_message(&nack);
        assert!(
            message.contains("xds:edge-b") && message.contains("edge"),
            "{message}"
        );
        drop(floodgate);

        let merging = XdsServer::start(None).await;
        merging.set_snapshot(NODE, "v1", twice());
        let floodgate = start(merging.port(), &[("MERGE_DOMAIN_CONFIG", "true")]);
        merging
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        let url = floodgate.grpc_url();
        assert_eq!(decided(&url, "edge", "a", "x").await, (Code::Ok, 0));
        assert_eq!(decided(&url, "edge", "b", "x").await, (Code::Ok, 0));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_holds_a_nacked_version_gets_one_nack_and_then_the_next_snapshot_loads() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_nack_policy(NackPolicy::HoldUntilNewSnapshot);
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource("edge", "edge", vec![hourly("k", 2)])],
        );
        let floodgate = start(server.port(), &[]);
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        server.set_snapshot(NODE, "v2", vec![resource("edge", "", vec![hourly("k", 2)])]);
        server
            .wait_for_request(STEP, ReceivedRequest::is_nack)
            .await;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let nacks = server
            .requests()
            .iter()
            .filter(|seen| seen.is_nack())
            .count();
        assert_eq!(
            nacks, 1,
            "nothing was sent again, so nothing is NACKed again"
        );
        push(
            &server,
            "v3",
            vec![resource("edge", "edge", vec![hourly("k", 5)])],
        )
        .await;
        assert_eq!(
            decided(&floodgate.grpc_url(), "edge", "k", "a").await,
            (Code::Ok, 4)
        );
    })
    .await;
}
