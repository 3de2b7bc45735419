//! TLS to the management server as Envoy Gateway configures it: mutual TLS, floodgate's client
//! certificate required by the server, the server's certificate checked against the CA and
//! against `CONFIG_GRPC_XDS_SERVER_TLS_SAN` (or the URL's host without it).

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::testca::TestCa;
use floodgate_testkit::xds::{XdsServer, XdsServerTls};

use crate::harness::{bounded, decided, hourly, resource, spawn, start, until, NODE, STEP};

/// The name on the management server's certificate, and nothing else (not 127.0.0.1).
const SERVER_NAME: &str = "xds.floodgate.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_server_name_of_its_own() {
    bounded(async {
        let ca = TestCa::new("xds test CA");
        let server_pair = ca.server_for(&[SERVER_NAME]);
        let server = XdsServer::start(Some(XdsServerTls {
            cert_pem: server_pair.cert,
            key_pem: server_pair.key,
            client_ca_pem: Some(ca.pem()),
        }))
        .await;
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource("edge", "edge", vec![hourly("client", 1)])],
        );
        let dir = floodgate_testkit::tempdir();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap_or_else(|error| panic!("{error}"));
            path.display().to_string()
        };
        let client = ca.client("envoy-ratelimit");
        let (cert, key, ca_file) = (
            write("tls.crt", &client.cert),
            write("tls.key", &client.key),
            write("ca.crt", &ca.pem()),
        );
        let tls = [
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", cert.as_str()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", key.as_str()),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca_file.as_str()),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
        ];

        // Without the SAN, the certificate is checked against 127.0.0.1, which it is not for.
        let unnamed = start(server.port(), &tls);
        until(STEP, "a TLS failure is logged", || {
            unnamed
                .log()
                .contains("xDS: cannot connect to the xDS management server")
        })
        .await;
        let log = unnamed.log();
        assert!(
            log.contains("certificate") || log.contains("Certificate"),
            "{log}"
        );
        drop(unnamed);
        // Without a client certificate the server refuses the handshake.
        let anonymous = start(
            server.port(),
            &[
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
                ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", ca_file.as_str()),
                ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", SERVER_NAME),
                ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ],
        );
        until(STEP, "the refusal is logged", || {
            let log = anonymous.log();
            log.contains("xDS: cannot connect")
                || log.contains("xDS: the xDS management server")
                || log.contains("xDS: the stream failed")
        })
        .await;
        drop(anonymous);
        assert_eq!(
            server.streams_opened(),
            0,
            "no stream without the right name and certificate"
        );

        let mut named = tls.to_vec();
        named.push(("CONFIG_GRPC_XDS_SERVER_TLS_SAN", SERVER_NAME));
        let floodgate = spawn(server.port(), &named);
        floodgate.wait_listening();
        server
            .wait_for_request(STEP, |seen| seen.is_ack_of("v1"))
            .await;
        let url = floodgate.grpc_url();
        assert_eq!(decided(&url, "edge", "client", "a").await, (Code::Ok, 0));
        assert_eq!(
            decided(&url, "edge", "client", "a").await.0,
            Code::OverLimit
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_file_that_is_not_there_stops_the_start_with_its_name() {
    let floodgate = spawn(
        1,
        &[
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/nonexistent/ca.crt"),
        ],
    );
    let mut process = floodgate.process;
    let status = process.exit_within(STEP);
    assert_eq!(status.and_then(|status| status.code()), Some(1));
    let log = process.log_text();
    assert!(
        log.contains("CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/nonexistent/ca.crt: cannot be read"),
        "{log}"
    );
}
