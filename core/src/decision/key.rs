//! The identity of one counter as bytes that no two different counters can share: every field
//! is length-prefixed, so no value (whatever bytes it holds) can shift into the next field.
//! Stores hash these bytes into their own key format.

use crate::arithmetic::algorithm::{Quota, Tiling};
use crate::policy::request::Entry;
use crate::policy::rlqs::BucketKey;
use crate::policy::rules::MatchedLevel;

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
    let algorithm = quota.algorithm.name().as_bytes();
    let rest = NUMBER * 2 + entries_size(entries, levels);
    let mut key = identity_opening(domain, rule_path.as_bytes(), algorithm, rest);
    key.extend_from_slice(&(limit_index as u64).to_le_bytes());
    key.extend_from_slice(&window_identity(quota).to_le_bytes());
    push_entries(&mut key, entries, levels);
    key
}

/// What a counter identity ([`counter_key`]) names, read back: its domain and its entries, a
/// shared wildcard's pattern in place of the value. A store that writes keys of another layout
/// (envoyproxy/ratelimit's, `crate::decision::reference_cache`) builds them from this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterName<'a> {
    pub domain: &'a str,
    /// (key, value) in the descriptor's order.
    pub entries: Vec<(&'a str, &'a str)>,
}

/// Reads back what [`counter_key`] wrote; `None` for bytes it did not write (a lease or RLQS
/// identity, or anything else).
pub fn counter_name(identity: &[u8]) -> Option<CounterName<'_>> {
    let mut reader = FieldReader { rest: identity };
    let domain = reader.text()?;
    let _rule_path = reader.field()?;
    let _algorithm = reader.field()?;
    let _limit_index = reader.number()?;
    let _window = reader.number()?;
    let count = usize::try_from(reader.number()?).ok()?;
    // Each entry takes at least two 8-byte lengths: a count beyond that is not ours.
    if count > reader.rest.len() / 16 {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push((reader.text()?, reader.text()?));
    }
    reader
        .rest
        .is_empty()
        .then_some(CounterName { domain, entries })
}

/// Walks the length-prefixed fields [`push_field`] writes.
struct FieldReader<'a> {
    rest: &'a [u8],
}

impl<'a> FieldReader<'a> {
    fn number(&mut self) -> Option<u64> {
        let (head, rest) = self.rest.split_first_chunk::<8>()?;
        self.rest = rest;
        Some(u64::from_le_bytes(*head))
    }

    fn field(&mut self) -> Option<&'a [u8]> {
        let length = usize::try_from(self.number()?).ok()?;
        let (field, rest) = self.rest.split_at_checked(length)?;
        self.rest = rest;
        Some(field)
    }

    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.field()?).ok()
    }
}

/// The entries' count, then each key and value (a shared wildcard's pattern in place of the
/// value, so every value it matches shares one counter).
fn push_entries(key: &mut Vec<u8>, entries: &[Entry], levels: &[MatchedLevel<'_>]) {
    key.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (index, entry) in entries.iter().enumerate() {
        push_field(key, entry.key.as_bytes());
        push_field(key, counted_value(entry, levels.get(index)).as_bytes());
    }
}

/// The bytes [`push_entries`] writes.
fn entries_size(entries: &[Entry], levels: &[MatchedLevel<'_>]) -> usize {
    let fields: usize = entries
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            FIELD * 2 + entry.key.len() + counted_value(entry, levels.get(index)).len()
        })
        .sum();
    NUMBER + fields
}

/// The value an entry's counter is kept under: a shared wildcard's pattern, else its own.
fn counted_value<'a>(entry: &'a Entry, level: Option<&'a MatchedLevel<'_>>) -> &'a str {
    match level {
        Some(MatchedLevel::Wildcard {
            pattern,
            shared: true,
        }) => pattern,
        _ => entry.value.as_str(),
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
    let rest = entries_size(entries, levels);
    let mut key = identity_opening(domain, rule_path.as_bytes(), b"concurrency", rest);
    push_entries(&mut key, entries, levels);
    key
}

