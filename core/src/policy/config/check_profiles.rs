//! `check_profiles:` at the top of a domain file: named header→descriptor recipes for the HTTP
//! check endpoint (`/check/<name>`, see `http_check::profile`). A profile belongs to the domain
//! of the file it is written in; names are shared by all files, since the URL has no domain.
//!
//! Read from each file's parsed root right after its descriptors: profiles do not change the
//! rule tree, and the descriptor walk already reported syntax errors and a missing domain.

use std::collections::HashMap;

use serde_yaml::{Mapping, Value};

use super::check_profile_scope;
use super::keys::did_you_mean;
use super::report::{FileReport, Report};
use super::yaml_tree::{describe, field, not_a_map, render, text, wrong_type};
use crate::policy::http_check::profile::{
    CheckProfile, CheckProfiles, EntryValue, ProfileDescriptor, ProfileEntry, REQUEST_ATTRIBUTES,
};

/// The top-level key.
pub(super) const SECTION: &str = "check_profiles";

const PROFILE_KEYS: &[&str] = &[
    "descriptors",
    "hits_header",
    "hosts",
    "path_prefix",
    "deny_body",
];
const DESCRIPTOR_KEYS: &[&str] = &["entries"];
const ENTRY_KEYS: &[&str] = &["key", "value", "header", "default"];

const PROFILE_EXAMPLE: &str = "check_profiles: {site: {descriptors: [{entries: [{key: remote_address, header: X-Real-IP}]}]}}";

/// The profiles of the files read so far; problems go to the load's report.
#[derive(Default)]
pub(super) struct ProfilesBuild {
    profiles: Vec<CheckProfile>,
    /// Which file defined each name first.
    defined_in: HashMap<String, usize>,
}

impl ProfilesBuild {
    /// The profiles of file `index`, whose parsed top level is `root`.
    pub(super) fn read(&mut self, index: usize, root: &Value, report: &mut Report) {
        let Value::Mapping(root) = root else {
            return;
        };
        let Some(section) = field(root, SECTION) else {
            return;
        };
        // A missing domain was reported too; the load fails, so the profiles need no home.
        let Some(domain) = field(root, "domain")
            .and_then(|value| text(value).ok())
            .filter(|domain| !domain.is_empty())
        else {
            return;
        };
        let source = report.file_name(index).to_owned();
        let mut file_report = FileReport::new(report, index);
        let section_path = format!("{domain}.{SECTION}");
        let Value::Mapping(section) = section else {
            file_report.error(
                &section_path,
                wrong_type(
                    SECTION,
                    "a map from profile name to profile",
                    &describe(section),
                    PROFILE_EXAMPLE,
                ),
            );
            return;
        };
        for (name, body) in section {
            let Some(name) = profile_name(name, &section_path, &mut file_report) else {
                continue;
            };
            let path = format!("{section_path}.{name}");
            let Some(profile) = read_profile(&name, &domain, body, &path, &mut file_report) else {
                continue;
            };
            if let Some(&first) = self.defined_in.get(&name) {
                let other = file_report.file_name(first).to_owned();
                file_report.error(
                    &path,
                    format!(
                        "check profile '{name}' is already defined in {other}: profile names \
                         are shared by all files (the URL is /check/<name>); rename one"
                    ),
                );
                continue;
            }
            self.defined_in.insert(name.clone(), index);
            self.profiles.push(CheckProfile {
                source: source.clone(),
                ..profile
            });
        }
    }

    pub(super) fn finish(self) -> CheckProfiles {
        CheckProfiles::new(self.profiles)
    }
}

