//! The reference's `Test_mTLS` and `TestReloadGRPCServerCerts` (with `mtls_test.go`'s
//! certificate setup, here the test CA of `floodgate_testkit::testca`): the gRPC listener
//! served over TLS from `GRPC_SERVER_USE_TLS`, `GRPC_SERVER_TLS_CERT`/`_KEY`, requiring client
//! certificates signed by `GRPC_CLIENT_TLS_CACERT`; and a certificate and key renamed over the
//! served ones reaching new connections without a restart.
//!
//! The reference's `Test_mTLS` only dials (gRPC dials lazily, so it checks little); here a call
//! is made, and clients without a certificate, with one from another CA, or with one of the
//! client CA for another name than `GRPC_CLIENT_TLS_SAN`, are refused.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls::{self, tls_channel};
use floodgate_testkit::testca::{Pair, TestCa};

use super::redis_setups::{address, PASSWORD};
use crate::harness::{overall, request, start, write, Entry, Reference, RuntimeTree};

/// How long the reference's test waits for the renamed certificate to be served.
const ROTATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A new TLS connection trusting `ca` (presenting `identity`) and one call on it.
async fn call_works(server: &Reference, ca: &TestCa, identity: Option<&Pair>) -> bool {
    let Ok(channel) = tls_channel(server.grpc_port, &ca.pem(), identity).await else {
        return false;
    };
    let mut client = rls::Client::new(channel);
    match rls::call(&mut client, request("basic", &[&[("key1", "foo")]], 1)).await {
        Ok(response) => overall(&response) == Code::Ok,
        Err(_) => false,
    }
}

fn write_pair(dir: &Path, name: &str, pair: &Pair) -> (String, String) {
    let (cert, key) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    write(&cert, &pair.cert);
    write(&key, &pair.key);
    (cert.display().to_string(), key.display().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls() {
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    let dir = tree.log_dir("certificates");
    let (server_ca, client_ca, stranger_ca) = (
        TestCa::new("reference suite server CA"),
        TestCa::new("reference suite client CA"),
        TestCa::new("another CA"),
    );
    let (server_cert, server_key) = write_pair(&dir, "server", &server_ca.server());
    let client = client_ca.client("localhost");
    let client_ca_file = dir.join("client-ca.pem");
    write(&client_ca_file, &client_ca.pem());
    let server_ca_file = dir.join("server-ca.pem");
    write(&server_ca_file, &server_ca.pem());
    let client_ca_file = client_ca_file.display().to_string();
    let server_ca_file = server_ca_file.display().to_string();

    // The Go test's settings also reach Redis over TLS with a password.
    let (redis, tls_port) = RedisServer::start_tls(&[
        "--tls-cert-file",
        &server_cert,
        "--tls-key-file",
        &server_key,
        "--tls-ca-cert-file",
        &server_ca_file,
        "--tls-auth-clients",
        "no",
        "--requirepass",
        PASSWORD,
    ]);
    let server = start(
        Entry::Ratelimit,
        &tree,
        "Test_mTLS",
        &[
            ("REDIS_URL", &address(tls_port)),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", &server_ca_file),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false"),
            ("REDIS_AUTH", PASSWORD),
            ("REDIS_PERSECOND_AUTH", PASSWORD),
            ("REDIS_PERSECOND_TLS", "true"),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &server_cert),
            ("GRPC_SERVER_TLS_KEY", &server_key),
            ("GRPC_CLIENT_TLS_CACERT", &client_ca_file),
            ("GRPC_CLIENT_TLS_SAN", "localhost"),
        ],
    );
    assert!(
        call_works(&server, &server_ca, Some(&client)).await,
        "a client certificate of the client CA is served\n{}",
        server.process.log_text()
    );
    assert!(
        !call_works(&server, &server_ca, None).await,
        "no client certificate: refused"
    );
    assert!(
        !call_works(&server, &server_ca, Some(&stranger_ca.client("localhost"))).await,
        "a client certificate of another CA: refused"
    );
    assert!(
        !call_works(&server, &server_ca, Some(&client_ca.client("mallory"))).await,
        "a client certificate of the client CA for another name than GRPC_CLIENT_TLS_SAN: refused"
    );
    assert!(
        redis
            .query_text(&["DBSIZE"])
            .is_some_and(|count| count.trim() != "0"),
        "the call was counted in the TLS Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_grpc_server_certs() {
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    let dir = tree.log_dir("certificates");
    let (initial_ca, new_ca) = (TestCa::new("initial CA"), TestCa::new("new CA"));
    let (initial_cert, initial_key) = write_pair(&dir, "initial", &initial_ca.server());
    let (new_cert, new_key) = write_pair(&dir, "new", &new_ca.server());
    let redis = RedisServer::start();
    let server = start(
        Entry::Ratelimit,
        &tree,
        "TestReloadGRPCServerCerts",
        &[
            ("REDIS_URL", &address(redis.port())),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &initial_cert),
            ("GRPC_SERVER_TLS_KEY", &initial_key),
        ],
    );
    assert!(
        call_works(&server, &initial_ca, None).await,
        "WithInitialCert\n{}",
        server.process.log_text()
    );
    assert!(!call_works(&server, &new_ca, None).await, "WithNewCertFail");

    // As the reference's test: the new certificate, then its key, renamed over the served ones.
    std::fs::rename(&new_cert, &initial_cert).unwrap_or_else(|error| panic!("rename: {error}"));
    std::fs::rename(&new_key, &initial_key).unwrap_or_else(|error| panic!("rename: {error}"));

    let deadline = Instant::now() + ROTATION_TIMEOUT;
    while !call_works(&server, &new_ca, None).await {
        assert!(
            Instant::now() < deadline,
            "WithNewCertOK: the renamed certificate is not served within {ROTATION_TIMEOUT:?}\n{}",
            server.process.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !call_works(&server, &initial_ca, None).await,
        "WithInitialCertFail"
    );
}
