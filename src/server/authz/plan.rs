//! From a request under check to what the limiter decides: the profile (chosen by
//! `core::policy::http_check::selection`) and the descriptors it builds from the request's
//! attributes.

use crate::core::policy::http_check::headers::CheckInputError;
use crate::core::policy::http_check::profile::DEFAULT_DENY_BODY;
use crate::core::policy::http_check::selection::Selected;
use crate::core::policy::request::Request;
use crate::core::policy::rules::RuleSet;
use crate::server::authz::attributes::RequestAttributes;

/// The most profile names listed in the answer to an unknown one.
const LISTED_PROFILES: usize = 20;

/// What to do with a request under check.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Ask the limiter; a refusal carries `deny_body`.
    Decide { request: Request, deny_body: String },
    /// No profile applies, or the profile's descriptors all needed a header that was not sent:
    /// nothing limits the request.
    Allow,
    /// The caller named a profile no configuration file defines.
    UnknownProfile(String),
    /// The request cannot be turned into descriptors (a bad hits header).
    Refuse(CheckInputError),
}

/// The plan for `attributes` under `rules`, with the profile `named` by the caller, if any.
pub(crate) fn plan(rules: &RuleSet, named: Option<&str>, attributes: &RequestAttributes) -> Plan {
    let profiles = rules.check_profiles();
    let profile = match profiles.select(named, &attributes.authority, &attributes.path) {
        Selected::Profile(profile) => profile,
        Selected::Unknown(name) => {
            let known = profiles.iter().map(|profile| profile.name.as_str());
            return Plan::UnknownProfile(unknown_profile_message(name, known));
        }
        Selected::Nothing => return Plan::Allow,
    };
    match profile.request(|name| attributes.get(name)) {
        Ok(request) if request.descriptors.is_empty() => Plan::Allow,
        Ok(request) => Plan::Decide {
            request,
            deny_body: profile
                .deny_body
                .clone()
                .unwrap_or_else(|| DEFAULT_DENY_BODY.to_owned()),
        },
        Err(error) => Plan::Refuse(error),
    }
}

/// What a caller naming an unknown profile hears (here and at nginx's `/check/<profile>`):
/// the name and the names there are.
pub(crate) fn unknown_profile_message<'a>(
    name: &str,
    known: impl Iterator<Item = &'a str>,
) -> String {
    let known: Vec<&str> = known.collect();
    let listed = if known.is_empty() {
        "there are none: add `check_profiles:` to a configuration file".to_owned()
    } else {
        let shown = known
            .iter()
            .take(LISTED_PROFILES)
            .copied()
            .collect::<Vec<_>>();
        let more = known.len().saturating_sub(LISTED_PROFILES);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        format!("the profiles are {}{tail}", shown.join(", "))
    };
    format!("no check profile {name:?}: {listed}")
}
