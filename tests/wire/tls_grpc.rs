//! TLS on the gRPC listener with a CA made by the test: TLS works, plain text does not, mutual
//! TLS refuses clients without a trusted certificate, a rotated certificate is served to new
//! connections, a broken rotation keeps the old one, envoyproxy/ratelimit's variables work.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit as common;
use floodgate_testkit::ops::{self, descriptor, request, Server};
use floodgate_testkit::testca::{Pair, TestCa};
use tonic::transport::{Channel, Endpoint};

const RULES: &str =
    "domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

pub(super) struct Files {
    _temp: tempfile::TempDir,
    pub(super) dir: PathBuf,
    pub(super) rules: String,
    pub(super) cert: String,
    pub(super) key: String,
}

pub(super) fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

pub(super) fn files(server: &Pair) -> Files {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let dir = temp.path().to_path_buf();
    let tls = dir.join("tls");
    std::fs::create_dir(&tls).unwrap_or_else(|error| panic!("mkdir: {error}"));
    write(&dir.join("rules.yaml"), RULES);
    write(&tls.join("cert.pem"), &server.cert);
    write(&tls.join("key.pem"), &server.key);
    Files {
        rules: dir.join("rules.yaml").display().to_string(),
        cert: tls.join("cert.pem").display().to_string(),
        key: tls.join("key.pem").display().to_string(),
        dir,
        _temp: temp,
    }
}

impl Files {
    /// floodgate serving these rules over TLS with this certificate and key, plus `extra`.
    pub(super) fn serve_tls(&self, extra: &[&str]) -> Server {
        let mut args = vec![
            "--config",
            &self.rules,
            "--grpc-tls-cert",
            &self.cert,
            "--grpc-tls-key",
            &self.key,
        ];
        args.extend_from_slice(extra);
        ops::start(&args, &[], &self.dir)
    }
}

/// A TLS channel to the server trusting `ca`, optionally with a client certificate.
async fn channel(server: &Server, ca: &TestCa, identity: Option<&Pair>) -> Result<Channel, String> {
    floodgate_testkit::rls::tls_channel(server.grpc_port, &ca.pem(), identity).await
}

async fn call(channel: Channel) -> Result<(), String> {
    RateLimitServiceClient::new(channel)
        .should_rate_limit(request("t", vec![descriptor(&[("k", "v")], None)]))
        .await
        .map(|_| ())
        .map_err(|status| format!("{status:?}"))
}

/// A new connection trusting `ca` (with `identity`) and one call on it.
pub(super) fn new_connection_works(server: &Server, ca: &TestCa, identity: Option<&Pair>) -> bool {
    ops::runtime().block_on(async {
        match channel(server, ca, identity).await {
            Ok(channel) => call(channel).await.is_ok(),
            Err(_) => false,
        }
    })
}

fn plain_text_works(server: &Server) -> bool {
    ops::runtime().block_on(async {
        let connected = Endpoint::from_shared(server.grpc_url())
            .map_err(|error| error.to_string())
            .map(|endpoint| endpoint.timeout(Duration::from_secs(3)));
        let Ok(endpoint) = connected else {
            return false;
        };
        match endpoint.connect().await {
            Ok(channel) => call(channel).await.is_ok(),
            Err(_) => false,
        }
    })
}

