//! TLS on the gRPC listener, with certificates reloaded when their files change: every new
//! connection is handed the configuration in force when it arrives, so a rotated certificate
//! is served without a restart and connections already open are left alone.
//!
//! Handshakes run in each connection's own task (`server::connections`), bounded by
//! `--header-timeout-ms` and counted against `--max-connections`, so a slow or silent client
//! cannot hold up the others.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

use super::client_san::{ClientSan, ClientSanVerifier};
use crate::engine::reload::watch::{parent_directory, DirectoryWatch, WatchTarget};
use crate::engine::shutdown::Shutdown;

/// The files of the gRPC listener's TLS configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// Private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) client certificates must chain to: mutual TLS when set.
    pub client_ca: Option<PathBuf>,
    /// The name client certificates must carry besides; only with `client_ca`
    /// ([`files_from_settings`] refuses it alone).
    pub client_san: Option<ClientSan>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: cannot be read ({source})", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: no PEM certificate in it ({reason}): give a PEM file with `-----BEGIN CERTIFICATE-----`", path.display())]
    NoCertificate { path: PathBuf, reason: String },
    #[error("{}: no PEM private key in it ({reason}): give a PEM file with `-----BEGIN PRIVATE KEY-----` (or RSA/EC)", path.display())]
    NoKey { path: PathBuf, reason: String },
    #[error("{} and {}: {source} (does the key belong to the certificate?)", cert.display(), key.display())]
    CertificateAndKey {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("{}: cannot verify client certificates with these CAs: {reason}", path.display())]
    ClientCa { path: PathBuf, reason: String },
    /// The settings ask for TLS but leave out what it needs: the command line's (or the
    /// environment's) fault.
    #[error("TLS settings: {0}")]
    Incomplete(String),
    /// rustls refused the configuration it was given.
    #[error("TLS settings: {0}")]
    Settings(String),
    #[error("{setting}={value:?}: {reason}")]
    ClientSan {
        setting: &'static str,
        value: String,
        reason: String,
    },
    #[error(
        "{setting}={san} names the client certificates to accept, but no client CA is set, so \
         none is asked for: set --grpc-tls-client-ca (with --grpc-tls-cert and --grpc-tls-key), \
         or GRPC_CLIENT_TLS_CACERT (with GRPC_SERVER_USE_TLS=true, GRPC_SERVER_TLS_CERT and \
         GRPC_SERVER_TLS_KEY); or remove {setting}. (envoyproxy/ratelimit ignores the name \
         then; floodgate does not start, rather than take every client for the named one)"
    )]
    ClientSanWithoutCa {
        setting: &'static str,
        san: ClientSan,
    },
}

impl TlsError {
    /// Whether the settings themselves are wrong (missing or malformed), not a file they name:
    /// `serve` then exits with the usage code, as for any other setting.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            TlsError::Incomplete(_)
                | TlsError::ClientSan { .. }
                | TlsError::ClientSanWithoutCa { .. }
        )
    }
}

/// The live server configuration, swapped whole when the files change.
#[derive(Clone)]
pub struct ServerTls {
    files: TlsFiles,
    config: Arc<ArcSwap<ServerConfig>>,
    /// What the first configuration was built from: the watcher's starting point, so a change
    /// made right after the start is not taken for the files already loaded.
    loaded_from: Arc<FileContents>,
}

/// The file contents one configuration was built from, to skip rebuilding it for nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileContents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl ServerTls {
    /// Reads the files and builds the first configuration; any problem is an error.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let contents = read_contents(&files)?;
        let config = build_config(&files, &contents)?;
        Ok(Self {
            files,
            config: Arc::new(ArcSwap::from_pointee(config)),
            loaded_from: Arc::new(contents),
        })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// What a new connection is accepted with.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config.load_full())
    }

    fn watch_targets(&self) -> Vec<WatchTarget> {
        let mut directories: Vec<PathBuf> = [Some(&self.files.cert), Some(&self.files.key)]
            .into_iter()
            .chain([self.files.client_ca.as_ref()])
            .flatten()
            .map(|path| parent_directory(path))
            .collect();
        directories.sort();
        directories.dedup();
        directories
            .into_iter()
            .map(|directory| WatchTarget {
                directory,
                recursive: false,
            })
            .collect()
    }
}

/// Rebuilds the configuration when the files change, until shutdown. A configuration that
/// fails to build is logged and the previous one stays.
pub async fn watch_certificates(tls: ServerTls, shutdown: Shutdown) {
    let targets = tls.watch_targets();
    let mut watch = DirectoryWatch::new("gRPC TLS certificate");
    watch.ensure(&targets);
    let mut last = Some(FileContents::clone(&tls.loaded_from));
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            () = watch.changed() => {}
        }
        watch.ensure(&targets);
        let contents = match read_contents(&tls.files) {
            Ok(contents) => contents,
            Err(error) => {
                tracing::error!(
                    "gRPC TLS certificate reload failed, keeping the previous one: {error}"
                );
                last = None;
                continue;
            }
        };
        if last.as_ref() == Some(&contents) {
            continue;
        }
        match build_config(&tls.files, &contents) {
            Ok(config) => {
                tls.config.store(Arc::new(config));
                tracing::info!(
                    cert = %tls.files.cert.display(),
                    "gRPC TLS certificate reloaded: new connections use it"
                );
            }
            Err(error) => {
                tracing::error!(
                    "gRPC TLS certificate reload failed, keeping the previous one: {error}"
                );
            }
        }
        last = Some(contents);
    }
}

