//! TLS towards the management server (`CONFIG_GRPC_XDS_SERVER_USE_TLS`): the server's
//! certificate checked against `CONFIG_GRPC_XDS_SERVER_TLS_CACERT` (or the system's roots)
//! for the name `CONFIG_GRPC_XDS_SERVER_TLS_SAN` (or the URL's host), and a client certificate
//! from `CONFIG_GRPC_XDS_CLIENT_TLS_CERT` / `_KEY` for mutual TLS, as Envoy Gateway sets them.
//!
//! The files are read at every connection: a certificate rotated on disk (a renewed Kubernetes
//! secret) is presented from the next reconnect on. They are also read once at start, so a
//! wrong path stops the process at once rather than failing every connection.
//!
//! One difference: with a CA file the reference trusts the system's roots *and* the file;
//! floodgate trusts the file alone (a private CA is what it is for, and an image without system
//! roots still connects).

use std::path::{Path, PathBuf};

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::settings::{XdsSettings, XdsTlsFiles};

/// A TLS file that cannot be used, named with the variable that points at it.
#[derive(Debug, thiserror::Error)]
pub enum XdsTlsError {
    #[error("{variable}={}: cannot be read ({source}): check the path and that floodgate may read it", path.display())]
    Unreadable {
        variable: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{variable}={}: holds no PEM certificate: give the certificate file (-----BEGIN CERTIFICATE-----)", path.display())]
    NoCertificate {
        variable: &'static str,
        path: PathBuf,
    },
    #[error("CONFIG_GRPC_XDS_CLIENT_TLS_KEY={}: holds no PEM private key (PKCS#8, PKCS#1 or SEC1): give the key of CONFIG_GRPC_XDS_CLIENT_TLS_CERT", path.display())]
    NoKey { path: PathBuf },
}

const CERT_VARIABLE: &str = "CONFIG_GRPC_XDS_CLIENT_TLS_CERT";
const KEY_VARIABLE: &str = "CONFIG_GRPC_XDS_CLIENT_TLS_KEY";
const CA_VARIABLE: &str = "CONFIG_GRPC_XDS_SERVER_TLS_CACERT";

impl XdsSettings {
    /// Reads the TLS files once (at start), so a wrong one stops floodgate at once.
    pub fn check_tls_files(&self) -> Result<(), XdsTlsError> {
        match &self.tls {
            Some(files) => client_tls(files, self.server.host()).map(|_| ()),
            None => Ok(()),
        }
    }
}

/// The TLS settings of one connection, from the files as they are now.
pub fn client_tls(files: &XdsTlsFiles, url_host: &str) -> Result<ClientTlsConfig, XdsTlsError> {
    let server_name = files.server_name.as_deref().unwrap_or(url_host);
    let mut tls = ClientTlsConfig::new().domain_name(server_name);
    tls = match &files.server_ca {
        Some(path) => tls.ca_certificate(Certificate::from_pem(certificates(CA_VARIABLE, path)?)),
        None => tls.with_native_roots(),
    };
    if let Some((cert, key)) = &files.client_identity {
        let cert_pem = certificates(CERT_VARIABLE, cert)?;
        let key_pem = read(KEY_VARIABLE, key)?;
        if PrivateKeyDer::from_pem_slice(&key_pem).is_err() {
            return Err(XdsTlsError::NoKey { path: key.clone() });
        }
        tls = tls.identity(Identity::from_pem(cert_pem, key_pem));
    }
    Ok(tls)
}

fn read(variable: &'static str, path: &Path) -> Result<Vec<u8>, XdsTlsError> {
    std::fs::read(path).map_err(|source| XdsTlsError::Unreadable {
        variable,
        path: path.to_path_buf(),
        source,
    })
}

/// The file's text, when it holds at least one PEM certificate (rustls would skip a file of
/// none without a word, and every handshake would then fail for an unknown issuer).
fn certificates(variable: &'static str, path: &Path) -> Result<Vec<u8>, XdsTlsError> {
    let pem = read(variable, path)?;
    let found = CertificateDer::pem_slice_iter(&pem)
        .filter_map(Result::ok)
        .count();
    if found == 0 {
        return Err(XdsTlsError::NoCertificate {
            variable,
            path: path.to_path_buf(),
        });
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path, ca: &str, cert: &str, key: &str) -> XdsTlsFiles {
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap_or_else(|error| panic!("{error}"));
            path
        };
        XdsTlsFiles {
            client_identity: Some((write("cert.pem", cert), write("key.pem", key))),
            server_ca: Some(write("ca.pem", ca)),
            server_name: Some("xds.internal".to_owned()),
        }
    }

    #[test]
    fn bad_files_are_named_with_their_variable() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
        let error = client_tls(&files(dir.path(), "nope", "", ""), "host").err();
        let text = error.map(|error| error.to_string()).unwrap_or_default();
        assert!(
            text.starts_with("CONFIG_GRPC_XDS_SERVER_TLS_CACERT=") && text.contains("ca.pem"),
            "{text}"
        );
        let mut missing = files(dir.path(), "", "", "");
        missing.server_ca = Some(dir.path().join("absent.pem"));
        let text = client_tls(&missing, "host")
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(
            text.contains("absent.pem") && text.contains("cannot be read"),
            "{text}"
        );
    }
}
