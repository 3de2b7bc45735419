//! TLS to Redis (`rediss://`): the CA and client certificate files, read and checked once at
//! start so that a wrong path or a file that is not what it claims fails with its name and what
//! to do, instead of surfacing later as a handshake error of every connection.
//!
//! The files are handed to the `redis` crate (rustls, with the ring provider the gRPC listener
//! uses too); without a CA file the system's trust store verifies the server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redis::io::tcp::TcpSettings;
use redis::{
    Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, RedisResult, TlsCertificates,
};
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use super::errors::misconfigured;
use crate::store::StoreError;

/// How to talk TLS to Redis (and to the sentinels in Sentinel mode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// envoyproxy/ratelimit's `REDIS_TLS`: a bare `host:port` means `rediss://host:port`.
    pub enabled: bool,
    /// CA certificates (PEM) the server's certificate must chain to, instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM), for servers with `tls-auth-clients yes`.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// Accept a server certificate issued for another name (envoyproxy/ratelimit's
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`): the chain is still verified.
    pub skip_hostname_verification: bool,
}

impl TlsOptions {
    /// Whether any file or setting asks for TLS without saying `rediss://`.
    pub(super) fn has_settings(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.skip_hostname_verification
    }

    /// The certificates to connect with, read and checked; `None` when no file is given (the
    /// system's CAs, no client certificate).
    pub(super) fn certificates(&self) -> Result<Option<TlsCertificates>, StoreError> {
        let root_cert = self.ca_file.as_deref().map(read_ca_file).transpose()?;
        let client_tls =
            match (&self.cert_file, &self.key_file) {
                (Some(cert), Some(key)) => Some(read_client_pair(cert, key)?),
                (None, None) => None,
                (Some(_), None) => return Err(invalid(
                    "--redis-tls-cert (REDIS_TLS_CLIENT_CERT) is set without its key: also set \
                 --redis-tls-key (REDIS_TLS_CLIENT_KEY)"
                        .to_owned(),
                )),
                (None, Some(_)) => return Err(invalid(
                    "--redis-tls-key (REDIS_TLS_CLIENT_KEY) is set without its certificate: also \
                 set --redis-tls-cert (REDIS_TLS_CLIENT_CERT)"
                        .to_owned(),
                )),
            };
        if root_cert.is_none() && client_tls.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// How every client of one store is made: with the same certificates and hostname check,
/// whether it talks to a single server, a sentinel or a master a sentinel named.
#[derive(Clone, Default)]
pub(super) struct ClientSetup {
    certificates: Option<TlsCertificates>,
    skip_hostname_verification: bool,
}

impl ClientSetup {
    pub fn new(options: &TlsOptions) -> Result<Self, StoreError> {
        Ok(Self {
            certificates: options.certificates()?,
            skip_hostname_verification: options.skip_hostname_verification,
        })
    }

    /// A client for `info`; a `rediss://` address gets the certificates.
    pub fn client(&self, info: ConnectionInfo) -> RedisResult<Client> {
        let info = info.set_tcp_settings(tcp_settings());
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return Client::open(info);
        }
        let client = match &self.certificates {
            Some(certificates) => Client::build_with_tls(info, certificates.clone())?,
            None => Client::open(info)?,
        };
        if !self.skip_hostname_verification {
            return Ok(client);
        }
        let info = client.get_connection_info().clone();
        let mut addr = info.addr().clone();
        addr.set_danger_accept_invalid_hostnames(true);
        Client::open(info.set_addr(addr))
    }
}

fn invalid(reason: String) -> StoreError {
    misconfigured(format!("invalid Redis TLS settings: {reason}"))
}

fn read(path: &Path, what: &str, flag: &str) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|error| {
        invalid(format!(
            "cannot read the {what} {} ({error}): check {flag} names a readable file",
            path.display()
        ))
    })
}

fn certificates_in(
    pem: &[u8],
    path: &Path,
    what: &str,
    flag: &str,
) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            invalid(format!(
                "the {what} {} is not valid PEM ({error}): {flag} needs PEM certificates \
                 (`-----BEGIN CERTIFICATE-----`)",
                path.display()
            ))
        })?;
    if certificates.is_empty() {
        return Err(invalid(format!(
            "the {what} {} holds no certificate: {flag} needs PEM certificates \
             (`-----BEGIN CERTIFICATE-----`)",
            path.display()
        )));
    }
    Ok(certificates)
}

/// The CA file's bytes, each certificate in it checked.
fn read_ca_file(path: &Path) -> Result<Vec<u8>, StoreError> {
    const WHAT: &str = "Redis CA file";
    const FLAG: &str = "--redis-tls-ca (REDIS_TLS_CACERT)";
    let pem = read(path, WHAT, FLAG)?;
    let certificates = certificates_in(&pem, path, WHAT, FLAG)?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates {
        roots.add(certificate).map_err(|error| {
            invalid(format!(
                "the {WHAT} {} holds a certificate that cannot be a trust anchor ({error}): \
                 {FLAG} needs the CA certificate(s) that signed the server's certificate",
                path.display()
            ))
        })?;
    }
    Ok(pem)
}

