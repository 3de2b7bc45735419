//! floodgate as `/bin/ratelimit` in Envoy Gateway's rate limit Deployment: the container's
//! environment exactly as Envoy Gateway renders it
//! (`internal/infrastructure/kubernetes/ratelimit/testdata/deployments/default.yaml`), with only
//! the paths and addresses that must point at this test's files and ports replaced: it starts,
//! reaches the xDS server over mutual TLS, and serves the rules pushed to it over gRPC TLS,
//! counting in Redis.

use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitDescriptor;
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::testca::TestCa;
use floodgate_testkit::xds::{XdsServer, XdsServerTls};
use floodgate_testkit::{
    free_port, ratelimit_command, repo_file, rls, subdir, wait_for_port, Running,
};

use crate::harness::{bounded, hourly, resource, STEP};

/// Envoy Gateway's `InfraName`, the node id it sets snapshots for.
const NODE: &str = "envoy-ratelimit";

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
        let certs = subdir(dir.path(), "certs");
        let data = subdir(dir.path(), "data");
        let ca = TestCa::new("envoy-gateway");
        // Envoy Gateway's `envoy-rate-limit` secret: one pair for the gRPC listener and for the
        // client side of the xDS connection.
        let pair = ca.server_and_client();
        for (name, text) in [
            ("tls.crt", &pair.cert),
            ("tls.key", &pair.key),
            ("ca.crt", &ca.pem()),
        ] {
            std::fs::write(certs.join(name), text).unwrap_or_else(|error| panic!("{error}"));
        }
        let gateway = ca.server();
        let server = XdsServer::start(Some(XdsServerTls {
            cert_pem: gateway.cert,
            key_pem: gateway.key,
            client_ca_pem: Some(ca.pem()),
        }))
        .await;
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
        let cert = |name: &str| certs.join(name).display().to_string();
        let mapper = repo_file("tests/operations/fixtures/envoy-gateway/statsd_conf.yaml");
        let prometheus_port = free_port();
        let (mut command, ports) = ratelimit_command(dir.path());
        // Nothing inherited: Envoy Gateway's list, plus where to listen (8081, 8080 and 6070 in
        // the pod; free loopback ports here).
        command.env_clear();
        floodgate_testkit::reference_listeners(&mut command, ports);
        let (grpc_port, http_port, _) = ports;
        let environment: [(&str, String); 23] = [
            ("RUNTIME_ROOT", data.display().to_string()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
            ("RUNTIME_IGNOREDOTFILES", "true".to_owned()),
            ("RUNTIME_WATCH_ROOT", "false".to_owned()),
            ("LOG_LEVEL", "info".to_owned()),
            ("USE_STATSD", "false".to_owned()),
            ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
            (
                "CONFIG_GRPC_XDS_SERVER_URL",
                format!("127.0.0.1:{}", server.port()),
            ),
            ("CONFIG_GRPC_XDS_NODE_ID", NODE.to_owned()),
            ("GRPC_SERVER_USE_TLS", "true".to_owned()),
            ("GRPC_SERVER_TLS_CERT", cert("tls.crt")),
            ("GRPC_SERVER_TLS_KEY", cert("tls.key")),
            ("GRPC_SERVER_TLS_CA_CERT", cert("ca.crt")),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert("tls.crt")),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", cert("tls.key")),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", cert("ca.crt")),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_owned()),
            ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
            ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
            ("USE_PROMETHEUS", "true".to_owned()),
            ("PROMETHEUS_ADDR", format!("127.0.0.1:{prometheus_port}")),
            ("PROMETHEUS_MAPPER_YAML", mapper.display().to_string()),
        ];
        command.envs(
            environment
                .iter()
                .map(|(name, value)| (*name, value.as_str())),
        );
        let process = Running::spawn("ratelimit", &mut command, dir.path());
        wait_for_port(grpc_port, STEP, "ratelimit gRPC");
        wait_for_port(prometheus_port, STEP, "ratelimit Prometheus");
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("1"))
            .await;

        let channel = rls::tls_channel(grpc_port, &ca.pem(), None)
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
