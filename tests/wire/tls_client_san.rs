//! The name client certificates must carry under mutual TLS (`--grpc-tls-client-san`,
//! envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN`), with client certificates made by `openssl`:
//! the pinned DNS SAN and a wildcard over it are served; another name, a URI SAN alone (the CN
//! being the pinned name), a certificate for server authentication only and no certificate are
//! refused; an address is compared with IP SANs; and a name without a client CA stops the start.

use std::time::Duration;

use floodgate_testkit::openssl_ca::OpensslCa;
use floodgate_testkit::testca::{Pair, TestCa};
use floodgate_testkit::{ratelimit_command, serve_command, Running};

use super::tls_grpc::{files, new_connection_works, write, Files};

const PINNED: &str = "envoy.floodgate.test";
const CLIENT_AUTH: &str = "extendedKeyUsage=clientAuth";

/// A client certificate of `ca` whose CN is the pinned name, whatever its SANs say.
fn client(ca: &OpensslCa, label: &str, extensions: &[&str]) -> Pair {
    ca.leaf(label, PINNED, extensions)
}

/// The server's certificate (of the rcgen CA) in its files, and the openssl client CA with the
/// file it is written to beside them.
fn certificates() -> (TestCa, Files, OpensslCa, String) {
    let server_ca = TestCa::new("server CA");
    let files = files(&server_ca.server());
    let client_ca = OpensslCa::new("client CA");
    let ca_file = files.dir.join("tls/client-ca.pem");
    write(&ca_file, &client_ca.pem());
    let ca_file = ca_file.display().to_string();
    (server_ca, files, client_ca, ca_file)
}

#[test]
fn the_pinned_name_and_a_wildcard_over_it_are_served_and_other_certificates_refused() {
    let (server_ca, files, client_ca, ca_file) = certificates();
    let server = files.serve_tls(&[
        "--grpc-tls-client-ca",
        &ca_file,
        "--grpc-tls-client-san",
        PINNED,
    ]);
    let pinned_dns = format!("subjectAltName=DNS:{PINNED}");
    let served = [
        (
            "the pinned DNS SAN",
            &[pinned_dns.as_str(), CLIENT_AUTH][..],
        ),
        (
            "a wildcard covering it",
            &["subjectAltName=DNS:*.floodgate.test", CLIENT_AUTH],
        ),
    ];
    let refused = [
        (
            "another DNS SAN",
            &["subjectAltName=DNS:mallory.floodgate.test", CLIENT_AUTH][..],
        ),
        (
            "a wildcard over two labels",
            &["subjectAltName=DNS:*.test", CLIENT_AUTH],
        ),
        (
            "only a URI SAN",
            &[
                "subjectAltName=URI:spiffe://floodgate.test/envoy",
                CLIENT_AUTH,
            ],
        ),
        (
            "the pinned DNS SAN, for server authentication only",
            &[pinned_dns.as_str(), "extendedKeyUsage=serverAuth"],
        ),
    ];
    for (what, extensions) in served {
        let certificate = client(&client_ca, &what.replace(' ', "-"), extensions);
        assert!(
            new_connection_works(&server, &server_ca, Some(&certificate)),
            "{what}: served\n{}",
            server.process.log_text()
        );
    }
    for (what, extensions) in refused {
        let certificate = client(&client_ca, &what.replace([' ', ','], "-"), extensions);
        assert!(
            !new_connection_works(&server, &server_ca, Some(&certificate)),
            "{what}: refused"
        );
    }
    assert!(
        !new_connection_works(&server, &server_ca, None),
        "no client certificate: refused"
    );
    let log = server.process.log_text();
    assert!(
        log.contains("gRPC client certificate refused") && log.contains("mallory.floodgate.test"),
        "the refusal names what the certificate carries\n{log}"
    );
}

#[test]
fn an_address_from_the_reference_variable_is_compared_with_ip_sans() {
    let (server_ca, files, client_ca, ca_file) = certificates();
    let server = floodgate_testkit::ops::start(
        &["--config", &files.rules],
        &[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", &files.cert),
            ("GRPC_SERVER_TLS_KEY", &files.key),
            ("GRPC_CLIENT_TLS_CACERT", &ca_file),
            ("GRPC_CLIENT_TLS_SAN", "127.0.0.1"),
        ],
        &files.dir,
    );
    let works = |label: &str, extensions: &[&str]| {
        let certificate = client_ca.leaf(label, "127.0.0.1", extensions);
        new_connection_works(&server, &server_ca, Some(&certificate))
    };
    assert!(
        works("ip", &["subjectAltName=IP:127.0.0.1", CLIENT_AUTH]),
        "the IP SAN\n{}",
        server.process.log_text()
    );
    assert!(
        works(
            "mapped",
            &["subjectAltName=IP:::ffff:127.0.0.1", CLIENT_AUTH]
        ),
        "the address in its IPv4-mapped IPv6 form, which Go takes as the same"
    );
    assert!(
        !works("other-ip", &["subjectAltName=IP:127.0.0.2", CLIENT_AUTH]),
        "another address"
    );
    assert!(
        !works("dns", &["subjectAltName=DNS:localhost", CLIENT_AUTH]),
        "a DNS SAN (with the address as CN)"
    );
}

/// Long enough for any start to be refused; one that is not is reported.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(10);

#[test]
fn a_name_without_a_client_ca_stops_the_start_at_either_door() {
    let server_ca = TestCa::new("server CA");
    let files = files(&server_ca.server());

    let (mut command, _) = ratelimit_command(&files.dir);
    command
        .env("BACKEND_TYPE", "memory")
        .env("GRPC_SERVER_USE_TLS", "true")
        .env("GRPC_SERVER_TLS_CERT", &files.cert)
        .env("GRPC_SERVER_TLS_KEY", &files.key)
        .env("GRPC_CLIENT_TLS_SAN", PINNED)
        .env_remove("GRPC_CLIENT_TLS_CACERT");
    let log = Running::spawn("ratelimit", &mut command, &files.dir)
        .log_of_a_refused_start(REFUSAL_TIMEOUT);
    assert!(
        log.contains(&format!("GRPC_CLIENT_TLS_SAN={PINNED}"))
            && log.contains("no client CA is set")
            && log.contains("GRPC_CLIENT_TLS_CACERT"),
        "{log}"
    );

    let (mut command, _) = serve_command();
    command
        .args(["--config", &files.rules])
        .args(["--grpc-tls-cert", &files.cert, "--grpc-tls-key", &files.key])
        .args(["--grpc-tls-client-san", PINNED])
        .env_remove("GRPC_CLIENT_TLS_CACERT")
        .env_remove("FLOODGATE_GRPC_TLS_CLIENT_CA");
    let log = Running::spawn("floodgate", &mut command, &files.dir)
        .log_of_a_refused_start(REFUSAL_TIMEOUT);
    assert!(
        log.contains(&format!("--grpc-tls-client-san={PINNED}"))
            && log.contains("--grpc-tls-client-ca"),
        "{log}"
    );
}
