//! Where a counter lives in Redis:
//!
//! ```text
//! <prefix>{<domain>}:<rule>:<counter>                          --redis-hash-tag domain (default)
//! <prefix>{<domain>:<descriptor>}:<rule>:<counter>             --redis-hash-tag descriptor
//! floodgate:{edge}:9c1e0b7f5a3d2e48:4f7a…(32 hex digits)
//! floodgate:{edge:5d0c33a1e27f9b64}:9c1e0b7f5a3d2e48:4f7a…
//! ```
//!
//! * `prefix`: configurable, `floodgate:` by default; printable ASCII without braces or spaces.
//! * `{…}`: the Redis Cluster hash tag. Cluster places a key by the CRC16 of the text between
//!   the first `{` and the next `}` only, and one script call may only touch keys of one slot.
//!   [`HashTag`] chooses what goes inside:
//!   * `domain` (the default): the request's domain, sanitized (bytes outside
//!     `[A-Za-z0-9._-]` become `_`, at most 64 bytes, never empty). A request has exactly one
//!     domain, so all its keys share one slot: one script call decides the whole request all
//!     or nothing, on Cluster too. The cost: one domain's counters all live on one shard.
//!   * `descriptor`: the domain, then 64 bits of SHA-256 of what identifies one descriptor of
//!     one rule (domain, rule path and the descriptor's entries; not the limit index, algorithm
//!     or window, so every limit of one descriptor shares its slot). A domain's counters spread
//!     over every shard. On Cluster a request's keys are grouped by slot and each group is one
//!     script call (`slot.rs`): each group is all or nothing, but across groups a rejected
//!     request may already have charged the groups that admitted it — an over-count, never an
//!     under-count. Counters in `quota_mode` keep the domain tag even here: a request is over
//!     its quota only when every quota descriptor is, which one call can judge only if it sees
//!     them all, so they always share the domain's slot.
//!
//!   A sanitized domain may coincide with another's: that only puts both in one slot, the
//!   counter hash below still tells them apart. Changing the tag (or a rule's `quota_mode`
//!   under `descriptor`) moves counters to new keys: they start afresh.
//! * `<rule>`: the first 64 bits of SHA-256 of the rule's config path, in hex, so one rule's
//!   counters can be found (`SCAN MATCH floodgate:{edge*}:<rule>:*`). Hashed, not written out:
//!   a config path holds config values (`api_key_<value>`), which may be secrets.
//! * `<counter>`: the first 128 bits of SHA-256 of the whole counter identity
//!   (`core::decision::key::counter_key`: domain, rule path, algorithm, limit index, window and the
//!   descriptor's entries, each length-prefixed), in hex. No descriptor value (an IP, an API
//!   key) is stored in the clear, no value can change the layout or reach another key, and
//!   every instance derives the same key. The hash is not keyed: a guessable value (an IPv4
//!   address) can be confirmed by hashing guesses, which is fine for keeping it out of sight,
//!   not for keeping it secret from someone who can read Redis.

use std::cell::RefCell;

use sha2::{Digest, Sha256};

use crate::core::decision::plan::Counter;
use crate::core::ground::verdict::Role;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "floodgate:";

/// The longest prefix accepted: keys stay short and cheap to hash.
const MAX_PREFIX_LEN: usize = 128;

/// How much of the domain a key shows.
const MAX_DOMAIN_LEN: usize = 64;

/// Bytes of the rule path's digest a key shows (64 bits: the rules of one domain never collide
/// in practice, and a collision would only make `SCAN` by rule show two rules' counters).
const RULE_DIGEST_BYTES: usize = 8;

/// Bytes of the identity's digest a key shows (128 bits: no collision among any number of
/// counters a Redis can hold).
const COUNTER_DIGEST_BYTES: usize = 16;

/// Bytes of a descriptor's digest in a `descriptor` hash tag (64 bits: the tag only spreads
/// load, and two descriptors that share a slot lose nothing).
const DESCRIPTOR_DIGEST_BYTES: usize = 8;

/// What a key's Redis Cluster hash tag holds (`--redis-hash-tag`; see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HashTag {
    /// `{<domain>}`: a request's keys share one slot; one call decides it all or nothing.
    #[default]
    Domain,
    /// `{<domain>:<descriptor digest>}`: a domain's counters spread over the shards; a request
    /// is decided by one call per slot group, each all or nothing.
    Descriptor,
}

