//! The reference's cache key, its `src/limiter/cache_key.go` `GenerateCacheKey` (lines 62-82):
//!
//! ```text
//! CACHE_KEY_PREFIX + domain + "_" + (key + "_" + value + "_")… + window start
//! prefix:domain_key1_value1_key2_value2_1234
//! ```
//!
//! with a `share_threshold` wildcard's pattern in place of the value it matched (lines 69-76),
//! so every value it matches shares the key. Nothing is escaped: `_` inside a key or a value
//! reads like the separator.

use crate::decision::key::counter_name;

/// The reference's key for `entries` (key, value or shared pattern) of `domain`, in the window
/// starting at `window_start` (Unix seconds).
pub fn cache_key<'a>(
    prefix: &str,
    domain: &str,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    window_start: i64,
) -> String {
    let mut key = String::with_capacity(prefix.len() + domain.len() + 64);
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    for (name, value) in entries {
        key.push_str(name);
        key.push('_');
        key.push_str(value);
        key.push('_');
    }
    key.push_str(&window_start.to_string());
    key
}

/// The reference's key of the counter whose identity is `identity` (`Counter::key`, which holds
/// the domain and the entries with shared patterns already in place); `None` when the identity
/// is not a rate counter's.
pub fn cache_key_of(prefix: &str, identity: &[u8], window_start: i64) -> Option<String> {
    let name = counter_name(identity)?;
    Some(cache_key(
        prefix,
        name.domain,
        name.entries.iter().copied(),
        window_start,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arithmetic::algorithm::Quota;
    use crate::decision::key::counter_key;
    use crate::ground::unit::Unit;
    use crate::policy::request::Entry;
    use crate::policy::rules::MatchedLevel;

    #[test]
    fn keys_are_the_references() {
        // test/limiter/base_limiter_test.go: TestGenerateCacheKeys, TestGenerateCacheKeysPrefix.
        assert_eq!(
            cache_key("", "domain", [("key", "value")], 1234),
            "domain_key_value_1234"
        );
        assert_eq!(
            cache_key("prefix:", "domain", [("key", "value")], 1234),
            "prefix:domain_key_value_1234"
        );
        // test/redis/fixed_cache_impl_test.go: TestRedis, nested.
        assert_eq!(
            cache_key(
                "",
                "domain",
                [("key2", "value2"), ("subkey2", "subvalue2")],
                1200
            ),
            "domain_key2_value2_subkey2_subvalue2_1200"
        );
    }

    #[test]
    fn shared_patterns_replace_values() {
        // TestGenerateCacheKeysWithShareThreshold, test 3: the second level shares.
        let levels = [
            MatchedLevel::Exact,
            MatchedLevel::Wildcard {
                pattern: "nested/*",
                shared: true,
            },
        ];
        let identity = counter_key(
            "domain",
            "domain.parent.files",
            0,
            &Quota::new(10, Unit::Second),
            &[
                Entry::new("parent", "value1"),
                Entry::new("files", "nested/file1.txt"),
            ],
            &levels,
        );
        assert_eq!(
            cache_key_of("", &identity, 1234).as_deref(),
            Some("domain_parent_value1_files_nested/*_1234")
        );
    }

    #[test]
    fn underscores_collide_as_in_the_reference() {
        let left = cache_key("", "d", [("a_b", "c")], 60);
        let right = cache_key("", "d", [("a", "b_c")], 60);
        assert_eq!(left, right);
        assert_eq!(left, "d_a_b_c_60");
    }
}
