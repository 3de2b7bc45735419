//! An RLQS `BucketId`: a map of keys to values without an order (`{a: A, b: B}` is
//! `{b: B, a: A}`), kept sorted so equal maps are equal keys, and met with the rule whose
//! descriptor path has the same set of keys, in that path's order.

use std::collections::HashMap;
use std::fmt;

use crate::policy::request::Entry;
use crate::policy::rules::{DomainRules, Matched};

/// How big one bucket id may be: Envoy builds them from request headers, so their size is in
/// the hands of whoever sends requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketKeyBounds {
    pub max_keys: usize,
    /// Of each key and each value, in bytes.
    pub max_text_len: usize,
}

impl Default for BucketKeyBounds {
    fn default() -> Self {
        Self {
            max_keys: 16,
            max_text_len: 256,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    #[error("a bucket usage report without a bucket_id, or with an empty one: every report must name its bucket (bucket_id_builder in Envoy's bucket_matchers)")]
    Empty,
    #[error("a bucket_id with {keys} keys, over the bound of {max}: build bucket ids from fewer request attributes")]
    TooManyKeys { keys: usize, max: usize },
    #[error(
        "a bucket_id key or value of {len} bytes (key '{key}'), over the bound of {max} bytes"
    )]
    TextTooLong { key: String, len: usize, max: usize },
}

/// A bucket id, its entries sorted by key (keys of a map are unique).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    entries: Box<[(Box<str>, Box<str>)]>,
}

impl BucketKey {
    /// The bucket of a `BucketId` map, or why it is refused.
    pub fn from_map(
        map: &HashMap<String, String>,
        bounds: BucketKeyBounds,
    ) -> Result<Self, BucketError> {
        if map.is_empty() {
            return Err(BucketError::Empty);
        }
        if map.len() > bounds.max_keys {
            return Err(BucketError::TooManyKeys {
                keys: map.len(),
                max: bounds.max_keys,
            });
        }
        let mut entries = Vec::with_capacity(map.len());
        for (key, value) in map {
            let len = key.len().max(value.len());
            if len > bounds.max_text_len {
                return Err(BucketError::TextTooLong {
                    key: key.chars().take(64).collect(),
                    len,
                    max: bounds.max_text_len,
                });
            }
            entries.push((Box::from(key.as_str()), Box::from(value.as_str())));
        }
        entries.sort();
        Ok(Self {
            entries: entries.into_boxed_slice(),
        })
    }

    /// The entries, sorted by key.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(key, value)| (&**key, &**value))
    }

    /// The rule this bucket meets in `domain`: the one at the descriptor path whose keys are
    /// this bucket's keys, with values matched as a request descriptor's are (wildcards and
    /// key-only levels included). Failing that, a rule with priority classes whose path has
    /// every key of the bucket but one, that one its class key (`priority.key`): the bucket
    /// is one class's part of that rule's limit, and `Matched::class_entry` says so.
    pub fn lookup<'d>(&self, domain: &'d DomainRules) -> Option<Matched<'d>> {
        if let Some(matched) = self.lookup_keys(domain, None) {
            return Some(matched);
        }
        (0..self.entries.len()).find_map(|class_at| {
            let matched = self.lookup_keys(domain, Some(class_at))?;
            let (class_key, _) = self.entries.get(class_at)?;
            let names_its_class = matched.class_entry.is_some()
                && matched
                    .rule
                    .priority
                    .as_ref()
                    .is_some_and(|priority| *priority.key == **class_key);
            names_its_class.then_some(matched)
        })
    }

    /// The rule met by the bucket's entries, the one at `class_at` (when given) left out of
    /// the path and put last, where a request names its class.
    fn lookup_keys<'d>(
        &self,
        domain: &'d DomainRules,
        class_at: Option<usize>,
    ) -> Option<Matched<'d>> {
        let path: Vec<&(Box<str>, Box<str>)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(index, _)| Some(*index) != class_at)
            .map(|(_, entry)| entry)
            .collect();
        let order = domain.key_orders.iter().find(|order| {
            order.sorted.len() == path.len()
                && order
                    .sorted
                    .iter()
                    .zip(path.iter())
                    .all(|(sorted, (key, _))| **sorted == **key)
        })?;
        let mut entries: Vec<Entry> = order
            .ordered
            .iter()
            .filter_map(|key| {
                let (key, value) = path.iter().find(|(own, _)| **own == **key)?;
                Some(Entry::new(&**key, &**value))
            })
            .collect();
        if let Some((key, value)) = class_at.and_then(|at| self.entries.get(at)) {
            entries.push(Entry::new(&**key, &**value));
        }
        domain.lookup(&entries)
    }

    /// The value of entry `key`, if the bucket has one.
    pub fn value_of(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(own, _)| **own == *key)
            .map(|(_, value)| &**value)
    }

    /// This bucket without its entry `key`: what the buckets of one rule's priority classes
    /// share (the counter they divide).
    pub fn without(&self, key: &str) -> BucketKey {
        BucketKey {
            entries: self
                .entries
                .iter()
                .filter(|(own, _)| **own != *key)
                .cloned()
                .collect(),
        }
    }
}

