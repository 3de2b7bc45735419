//! Which keys belong where, and what to suggest for a key that belongs nowhere.
//!
//! The reference checks keys against one flat allow-list at every level: a misspelt key is an
//! error anywhere, but a valid key in the wrong place (`unit:` on a descriptor) is silently
//! ignored. floodgate keeps both outcomes, so every reference file still loads, and adds a
//! warning for the misplaced key. Keys only floodgate knows are checked per place: written in
//! the wrong place they are an error, since no reference file can contain them.

use serde_yaml::{Mapping, Value};

use super::report::FileReport;
use super::yaml_tree::{describe, render, wrong_type};

/// A kind of map in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Top,
    Descriptor,
    /// `rate_limit`, or one entry of `rate_limits`.
    Limit,
    /// One entry of `replaces`.
    Replace,
}

impl Place {
    const ALL: [Place; 4] = [Place::Top, Place::Descriptor, Place::Limit, Place::Replace];

    pub(super) fn keys(self) -> &'static [&'static str] {
        match self {
            Place::Top => &[
                "domain",
                "descriptors",
                "default_algorithm",
                "check_profiles",
                "failure_policy",
                "overflow",
            ],
            Place::Descriptor => &[
                "key",
                "value",
                "rate_limit",
                "rate_limits",
                "descriptors",
                "shadow_mode",
                "quota_mode",
                "detailed_metric",
                "value_to_metric",
                "share_threshold",
                "metadata",
                "adaptive",
                "priority",
                "concurrency",
                "ban",
                "heavy_hitters",
            ],
            Place::Limit => &[
                "unit",
                "requests_per_unit",
                "unlimited",
                "name",
                "replaces",
                "algorithm",
                "burst",
                "unit_multiplier",
                "nodelay",
                "queue",
                "delay",
                "max_wait_ms",
                "overflow",
                "counting",
            ],
            Place::Replace => &["name"],
        }
    }

    /// Where to move a key that belongs here.
    fn destination(self) -> &'static str {
        match self {
            Place::Top => "to the top level of the file",
            Place::Descriptor => "to the descriptor",
            Place::Limit => "inside `rate_limit` (or an entry of `rate_limits`)",
            Place::Replace => "inside a `replaces` entry",
        }
    }

    fn described(self) -> &'static str {
        match self {
            Place::Top => "at the top level of the file",
            Place::Descriptor => "on a descriptor",
            Place::Limit => "inside `rate_limit` (or an entry of `rate_limits`)",
            Place::Replace => "inside a `replaces` entry",
        }
    }
}

/// envoyproxy/ratelimit's `validKeys`: accepted anywhere by the reference.
const REFERENCE_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// Reports every key of `map` that does not belong at `place`.
pub(super) fn check_keys(map: &Mapping, place: Place, path: &str, report: &mut FileReport) {
    for key in map.keys() {
        let Value::String(key) = key else {
            report.error(
                path,
                format!(
                    "config error, key is not of type string: {}: keys must be names; \
                     the keys allowed {} are: {}",
                    render(key),
                    place.described(),
                    place.keys().join(", ")
                ),
            );
            continue;
        };
        if place.keys().contains(&key.as_str()) {
            continue;
        }
        match home_of(key) {
            Some(home) if REFERENCE_KEYS.contains(&key.as_str()) => report.warning(
                path,
                format!(
                    "'{key}' has no effect {} (envoyproxy/ratelimit ignores it there too): \
                     it belongs {}",
                    place.described(),
                    home.described()
                ),
            ),
            Some(home) => report.error(
                path,
                format!(
                    "'{key}' cannot be used {}: move it {}",
                    place.described(),
                    home.destination()
                ),
            ),
            None => report.error(path, unknown_key_message(key, place)),
        }
    }
}

