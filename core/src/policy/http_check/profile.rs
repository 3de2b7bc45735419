//! Check profiles: named recipes that turn the headers of a check request (`/check/<profile>`)
//! into descriptors. nginx passes its variables as headers (`X-Real-IP: $remote_addr`,
//! `X-Api-Key: $http_x_api_key`, …) and the profile, written next to the rules it feeds, says
//! which header fills which entry:
//!
//! ```yaml
//! domain: web
//! check_profiles:
//!   site:                                  # GET /check/site
//!     descriptors:
//!       - entries:
//!           - {key: user, header: X-Api-Key}
//!       - entries:
//!           - {key: remote_address, header: X-Real-IP}
//!           - {key: method, header: X-Original-Method, default: GET}
//!     hits_header: X-RateLimit-Hits        # optional
//! ```
//!
//! Rules of the mapping, chosen so that nothing a client sends can make the check fail (a
//! failing check is a 5xx to nginx, which a fail-open setup lets through):
//! * a header value is one entry value, taken as is: nothing is split or unescaped;
//! * a header that is absent or empty takes the entry's `default`; without one the whole
//!   descriptor is left out, as Envoy leaves out a descriptor whose `request_headers` action
//!   finds no header (nginx sends no header at all for an empty variable);
//! * a profile that leaves out every descriptor limits nothing: the request is allowed;
//! * hits come only from the header the profile names, so a client cannot send its own
//!   `X-RateLimit-Hits: 0` through nginx to be checked without being charged.
//!
//! Pure: the shell supplies a function that looks a header up by its lower-case name.

use std::collections::HashMap;

use crate::policy::http_check::headers::{parse_hits, CheckInputError};
use crate::policy::request::Entry;
use crate::policy::request::{Descriptor, Request};

/// Every profile of a rule set, by name (unique across files).
#[derive(Debug, Clone, Default)]
pub struct CheckProfiles {
    by_name: HashMap<String, CheckProfile>,
}

impl CheckProfiles {
    pub fn new(profiles: impl IntoIterator<Item = CheckProfile>) -> Self {
        Self {
            by_name: profiles
                .into_iter()
                .map(|profile| (profile.name.clone(), profile))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&CheckProfile> {
        self.by_name.get(name)
    }

    /// Every profile, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = &CheckProfile> {
        let mut profiles: Vec<&CheckProfile> = self.by_name.values().collect();
        profiles.sort_by(|a, b| a.name.cmp(&b.name));
        profiles.into_iter()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// One profile: the domain of the file it is written in and its descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckProfile {
    /// The last path segment of `/check/<name>`.
    pub name: String,
    pub domain: String,
    pub descriptors: Vec<ProfileDescriptor>,
    /// Lower-case name of the header that carries the hits (0: check only); absent: 1 hit.
    pub hits_header: Option<String>,
    /// The file it came from, for messages.
    pub source: String,
    /// Where ext_authz applies it without being told its name (`http_check::selection`).
    pub scope: ProfileScope,
    /// The body of an ext_authz refusal (`deny_body:`); absent: `DEFAULT_DENY_BODY`.
    pub deny_body: Option<String>,
}

/// The body of an ext_authz refusal when the profile names none.
pub const DEFAULT_DENY_BODY: &str = "Too Many Requests\n";

/// The requests a profile applies to when a caller (ext_authz) does not name one: `hosts:`
/// (exact, or `*.example.com` for any subdomain; stored lower-case) and `path_prefix:` (a plain
/// prefix of the path, as Envoy's route `prefix`). Both empty: only by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProfileScope {
    pub hosts: Vec<String>,
    pub path_prefix: Option<String>,
}

/// Request attributes a profile entry can read like headers (`header: ":path"`). ext_authz
/// callers fill them from the request Envoy describes, or from the `X-Forwarded-*` headers of
/// Caddy and Traefik; nginx's `/check` sends none of them, so there they take their `default`.
pub const REQUEST_ATTRIBUTES: &[&str] = &[
    METHOD_ATTRIBUTE,
    PATH_ATTRIBUTE,
    AUTHORITY_ATTRIBUTE,
    SCHEME_ATTRIBUTE,
    SOURCE_ADDRESS_ATTRIBUTE,
];
/// The request's method.
pub const METHOD_ATTRIBUTE: &str = ":method";
/// The request's path with its query, as the client sent it.
pub const PATH_ATTRIBUTE: &str = ":path";
/// The request's host (HTTP/2 `:authority`, HTTP/1 `Host`), port included when sent.
pub const AUTHORITY_ATTRIBUTE: &str = ":authority";
/// `http` or `https`.
pub const SCHEME_ATTRIBUTE: &str = ":scheme";
/// The address of the client the proxy saw (Envoy's `source.address`; the last
/// `X-Forwarded-For` entry, which the proxy in front of floodgate appended).
pub const SOURCE_ADDRESS_ATTRIBUTE: &str = ":source-address";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileDescriptor {
    pub entries: Vec<ProfileEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileEntry {
    pub key: String,
    pub value: EntryValue,
}

/// Where an entry's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryValue {
    /// Always this text (`value:`).
    Fixed(String),
    /// The value of a request header (`header:`, stored lower-case), or `default` when it is
    /// absent or empty.
    Header {
        name: String,
        default: Option<String>,
    },
}

impl CheckProfile {
    /// The request for one check. `header(name)` returns the value of the header `name` (given
    /// in lower case), if present. The request has no descriptors when every one was left out.
    pub fn request<'h>(
        &self,
        header: impl Fn(&str) -> Option<&'h str>,
    ) -> Result<Request, CheckInputError> {
        let hits = match &self.hits_header {
            Some(name) => header(name)
                .filter(|text| !text.trim().is_empty())
                .map(|text| parse_hits(name, text))
                .transpose()?,
            None => None,
        };
        let descriptors = self
            .descriptors
            .iter()
            .filter_map(|descriptor| descriptor.resolve(&header))
            .map(|entries| Descriptor {
                hits_addend: hits,
                ..Descriptor::new(entries)
            })
            .collect();
        Ok(Request {
            domain: self.domain.clone(),
            descriptors,
            hits_addend: 0,
        })
    }
}