/// The identity of an RLQS bucket (`core::policy::rlqs::BucketKey`, entries sorted by key) in
/// `domain`, under which the floodgates that share a store publish their demand on it: the
/// same length-prefixed fields, named apart from every counter by the algorithm field.
pub fn quota_bucket_key(domain: &str, bucket: &BucketKey) -> Vec<u8> {
    let entries: Vec<(&str, &str)> = bucket.entries().collect();
    let rest = NUMBER
        + entries
            .iter()
            .map(|(name, value)| FIELD * 2 + name.len() + value.len())
            .sum::<usize>();
    let mut key = identity_opening(domain, b"rlqs", b"quota-demand", rest);
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

/// The three fields every identity opens with (its domain, its rule path, what it counts), in
/// a vector with room for exactly `rest` bytes more, so the identity is written once: a guess
/// short of it grows the vector mid-way, a second allocation and a copy on every decision.
fn identity_opening(domain: &str, rule_path: &[u8], counts: &[u8], rest: usize) -> Vec<u8> {
    let capacity = FIELD * 3 + domain.len() + rule_path.len() + counts.len() + rest;
    let mut key = Vec::with_capacity(capacity);
    push_field(&mut key, domain.as_bytes());
    push_field(&mut key, rule_path);
    push_field(&mut key, counts);
    key
}

/// A number's bytes in an identity (little-endian u64), and a field's length prefix.
const NUMBER: usize = 8;
/// What a field takes besides its bytes.
const FIELD: usize = NUMBER;

fn push_field(key: &mut Vec<u8>, bytes: &[u8]) {
    key.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    key.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground::unit::Unit;

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
    fn identities_are_written_into_the_room_made_for_them() {
        let quota = Quota::new(1, Unit::Second);
        let entries = [
            Entry::new("generic_key", "api"),
            Entry::new("client_id", "alice"),
        ];
        let shared = [
            MatchedLevel::Default,
            MatchedLevel::Wildcard {
                pattern: "al*",
                shared: true,
            },
        ];
        for levels in [&shared[..], &[]] {
            let key = counter_key("edge", "edge.generic_key_api", 1, &quota, &entries, levels);
            assert_eq!(key.len(), key.capacity());
            let lease = lease_key("edge", "edge.generic_key_api", &entries, levels);
            assert_eq!(lease.len(), lease.capacity());
        }
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
                .with_algorithm(crate::arithmetic::algorithm::Algorithm::TokenBucket)
                .with_calendar_months(calendar_months)
        };
        assert_eq!(key(&bucket(true)), key(&bucket(false)));
    }

    #[test]
    fn a_counter_identity_reads_back_its_domain_and_entries() {
        let shared = [
            MatchedLevel::Exact,
            MatchedLevel::Wildcard {
                pattern: "files/*",
                shared: true,
            },
        ];
        let identity = counter_key(
            "edge",
            "edge.tenant.path",
            1,
            &Quota::new(5, Unit::Hour),
            &[Entry::new("tenant", "acme"), Entry::new("path", "files/a")],
            &shared,
        );
        let name = counter_name(&identity).unwrap_or_else(|| panic!("not read back"));
        assert_eq!(name.domain, "edge");
        assert_eq!(name.entries, [("tenant", "acme"), ("path", "files/*")]);
        let none = counter_key("d", "d", 0, &Quota::new(1, Unit::Second), &[], &[]);
        assert_eq!(counter_name(&none).map(|name| name.entries.len()), Some(0));
    }

    #[test]
    fn other_bytes_are_not_read_as_a_counter() {
        let identity = key_of(&[Entry::new("k", "v")]);
        assert!(counter_name(&identity[..identity.len() - 1]).is_none());
        let mut longer = identity.clone();
        longer.push(0);
        assert!(counter_name(&longer).is_none());
        assert!(counter_name(&lease_key("d", "d.k", &[Entry::new("k", "v")], &[])).is_none());
        assert!(counter_name(b"").is_none());
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
