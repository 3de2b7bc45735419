//! TLS to Redis (`rediss://`): floodgate processes decide through a redis-server that only
//! speaks TLS on the port they use, with a CA, server and client certificates this test makes;
//! the flags and envoyproxy/ratelimit's variables (`REDIS_TLS`, `REDIS_TLS_CACERT`,
//! `REDIS_TLS_CLIENT_CERT`/`_KEY`, `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`) both work, and a
//! wrong CA, a missing client certificate, a certificate for another name or an unreadable file
//! stop floodgate at start with a message that says what to fix.

use std::path::PathBuf;
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;

use floodgate_testkit as common;
use floodgate_testkit::redis::{scan_keys, store_flags, RedisServer};
use floodgate_testkit::rls;
use floodgate_testkit::testca::TestCa;
use floodgate_testkit::{subdir, Floodgate, Running};

const RULES: &str = "domain: tls\n\
                     descriptors:\n\
                     \x20 - key: user\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 3, algorithm: fixed_window}\n";

/// How long a floodgate that should refuse to start may take to do so (the connect timeout is
/// 2 s; a debug build on a busy machine starts slowly).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(20);

/// A CA, its server and client certificates, another CA, and the rules, as files.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        let dir = common::tempdir();
        let (ca, other_ca) = (TestCa::new("floodgate test CA"), TestCa::new("another CA"));
        let (server, client) = (ca.server(), ca.client("floodgate"));
        for (name, text) in [
            ("ca.pem", ca.pem()),
            ("other-ca.pem", other_ca.pem()),
            ("server.pem", server.cert),
            ("server.key", server.key),
            ("client.pem", client.cert),
            ("client.key", client.key),
            ("tls.yaml", RULES.to_owned()),
        ] {
            std::fs::write(dir.path().join(name), text)
                .unwrap_or_else(|error| panic!("cannot write {name}: {error}"));
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tls.yaml")
    }

    /// A log directory of its own for one floodgate.
    fn log_dir(&self, name: &str) -> PathBuf {
        subdir(self.dir.path(), name)
    }

    /// A redis-server with TLS on the returned port, requiring client certificates or not.
    fn redis(&self, auth_clients: bool, extra: &[&str]) -> (RedisServer, u16) {
        let (cert, key, ca) = (
            self.path("server.pem"),
            self.path("server.key"),
            self.path("ca.pem"),
        );
        let mut args = vec![
            "--tls-cert-file",
            cert.as_str(),
            "--tls-key-file",
            key.as_str(),
            "--tls-ca-cert-file",
            ca.as_str(),
            "--tls-auth-clients",
            if auth_clients { "yes" } else { "no" },
        ];
        args.extend_from_slice(extra);
        RedisServer::start_tls(&args)
    }
}

/// Runs `floodgate serve` that must stop at start; returns what it printed.
fn refused_start(files: &Files, name: &str, extra: &[&str]) -> String {
    let (mut command, _) = common::serve_command();
    command
        .arg("--config")
        .arg(files.config())
        .args(["--store", "redis"])
        .args(extra);
    let mut floodgate = Running::spawn("floodgate", &mut command, &files.log_dir(name));
    let status = floodgate.exit_within(REFUSAL_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "{name}: floodgate still runs after {REFUSAL_TIMEOUT:?}: {}",
            floodgate.log_text()
        )
    });
    let output = floodgate.log_text();
    // Shown with --nocapture, or when an assertion on it fails.
    eprintln!("--- {name}:\n{output}");
    assert!(
        !status.success(),
        "{name}: floodgate should have refused to start: {output}"
    );
    output
}

