//! The name client certificates must carry on the gRPC listener (`--grpc-tls-client-san`,
//! envoyproxy/ratelimit's `GRPC_CLIENT_TLS_SAN`): checked during the handshake, after the client
//! CA's own checks, so a client of the right CA under another name never gets to call.
//!
//! The reference (`verifyClient` in its `src/server/tls.go`) verifies the client's leaf with Go's
//! `x509.Certificate.Verify` and `VerifyOptions{DNSName: san, KeyUsages: [ClientAuth]}`, which
//! is Go's `VerifyHostname`: a value that is an address (brackets allowed) is compared with the
//! certificate's IP SANs, an IPv4 address being equal to its IPv4-mapped IPv6 form; any other
//! value with its DNS SANs, case aside, where a SAN whose leftmost label is `*` stands for
//! exactly one label. URI SANs (SPIFFE ids) and the subject's CN never count. rustls-webpki's
//! subject-name check, used here, is the same, but stricter in two corners: a wildcard SAN needs
//! two labels after the `*` (`*.example.com` covers `envoy.example.com`; `*.com` covers nothing,
//! where Go lets it cover `example.com`), and a value that is neither a DNS name nor an address
//! is refused at start (Go would compare it with the DNS SANs letter for letter).
//!
//! The client-auth usage is checked by the CA's verifier this one wraps (rustls' webpki
//! verifier: a certificate that lists extended key usages must list clientAuth).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use tokio_rustls::rustls::client::danger::HandshakeSignatureValid;
use tokio_rustls::rustls::client::verify_server_name;
use tokio_rustls::rustls::pki_types::{CertificateDer, DnsName, ServerName, UnixTime};
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::server::ParsedCertificate;
use tokio_rustls::rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// The name client certificates must carry: a DNS name, or an IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSan {
    text: String,
    name: ServerName<'static>,
    /// An address's other form (IPv4 ⇄ IPv4-mapped IPv6), which Go takes as the same address.
    other_form: Option<ServerName<'static>>,
}

impl ClientSan {
    /// The name from its text, as the reference's `GRPC_CLIENT_TLS_SAN` takes it; `Err` says why
    /// the text is neither a DNS name nor an IP address.
    pub fn parse(text: &str) -> Result<Self, String> {
        let unbracketed = text
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(address) = unbracketed.parse::<IpAddr>() {
            let other_form = match address {
                IpAddr::V4(v4) => Some(IpAddr::V6(v4.to_ipv6_mapped())),
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            };
            return Ok(Self {
                text: text.to_owned(),
                name: ServerName::from(address),
                other_form: other_form.map(ServerName::from),
            });
        }
        let dns_name = DnsName::try_from(text.to_owned()).map_err(|_| {
            "neither a DNS name nor an IP address: give the DNS SAN client certificates carry \
             (envoy.example.com) or their IP SAN (10.0.0.7)"
                .to_owned()
        })?;
        Ok(Self {
            text: text.to_owned(),
            name: ServerName::DnsName(dns_name),
            other_form: None,
        })
    }

    /// Whether the end-entity certificate `certificate` carries this name.
    fn check(&self, certificate: &CertificateDer<'_>) -> Result<(), Error> {
        let parsed = ParsedCertificate::try_from(certificate)?;
        let outcome = verify_server_name(&parsed, &self.name);
        match &self.other_form {
            Some(other) if outcome.is_err() && verify_server_name(&parsed, other).is_ok() => Ok(()),
            _ => outcome,
        }
    }
}

impl fmt::Display for ClientSan {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.text)
    }
}

/// The client CA's verifier, then the name: a certificate that chains to the CA but lacks the
/// name fails the handshake.
#[derive(Debug)]
pub(crate) struct ClientSanVerifier {
    ca: Arc<dyn ClientCertVerifier>,
    san: ClientSan,
}

impl ClientSanVerifier {
    pub(crate) fn new(ca: Arc<dyn ClientCertVerifier>, san: ClientSan) -> Self {
        Self { ca, san }
    }
}

impl ClientCertVerifier for ClientSanVerifier {
    fn offer_client_auth(&self) -> bool {
        self.ca.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.ca.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.ca.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self.ca.verify_client_cert(end_entity, intermediates, now)?;
        // As the reference, said at warn: a certificate of the trusted CA under another name is
        // a misconfigured client, or one that should not be calling.
        self.san.check(end_entity).inspect_err(|error| {
            tracing::warn!(pinned = %self.san, %error, "gRPC client certificate refused");
        })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.ca.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.ca.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.ca.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.ca.requires_raw_public_keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_dns_names_are_told_apart_as_go_tells_them() {
        let parsed = |text: &str| ClientSan::parse(text).map(|san| (san.name, san.other_form));
        let v4: IpAddr = [10, 0, 0, 7].into();
        let mapped: IpAddr = "::ffff:10.0.0.7"
            .parse()
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            parsed("10.0.0.7"),
            Ok((ServerName::from(v4), Some(ServerName::from(mapped))))
        );
        assert_eq!(
            parsed("[::ffff:10.0.0.7]"),
            Ok((ServerName::from(mapped), Some(ServerName::from(v4))))
        );
        assert!(matches!(
            parsed("[::1]"),
            Ok((ServerName::IpAddress(_), None))
        ));
        assert!(matches!(
            parsed("envoy.example.com"),
            Ok((ServerName::DnsName(_), None))
        ));
        for bad in [
            "",
            "envoy example",
            "spiffe://cluster.local/ns/x/sa/envoy",
            "[envoy]",
        ] {
            assert!(ClientSan::parse(bad).is_err(), "{bad:?}");
        }
    }
}
