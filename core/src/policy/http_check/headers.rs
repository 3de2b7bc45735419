//! The check endpoint's header form (`GET /check`): a proxy that cannot speak gRPC (nginx's
//! `auth_request`) names the domain and the descriptors in request headers:
//!
//! ```text
//! X-RateLimit-Domain: edge
//! X-RateLimit-Descriptor: generic_key=api,client_id=alice     (one header per descriptor)
//! X-RateLimit-Descriptor: remote_address=10.0.0.7
//! X-RateLimit-Hits: 1                                          (optional)
//! ```
//!
//! A descriptor is `key=value` entries separated by `,`, in order; the value is everything after
//! the first `=` (so it may contain `=`), an empty value is legal (`client_id=`), and spaces
//! around entries, keys and values are dropped. There is no escaping, so a value cannot contain
//! `,`: values a client controls belong in a check profile (`http_check::profile`), where each
//! header is one value and nothing is parsed.
//!
//! Pure: the shell hands over the header values as text.

use crate::policy::request::Entry;
use crate::policy::request::{Descriptor, Request};

/// The domain of the request.
pub const DOMAIN_HEADER: &str = "x-ratelimit-domain";
/// One descriptor per header line.
pub const DESCRIPTOR_HEADER: &str = "x-ratelimit-descriptor";
/// Hits to charge to every descriptor; 0 checks without charging.
pub const HITS_HEADER: &str = "x-ratelimit-hits";

/// Why the headers of a check request cannot be turned into a request. Each message says what to
/// send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckInputError {
    #[error(
        "missing X-RateLimit-Domain header: send the domain of the rules to apply \
         (nginx: proxy_set_header X-RateLimit-Domain <domain>;), or call /check/<profile>"
    )]
    MissingDomain,
    #[error(
        "no X-RateLimit-Descriptor header: send one per descriptor, as key=value,key=value \
         (nginx: proxy_set_header X-RateLimit-Descriptor \"remote_address=$remote_addr\";)"
    )]
    NoDescriptors,
    #[error("X-RateLimit-Descriptor #{descriptor} is empty: write key=value[,key=value…]")]
    EmptyDescriptor { descriptor: usize },
    #[error(
        "X-RateLimit-Descriptor #{descriptor}, entry {entry:?}: no '=' between key and value; \
         write key=value (key= for an empty value)"
    )]
    EntryWithoutValue { descriptor: usize, entry: String },
    #[error(
        "X-RateLimit-Descriptor #{descriptor}, entry {entry:?}: the key is empty; write key=value"
    )]
    EmptyKey { descriptor: usize, entry: String },
    #[error("{header}: {text:?} is not a whole number of hits from 0 to 18446744073709551615")]
    BadHits { header: String, text: String },
}

/// The request the headers describe. `descriptors` are the values of every
/// `X-RateLimit-Descriptor` header, in the order received (numbered from 1 in messages).
pub fn request_from_headers(
    domain: Option<&str>,
    descriptors: &[String],
    hits: Option<&str>,
) -> Result<Request, CheckInputError> {
    let domain = domain
        .map(str::trim)
        .filter(|domain| !domain.is_empty())
        .ok_or(CheckInputError::MissingDomain)?;
    if descriptors.is_empty() {
        return Err(CheckInputError::NoDescriptors);
    }
    let hits = hits.map(|text| parse_hits(HITS_HEADER, text)).transpose()?;
    let descriptors = descriptors
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let mut descriptor = parse_descriptor(index + 1, text)?;
            descriptor.hits_addend = hits;
            Ok(descriptor)
        })
        .collect::<Result<Vec<_>, CheckInputError>>()?;
    Ok(Request {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    })
}

