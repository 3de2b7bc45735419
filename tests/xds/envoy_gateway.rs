//! floodgate as `/bin/ratelimit` in Envoy Gateway's rate limit Deployment: the container's
//! environment exactly as Envoy Gateway renders it (`floodgate_testkit::envoy_gateway`), with
//! only the paths and addresses that must point at this test's files and ports replaced: it starts,
//! reaches the xDS server over mutual TLS, and serves the rules pushed to it over gRPC TLS,
//! counting in Redis.

use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitDescriptor;
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::envoy_gateway::{self, Certs, Peers, NODE};
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::xds::XdsServer;
use floodgate_testkit::{free_port, rls, subdir, wait_for_port};

use crate::harness::{bounded, hourly, resource, STEP};

/// The domain and descriptors Envoy Gateway's translator renders for an HTTPRoute rule
/// (`tests/operations/fixtures/envoy-gateway/ratelimit.yaml`), 3 an hour.
fn envoy_gateway_rules() -> Vec<RateLimitDescriptor> {
    let route = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
    vec![RateLimitDescriptor {
        key: route.to_owned(),
        value: route.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            value: "rule-0-match-0".to_owned(),
            ..hourly("rule-0-match-0", 3)
        }],
        ..RateLimitDescriptor::default()
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_as_ratelimit_with_envoy_gateways_environment_it_serves_pushed_rules() {
    bounded(async {
        let dir = floodgate_testkit::tempdir();
        let data = subdir(dir.path(), "data");
        let certs = Certs::write(dir.path());
        let server = XdsServer::start(Some(certs.xds_server_tls())).await;
        server.set_snapshot(
            NODE,
            "1",
            vec![resource(
                "default/eg/http",
                "default/eg/http",
                envoy_gateway_rules(),
            )],
        );
        let redis = RedisServer::start();
        let peers = Peers {
            xds_port: server.port(),
            redis_port: Some(redis.port()),
            prometheus_port: free_port(),
        };
        let environment = envoy_gateway::environment(&data, &certs, &peers);
        let (process, (grpc_port, http_port, _)) = envoy_gateway::spawn(dir.path(), &environment);
        let prometheus_port = peers.prometheus_port;
        wait_for_port(grpc_port, STEP, "ratelimit gRPC");
        wait_for_port(prometheus_port, STEP, "ratelimit Prometheus");
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("1"))
            .await;

        let channel = rls::tls_channel(grpc_port, &certs.ca.pem(), None)
            .await
            .unwrap_or_else(|error| panic!("gRPC TLS: {error}\n{}", process.log_text()));
        let mut client = RateLimitServiceClient::new(channel);
        let route = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
        let request = || {
            rls::request(
                "default/eg/http",
                &[&[(route, route), ("rule-0-match-0", "rule-0-match-0")]],
            )
        };
        let mut codes = Vec::new();
        for _ in 0..4 {
            let answer = rls::call(&mut client, request())
                .await
                .unwrap_or_else(|status| panic!("{status}\n{}", process.log_text()));
            codes.push(rls::first_outcome(&answer).0);
        }
        assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);

        let health = floodgate_testkit::http::get(http_port, "/healthcheck", &[])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(health.status, 200, "Envoy Gateway's probes");
        let log = process.log_text();
        assert!(log.contains("connected to Redis"), "{log}");
        assert!(
            !log.contains("does not support"),
            "every variable is honoured:\n{log}"
        );
        assert!(
            log.contains("GRPC_SERVER_TLS_CA_CERT is set and ignored"),
            "{log}"
        );
        let stats = floodgate_testkit::http::get(prometheus_port, "/metrics", &[])
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(
            stats.body.contains("ratelimit_service_config_load_success"),
            "{}",
            stats.body
        );
    })
    .await;
}