impl ProfileDescriptor {
    /// The entries, or `None` when a header it needs is missing and has no default.
    fn resolve<'h>(&self, header: &impl Fn(&str) -> Option<&'h str>) -> Option<Vec<Entry>> {
        self.entries
            .iter()
            .map(|entry| {
                let value = match &entry.value {
                    EntryValue::Fixed(text) => text.clone(),
                    EntryValue::Header { name, default } => header(name)
                        .filter(|value| !value.is_empty())
                        .map(str::to_owned)
                        .or_else(|| default.clone())?,
                };
                Some(Entry::new(entry.key.clone(), value))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_entry(key: &str, header: &str, default: Option<&str>) -> ProfileEntry {
        ProfileEntry {
            key: key.to_owned(),
            value: EntryValue::Header {
                name: header.to_owned(),
                default: default.map(str::to_owned),
            },
        }
    }

    fn profile() -> CheckProfile {
        CheckProfile {
            name: "site".to_owned(),
            domain: "web".to_owned(),
            descriptors: vec![
                ProfileDescriptor {
                    entries: vec![
                        ProfileEntry {
                            key: "generic_key".to_owned(),
                            value: EntryValue::Fixed("api".to_owned()),
                        },
                        header_entry("user", "x-api-key", None),
                    ],
                },
                ProfileDescriptor {
                    entries: vec![
                        header_entry("remote_address", "x-real-ip", None),
                        header_entry("method", "x-original-method", Some("GET")),
                    ],
                },
            ],
            hits_header: None,
            source: "web.yaml".to_owned(),
            scope: ProfileScope::default(),
            deny_body: None,
        }
    }

    fn lookup<'h>(headers: &'h [(&'h str, &'h str)]) -> impl Fn(&str) -> Option<&'h str> {
        move |name| {
            headers
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| *value)
        }
    }

    fn entries(request: &Request) -> Vec<Vec<(String, String)>> {
        request
            .descriptors
            .iter()
            .map(|descriptor| {
                descriptor
                    .entries
                    .iter()
                    .map(|entry| (entry.key.clone(), entry.value.clone()))
                    .collect()
            })
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn headers_fill_entries_verbatim() {
        let headers = [
            ("x-api-key", "k,1=2"),
            ("x-real-ip", "10.0.0.7"),
            ("x-original-method", "POST"),
        ];
        let request = profile().request(lookup(&headers));
        let Ok(request) = request else {
            panic!("expected a request, got {request:?}");
        };
        assert_eq!(request.domain, "web");
        assert_eq!(
            entries(&request),
            [
                pairs(&[("generic_key", "api"), ("user", "k,1=2")]),
                pairs(&[("remote_address", "10.0.0.7"), ("method", "POST")]),
            ]
        );
    }

    #[test]
    fn a_missing_header_drops_its_descriptor_unless_it_has_a_default() {
        let headers = [("x-real-ip", "10.0.0.7"), ("x-api-key", "")];
        let request = profile().request(lookup(&headers));
        let Ok(request) = request else {
            panic!("expected a request, got {request:?}");
        };
        assert_eq!(
            entries(&request),
            [pairs(&[("remote_address", "10.0.0.7"), ("method", "GET")])]
        );
        let nothing = profile().request(lookup(&[]));
        assert!(matches!(nothing, Ok(request) if request.descriptors.is_empty()));
    }

    #[test]
    fn hits_only_from_the_named_header() {
        let headers = [("x-real-ip", "10.0.0.7"), ("x-ratelimit-hits", "0")];
        let ignored = profile().request(lookup(&headers));
        assert!(matches!(ignored, Ok(request) if request.descriptors[0].hits_addend.is_none()));

        let mut counted = profile();
        counted.hits_header = Some("x-ratelimit-hits".to_owned());
        let request = counted.request(lookup(&headers));
        assert!(matches!(request, Ok(request) if request.descriptors[0].hits_addend == Some(0)));
        let bad = counted.request(lookup(&[("x-ratelimit-hits", "many")]));
        assert!(matches!(bad, Err(CheckInputError::BadHits { .. })));
    }

    #[test]
    fn profiles_by_name() {
        let profiles = CheckProfiles::new([profile()]);
        assert_eq!(profiles.len(), 1);
        assert!(profiles.get("site").is_some());
        assert!(profiles.get("other").is_none());
        assert_eq!(
            profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["site"]
        );
    }
}