/// A profile name is one URL path segment.
fn profile_name(name: &Value, section_path: &str, report: &mut FileReport) -> Option<String> {
    let name = match name {
        Value::String(name) => name.clone(),
        other => {
            report.error(
                section_path,
                format!(
                    "profile name {} is not text: name each profile with letters, digits, \
                     '_', '-' or '.'",
                    render(other)
                ),
            );
            return None;
        }
    };
    let usable = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !usable {
        report.error(
            section_path,
            format!(
                "profile name '{name}' cannot be a URL path segment: use only letters, digits, \
                 '_', '-' and '.' (it is called as /check/<name>)"
            ),
        );
        return None;
    }
    Some(name)
}

fn read_profile(
    name: &str,
    domain: &str,
    body: &Value,
    path: &str,
    report: &mut FileReport,
) -> Option<CheckProfile> {
    let Value::Mapping(body) = body else {
        report.error(
            path,
            wrong_type(name, "a map", &describe(body), PROFILE_EXAMPLE),
        );
        return None;
    };
    let mut ok = check_keys(body, PROFILE_KEYS, "in a check profile", path, report);
    let hits_header = match field(body, "hits_header") {
        Some(value) => match header_name(value, "hits_header", path, report) {
            Some(header) => Some(header),
            None => {
                ok = false;
                None
            }
        },
        None => None,
    };
    let ext_authz = check_profile_scope::read(body, path, report);
    ok &= ext_authz.is_some();
    let descriptors = match field(body, "descriptors") {
        Some(Value::Sequence(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                read_descriptor(item, &format!("{path}.descriptors[{index}]"), report)
            })
            .collect::<Vec<_>>(),
        Some(Value::Sequence(_)) | None => {
            report.error(
                path,
                format!(
                    "check profile '{name}' has no descriptors: add `descriptors:`, a list of \
                     `- entries: [{{key: …, header: …}}]`"
                ),
            );
            return None;
        }
        Some(other) => {
            report.error(
                path,
                wrong_type(
                    "descriptors",
                    "a list",
                    &describe(other),
                    "descriptors: [{entries: [{key: remote_address, header: X-Real-IP}]}]",
                ),
            );
            return None;
        }
    };
    let descriptors: Option<Vec<ProfileDescriptor>> = descriptors.into_iter().collect();
    match (ok, descriptors, ext_authz) {
        (true, Some(descriptors), Some(ext_authz)) => Some(CheckProfile {
            name: name.to_owned(),
            domain: domain.to_owned(),
            descriptors,
            hits_header,
            source: String::new(),
            scope: ext_authz.scope,
            deny_body: ext_authz.deny_body,
        }),
        _ => None,
    }
}

fn read_descriptor(item: &Value, path: &str, report: &mut FileReport) -> Option<ProfileDescriptor> {
    let Value::Mapping(map) = item else {
        report.error(
            path,
            not_a_map(
                item,
                "descriptors",
                "entries: [{key: user, header: X-Api-Key}]",
            ),
        );
        return None;
    };
    let keys_ok = check_keys(
        map,
        DESCRIPTOR_KEYS,
        "on a profile descriptor",
        path,
        report,
    );
    let entries = match field(map, "entries") {
        Some(Value::Sequence(items)) if !items.is_empty() => items,
        Some(Value::Sequence(_)) | None => {
            report.error(
                path,
                "the descriptor has no entries: add `entries:`, a list of \
                 `{key: …, header: …}` or `{key: …, value: …}`, in the order of the rule tree",
            );
            return None;
        }
        Some(other) => {
            report.error(
                path,
                wrong_type(
                    "entries",
                    "a list",
                    &describe(other),
                    "entries: [{key: user, header: X-Api-Key}]",
                ),
            );
            return None;
        }
    };
    let entries: Option<Vec<ProfileEntry>> = entries
        .iter()
        .enumerate()
        .map(|(index, entry)| read_entry(entry, &format!("{path}.entries[{index}]"), report))
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    match (keys_ok, entries) {
        (true, Some(entries)) => Some(ProfileDescriptor { entries }),
        _ => None,
    }
}

