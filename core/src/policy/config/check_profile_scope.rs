//! The ext_authz keys of a check profile: `hosts:` and `path_prefix:`, where the profile applies
//! when the caller does not name it (`http_check::selection`), and `deny_body:`, the body of a
//! refusal.
//!
//! ```yaml
//! check_profiles:
//!   api:
//!     hosts: [api.example.com, "*.api.example.com"]
//!     path_prefix: /v1/
//!     deny_body: "{\"error\": \"rate limited\"}"
//!     descriptors: …
//! ```

use serde_yaml::{Mapping, Value};

use super::report::FileReport;
use super::yaml_tree::{describe, field, text, wrong_type};
use crate::policy::http_check::profile::ProfileScope;

/// What these keys hold; `None` when one is wrong (reported).
pub(super) struct ExtAuthzKeys {
    pub(super) scope: ProfileScope,
    pub(super) deny_body: Option<String>,
}

pub(super) fn read(body: &Mapping, path: &str, report: &mut FileReport) -> Option<ExtAuthzKeys> {
    let hosts = match field(body, "hosts") {
        Some(value) => hosts(value, path, report)?,
        None => Vec::new(),
    };
    let path_prefix = match field(body, "path_prefix") {
        Some(value) => Some(path_prefix(value, path, report)?),
        None => None,
    };
    let deny_body = match field(body, "deny_body") {
        Some(value) => Some(plain_text(value, "deny_body", path, report)?),
        None => None,
    };
    Some(ExtAuthzKeys {
        scope: ProfileScope { hosts, path_prefix },
        deny_body,
    })
}

fn hosts(value: &Value, path: &str, report: &mut FileReport) -> Option<Vec<String>> {
    let Value::Sequence(items) = value else {
        report.error(
            path,
            wrong_type(
                "hosts",
                "a list of host names",
                &describe(value),
                "hosts: [api.example.com, \"*.example.com\"]",
            ),
        );
        return None;
    };
    let hosts: Vec<Option<String>> = items.iter().map(|item| host(item, path, report)).collect();
    hosts.into_iter().collect()
}

/// One host: a name without port, or `*.` and a name; stored lower-case.
fn host(item: &Value, path: &str, report: &mut FileReport) -> Option<String> {
    let written = plain_text(item, "hosts", path, report)?;
    let name = written.strip_prefix("*.").unwrap_or(&written);
    let usable = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if !usable {
        report.error(
            path,
            format!(
                "host '{written}' is not a host name: write it without scheme or port, like \
                 api.example.com, or \"*.example.com\" for every subdomain"
            ),
        );
        return None;
    }
    Some(written.to_ascii_lowercase())
}

fn path_prefix(value: &Value, path: &str, report: &mut FileReport) -> Option<String> {
    let prefix = plain_text(value, "path_prefix", path, report)?;
    if !prefix.starts_with('/') {
        report.error(
            path,
            format!("`path_prefix: {prefix}` must start with '/', like `path_prefix: /api/`"),
        );
        return None;
    }
    Some(prefix)
}

fn plain_text(value: &Value, name: &str, path: &str, report: &mut FileReport) -> Option<String> {
    match text(value) {
        Ok(text) => Some(text),
        Err(found) => {
            report.error(
                path,
                wrong_type(name, "a string", &found, &format!("{name}: something")),
            );
            None
        }
    }
}