fn read_client_pair(cert: &Path, key: &Path) -> Result<ClientTlsConfig, StoreError> {
    const FLAG: &str = "--redis-tls-cert (REDIS_TLS_CLIENT_CERT)";
    let cert_pem = read(cert, "Redis client certificate", FLAG)?;
    let chain = certificates_in(&cert_pem, cert, "Redis client certificate", FLAG)?;
    let key_pem = read(
        key,
        "Redis client key",
        "--redis-tls-key (REDIS_TLS_CLIENT_KEY)",
    )?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
        invalid(format!(
            "the Redis client key {} holds no usable private key ({error}): \
             --redis-tls-key (REDIS_TLS_CLIENT_KEY) needs a PEM key (`-----BEGIN PRIVATE \
             KEY-----`, or RSA/EC)",
            key.display()
        ))
    })?;
    // What the connection will do with them, once, now: a key of another certificate or of an
    // unsupported kind is named here rather than in every handshake.
    ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| invalid(error.to_string()))?
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(chain, private_key)
        .map_err(|error| {
            invalid(format!(
                "{} and {}: {error} (does the key belong to the certificate?)",
                cert.display(),
                key.display()
            ))
        })?;
    Ok(ClientTlsConfig {
        client_cert: cert_pem,
        client_key: key_pem,
    })
}

/// What to check when a TLS connection fails with `message`, if the message says enough.
/// Whether a failed handshake's `message` says the settings on this side are wrong (the CA, the
/// name, the client certificate, TLS to a plain port): waiting for the server does not help.
pub(super) fn is_settled_refusal(message: &str) -> bool {
    hint(message).is_some_and(|hint| !hint.starts_with("is this the server's tls-port"))
}

pub(super) fn hint(message: &str) -> Option<&'static str> {
    let lower = message.to_ascii_lowercase();
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        Some(
            "the server's certificate is not signed by a trusted CA: give the CA that signed it \
             with --redis-tls-ca (REDIS_TLS_CACERT)",
        )
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        Some(
            "the server's certificate does not name the host in the URL: connect by a name the \
             certificate holds, or set REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true",
        )
    } else if lower.contains("certificaterequired")
        || lower.contains("certificate required")
        || lower.contains("handshakefailure")
        || lower.contains("badcertificate")
        || lower.contains("unknownca")
    {
        Some(
            "the server refused the client certificate or wants one: give a certificate its \
             tls-ca-cert-file trusts with --redis-tls-cert and --redis-tls-key",
        )
    } else if lower.contains("invalidcontenttype") || lower.contains("corrupt message") {
        Some("the server does not talk TLS on this port: use redis:// or the server's TLS port")
    } else if lower.contains("timed out") || lower.contains("no answer within") {
        // A plain Redis port reads a ClientHello as an unfinished command and says nothing.
        Some("is this the server's tls-port? A port without TLS does not answer a handshake")
    } else {
        None
    }
}

/// Every socket to Redis: without TCP_NODELAY, a call written while the previous one is
/// unacknowledged waits for Redis's reply (Nagle), which adds a round trip to calls that
/// share a connection. Go's net package, and so envoyproxy/ratelimit, sets it by default.
pub(super) fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(result: Result<Option<TlsCertificates>, StoreError>) -> String {
        match result {
            Ok(_) => panic!("the settings should have been refused"),
            Err(StoreError::Misconfigured { reason, .. }) => reason,
            Err(other) => panic!("expected Misconfigured, got {other}"),
        }
    }

    #[test]
    fn no_files_means_the_system_trust_store() {
        let options = TlsOptions {
            enabled: true,
            ..TlsOptions::default()
        };
        assert!(matches!(options.certificates(), Ok(None)));
        assert!(!options.has_settings());
    }

    #[test]
    fn unreadable_and_invalid_files_are_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
        let missing = dir.path().join("missing-ca.pem");
        let options = TlsOptions {
            ca_file: Some(missing.clone()),
            ..TlsOptions::default()
        };
        let message = reason(options.certificates());
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
        assert!(message.contains("REDIS_TLS_CACERT"), "{message}");

        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n")
            .unwrap_or_else(|error| panic!("write: {error}"));
        let options = TlsOptions {
            ca_file: Some(garbage.clone()),
            ..TlsOptions::default()
        };
        let message = reason(options.certificates());
        assert!(
            message.contains("holds no certificate") && message.contains("garbage.pem"),
            "{message}"
        );
    }

    #[test]
    fn a_certificate_needs_its_key() {
        let options = TlsOptions {
            cert_file: Some(PathBuf::from("/nonexistent/client.pem")),
            ..TlsOptions::default()
        };
        assert!(reason(options.certificates()).contains("REDIS_TLS_CLIENT_KEY"));
    }

    #[test]
    fn handshake_failures_get_a_hint() {
        assert!(hint("invalid peer certificate: UnknownIssuer")
            .is_some_and(|hint| hint.contains("--redis-tls-ca")));
        assert!(hint("received fatal alert: CertificateRequired")
            .is_some_and(|hint| hint.contains("--redis-tls-cert")));
        assert_eq!(hint("Connection refused"), None);
    }
}
