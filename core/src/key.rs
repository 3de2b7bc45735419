//! The identity of one counter as bytes that no two different counters can share: every field
//! is length-prefixed, so no value (whatever bytes it holds) can shift into the next field.
//! Stores hash these bytes into their own key format.

use super::algorithm::{Quota, Tiling};
use super::quota::BucketKey;
use super::rules::{Entry, MatchedLevel};

/// Builds the identity of the counter that limit `limit_index` of rule `rule_path` keeps for
/// the request's `entries`. Values matched by a `share_threshold` wildcard contribute the
/// pattern instead, so every matching value shares one counter.
///
/// The limit's size is not part of it, so editing `requests_per_unit` keeps the counter across a
/// reload; the algorithm and window are, because a state means nothing under another one.
pub fn counter_key(
    domain: &str,
    rule_path: &str,
    limit_index: usize,
    quota: &Quota,
    entries: &[Entry],
    levels: &[MatchedLevel<'_>],
) -> Vec<u8> {
    let mut key = Vec::with_capacity(
        64 + domain.len()
            + rule_path.len()
            + entries
                .iter()
                .map(|e| e.key.len() + e.value.len() + 8)
                .sum::<usize>(),
    );
    push_field(&mut key, domain.as_bytes());
    push_field(&mut key, rule_path.as_bytes());
    push_field(&mut key, quota.algorithm.name().as_bytes());
    key.extend_from_slice(&(limit_index as u64).to_le_bytes());
    key.extend_from_slice(&window_identity(quota).to_le_bytes());
    push_entries(&mut key, entries, levels);
    key
}

/// The entries' count, then each key and value (a shared wildcard's pattern in place of the
/// value, so every value it matches shares one counter).
fn push_entries(key: &mut Vec<u8>, entries: &[Entry], levels: &[MatchedLevel<'_>]) {
    key.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (index, entry) in entries.iter().enumerate() {
        push_field(key, entry.key.as_bytes());
        let value = match levels.get(index) {
            Some(MatchedLevel::Wildcard {
                pattern,
                shared: true,
            }) => pattern,
            _ => entry.value.as_str(),
        };
        push_field(key, value.as_bytes());
    }
}

/// The identity of the lease counter a concurrency rule `rule_path` keeps for the request's
/// `entries` (the lease and release entries left out): the same length-prefixed fields, named
/// apart from every rate counter by the algorithm field.
pub fn lease_key(
    domain: &str,
    rule_path: &str,
    entries: &[Entry],
    levels: &[MatchedLevel<'_>],
) -> Vec<u8> {
    let mut key = Vec::with_capacity(64 + domain.len() + rule_path.len());
    push_field(&mut key, domain.as_bytes());
    push_field(&mut key, rule_path.as_bytes());
    push_field(&mut key, b"concurrency");
    push_entries(&mut key, entries, levels);
    key
}

/// The identity of an RLQS bucket (`core::quota::BucketKey`, entries sorted by key) in
/// `domain`, under which the floodgates that share a store publish their demand on it: the
/// same length-prefixed fields, named apart from every counter by the algorithm field.
pub fn quota_bucket_key(domain: &str, bucket: &BucketKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(64 + domain.len());
    push_field(&mut key, domain.as_bytes());
    push_field(&mut key, b"rlqs");
    push_field(&mut key, b"quota-demand");
    let entries: Vec<(&str, &str)> = bucket.entries().collect();
    key.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (name, value) in entries {
        push_field(&mut key, name.as_bytes());
        push_field(&mut key, value.as_bytes());
    }
    key
}

/// The window in a counter's identity: its length in seconds, or, for calendar months, a number
/// above every length (at most 365 days × 2^32 ≈ 1.4e17 s), one per count of months. A state
/// means nothing under another tiling (a 30-day window's start is not a month's), so switching
/// `--calendar-months` starts those counters afresh; limits whose windows it does not move
/// (other units, rate algorithms) keep their identity.
fn window_identity(quota: &Quota) -> u64 {
    match quota.tiling() {
        Tiling::CalendarMonths { months } => u64::MAX - u64::from(months),
        Tiling::Epoch { .. } => quota.window_seconds(),
    }
}

fn push_field(key: &mut Vec<u8>, bytes: &[u8]) {
    key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    key.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit::Unit;

    fn key_of(entries: &[Entry]) -> Vec<u8> {
        let levels = vec![MatchedLevel::Default; entries.len()];
        counter_key(
            "d",
            "d.a",
            0,
            &Quota::new(1, Unit::Second),
            entries,
            &levels,
        )
    }

    #[test]
    fn separators_in_values_cannot_collide() {
        // The reference joins with `_`, so these two shared one counter there.
        let left = key_of(&[Entry::new("a_b", "c")]);
        let right = key_of(&[Entry::new("a", "b_c")]);
        assert_ne!(left, right);
        let two = key_of(&[Entry::new("a", "b"), Entry::new("c", "d")]);
        let one = key_of(&[Entry::new("a", "b\0\0\0\0\0\0\0\x01c\0\0\0\0\0\0\0\x01d")]);
        assert_ne!(two, one);
    }

    #[test]
    fn shared_wildcards_use_the_pattern() {
        let quota = Quota::new(1, Unit::Second);
        let shared = [MatchedLevel::Wildcard {
            pattern: "files/*",
            shared: true,
        }];
        let a = counter_key(
            "d",
            "p",
            0,
            &quota,
            &[Entry::new("path", "files/a")],
            &shared,
        );
        let b = counter_key(
            "d",
            "p",
            0,
            &quota,
            &[Entry::new("path", "files/b")],
            &shared,
        );
        assert_eq!(a, b);
        let own = [MatchedLevel::Wildcard {
            pattern: "files/*",
            shared: false,
        }];
        let c = counter_key("d", "p", 0, &quota, &[Entry::new("path", "files/a")], &own);
        let d = counter_key("d", "p", 0, &quota, &[Entry::new("path", "files/b")], &own);
        assert_ne!(c, d);
    }

    #[test]
    fn calendar_months_are_a_window_of_their_own() {
        let entries = [Entry::new("k", "v")];
        let levels = [MatchedLevel::Exact];
        let key = |quota: &Quota| counter_key("d", "p", 0, quota, &entries, &levels);
        let thirty_days = Quota::new(9, Unit::Month);
        let calendar = thirty_days.clone().with_calendar_months(true);
        let quarters = calendar.clone().with_multiplier(3);
        assert_ne!(key(&thirty_days), key(&calendar));
        assert_ne!(key(&calendar), key(&quarters));
        assert_ne!(key(&quarters), key(&thirty_days.clone().with_multiplier(3)));
        // Unchanged where calendar months change nothing: a token bucket refills as before.
        let bucket = |calendar_months| {
            Quota::new(9, Unit::Month)
                .with_algorithm(crate::algorithm::Algorithm::TokenBucket)
                .with_calendar_months(calendar_months)
        };
        assert_eq!(key(&bucket(true)), key(&bucket(false)));
    }

    #[test]
    fn the_limit_size_is_not_part_of_the_identity() {
        let entries = [Entry::new("k", "v")];
        let levels = [MatchedLevel::Exact];
        let small = counter_key("d", "p", 0, &Quota::new(1, Unit::Minute), &entries, &levels);
        let large = counter_key("d", "p", 0, &Quota::new(9, Unit::Minute), &entries, &levels);
        let hourly = counter_key("d", "p", 0, &Quota::new(9, Unit::Hour), &entries, &levels);
        assert_eq!(small, large);
        assert_ne!(small, hourly);
    }
}