impl fmt::Display for BucketKey {
    /// `{key: value, …}`, sorted by key, for logs and errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (index, (key, value)) in self.entries().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}: {value}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::load_valid;

    fn key(pairs: &[(&str, &str)]) -> Result<BucketKey, BucketError> {
        let map = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        BucketKey::from_map(&map, BucketKeyBounds::default())
    }

    const RULES: &str = "
domain: acme
descriptors:
  - key: name
    value: prod
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: name
    value: 'stag*'
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 60}
";

    #[test]
    fn a_bucket_meets_the_rule_whose_path_has_its_keys_in_any_order() {
        let rules = load_valid("acme.yaml", RULES);
        let Some(domain) = rules.domain("acme") else {
            panic!("no domain acme");
        };
        let prod = key(&[("name", "prod")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            prod.lookup(domain).map(|m| m.rule.path.clone()),
            Some("acme.name_prod".to_owned())
        );
        let staging = key(&[("name", "staging")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            staging.lookup(domain).map(|m| m.rule.path.clone()),
            Some("acme.name_stag*".to_owned())
        );
        let reversed = key(&[("path", "/a"), ("tenant", "t1")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            reversed.lookup(domain).map(|m| m.rule.path.clone()),
            Some("acme.tenant.path".to_owned())
        );
        let unknown = key(&[("name", "dev")]).unwrap_or_else(|e| panic!("{e}"));
        assert!(unknown.lookup(domain).is_none());
        let other_keys = key(&[("user", "x")]).unwrap_or_else(|e| panic!("{e}"));
        assert!(other_keys.lookup(domain).is_none());
    }

    #[test]
    fn a_bucket_with_a_rules_class_key_meets_that_rule_in_its_class() {
        let text = "
domain: acme
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 30}
    priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}
  - key: name
    rate_limit: {unit: second, requests_per_unit: 5}
";
        let rules = load_valid("acme.yaml", text);
        let Some(domain) = rules.domain("acme") else {
            panic!("no domain acme");
        };
        let low = key(&[("tenant", "t1"), ("priority", "low")]).unwrap_or_else(|e| panic!("{e}"));
        let matched = low
            .lookup(domain)
            .unwrap_or_else(|| panic!("no rule for {low}"));
        assert_eq!(matched.rule.path, "acme.tenant");
        assert_eq!(matched.class_entry, Some(1));
        assert_eq!(low.without("priority").to_string(), "{tenant: t1}");
        let plain = key(&[("tenant", "t1")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plain.lookup(domain).and_then(|m| m.class_entry), None);
        // A rule without classes takes no extra key, and a key that is not the class key
        // meets nothing.
        let extra = key(&[("name", "n"), ("priority", "low")]).unwrap_or_else(|e| panic!("{e}"));
        assert!(extra.lookup(domain).is_none());
        let other = key(&[("tenant", "t1"), ("colour", "red")]).unwrap_or_else(|e| panic!("{e}"));
        assert!(other.lookup(domain).is_none());
    }

    #[test]
    fn equal_maps_are_equal_buckets() {
        let a = key(&[("a", "A"), ("b", "B")]);
        let b = key(&[("b", "B"), ("a", "A")]);
        assert_eq!(a, b);
        assert_eq!(a.map(|k| k.to_string()), Ok("{a: A, b: B}".to_owned()));
    }

    #[test]
    fn ids_beyond_the_bounds_are_refused() {
        assert_eq!(key(&[]), Err(BucketError::Empty));
        let many: Vec<(String, String)> =
            (0..17).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        let map = many.into_iter().collect();
        assert_eq!(
            BucketKey::from_map(&map, BucketKeyBounds::default()),
            Err(BucketError::TooManyKeys { keys: 17, max: 16 })
        );
        let long = "v".repeat(257);
        assert!(matches!(
            key(&[("k", &long)]),
            Err(BucketError::TextTooLong { len: 257, .. })
        ));
    }

    #[test]
    fn two_orders_of_one_key_set_load_with_a_warning_and_buckets_meet_the_first() {
        let text = "
domain: acme
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
";
        let rules = match crate::policy::config::load_text("acme.yaml", text) {
            Ok(rules) => rules,
            Err(errors) => panic!("the reference loads this file, and so must floodgate: {errors}"),
        };
        let warnings: Vec<String> = rules.warnings().iter().map(ToString::to_string).collect();
        assert!(
            warnings.iter().any(|warning| warning
                .contains("same descriptor keys in different orders")
                && warning.contains("meets only 'acme.a.b'")),
            "{warnings:?}"
        );
    }
}
