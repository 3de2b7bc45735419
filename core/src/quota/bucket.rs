//! An RLQS `BucketId`: a map of keys to values without an order (`{a: A, b: B}` is
//! `{b: B, a: A}`), kept sorted so equal maps are equal keys, and met with the rule whose
//! descriptor path has the same set of keys, in that path's order.

use std::collections::HashMap;
use std::fmt;

use crate::rules::{DomainRules, Entry, Matched};

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
    /// key-only levels included).
    pub fn lookup<'d>(&self, domain: &'d DomainRules) -> Option<Matched<'d>> {
        let order = domain.key_orders.iter().find(|order| {
            order.sorted.len() == self.entries.len()
                && order
                    .sorted
                    .iter()
                    .zip(self.entries.iter())
                    .all(|(sorted, (key, _))| **sorted == **key)
        })?;
        let entries: Vec<Entry> = order
            .ordered
            .iter()
            .filter_map(|key| {
                let at = self
                    .entries
                    .binary_search_by(|(own, _)| (**own).cmp(key))
                    .ok()?;
                let (key, value) = self.entries.get(at)?;
                Some(Entry::new(&**key, &**value))
            })
            .collect();
        domain.lookup(&entries)
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
    use crate::config::load_valid;

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
        let rules = match crate::config::load_text("acme.yaml", text) {
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
