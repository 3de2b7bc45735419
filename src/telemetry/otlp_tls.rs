//! TLS towards the OTLP collector, for an `https://` endpoint: the collector's certificate is
//! checked against `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` / `OTEL_EXPORTER_OTLP_CERTIFICATE` (a
//! PEM CA file, trusted alone) or else the system's roots, and a client certificate is shown
//! from `OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE` with its `_CLIENT_KEY`: the variables
//! OpenTelemetry Go's OTLP exporters read, and as they read them.
//!
//! A file that cannot be used is passed over with a warning (logged once logging is set up, which
//! comes after the exporter), as Go's exporters do (they fall back to
//! the system's roots, or show no client certificate): a trace collector that cannot be reached
//! costs the traces, never the answers, so it does not stop the process either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// The TLS files the environment names, each with the variable that named it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpTlsFiles {
    /// CA files, the generic variable's before the signal's (a later one that loads wins).
    ca: Vec<(String, PathBuf)>,
    /// Client certificate and key files, in the same order.
    client: Vec<ClientFiles>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ClientFiles {
    cert: (String, PathBuf),
    key: (String, PathBuf),
}

impl OtlpTlsFiles {
    /// The files `env` names (empty values count as unset, as Go's reader trims them).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let named = |key: &str| {
            let name = format!("OTEL_EXPORTER_OTLP_{key}");
            let value = env(&name)?.trim().to_owned();
            (!value.is_empty()).then(|| (name, PathBuf::from(value)))
        };
        let ca = ["CERTIFICATE", "TRACES_CERTIFICATE"]
            .into_iter()
            .filter_map(named)
            .collect();
        let client = ["", "TRACES_"]
            .into_iter()
            .filter_map(|prefix| {
                Some(ClientFiles {
                    cert: named(&format!("{prefix}CLIENT_CERTIFICATE"))?,
                    key: named(&format!("{prefix}CLIENT_KEY"))?,
                })
            })
            .collect();
        Self { ca, client }
    }
}

/// What was loaded of the files: PEM text, checked.
#[derive(Debug)]
pub(super) struct OtlpTls {
    /// The CA certificates; `None`: the system's roots.
    ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and key.
    identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Why each file that could not be used was passed over, naming its variable.
    pub(super) passed_over: Vec<String>,
}

impl OtlpTls {
    /// Reads `files` now, noting each that cannot be used.
    pub(super) fn load(files: &OtlpTlsFiles) -> Self {
        let mut passed_over = Vec::new();
        let ca_pem = files
            .ca
            .iter()
            .filter_map(|(name, path)| usable(name, path, read_ca(path), &mut passed_over))
            .next_back();
        let identity = files
            .client
            .iter()
            .filter_map(|pair| {
                let (name, path) = &pair.cert;
                let loaded = read_identity(&pair.cert.1, &pair.key.1);
                usable(name, path, loaded, &mut passed_over)
            })
            .next_back();
        Self {
            ca_pem,
            identity,
            passed_over,
        }
    }

    /// tonic's settings, for OTLP/gRPC.
    pub(super) fn tonic(&self) -> ClientTlsConfig {
        let mut tls = ClientTlsConfig::new();
        tls = match &self.ca_pem {
            Some(pem) => tls.ca_certificate(Certificate::from_pem(pem)),
            None => tls.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        tls
    }

    /// rustls' settings, for OTLP/HTTP; `None` (a plain `http://` endpoint, which never
    /// speaks TLS) trusts nothing rather than read the system's roots for nothing.
    pub(super) fn rustls(tls: Option<&OtlpTls>) -> Result<ClientConfig, String> {
        let builder = ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?;
        let Some(tls) = tls else {
            return Ok(builder
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth());
        };
        let builder = builder.with_root_certificates(tls.roots());
        match &tls.identity {
            Some((cert, key)) => {
                let (chain, key) = parse_identity(cert, key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|error| error.to_string())
            }
            None => Ok(builder.with_no_client_auth()),
        }
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        match &self.ca_pem {
            Some(pem) => {
                roots.add_parsable_certificates(CertificateDer::pem_slice_iter(pem).flatten());
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for error in &native.errors {
                    tracing::debug!("a system root certificate was passed over: {error}");
                }
                roots.add_parsable_certificates(native.certs);
            }
        }
        roots
    }
}

/// `loaded`, or `None` with a warning naming `variable` added to `passed_over`.
fn usable<T>(
    variable: &str,
    path: &Path,
    loaded: Result<T, String>,
    passed_over: &mut Vec<String>,
) -> Option<T> {
    loaded
        .inspect_err(|why| {
            passed_over.push(format!(
                "{variable}={}: {why}; passed over, as OpenTelemetry Go does: traces are sent \
                 without it and a collector that needs it will refuse them",
                path.display()
            ));
        })
        .ok()
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|error| format!("cannot be read ({error})"))
}