fn read_contents(files: &TlsFiles) -> Result<FileContents, TlsError> {
    Ok(FileContents {
        cert: read(&files.cert)?,
        key: read(&files.key)?,
        client_ca: files.client_ca.as_deref().map(read).transpose()?,
    })
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::NoCertificate {
            path: path.to_path_buf(),
            reason: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
            reason: "the file is empty or holds something else".to_owned(),
        });
    }
    Ok(certificates)
}

fn build_config(files: &TlsFiles, contents: &FileContents) -> Result<ServerConfig, TlsError> {
    let chain = certificates(&files.cert, &contents.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|error| TlsError::NoKey {
        path: files.key.clone(),
        reason: error.to_string(),
    })?;
    let provider = Arc::new(default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Settings(error.to_string()))?;
    let builder = match (&files.client_ca, &contents.client_ca) {
        (Some(path), Some(pem)) => {
            let mut roots = RootCertStore::empty();
            for certificate in certificates(path, pem)? {
                roots.add(certificate).map_err(|error| TlsError::ClientCa {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|error| TlsError::ClientCa {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            match &files.client_san {
                Some(san) => builder.with_client_cert_verifier(Arc::new(ClientSanVerifier::new(
                    verifier,
                    san.clone(),
                ))),
                None => builder.with_client_cert_verifier(verifier),
            }
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config =
        builder
            .with_single_cert(chain, key)
            .map_err(|source| TlsError::CertificateAndKey {
                cert: files.cert.clone(),
                key: files.key.clone(),
                source,
            })?;
    // gRPC is HTTP/2: clients (Envoy among them) offer `h2` by ALPN.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The TLS files from the flags, or from envoyproxy/ratelimit's variables (`reference_tls`: its
/// `GRPC_SERVER_USE_TLS`, read by the command line, with `GRPC_SERVER_TLS_CERT`,
/// `GRPC_SERVER_TLS_KEY` and optionally `GRPC_CLIENT_TLS_CACERT`), with the name client
/// certificates must carry from `client_san` (`--grpc-tls-client-san`), else
/// `GRPC_CLIENT_TLS_SAN`, whichever way the files came. `None`: plain gRPC. A name without a
/// client CA is refused.
pub fn files_from_settings(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
    client_san: Option<&str>,
    reference_tls: bool,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TlsFiles>, TlsError> {
    let san = client_san_from_settings(client_san, &env)?;
    let files = files_without_san(cert, key, client_ca, reference_tls, env)?;
    match (files, san) {
        (files, None) => Ok(files),
        (Some(files), Some((_, san))) if files.client_ca.is_some() => Ok(Some(TlsFiles {
            client_san: Some(san),
            ..files
        })),
        (_, Some((setting, san))) => Err(TlsError::ClientSanWithoutCa { setting, san }),
    }
}

/// `--grpc-tls-client-san` (`flag`), else `GRPC_CLIENT_TLS_SAN`, with the setting it came from.
fn client_san_from_settings(
    flag: Option<&str>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<(&'static str, ClientSan)>, TlsError> {
    let (setting, value) = match (flag, env("GRPC_CLIENT_TLS_SAN")) {
        (Some(value), _) => ("--grpc-tls-client-san", value.to_owned()),
        (None, Some(value)) => ("GRPC_CLIENT_TLS_SAN", value),
        (None, None) => return Ok(None),
    };
    match ClientSan::parse(&value) {
        Ok(san) => Ok(Some((setting, san))),
        Err(reason) => Err(TlsError::ClientSan {
            setting,
            value,
            reason,
        }),
    }
}

fn files_without_san(
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
    reference_tls: bool,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TlsFiles>, TlsError> {
    if let (Some(cert), Some(key)) = (cert, key) {
        return Ok(Some(TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: client_ca.map(Path::to_path_buf),
            client_san: None,
        }));
    }
    if !reference_tls {
        return Ok(None);
    }
    match (env("GRPC_SERVER_TLS_CERT"), env("GRPC_SERVER_TLS_KEY")) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
            client_ca: env("GRPC_CLIENT_TLS_CACERT").map(PathBuf::from),
            client_san: None,
        })),
        _ => Err(TlsError::Incomplete(
            "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (or pass \
             --grpc-tls-cert and --grpc-tls-key)"
                .to_owned(),
        )),
    }
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
                .filter(|value| !value.is_empty())
        }
    }

    #[test]
    fn flags_win_and_reference_variables_are_honoured() {
        let from_flags = files_from_settings(
            Some(Path::new("c.pem")),
            Some(Path::new("k.pem")),
            None,
            None,
            true,
            env(&[]),
        );
        assert!(matches!(from_flags, Ok(Some(files)) if files.cert == Path::new("c.pem")));
        let none = files_from_settings(
            None,
            None,
            None,
            None,
            false,
            env(&[("GRPC_SERVER_TLS_CERT", "x"), ("GRPC_SERVER_TLS_KEY", "y")]),
        );
        assert!(matches!(none, Ok(None)));
        let from_env = files_from_settings(
            None,
            None,
            None,
            None,
            true,
            env(&[
                ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
                ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
                ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
            ]),
        );
        match from_env {
            Ok(Some(files)) => {
                assert_eq!(files.key, Path::new("/tls/key.pem"));
                assert_eq!(files.client_ca.as_deref(), Some(Path::new("/tls/ca.pem")));
            }
            other => panic!("expected files, got {other:?}"),
        }
        let incomplete = files_from_settings(None, None, None, None, true, env(&[]));
        assert!(matches!(incomplete, Err(TlsError::Incomplete(_))));
    }

    const REFERENCE_MUTUAL_TLS: [(&str, &str); 5] = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
        ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
        ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.example.com"),
    ];

    fn flags() -> (
        Option<&'static Path>,
        Option<&'static Path>,
        Option<&'static Path>,
    ) {
        (
            Some(Path::new("c.pem")),
            Some(Path::new("k.pem")),
            Some(Path::new("ca.pem")),
        )
    }

    #[test]
    fn a_client_san_is_the_flag_else_the_reference_variable_whichever_gave_the_files() {
        let san = |files: Result<Option<TlsFiles>, TlsError>| match files {
            Ok(Some(files)) => files.client_san.map(|san| san.to_string()),
            other => panic!("expected files, got {other:?}"),
        };
        let reference = env(&REFERENCE_MUTUAL_TLS);
        let from_env = files_from_settings(None, None, None, None, true, &reference);
        assert_eq!(san(from_env).as_deref(), Some("envoy.example.com"));
        let flag_wins = files_from_settings(None, None, None, Some("10.0.0.7"), true, &reference);
        assert_eq!(san(flag_wins).as_deref(), Some("10.0.0.7"));
        let (cert, key, ca) = flags();
        let files_from_flags = files_from_settings(cert, key, ca, None, true, &reference);
        assert_eq!(san(files_from_flags).as_deref(), Some("envoy.example.com"));
        let no_san = files_from_settings(cert, key, ca, None, false, env(&[]));
        assert_eq!(san(no_san), None);
    }

    #[test]
    fn a_client_san_without_a_client_ca_or_that_is_no_name_is_refused() {
        let refused = |files: Result<Option<TlsFiles>, TlsError>| match files {
            Err(error) => error.to_string(),
            Ok(files) => panic!("expected a refusal, got {files:?}"),
        };
        let mut no_ca = REFERENCE_MUTUAL_TLS.to_vec();
        no_ca.retain(|(name, _)| *name != "GRPC_CLIENT_TLS_CACERT");
        let without_ca = refused(files_from_settings(
            None,
            None,
            None,
            None,
            true,
            env(&no_ca),
        ));
        assert!(
            without_ca.starts_with("GRPC_CLIENT_TLS_SAN=envoy.example.com")
                && without_ca.contains("GRPC_CLIENT_TLS_CACERT"),
            "{without_ca}"
        );
        let without_tls = refused(files_from_settings(
            None,
            None,
            None,
            Some("envoy"),
            false,
            env(&[]),
        ));
        assert!(
            without_tls.starts_with("--grpc-tls-client-san=envoy")
                && without_tls.contains("--grpc-tls-client-ca"),
            "{without_tls}"
        );
        let (cert, key, ca) = flags();
        let flags_without_ca = files_from_settings(cert, key, None, Some("envoy"), false, env(&[]));
        assert!(matches!(
            flags_without_ca,
            Err(TlsError::ClientSanWithoutCa { .. })
        ));
        let not_a_name = refused(files_from_settings(
            cert,
            key,
            ca,
            Some("envoy proxy"),
            false,
            env(&[]),
        ));
        assert!(
            not_a_name.contains("neither a DNS name nor an IP address"),
            "{not_a_name}"
        );
    }

    #[test]
    fn bad_files_are_named_in_errors() {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
            client_san: None,
        };
        assert!(
            matches!(ServerTls::load(files.clone()), Err(TlsError::Read { path, .. }) if path == cert)
        );
        for (path, text) in [(&cert, "not pem"), (&key, "not pem either")] {
            if let Err(error) = std::fs::write(path, text) {
                panic!("write: {error}");
            }
        }
        match ServerTls::load(files) {
            Err(error @ TlsError::NoCertificate { .. }) => {
                assert!(error.to_string().contains("cert.pem"), "{error}");
            }
            other => panic!("expected NoCertificate, got {:?}", other.err()),
        }
    }
}
