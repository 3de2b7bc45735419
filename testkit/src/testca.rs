//! A certificate authority made by the test (rcgen): server and client certificates, PEM.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

fn key_pair() -> KeyPair {
    KeyPair::generate().unwrap_or_else(|error| panic!("key pair: {error}"))
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .unwrap_or_else(|error| panic!("CA params: {error}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, key_pair())
            .unwrap_or_else(|error| panic!("CA certificate: {error}"));
        Self { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, names: &[&str], usages: &[ExtendedKeyUsagePurpose]) -> Pair {
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone())
            .unwrap_or_else(|error| panic!("leaf params: {error}"));
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = usages.to_vec();
        let key = key_pair();
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|error| panic!("leaf certificate: {error}"));
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// For `localhost` and 127.0.0.1.
    pub fn server(&self) -> Pair {
        self.server_for(&["localhost", "127.0.0.1"])
    }

    /// A server certificate for `names` only (DNS names, or IP addresses).
    pub fn server_for(&self, names: &[&str]) -> Pair {
        self.leaf(names, &[ExtendedKeyUsagePurpose::ServerAuth])
    }

    pub fn client(&self, name: &str) -> Pair {
        self.leaf(&[name], &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    /// One certificate for both ends, for `localhost` and 127.0.0.1: what Envoy Gateway mounts
    /// as the rate limit service's `tls.crt`, its gRPC server certificate and its client
    /// certificate towards the xDS server alike.
    pub fn server_and_client(&self) -> Pair {
        self.leaf(
            &["localhost", "127.0.0.1"],
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }
}