/// `key=value,key=value` → a descriptor; `number` counts from 1 for messages.
pub fn parse_descriptor(number: usize, text: &str) -> Result<Descriptor, CheckInputError> {
    if text.trim().is_empty() {
        return Err(CheckInputError::EmptyDescriptor { descriptor: number });
    }
    let entries = text
        .split(',')
        .map(|part| {
            let part = part.trim();
            let Some((key, value)) = part.split_once('=') else {
                return Err(CheckInputError::EntryWithoutValue {
                    descriptor: number,
                    entry: part.to_owned(),
                });
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(CheckInputError::EmptyKey {
                    descriptor: number,
                    entry: part.to_owned(),
                });
            }
            Ok(Entry::new(key, value.trim()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Descriptor::new(entries))
}

/// A hits header: a whole number, charged to every descriptor (0: check only, nothing charged;
/// unlike the request-wide `hits_addend` of RLS, where 0 means 1).
pub fn parse_hits(header: &str, text: &str) -> Result<u64, CheckInputError> {
    let trimmed = text.trim();
    let well_formed = !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit());
    well_formed
        .then(|| trimmed.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| CheckInputError::BadHits {
            header: header.to_owned(),
            text: text.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptors(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|text| (*text).to_owned()).collect()
    }

    fn entries(descriptor: &Descriptor) -> Vec<(&str, &str)> {
        descriptor
            .entries
            .iter()
            .map(|entry| (entry.key.as_str(), entry.value.as_str()))
            .collect()
    }

    #[test]
    fn one_descriptor_per_header_in_order() {
        let request = request_from_headers(
            Some("edge"),
            &descriptors(&[
                "generic_key=api, client_id=alice",
                "remote_address=10.0.0.7",
            ]),
            None,
        );
        let Ok(request) = request else {
            panic!("expected a request, got {request:?}");
        };
        assert_eq!(request.domain, "edge");
        assert_eq!(request.hits_addend, 0);
        assert_eq!(
            entries(&request.descriptors[0]),
            [("generic_key", "api"), ("client_id", "alice")]
        );
        assert_eq!(
            entries(&request.descriptors[1]),
            [("remote_address", "10.0.0.7")]
        );
        assert_eq!(request.descriptors[0].hits_addend, None);
    }

    #[test]
    fn values_keep_later_equals_signs_and_may_be_empty() {
        let parsed = parse_descriptor(1, "token=a=b==,client_id=");
        let Ok(descriptor) = parsed else {
            panic!("expected a descriptor, got {parsed:?}");
        };
        assert_eq!(
            entries(&descriptor),
            [("token", "a=b=="), ("client_id", "")]
        );
    }

    #[test]
    fn hits_apply_to_every_descriptor_and_zero_checks_only() {
        let request = request_from_headers(Some("d"), &descriptors(&["a=1", "b=2"]), Some(" 0 "));
        let Ok(request) = request else {
            panic!("expected a request, got {request:?}");
        };
        assert!(request
            .descriptors
            .iter()
            .all(|descriptor| descriptor.hits_addend == Some(0)));
    }

    #[test]
    fn every_mistake_is_named() {
        let none: Vec<String> = Vec::new();
        assert_eq!(
            request_from_headers(None, &descriptors(&["a=1"]), None),
            Err(CheckInputError::MissingDomain)
        );
        assert_eq!(
            request_from_headers(Some("  "), &descriptors(&["a=1"]), None),
            Err(CheckInputError::MissingDomain)
        );
        assert_eq!(
            request_from_headers(Some("d"), &none, None),
            Err(CheckInputError::NoDescriptors)
        );
        assert_eq!(
            request_from_headers(Some("d"), &descriptors(&["a=1", " "]), None),
            Err(CheckInputError::EmptyDescriptor { descriptor: 2 })
        );
        assert_eq!(
            parse_descriptor(1, "a=1,b"),
            Err(CheckInputError::EntryWithoutValue {
                descriptor: 1,
                entry: "b".to_owned()
            })
        );
        assert_eq!(
            parse_descriptor(3, "a=1,,b=2"),
            Err(CheckInputError::EntryWithoutValue {
                descriptor: 3,
                entry: String::new()
            })
        );
        assert_eq!(
            parse_descriptor(1, "=x"),
            Err(CheckInputError::EmptyKey {
                descriptor: 1,
                entry: "=x".to_owned()
            })
        );
        for bad in ["", "-1", "1.5", "ten", "+3", "18446744073709551616"] {
            assert!(
                matches!(
                    request_from_headers(Some("d"), &descriptors(&["a=1"]), Some(bad)),
                    Err(CheckInputError::BadHits { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn messages_say_what_to_send() {
        let message = CheckInputError::MissingDomain.to_string();
        assert!(message.contains("X-RateLimit-Domain"), "{message}");
        let message = parse_descriptor(2, "oops")
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("#2") && message.contains("key=value"),
            "{message}"
        );
    }
}