impl HashTag {
    pub fn name(self) -> &'static str {
        match self {
            Self::Domain => "domain",
            Self::Descriptor => "descriptor",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPrefix {
    #[error("the Redis key prefix is longer than {MAX_PREFIX_LEN} bytes")]
    TooLong,
    #[error(
        "the Redis key prefix may hold only printable ASCII without spaces, `{{` or `}}` \
         (braces would change the Cluster hash tag)"
    )]
    BadByte,
}

/// Turns counter identities into Redis keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
    hash_tag: HashTag,
}

impl KeyLayout {
    pub fn new(prefix: &str) -> Result<Self, InvalidPrefix> {
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(InvalidPrefix::TooLong);
        }
        let allowed = |byte: u8| byte.is_ascii_graphic() && byte != b'{' && byte != b'}';
        if !prefix.bytes().all(allowed) {
            return Err(InvalidPrefix::BadByte);
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            hash_tag: HashTag::Domain,
        })
    }

    /// This layout with `hash_tag` in place of the default `domain` tag.
    pub fn with_hash_tag(mut self, hash_tag: HashTag) -> Self {
        self.hash_tag = hash_tag;
        self
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn hash_tag(&self) -> HashTag {
        self.hash_tag
    }

    /// The key of `counter`: quota-mode counters always carry the domain tag (module doc).
    pub fn key_of(&self, counter: &Counter) -> String {
        let hash_tag = match counter.role {
            Role::Quota => HashTag::Domain,
            Role::Enforced | Role::Shadow => self.hash_tag,
        };
        self.key(&counter.key, hash_tag)
    }

    /// The key of a counter not in quota mode whose identity (`Counter::key`) is `identity`.
    pub fn key_for(&self, identity: &[u8]) -> String {
        self.key(identity, self.hash_tag)
    }

    /// The key of an identity that must always carry the domain's hash tag, whatever
    /// `--redis-hash-tag` says: a lease counter (`core::decision::key::lease_key`), so a request's lease
    /// calls share one slot, and an RLQS bucket (`core::decision::key::quota_bucket_key`), so one
    /// domain's buckets go in one exchange call.
    pub fn domain_key_for(&self, identity: &[u8]) -> String {
        self.key(identity, HashTag::Domain)
    }

    fn key(&self, identity: &[u8], hash_tag: HashTag) -> String {
        let (domain, rule_path) = leading_fields(identity).unwrap_or((b"", b""));
        let mut key = String::with_capacity(
            self.prefix.len()
                + MAX_DOMAIN_LEN
                + 5
                + 2 * (DESCRIPTOR_DIGEST_BYTES + RULE_DIGEST_BYTES + COUNTER_DIGEST_BYTES),
        );
        key.push_str(&self.prefix);
        key.push('{');
        push_sanitized(&mut key, domain);
        if hash_tag == HashTag::Descriptor {
            key.push(':');
            push_hex(
                &mut key,
                &descriptor_digest(identity)[..DESCRIPTOR_DIGEST_BYTES],
            );
        }
        key.push_str("}:");
        push_hex(&mut key, &rule_digest(rule_path));
        key.push(':');
        push_hex(&mut key, &Sha256::digest(identity)[..COUNTER_DIGEST_BYTES]);
        key
    }
}

/// How many rule paths' digests each thread remembers.
const REMEMBERED_RULES: usize = 8;

/// A rule path and the first bytes of its digest.
type RuleDigest = (Box<[u8]>, [u8; RULE_DIGEST_BYTES]);

thread_local! {
    /// The digests of the rule paths this thread made keys for last, the latest first.
    static RULE_DIGESTS: RefCell<Vec<RuleDigest>> = const { RefCell::new(Vec::new()) };
}

/// The first [`RULE_DIGEST_BYTES`] of SHA-256(`rule_path`), computed once per rule and
/// thread rather than for every key: a worker's decisions come from a few rules, and a
/// lookup among the last [`REMEMBERED_RULES`] costs less than the digest.
fn rule_digest(rule_path: &[u8]) -> [u8; RULE_DIGEST_BYTES] {
    RULE_DIGESTS.with_borrow_mut(|remembered| {
        if let Some(at) = remembered.iter().position(|(path, _)| **path == *rule_path) {
            if let Some(latest) = remembered.get_mut(..=at) {
                latest.rotate_right(1);
            }
            if let Some((_, digest)) = remembered.first() {
                return *digest;
            }
        }
        let mut digest = [0; RULE_DIGEST_BYTES];
        digest.copy_from_slice(&Sha256::digest(rule_path)[..RULE_DIGEST_BYTES]);
        remembered.truncate(REMEMBERED_RULES - 1);
        remembered.insert(0, (rule_path.into(), digest));
        digest
    })
}