/// Reports every key of `map`, a map only floodgate knows (`priority`), that is not one of
/// `allowed`: no reference file can hold it, so any other key is an error. `shown` names the
/// map in messages.
pub(super) fn check_floodgate_keys(
    map: &Mapping,
    shown: &str,
    allowed: &[&'static str],
    path: &str,
    report: &mut FileReport,
) {
    for key in map.keys() {
        let written = match key {
            Value::String(text) => text.clone(),
            other => render(other),
        };
        if allowed.contains(&written.as_str()) {
            continue;
        }
        let hint = did_you_mean(&written, allowed);
        report.error(
            path,
            format!(
                "config error, unknown key '{written}' in `{shown}`: {hint}the keys allowed \
                 there are: {}",
                allowed.join(", ")
            ),
        );
    }
}

/// `value` as a map only floodgate knows, its keys checked by [`check_floodgate_keys`];
/// `None`, reported with `example`, when it is not a map at all.
pub(super) fn floodgate_map<'v>(
    value: &'v Value,
    shown: &str,
    allowed: &[&'static str],
    example: &str,
    path: &str,
    report: &mut FileReport,
) -> Option<&'v Mapping> {
    let Value::Mapping(map) = value else {
        report.error(path, wrong_type(shown, "a map", &describe(value), example));
        return None;
    };
    check_floodgate_keys(map, shown, allowed, path, report);
    Some(map)
}

/// "did you mean 'x'? " for the candidate closest to `written` (see [`suggest`]), or nothing:
/// the start of a message's advice.
pub(super) fn did_you_mean(written: &str, candidates: &[&str]) -> String {
    suggest(written, candidates)
        .map(|near| format!("did you mean '{near}'? "))
        .unwrap_or_default()
}

fn home_of(key: &str) -> Option<Place> {
    Place::ALL
        .into_iter()
        .find(|place| place.keys().contains(&key))
}

fn unknown_key_message(key: &str, place: Place) -> String {
    let hint = match suggest(key, place.keys()) {
        Some(near) => format!("did you mean '{near}'?"),
        None => match Place::ALL
            .into_iter()
            .find_map(|other| suggest(key, other.keys()).map(|near| (near, other)))
        {
            Some((near, other)) => {
                format!(
                    "did you mean '{near}' (which belongs {})?",
                    other.described()
                )
            }
            None => "remove it or fix its spelling.".to_owned(),
        },
    };
    format!(
        "config error, unknown key '{key}': {hint} The keys allowed {} are: {}",
        place.described(),
        place.keys().join(", ")
    )
}

/// The closest of `candidates` to `written`: equal once case, `_`, `-` and spaces are ignored,
/// or within a small edit distance.
pub(super) fn suggest<'c>(written: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let written = normalize(written);
    if written.is_empty() {
        return None;
    }
    let allowed = 1 + written.chars().count() / 5;
    candidates
        .iter()
        .map(|candidate| (edit_distance(&written, &normalize(candidate)), *candidate))
        .filter(|(distance, _)| *distance <= allowed.min(3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

fn normalize(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Optimal string alignment distance (Levenshtein plus swaps of neighbours).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut rows = vec![0usize; (a.len() + 1) * width];
    for (j, cell) in rows.iter_mut().take(width).enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        rows[i * width] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[(i - 1) * width + j] + 1)
                .min(rows[i * width + j - 1] + 1)
                .min(rows[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[(i - 2) * width + j - 2] + 1);
            }
            rows[i * width + j] = best;
        }
    }
    rows[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_for_common_typos() {
        let descriptor = Place::Descriptor.keys();
        let limit = Place::Limit.keys();
        assert_eq!(suggest("ratelimit", descriptor), Some("rate_limit"));
        assert_eq!(suggest("RateLimit", descriptor), Some("rate_limit"));
        assert_eq!(suggest("rate-limits", descriptor), Some("rate_limits"));
        assert_eq!(suggest("descriptor", descriptor), Some("descriptors"));
        assert_eq!(suggest("shadowmode", descriptor), Some("shadow_mode"));
        assert_eq!(suggest("requestsperunit", limit), Some("requests_per_unit"));
        assert_eq!(
            suggest("request_per_unit", limit),
            Some("requests_per_unit")
        );
        assert_eq!(suggest("unlimied", limit), Some("unlimited"));
        assert_eq!(suggest("algoritm", limit), Some("algorithm"));
        assert_eq!(suggest("bursts", limit), Some("burst"));
        assert_eq!(suggest("colour", limit), None);
        assert_eq!(suggest("", limit), None);
    }

    #[test]
    fn edit_distance_counts_swaps_as_one() {
        assert_eq!(edit_distance("unit", "unti"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn every_reference_key_has_a_place() {
        for key in REFERENCE_KEYS {
            assert!(home_of(key).is_some(), "{key}");
        }
    }
}
