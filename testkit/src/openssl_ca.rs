//! A certificate authority made with the `openssl` command, for client certificates whose
//! subject alternative names and extended key usages a test spells out as openssl extensions:
//! made by another tool than the one floodgate's side of the ecosystem shares (rcgen,
//! [`crate::testca`]), as an operator's CA would be.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::testca::Pair;

pub struct OpensslCa {
    _temp: tempfile::TempDir,
    dir: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl OpensslCa {
    /// A self-signed CA (P-256, two days) whose subject is `CN=name`.
    pub fn new(name: &str) -> Self {
        let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
        let dir = temp.path().to_path_buf();
        let (cert, key) = (dir.join("ca.pem"), dir.join("ca.key"));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &text(&key),
            "-out",
            &text(&cert),
        ]);
        Self {
            _temp: temp,
            dir,
            cert,
            key,
        }
    }

    pub fn pem(&self) -> String {
        read(&self.cert)
    }

    /// A certificate signed by this CA (random serial) for `CN=common_name`, with `extensions`:
    /// lines of an openssl extension section (`subjectAltName=DNS:envoy.example.com`,
    /// `extendedKeyUsage=clientAuth`). `label` names its files.
    pub fn leaf(&self, label: &str, common_name: &str, extensions: &[&str]) -> Pair {
        let path = |suffix: &str| self.dir.join(format!("{label}.{suffix}"));
        let (key, request, cert, config) = (path("key"), path("csr"), path("pem"), path("ext"));
        std::fs::write(&config, extensions.join("\n") + "\n")
            .unwrap_or_else(|error| panic!("write {}: {error}", config.display()));
        openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={common_name}"),
            "-keyout",
            &text(&key),
            "-out",
            &text(&request),
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &text(&request),
            "-CA",
            &text(&self.cert),
            "-CAkey",
            &text(&self.key),
            "-days",
            "2",
            "-extfile",
            &text(&config),
            "-out",
            &text(&cert),
        ]);
        Pair {
            cert: read(&cert),
            key: read(&key),
        }
    }
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run openssl: {error}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}