/// The domain and rule path that `core::decision::key::counter_key` writes first, each as a
/// little-endian u64 length and the bytes. `None` if the identity is not shaped so; the key
/// is still unique (the whole identity is hashed), it just shows an empty domain.
fn leading_fields(identity: &[u8]) -> Option<(&[u8], &[u8])> {
    let (domain, rest) = length_prefixed(identity)?;
    let (rule_path, _) = length_prefixed(rest)?;
    Some((domain, rule_path))
}

/// The digest of what `core::decision::key::counter_key` writes for one descriptor of one rule: the
/// domain and rule path, then the entries; the algorithm, limit index and window between them
/// are left out, so every limit of a descriptor gets one digest. An identity not shaped so is
/// hashed whole.
fn descriptor_digest(identity: &[u8]) -> sha2::digest::Output<Sha256> {
    let fields = || {
        let (_, rest) = length_prefixed(identity)?;
        let (_, rest) = length_prefixed(rest)?;
        let domain_and_rule = &identity[..identity.len() - rest.len()];
        let (_, rest) = length_prefixed(rest)?;
        // The limit index and the window, a little-endian u64 each.
        let entries = rest.get(16..)?;
        Some((domain_and_rule, entries))
    };
    match fields() {
        Some((domain_and_rule, entries)) => Sha256::new()
            .chain_update(domain_and_rule)
            .chain_update(entries)
            .finalize(),
        None => Sha256::digest(identity),
    }
}

fn length_prefixed(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (length, rest) = bytes.split_first_chunk::<8>()?;
    let length = usize::try_from(u64::from_le_bytes(*length)).ok()?;
    (length <= rest.len()).then(|| rest.split_at(length))
}

fn push_sanitized(key: &mut String, domain: &[u8]) {
    if domain.is_empty() {
        // `{}` is no hash tag at all: Cluster would hash the whole key.
        key.push('_');
        return;
    }
    let shown = &domain[..domain.len().min(MAX_DOMAIN_LEN)];
    let kept = |byte: &u8| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-');
    // A domain is nearly always kept whole: then it is copied at once, not byte by byte.
    match std::str::from_utf8(shown) {
        Ok(text) if shown.iter().all(kept) => key.push_str(text),
        _ => key.extend(
            shown
                .iter()
                .map(|byte| if kept(byte) { char::from(*byte) } else { '_' }),
        ),
    }
}