fn check_health(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(common::floodgate_bin())
        .args(["check", "--health"])
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("run floodgate check: {error}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

#[test]
fn tls_is_served_and_a_rotated_certificate_reaches_new_connections() {
    let (first_ca, second_ca) = (TestCa::new("first CA"), TestCa::new("second CA"));
    let files = files(&first_ca.server());
    let server = files.serve_tls(&[]);
    assert!(new_connection_works(&server, &first_ca, None));
    assert!(!plain_text_works(&server), "plain text must be refused");
    assert!(!new_connection_works(&server, &second_ca, None));

    let ca_file = files.dir.join("first-ca.pem");
    write(&ca_file, &first_ca.pem());
    let url = format!("https://127.0.0.1:{}", server.grpc_port);
    let ca_text = ca_file.display().to_string();
    let (code, output) = check_health(&[
        "--addr",
        &url,
        "--tls-ca",
        &ca_text,
        "--tls-server-name",
        "localhost",
    ]);
    assert_eq!(code, Some(0), "{output}");

    let runtime = ops::runtime();
    let open = runtime
        .block_on(channel(&server, &first_ca, None))
        .unwrap_or_else(|error| panic!("connect: {error}"));

    // Rotate: the key first, then the certificate, each renamed into place.
    let rotated = second_ca.server();
    ops::write_atomically(Path::new(&files.key), rotated.key.as_bytes());
    ops::write_atomically(Path::new(&files.cert), rotated.cert.as_bytes());
    let took = ops::wait_for(Duration::from_secs(3), "the rotated certificate", || {
        new_connection_works(&server, &second_ca, None)
    });
    eprintln!("rotated certificate served to new connections after {took:?}");
    assert!(!new_connection_works(&server, &first_ca, None));
    // A connection opened before the rotation is left alone.
    assert_eq!(runtime.block_on(call(open)), Ok(()));
    assert!(server.process.log_text().contains("certificate reloaded"));
}

#[test]
fn a_broken_rotation_keeps_the_previous_certificate() {
    let ca = TestCa::new("CA");
    let files = files(&ca.server());
    let server = files.serve_tls(&[]);
    ops::write_atomically(Path::new(&files.cert), b"not a certificate");
    ops::wait_for(Duration::from_secs(3), "the error is logged", || {
        server
            .process
            .log_text()
            .contains("certificate reload failed")
    });
    assert!(new_connection_works(&server, &ca, None));
    // A key that does not belong to the certificate is refused too.
    ops::write_atomically(Path::new(&files.cert), ca.server().cert.as_bytes());
    ops::wait_for(Duration::from_secs(3), "the mismatch is logged", || {
        server
            .process
            .log_text()
            .contains("does the key belong to the certificate?")
    });
    assert!(new_connection_works(&server, &ca, None));
}

#[test]
fn mutual_tls_refuses_clients_without_a_trusted_certificate() {
    let (ca, stranger) = (TestCa::new("CA"), TestCa::new("stranger CA"));
    let files = files(&ca.server());
    let client_ca = files.dir.join("tls/client-ca.pem");
    write(&client_ca, &ca.pem());
    let client_ca = client_ca.display().to_string();
    let server = files.serve_tls(&["--grpc-tls-client-ca", &client_ca]);
    let envoy = ca.client("envoy");
    assert!(new_connection_works(&server, &ca, Some(&envoy)));
    assert!(
        !new_connection_works(&server, &ca, None),
        "no client certificate"
    );
    assert!(
        !new_connection_works(&server, &ca, Some(&stranger.client("mallory"))),
        "a certificate from another CA"
    );

    let client_dir = files.dir.join("client");
    std::fs::create_dir(&client_dir).unwrap_or_else(|error| panic!("mkdir: {error}"));
    write(&client_dir.join("cert.pem"), &envoy.cert);
    write(&client_dir.join("key.pem"), &envoy.key);
    let url = format!("https://127.0.0.1:{}", server.grpc_port);
    let ca_file = client_ca.clone();
    let cert = client_dir.join("cert.pem").display().to_string();
    let key = client_dir.join("key.pem").display().to_string();
    let (code, output) = check_health(&[
        "--addr",
        &url,
        "--tls-ca",
        &ca_file,
        "--tls-server-name",
        "localhost",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    assert_eq!(code, Some(0), "{output}");
    let (code, output) = check_health(&[
        "--addr",
        &url,
        "--tls-ca",
        &ca_file,
        "--tls-server-name",
        "localhost",
    ]);
    assert_eq!(code, Some(1), "without a client certificate: {output}");
}

#[test]
fn envoyproxy_ratelimit_variables_turn_on_mutual_tls() {
    let ca = TestCa::new("CA");
    let files = files(&ca.server());
    let client_ca = files.dir.join("tls/client-ca.pem");
    write(&client_ca, &ca.pem());
    let client_ca = client_ca.display().to_string();
    let server = ops::start(
        &["--config", &files.rules],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &files.cert),
            ("GRPC_SERVER_TLS_KEY", &files.key),
            ("GRPC_CLIENT_TLS_CACERT", &client_ca),
        ],
        &files.dir,
    );
    assert!(new_connection_works(
        &server,
        &ca,
        Some(&ca.client("envoy"))
    ));
    assert!(!new_connection_works(&server, &ca, None));
    assert!(!plain_text_works(&server));
}
