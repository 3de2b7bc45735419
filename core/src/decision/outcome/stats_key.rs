//! envoyproxy/ratelimit's stats key of one descriptor (`rl.Stats.Key`, built by its
//! `GetLimit` in `src/config/config_impl.go`): `<domain>.<key path>`, the name under which it
//! counts `total_hits`, `over_limit` and the others. Dashboards and alerts built on the
//! reference query these names, so they are rebuilt here exactly, `detailed_metric` and
//! `value_to_metric` included. Pure: the telemetry layer only looks the key's series up.

use super::MAX_DETAILED_LABEL_BYTES;
use crate::policy::request::Descriptor;
use crate::policy::request::Entry;
use crate::policy::rules::{Matched, MatchedLevel};

/// A descriptor's stats key: the rule's config path when no request value is in it (known
/// before any request, so counted under the rule's place in the label budget), or a key made
/// from the request's values (`detailed_metric`, `value_to_metric`, a limit override), which
/// the budget admits as a spare label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsKey<'a> {
    Rule(&'a str),
    Values(String),
}

impl StatsKey<'_> {
    pub fn as_str(&self) -> &str {
        match self {
            StatsKey::Rule(path) => path,
            StatsKey::Values(key) => key,
        }
    }
}

/// The reference's stats key of the descriptor whose entries `entries` found `matched` in
/// `domain`. Allocates only when the key holds request values.
pub fn stats_key<'r>(domain: &str, matched: &Matched<'r>, entries: &[Entry]) -> StatsKey<'r> {
    let rule = matched.rule;
    // A priority class entry is floodgate's own and not a level of the path.
    let pieces = || {
        entries
            .iter()
            .enumerate()
            .filter(|(index, _)| Some(*index) != matched.class_entry)
            .map(|(_, entry)| entry)
            .zip(matched.levels.iter().zip(matched.config_path.iter()))
    };
    if rule.detailed_metric {
        let shared = matched
            .levels
            .iter()
            .any(|level| matches!(level, MatchedLevel::Wildcard { shared: true, .. }));
        let mut key = String::from(domain);
        for (entry, (level, _)) in pieces() {
            key.push('.');
            key.push_str(&entry.key);
            match level {
                MatchedLevel::Wildcard {
                    pattern,
                    shared: true,
                } => push_value(&mut key, pattern),
                // With a shared level the reference writes `key` alone for an empty value;
                // without one it always writes `key_value`.
                _ if shared => push_value(&mut key, &entry.value),
                _ => {
                    key.push('_');
                    key.push_str(&entry.value);
                }
            }
        }
        return StatsKey::Values(bounded(key));
    }
    // `value_to_metric` puts the request's value where the config path has none (a key-only
    // level) or a pattern (a wildcard not shared); elsewhere the key is the config path.
    let holds_values = pieces().any(|(entry, (level, path_level))| {
        path_level.value_to_metric
            && match level {
                MatchedLevel::Default => !entry.value.is_empty(),
                MatchedLevel::Wildcard { shared, .. } => !shared,
                MatchedLevel::Exact => false,
            }
    });
    if !holds_values {
        return StatsKey::Rule(&rule.path);
    }
    let mut key = String::from(domain);
    for (entry, (level, path_level)) in pieces() {
        key.push('.');
        key.push_str(&entry.key);
        let value: &str = match level {
            MatchedLevel::Wildcard { shared: false, .. } if path_level.value_to_metric => {
                &entry.value
            }
            MatchedLevel::Wildcard { pattern, .. } => pattern,
            MatchedLevel::Exact => &entry.value,
            MatchedLevel::Default if path_level.value_to_metric => &entry.value,
            MatchedLevel::Default => "",
        };
        push_value(&mut key, value);
    }
    if key == rule.path {
        return StatsKey::Rule(&rule.path);
    }
    StatsKey::Values(bounded(key))
}

