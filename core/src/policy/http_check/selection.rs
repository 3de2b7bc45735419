//! Which check profile an ext_authz call uses. Envoy's ext_authz (and Istio's CUSTOM
//! authorization, which renders it) sends every request of a listener to one service, so the
//! service picks the profile, in this order:
//!
//! 1. the name in the context extension `floodgate_profile` (Envoy's per-route
//!    `check_settings.context_extensions`), or the one in the URL of the HTTP form
//!    (`/authz/<profile>`); a name no profile has is an error the caller hears about;
//! 2. the profile whose `hosts:` and `path_prefix:` match the request most closely: an exact
//!    host before a `*.` wildcard before no `hosts:` at all, then the longest prefix, then the
//!    first name in alphabetical order;
//! 3. the profile named `default`;
//! 4. none: nothing limits the request, and it is allowed.
//!
//! Pure: the shell hands over the host and path it read from the request.

use crate::policy::http_check::profile::{CheckProfile, CheckProfiles};

/// The context extension that names the profile.
pub const PROFILE_CONTEXT_EXTENSION: &str = "floodgate_profile";

/// The profile used when no other applies.
pub const DEFAULT_PROFILE: &str = "default";

/// The outcome of the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected<'a> {
    Profile(&'a CheckProfile),
    /// The caller named a profile that does not exist.
    Unknown(&'a str),
    /// No profile applies to the request.
    Nothing,
}

impl CheckProfiles {
    /// The profile for a request `named` one (or not), for `host` and `path` as sent.
    pub fn select<'a>(&'a self, named: Option<&'a str>, host: &str, path: &str) -> Selected<'a> {
        if let Some(name) = named {
            return self
                .get(name)
                .map_or(Selected::Unknown(name), Selected::Profile);
        }
        let host = bare_host(host);
        let path = path.split('?').next().unwrap_or_default();
        let mut best: Option<((u8, usize), &CheckProfile)> = None;
        // In name order, so that on a tie the first name stays.
        for profile in self.iter() {
            let Some(closeness) = closeness(profile, &host, path) else {
                continue;
            };
            if best.is_none_or(|(so_far, _)| closeness > so_far) {
                best = Some((closeness, profile));
            }
        }
        best.map(|(_, profile)| profile)
            .or_else(|| self.get(DEFAULT_PROFILE))
            .map_or(Selected::Nothing, Selected::Profile)
    }
}

/// How closely `profile`'s scope matches (host rank, prefix length), or `None` when it does
/// not match or has no scope.
fn closeness(profile: &CheckProfile, host: &str, path: &str) -> Option<(u8, usize)> {
    let scope = &profile.scope;
    if scope.hosts.is_empty() && scope.path_prefix.is_none() {
        return None;
    }
    let host_rank = if scope.hosts.is_empty() {
        0
    } else {
        scope
            .hosts
            .iter()
            .filter_map(|pattern| host_rank(pattern, host))
            .max()?
    };
    let prefix = scope.path_prefix.as_deref().unwrap_or_default();
    path.starts_with(prefix)
        .then_some((host_rank, prefix.len()))
}

/// 2 for the same host, 1 for a subdomain of a `*.` pattern, `None` otherwise.
fn host_rank(pattern: &str, host: &str) -> Option<u8> {
    if pattern == host {
        return Some(2);
    }
    let suffix = pattern.strip_prefix('*')?;
    (suffix.starts_with('.') && host.len() > suffix.len() && host.ends_with(suffix)).then_some(1)
}

/// `host` lower-case and without its port (`[::1]:8080` → `[::1]`).
fn bare_host(host: &str) -> String {
    let host = host.trim();
    let without_port = if host.starts_with('[') {
        host.find(']').map_or(host, |end| &host[..=end])
    } else {
        host.rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(host, |(name, _)| name)
    };
    without_port.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::http_check::profile::{ProfileScope, DEFAULT_DENY_BODY};

    fn profile(name: &str, hosts: &[&str], path_prefix: Option<&str>) -> CheckProfile {
        CheckProfile {
            name: name.to_owned(),
            domain: "web".to_owned(),
            descriptors: Vec::new(),
            hits_header: None,
            source: "web.yaml".to_owned(),
            scope: ProfileScope {
                hosts: hosts.iter().map(|host| (*host).to_owned()).collect(),
                path_prefix: path_prefix.map(str::to_owned),
            },
            deny_body: None,
        }
    }

    fn chosen(profiles: &CheckProfiles, named: Option<&str>, host: &str, path: &str) -> String {
        match profiles.select(named, host, path) {
            Selected::Profile(profile) => profile.name.clone(),
            Selected::Unknown(name) => format!("unknown {name}"),
            Selected::Nothing => "nothing".to_owned(),
        }
    }

    fn profiles() -> CheckProfiles {
        CheckProfiles::new([
            profile("api", &["api.example.com"], None),
            profile("api_login", &["api.example.com"], Some("/login")),
            profile("any_login", &[], Some("/login")),
            profile("subdomains", &["*.example.com"], None),
            profile("by_name_only", &[], None),
            profile(DEFAULT_PROFILE, &[], None),
        ])
    }

    #[test]
    fn a_name_wins_and_an_unknown_name_is_reported() {
        let profiles = profiles();
        let host = "api.example.com";
        assert_eq!(
            chosen(&profiles, Some("by_name_only"), host, "/"),
            "by_name_only"
        );
        assert_eq!(chosen(&profiles, Some("nope"), host, "/"), "unknown nope");
    }

    #[test]
    fn the_closest_scope_wins() {
        let profiles = profiles();
        assert_eq!(chosen(&profiles, None, "api.example.com", "/x"), "api");
        assert_eq!(
            chosen(&profiles, None, "API.example.com:443", "/login?a=1"),
            "api_login"
        );
        assert_eq!(
            chosen(&profiles, None, "www.example.com", "/login"),
            "subdomains"
        );
        assert_eq!(
            chosen(&profiles, None, "other.org", "/login/now"),
            "any_login"
        );
        assert_eq!(chosen(&profiles, None, "example.com", "/"), DEFAULT_PROFILE);
    }

    #[test]
    fn without_a_default_nothing_applies() {
        let profiles = CheckProfiles::new([profile("api", &["api.example.com"], None)]);
        assert_eq!(chosen(&profiles, None, "[::1]:8080", "/"), "nothing");
        assert_eq!(bare_host("[::1]:8080"), "[::1]");
        assert_eq!(bare_host("Host.Example"), "host.example");
        assert!(DEFAULT_DENY_BODY.ends_with('\n'));
    }
}