fn push_hex(key: &mut String, bytes: &[u8]) {
    // Not `write!("{byte:02x}")`: the formatter cost a decision about 0.25 µs of floodgate's
    // CPU in Redis mode, a sixtieth of it (perf, 2026-12-04).
    let mut digits = [0u8; 2 * COUNTER_DIGEST_BYTES];
    for chunk in bytes.chunks(COUNTER_DIGEST_BYTES) {
        let digits = &mut digits[..2 * chunk.len()];
        // Hex digits are ASCII: both steps always succeed.
        let text = hex::encode_to_slice(chunk, digits)
            .ok()
            .and_then(|()| std::str::from_utf8(digits).ok());
        key.push_str(text.unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arithmetic::algorithm::{Algorithm, Quota, Share};
    use crate::core::decision::key::counter_key;
    use crate::core::ground::unit::Unit;
    use crate::core::policy::request::Entry;
    use crate::core::policy::rules::MatchedLevel;

    fn identity(domain: &str, path: &str, entries: &[Entry]) -> Vec<u8> {
        let levels = vec![MatchedLevel::Default; entries.len()];
        let quota = Quota::new(10, Unit::Second);
        counter_key(domain, path, 0, &quota, entries, &levels)
    }

    /// Rule `edge.remote_address`'s counter for 10.0.0.1.
    fn remote_address_identity() -> Vec<u8> {
        identity(
            "edge",
            "edge.remote_address",
            &[Entry::new("remote_address", "10.0.0.1")],
        )
    }

    fn layout() -> KeyLayout {
        KeyLayout::new(DEFAULT_PREFIX).expect("the default prefix is valid")
    }

    #[test]
    fn remembered_rule_digests_are_each_rules_own() {
        let paths: Vec<String> = (0..REMEMBERED_RULES + 3)
            .map(|rule| format!("edge.rule_{rule}"))
            .collect();
        // Round after round, past what a thread remembers, then the latest again.
        for path in paths.iter().chain(&paths).chain(paths.iter().rev()) {
            let digest = &Sha256::digest(path.as_bytes())[..RULE_DIGEST_BYTES];
            assert_eq!(rule_digest(path.as_bytes()), digest, "{path}");
        }
    }

    #[test]
    fn reads_domain_and_rule_path_from_core_identities() {
        let id = remote_address_identity();
        assert_eq!(
            leading_fields(&id),
            Some((&b"edge"[..], &b"edge.remote_address"[..]))
        );
    }

    #[test]
    fn key_shows_prefix_domain_tag_and_hashes_only() {
        let id = remote_address_identity();
        let key = layout().key_for(&id);
        assert!(key.starts_with("floodgate:{edge}:"), "{key}");
        assert!(
            !key.contains("10.0.0.1") && !key.contains("remote_address"),
            "{key}"
        );
        let parts: Vec<&str> = key.splitn(3, ':').collect();
        assert_eq!(parts.len(), 3);
        let hashes: Vec<&str> = parts[2].split(':').collect();
        assert_eq!(hashes.len(), 2);
        assert_eq!(hashes[0].len(), 2 * RULE_DIGEST_BYTES);
        assert_eq!(hashes[1].len(), 2 * COUNTER_DIGEST_BYTES);
        assert!(parts[2].bytes().all(|b| b == b':' || b.is_ascii_hexdigit()));
    }

    /// Counters outlive a version: a rolling upgrade's old and new pods must name each counter
    /// alike, or each would count apart. The key of one identity, written by an earlier version.
    #[test]
    fn a_counters_key_is_what_earlier_versions_wrote() {
        let id = remote_address_identity();
        assert_eq!(
            layout().key_for(&id),
            "floodgate:{edge}:d08d560d1bfac05b:00812f599da81b4945ff5d37958ffadd"
        );
        let tagged = KeyLayout::new(DEFAULT_PREFIX)
            .expect("the default prefix is valid")
            .with_hash_tag(HashTag::Descriptor);
        assert_eq!(
            tagged.key_for(&id),
            "floodgate:{edge:cd7942fff139de0e}:d08d560d1bfac05b:00812f599da81b4945ff5d37958ffadd"
        );
    }

    #[test]
    fn key_is_stable_and_distinct() {
        let a = identity("edge", "edge.k", &[Entry::new("k", "a")]);
        let b = identity("edge", "edge.k", &[Entry::new("k", "b")]);
        assert_eq!(layout().key_for(&a), layout().key_for(&a));
        assert_ne!(layout().key_for(&a), layout().key_for(&b));
        // Same rule, same rule digest: SCAN by rule works.
        let rule_of = |key: String| key.split(':').nth(2).map(str::to_owned);
        assert_eq!(rule_of(layout().key_for(&a)), rule_of(layout().key_for(&b)));
    }

    #[test]
    fn hostile_domains_cannot_break_the_hash_tag() {
        let id = identity("a}b{c d:\u{e9}", "p", &[]);
        let key = layout().key_for(&id);
        assert!(key.starts_with("floodgate:{a_b_c_d___}:"), "{key}");
        assert_eq!(key.matches('{').count(), 1);
        assert_eq!(key.matches('}').count(), 1);

        let long = "d".repeat(500);
        let key = layout().key_for(&identity(&long, "p", &[]));
        assert!(key.starts_with(&format!("floodgate:{{{}}}:", "d".repeat(MAX_DOMAIN_LEN))));

        let key = layout().key_for(&identity("", "p", &[]));
        assert!(key.starts_with("floodgate:{_}:"), "{key}");
    }

    #[test]
    fn odd_identities_still_get_a_unique_key() {
        let key = layout().key_for(b"short");
        assert!(key.starts_with("floodgate:{_}:"), "{key}");
        assert_ne!(key, layout().key_for(b"shorter"));
        let lying_length = [255u8; 20];
        assert!(leading_fields(&lying_length).is_none());
    }

    #[test]
    fn prefixes_are_checked() {
        assert_eq!(
            KeyLayout::new("rl:").map(|l| l.key_for(b"x").starts_with("rl:{")),
            Ok(true)
        );
        assert_eq!(
            KeyLayout::new(""),
            Ok(KeyLayout {
                prefix: String::new(),
                hash_tag: HashTag::Domain,
            })
        );
        assert_eq!(KeyLayout::new("a{b"), Err(InvalidPrefix::BadByte));
        assert_eq!(KeyLayout::new("a b"), Err(InvalidPrefix::BadByte));
        assert_eq!(KeyLayout::new("é"), Err(InvalidPrefix::BadByte));
        assert_eq!(
            KeyLayout::new(&"x".repeat(129)),
            Err(InvalidPrefix::TooLong)
        );
    }

    fn tag_of(key: &str) -> &str {
        let open = key.find('{').unwrap_or(0);
        let close = key.find('}').unwrap_or(key.len());
        &key[open..=close.min(key.len() - 1)]
    }

    #[test]
    fn descriptor_tags_share_a_descriptors_limits_and_spread_the_rest() {
        let spread = layout().with_hash_tag(HashTag::Descriptor);
        let entries = [Entry::new("remote_address", "10.0.0.1")];
        let levels = [MatchedLevel::Exact];
        let minute = Quota::new(10, Unit::Minute);
        let hour = Quota::new(100, Unit::Hour).with_algorithm(Algorithm::SlidingWindow);
        let first = counter_key("edge", "edge.ip", 0, &minute, &entries, &levels);
        let second = counter_key("edge", "edge.ip", 1, &hour, &entries, &levels);
        let (a, b) = (spread.key_for(&first), spread.key_for(&second));
        assert_ne!(a, b);
        assert_eq!(tag_of(&a), tag_of(&b), "{a} {b}");
        assert!(a.starts_with("floodgate:{edge:"), "{a}");
        assert_eq!(
            tag_of(&a).len(),
            "{edge:}".len() + 2 * DESCRIPTOR_DIGEST_BYTES
        );

        let other_value = [Entry::new("remote_address", "10.0.0.2")];
        let third = counter_key("edge", "edge.ip", 0, &minute, &other_value, &levels);
        assert_ne!(tag_of(&a), tag_of(&spread.key_for(&third)));
        let other_rule = counter_key("edge", "edge.ip2", 0, &minute, &entries, &levels);
        assert_ne!(tag_of(&a), tag_of(&spread.key_for(&other_rule)));
        let other_domain = counter_key("edge2", "edge.ip", 0, &minute, &entries, &levels);
        assert_ne!(tag_of(&a), tag_of(&spread.key_for(&other_domain)));

        // The tag is the only change: the rule and counter digests stay as they were.
        let domain_key = layout().key_for(&first);
        assert_eq!(
            a.split_once("}:").map(|(_, rest)| rest),
            domain_key.split_once("}:").map(|(_, rest)| rest)
        );
        assert_eq!(tag_of(&domain_key), "{edge}");
    }

    #[test]
    fn quota_counters_keep_the_domain_tag() {
        let spread = layout().with_hash_tag(HashTag::Descriptor);
        let id = identity("edge", "edge.k", &[Entry::new("k", "v")]);
        let counter = |role| Counter {
            descriptor: 0,
            key: id.clone(),
            quota: Quota::new(1, Unit::Second),
            hits: crate::core::arithmetic::algorithm::Hits::Charge(1),
            role,
            share: Share::FULL,
        };
        assert_eq!(spread.key_of(&counter(Role::Quota)), layout().key_for(&id));
        assert_eq!(spread.key_of(&counter(Role::Enforced)), spread.key_for(&id));
        assert_eq!(spread.key_of(&counter(Role::Shadow)), spread.key_for(&id));
        assert_eq!(
            layout().key_of(&counter(Role::Enforced)),
            layout().key_for(&id)
        );
    }

    #[test]
    fn odd_identities_get_a_descriptor_tag_too() {
        let spread = layout().with_hash_tag(HashTag::Descriptor);
        let key = spread.key_for(b"short");
        assert!(key.starts_with("floodgate:{_:"), "{key}");
        assert_ne!(tag_of(&key), tag_of(&spread.key_for(b"shorter")));
    }
}