fn read_entry(item: &Value, path: &str, report: &mut FileReport) -> Option<ProfileEntry> {
    let Value::Mapping(map) = item else {
        report.error(
            path,
            not_a_map(item, "entries", "{key: user, header: X-Api-Key}"),
        );
        return None;
    };
    let mut ok = check_keys(map, ENTRY_KEYS, "in a profile entry", path, report);
    let mut string = |name: &str, report: &mut FileReport| -> Option<String> {
        let value = field(map, name)?;
        match text(value) {
            Ok(text) => Some(text),
            Err(found) => {
                ok = false;
                report.error(
                    path,
                    wrong_type(name, "a string", &found, &format!("{name}: something")),
                );
                None
            }
        }
    };
    let key = string("key", report);
    let fixed = string("value", report);
    let default = string("default", report);
    let header = match field(map, "header") {
        Some(value) => {
            let name = header_name(value, "header", path, report);
            ok &= name.is_some();
            name
        }
        None => None,
    };
    let key = match key {
        Some(key) if !key.is_empty() => key,
        _ => {
            report.error(
                path,
                "the entry has no `key`: write the descriptor key the rules expect, like \
                 `{key: remote_address, header: X-Real-IP}`",
            );
            return None;
        }
    };
    let value = match (fixed, header, default) {
        (Some(fixed), None, None) => EntryValue::Fixed(fixed),
        (None, Some(name), default) => EntryValue::Header { name, default },
        (Some(_), Some(_), _) => {
            report.error(
                path,
                format!(
                    "entry '{key}' has both `value` and `header`: keep `value` for fixed \
                     text or `header` to take it from the request"
                ),
            );
            return None;
        }
        (Some(_), None, Some(_)) => {
            report.error(
                path,
                format!(
                    "entry '{key}' has `default` but no `header`: `default` is used when the \
                     header is missing; with a fixed `value`, remove it"
                ),
            );
            return None;
        }
        (None, None, _) => {
            // A header of the wrong type was reported already.
            if ok {
                report.error(
                    path,
                    format!(
                        "entry '{key}' has neither `value` nor `header`: add `header: \
                         X-Something` (nginx: proxy_set_header X-Something $variable;) or a \
                         fixed `value`"
                    ),
                );
            }
            return None;
        }
    };
    ok.then_some(ProfileEntry { key, value })
}

/// A header name (an RFC 9110 token) or a request attribute (`:path`, …), stored lower-case.
fn header_name(
    value: &Value,
    field_name: &str,
    path: &str,
    report: &mut FileReport,
) -> Option<String> {
    let written = match text(value) {
        Ok(written) => written,
        Err(found) => {
            report.error(
                path,
                wrong_type(
                    field_name,
                    "a header name",
                    &found,
                    &format!("{field_name}: X-Real-IP"),
                ),
            );
            return None;
        }
    };
    if written.starts_with(':') {
        return request_attribute(&written, field_name, path, report);
    }
    let is_token = !written.is_empty()
        && written
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c));
    if !is_token {
        report.error(
            path,
            format!(
                "`{field_name}: {written}` is not a header name: use letters, digits and '-', \
                 like X-Real-IP"
            ),
        );
        return None;
    }
    Some(written.to_ascii_lowercase())
}

/// One of `REQUEST_ATTRIBUTES`, stored lower-case.
fn request_attribute(
    written: &str,
    field_name: &str,
    path: &str,
    report: &mut FileReport,
) -> Option<String> {
    let lower = written.to_ascii_lowercase();
    if REQUEST_ATTRIBUTES.contains(&lower.as_str()) {
        return Some(lower);
    }
    report.error(
        path,
        format!(
            "`{field_name}: {written}` is not a request attribute: the attributes are {}",
            REQUEST_ATTRIBUTES.join(", ")
        ),
    );
    None
}