async fn code(client: &mut rls::Client, user: &str) -> Code {
    let response = rls::call(client, rls::request("tls", &[&[("user", user)]]))
        .await
        .unwrap_or_else(|status| panic!("call failed: {status}"));
    Code::try_from(response.overall_code).unwrap_or_else(|error| panic!("bad code: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_over_mutual_tls_from_flags_and_from_the_reference_variables() {
    let files = Files::new();
    let (redis, tls_port) = files.redis(true, &[]);
    let url = format!("rediss://localhost:{tls_port}/0");
    let (ca, cert, key) = (
        files.path("ca.pem"),
        files.path("client.pem"),
        files.path("client.key"),
    );
    let with_flags = Floodgate::start(
        &files.config(),
        &store_flags(
            &url,
            &[
                "--redis-tls-ca",
                &ca,
                "--redis-tls-cert",
                &cert,
                "--redis-tls-key",
                &key,
            ],
        ),
        &files.log_dir("flags"),
    );
    let bare_address = format!("127.0.0.1:{tls_port}");
    let with_variables = Floodgate::start_with_env(
        &files.config(),
        &["--store", "redis"],
        &[
            ("REDIS_TYPE", "SINGLE"),
            ("REDIS_URL", &bare_address),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", &ca),
            ("REDIS_TLS_CLIENT_CERT", &cert),
            ("REDIS_TLS_CLIENT_KEY", &key),
        ],
        &files.log_dir("variables"),
    );
    let mut first = rls::connect(&with_flags.grpc_url()).await;
    let mut second = rls::connect(&with_variables.grpc_url()).await;
    // One counter in the one Redis: 3 per hour across both processes.
    assert_eq!(code(&mut first, "alice").await, Code::Ok);
    assert_eq!(code(&mut second, "alice").await, Code::Ok);
    assert_eq!(code(&mut first, "alice").await, Code::Ok);
    assert_eq!(code(&mut second, "alice").await, Code::OverLimit);
    assert_eq!(code(&mut first, "alice").await, Code::OverLimit);

    let keys = scan_keys(&mut redis.inspector().await, "floodgate:*").await;
    assert_eq!(keys.len(), 1, "one counter, written over TLS: {keys:?}");
    let log = with_flags.process.log_text();
    assert!(
        log.contains(&format!("localhost:{tls_port}/0 (TLS)")),
        "the log names the TLS server: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_a_missing_client_certificate_or_a_bad_file_is_refused_at_start() {
    let files = Files::new();
    let (_redis, tls_port) = files.redis(true, &[]);
    let url = format!("rediss://localhost:{tls_port}/0");
    let server = format!("localhost:{tls_port}/0 (TLS)");
    let (ca, other_ca, cert, key) = (
        files.path("ca.pem"),
        files.path("other-ca.pem"),
        files.path("client.pem"),
        files.path("client.key"),
    );

    let output = refused_start(
        &files,
        "wrong-ca",
        &[
            "--redis-url",
            &url,
            "--redis-tls-ca",
            &other_ca,
            "--redis-tls-cert",
            &cert,
            "--redis-tls-key",
            &key,
        ],
    );
    assert!(output.contains(&server), "names the server: {output}");
    assert!(
        output.contains("not signed by a trusted CA") && output.contains("--redis-tls-ca"),
        "says to give the right CA: {output}"
    );

    let output = refused_start(
        &files,
        "no-client-cert",
        &["--redis-url", &url, "--redis-tls-ca", &ca],
    );
    assert!(output.contains(&server), "names the server: {output}");
    assert!(
        output.contains("--redis-tls-cert") && output.contains("--redis-tls-key"),
        "says to give a client certificate: {output}"
    );

    let missing = files.path("no-such-ca.pem");
    let output = refused_start(
        &files,
        "missing-ca",
        &["--redis-url", &url, "--redis-tls-ca", &missing],
    );
    assert!(
        output.contains(&missing) && output.contains("REDIS_TLS_CACERT"),
        "names the file and the setting: {output}"
    );

    // The key of another certificate: the server's key with the client's certificate.
    let server_key = files.path("server.key");
    let output = refused_start(
        &files,
        "mismatched-key",
        &[
            "--redis-url",
            &url,
            "--redis-tls-ca",
            &ca,
            "--redis-tls-cert",
            &cert,
            "--redis-tls-key",
            &server_key,
        ],
    );
    assert!(
        output.contains("does the key belong to the certificate?"),
        "{output}"
    );

    let plain = format!("redis://localhost:{tls_port}/0");
    let output = refused_start(
        &files,
        "files-without-tls",
        &["--redis-url", &plain, "--redis-tls-ca", &ca],
    );
    assert!(
        output.contains("the connection is not TLS") && output.contains("rediss://"),
        "{output}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_needs_skip_hostname_verification() {
    let files = Files::new();
    // The server certificate names localhost and 127.0.0.1, not 127.0.0.2.
    let (_redis, tls_port) = files.redis(false, &["--bind", "127.0.0.1", "127.0.0.2"]);
    let url = format!("rediss://127.0.0.2:{tls_port}/0");
    let (ca, other_ca) = (files.path("ca.pem"), files.path("other-ca.pem"));

    let output = refused_start(
        &files,
        "other-name",
        &["--redis-url", &url, "--redis-tls-ca", &ca],
    );
    assert!(
        output.contains("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"),
        "points at the setting: {output}"
    );
    // Skipping the name check still verifies the chain.
    let output = refused_start(
        &files,
        "other-name-wrong-ca",
        &[
            "--redis-url",
            &url,
            "--redis-tls-ca",
            &other_ca,
            "--redis-tls-skip-hostname-verification",
        ],
    );
    assert!(output.contains("not signed by a trusted CA"), "{output}");

    let floodgate = Floodgate::start_with_env(
        &files.config(),
        &store_flags(&url, &["--redis-tls-ca", &ca]),
        &[("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true")],
        &files.log_dir("skip"),
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    for _ in 0..3 {
        assert_eq!(code(&mut client, "bob").await, Code::Ok);
    }
    assert_eq!(code(&mut client, "bob").await, Code::OverLimit);
}