/// The stats key of a descriptor carrying Envoy's limit override (the reference's
/// `descriptorKey`): the domain, then per entry `key` or `key_value`.
pub fn override_stats_key(domain: &str, descriptor: &Descriptor) -> String {
    let mut key = String::from(domain);
    for entry in &descriptor.entries {
        key.push('.');
        key.push_str(&entry.key);
        push_value(&mut key, &entry.value);
    }
    bounded(key)
}

/// `_value`, when there is a value.
fn push_value(key: &mut String, value: &str) {
    if !value.is_empty() {
        key.push('_');
        key.push_str(value);
    }
}

/// A request value can be kilobytes long and the key is kept for the life of the process:
/// cut at [`MAX_DETAILED_LABEL_BYTES`] (at a character boundary), as floodgate's own labels.
pub(super) fn bounded(mut key: String) -> String {
    if key.len() > MAX_DETAILED_LABEL_BYTES {
        let mut cut = MAX_DETAILED_LABEL_BYTES;
        while !key.is_char_boundary(cut) {
            cut -= 1;
        }
        key.truncate(cut);
    }
    key
}

/// The reference's `SanitizeStatName`, applied to a key before it becomes a stat name: `:` and
/// `|` (statsd's separators) become `_`, and so do the dots of anything shaped like an IPv4
/// address (`\d{1,3}(\.\d{1,3}){3}`, found left to right without overlap, as Go's regexp).
pub fn sanitize_stat_name(key: &str) -> String {
    let replaced: Vec<u8> = key
        .bytes()
        .map(|byte| {
            if byte == b':' || byte == b'|' {
                b'_'
            } else {
                byte
            }
        })
        .collect();
    let mut out = replaced.clone();
    let mut at = 0;
    while at < replaced.len() {
        match ipv4_at(&replaced, at) {
            Some(end) => {
                for byte in &mut out[at..end] {
                    if *byte == b'.' {
                        *byte = b'_';
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes, so the text stays UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| key.to_owned())
}

/// The end of the leftmost-first match of `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` starting at
/// `start` (Go's regexp prefers the longest run of digits of each group, backtracking).
fn ipv4_at(bytes: &[u8], start: usize) -> Option<usize> {
    fn groups(bytes: &[u8], at: usize, left: usize) -> Option<usize> {
        let digits = bytes[at..]
            .iter()
            .take(3)
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        for take in (1..=digits).rev() {
            let end = at + take;
            if left == 1 {
                return Some(end);
            }
            if bytes.get(end) == Some(&b'.') {
                if let Some(found) = groups(bytes, end + 1, left - 1) {
                    return Some(found);
                }
            }
        }
        None
    }
    groups(bytes, start, 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizing_replaces_separators_and_the_dots_of_addresses() {
        assert_eq!(sanitize_stat_name("d.k_a:b|c"), "d.k_a_b_c");
        assert_eq!(
            sanitize_stat_name("d.remote_address_10.0.0.1"),
            "d.remote_address_10_0_0_1"
        );
        assert_eq!(sanitize_stat_name("d.v_1.2.3"), "d.v_1.2.3");
        assert_eq!(sanitize_stat_name("d.v_1234.5.6.7"), "d.v_1234_5_6_7");
        assert_eq!(sanitize_stat_name("d.é:1"), "d.é_1");
    }

    #[test]
    fn an_override_key_has_the_values_it_was_given() {
        let descriptor = Descriptor {
            entries: vec![Entry::new("a", "1"), Entry::new("b", "")],
            ..Descriptor::default()
        };
        assert_eq!(override_stats_key("d", &descriptor), "d.a_1.b");
    }

    #[test]
    fn long_keys_are_cut_at_a_character_boundary() {
        let key = bounded(format!("d.k_{}", "é".repeat(300)));
        assert!(key.len() <= MAX_DETAILED_LABEL_BYTES);
        assert!(key.starts_with("d.k_é"));
    }
}