/// Reports keys of `map` not in `allowed`; false when there was one.
fn check_keys(
    map: &Mapping,
    allowed: &[&'static str],
    place: &str,
    path: &str,
    report: &mut FileReport,
) -> bool {
    let mut ok = true;
    for key in map.keys() {
        let known = matches!(key, Value::String(key) if allowed.contains(&key.as_str()));
        if known {
            continue;
        }
        ok = false;
        let written = text(key).unwrap_or_else(|_| render(key));
        let hint = did_you_mean(&written, allowed);
        report.error(
            path,
            format!(
                "unknown key '{written}' {place}: {hint}the keys allowed there are: {}",
                allowed.join(", ")
            ),
        );
    }
    ok
}

#[cfg(test)]
mod tests {
    use crate::policy::config::{load, LoadOptions, SourceFile};
    use crate::policy::http_check::profile::{CheckProfile, EntryValue};
    use crate::policy::rules::RuleSet;

    fn load_files(files: &[(&str, &str)]) -> Result<RuleSet, Vec<String>> {
        let sources: Vec<SourceFile> = files
            .iter()
            .map(|(name, text)| SourceFile {
                name: (*name).to_owned(),
                text: (*text).to_owned(),
            })
            .collect();
        load(&sources, &LoadOptions::default())
            .map_err(|errors| errors.0.iter().map(ToString::to_string).collect())
    }

    fn errors_of(profiles: &str) -> Vec<String> {
        let text = format!("domain: web\ndescriptors: []\ncheck_profiles:\n{profiles}");
        match load_files(&[("web.yaml", &text)]) {
            Ok(_) => panic!("should be refused:\n{text}"),
            Err(errors) => errors,
        }
    }

    const SITE: &str = r#"
domain: web
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
check_profiles:
  site:
    descriptors:
      - entries:
          - {key: user, header: X-Api-Key}
      - entries:
          - key: remote_address
            header: X-Real-IP
          - {key: method, header: x-original-method, default: GET}
          - {key: kind, value: 7}
    hits_header: X-RateLimit-Hits
"#;

    fn site(rules: &RuleSet) -> Option<&CheckProfile> {
        rules.check_profile("site")
    }

    #[test]
    fn a_profile_loads_with_its_file_domain_and_lower_case_headers() {
        let rules = match load_files(&[("web.yaml", SITE)]) {
            Ok(rules) => rules,
            Err(errors) => panic!("{errors:#?}"),
        };
        let Some(profile) = site(&rules) else {
            panic!("no profile 'site'");
        };
        assert_eq!(profile.domain, "web");
        assert_eq!(profile.source, "web.yaml");
        assert_eq!(profile.hits_header.as_deref(), Some("x-ratelimit-hits"));
        assert_eq!(profile.descriptors.len(), 2);
        let second = &profile.descriptors[1].entries;
        assert_eq!(
            second[0].value,
            EntryValue::Header {
                name: "x-real-ip".to_owned(),
                default: None
            }
        );
        assert_eq!(
            second[1].value,
            EntryValue::Header {
                name: "x-original-method".to_owned(),
                default: Some("GET".to_owned())
            }
        );
        assert_eq!(second[2].value, EntryValue::Fixed("7".to_owned()));
        assert_eq!(rules.check_profiles().len(), 1);
    }

    #[test]
    fn ext_authz_keys_and_request_attributes_load() {
        let text = SITE.replace(
            "    hits_header: X-RateLimit-Hits\n",
            "    hits_header: X-RateLimit-Hits\n    hosts: [API.example.com, \"*.example.org\"]\n    \
             path_prefix: /v1/\n    deny_body: slow down\n",
        )
        .replace("header: x-original-method", "header: \":Method\"");
        let rules = match load_files(&[("web.yaml", &text)]) {
            Ok(rules) => rules,
            Err(errors) => panic!("{errors:#?}\n{text}"),
        };
        let Some(profile) = site(&rules) else {
            panic!("no profile 'site'");
        };
        assert_eq!(profile.scope.hosts, ["api.example.com", "*.example.org"]);
        assert_eq!(profile.scope.path_prefix.as_deref(), Some("/v1/"));
        assert_eq!(profile.deny_body.as_deref(), Some("slow down"));
        assert_eq!(
            profile.descriptors[1].entries[1].value,
            EntryValue::Header {
                name: ":method".to_owned(),
                default: Some("GET".to_owned())
            }
        );
    }

    #[test]
    fn profile_names_are_unique_across_files() {
        let other = SITE.replace("domain: web", "domain: shop");
        let errors = match load_files(&[("web.yaml", SITE), ("shop.yaml", &other)]) {
            Ok(_) => panic!("a duplicate profile should be refused"),
            Err(errors) => errors,
        };
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with("shop.yaml: shop.check_profiles.site:")
                && errors[0].contains("already defined in web.yaml"),
            "{errors:#?}"
        );
    }

    #[test]
    fn mistakes_are_reported_where_they_are() {
        let cases = [
            (
                "  - site\n",
                "web.check_profiles",
                "must be a map from profile name",
            ),
            (
                "  a/b: {descriptors: []}\n",
                "web.check_profiles",
                "cannot be a URL path segment",
            ),
            ("  site: 3\n", "web.check_profiles.site", "must be a map"),
            (
                "  site: {}\n",
                "web.check_profiles.site",
                "has no descriptors",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, value: b}]}], hits: 1}\n",
                "web.check_profiles.site",
                "unknown key 'hits'",
            ),
            (
                "  site: {descriptor: [{entries: [{key: a, value: b}]}]}\n",
                "web.check_profiles.site",
                "did you mean 'descriptors'?",
            ),
            (
                "  site: {descriptors: [{entries: []}]}\n",
                "web.check_profiles.site.descriptors[0]",
                "has no entries",
            ),
            (
                "  site: {descriptors: [x]}\n",
                "web.check_profiles.site.descriptors[0]",
                "list of type other than map",
            ),
            (
                "  site: {descriptors: [{entries: [{value: b}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "has no `key`",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "neither `value` nor `header`",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, value: b, header: X-B}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "both `value` and `header`",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, value: b, default: c}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "`default` but no `header`",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, header: \"X B\"}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "is not a header name",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, header: [x]}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "`header` must be a header name",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, headr: X-A}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "did you mean 'header'?",
            ),
            (
                "  site: {descriptors: [{entries: [{key: a, header: \":host\"}]}]}\n",
                "web.check_profiles.site.descriptors[0].entries[0]",
                "is not a request attribute: the attributes are :method, :path",
            ),
            (
                "  site: {hosts: api.example.com, descriptors: [{entries: [{key: a, value: b}]}]}\n",
                "web.check_profiles.site",
                "`hosts` must be a list of host names",
            ),
            (
                "  site: {hosts: [\"https://a.example\"], descriptors: [{entries: [{key: a, value: b}]}]}\n",
                "web.check_profiles.site",
                "is not a host name",
            ),
            (
                "  site: {path_prefix: api, descriptors: [{entries: [{key: a, value: b}]}]}\n",
                "web.check_profiles.site",
                "must start with '/'",
            ),
        ];
        for (profiles, path, message) in cases {
            let errors = errors_of(profiles);
            let expected = format!("web.yaml: {path}: ");
            assert!(
                errors
                    .iter()
                    .any(|error| error.starts_with(&expected) && error.contains(message)),
                "{profiles}→ {errors:#?}\n(expected {expected}… {message})"
            );
        }
    }

    #[test]
    fn a_misspelt_section_is_caught_by_the_top_level_keys() {
        let text = "domain: web\ndescriptors: []\ncheck_profile: {}\n";
        let errors = match load_files(&[("web.yaml", text)]) {
            Ok(_) => panic!("should be refused"),
            Err(errors) => errors,
        };
        assert!(
            errors
                .iter()
                .any(|error| error.contains("did you mean 'check_profiles'")),
            "{errors:#?}"
        );
    }
}