/// The CA file, when it holds a certificate that can be a trust anchor.
fn read_ca(path: &Path) -> Result<Vec<u8>, String> {
    let pem = read(path)?;
    let mut roots = RootCertStore::empty();
    let (added, _) =
        roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).flatten());
    if added == 0 {
        return Err("holds no PEM CA certificate (-----BEGIN CERTIFICATE-----)".to_owned());
    }
    Ok(pem)
}

/// The client certificate and key, when rustls takes them as a pair.
fn read_identity(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let cert_pem = read(cert)?;
    let key_pem = read(key).map_err(|why| format!("its key {}: {why}", key.display()))?;
    let (chain, private_key) = parse_identity(&cert_pem, &key_pem)?;
    ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(chain, private_key)
        .map_err(|error| format!("and its key {}: {error}", key.display()))?;
    Ok((cert_pem, key_pem))
}

type Chain = Vec<CertificateDer<'static>>;

fn parse_identity(cert: &[u8], key: &[u8]) -> Result<(Chain, PrivateKeyDer<'static>), String> {
    let chain: Chain = CertificateDer::pem_slice_iter(cert).flatten().collect();
    if chain.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|error| format!("its key holds no PEM private key ({error})"))?;
    Ok((chain, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn the_signals_files_come_after_the_generic_ones_and_a_client_needs_both_files() {
        let files = OtlpTlsFiles::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "/t/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", " /g/ca.pem "),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/g/cert.pem"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
                "/t/cert.pem",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "/t/key.pem"),
        ]));
        let paths: Vec<_> = files.ca.iter().map(|(_, path)| path.clone()).collect();
        assert_eq!(
            paths,
            [PathBuf::from("/g/ca.pem"), PathBuf::from("/t/ca.pem")]
        );
        assert_eq!(files.client.len(), 1, "{files:?}");
        assert_eq!(files.client[0].key.1, PathBuf::from("/t/key.pem"));
        assert_eq!(
            OtlpTlsFiles::from_env(env(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", " ")])),
            OtlpTlsFiles::default()
        );
    }

    #[test]
    fn unusable_files_are_passed_over_for_the_system_roots() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "not a certificate").unwrap_or_else(|error| panic!("{error}"));
        let missing = dir.path().join("absent.pem");
        let files = OtlpTlsFiles::from_env(env(&[
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &not_pem.to_string_lossy()),
            (
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                &not_pem.to_string_lossy(),
            ),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &missing.to_string_lossy()),
        ]));
        let loaded = OtlpTls::load(&files);
        assert!(loaded.ca_pem.is_none() && loaded.identity.is_none());
        assert_eq!(loaded.passed_over.len(), 2, "{:?}", loaded.passed_over);
        assert!(loaded.passed_over[0].starts_with("OTEL_EXPORTER_OTLP_CERTIFICATE="));
        assert!(read_ca(&missing).is_err_and(|why| why.starts_with("cannot be read")));
        assert!(OtlpTls::rustls(Some(&loaded)).is_ok());
    }
}
