//! A rate-limit request as the core sees it, independent of the wire (gRPC or JSON), and the
//! checks every request must pass before it is decided.

use crate::arithmetic::algorithm::{CheckRule, Hits};
use crate::ground::unit::Unit;

/// One `(key, value)` pair of a request descriptor. An empty value is legal (Envoy sends one for
/// an empty header).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

impl Entry {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// `RateLimitRequest`: a domain and the descriptors Envoy built for one HTTP request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
    /// The request-wide `hits_addend`; 0 means 1.
    pub hits_addend: u32,
}

/// One `RateLimitDescriptor`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<Entry>,
    /// Envoy's `limit` override: used instead of the configured rule.
    pub limit_override: Option<LimitOverride>,
    /// Per-descriptor `hits_addend`; when set (even to 0) it wins over the request's.
    pub hits_addend: Option<u64>,
    /// The hits give budget back instead of taking it.
    pub is_negative_hits: bool,
}

/// `RateLimitDescriptor.RateLimitOverride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    pub requests_per_unit: u32,
    /// `None` when the wire said UNKNOWN (or a number no unit has): the request is refused.
    pub unit: Option<Unit>,
    pub unit_multiplier: Option<u32>,
}

/// Bounds on what one request may carry (`--max-descriptors`, `--max-entries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    pub max_descriptors: usize,
    pub max_entries: usize,
}

impl Default for RequestBounds {
    fn default() -> Self {
        Self {
            max_descriptors: 64,
            max_entries: 32,
        }
    }
}

/// Why a request cannot be decided. Each message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    #[error("rate limit domain must not be empty: set the ratelimit filter's `domain`")]
    EmptyDomain,
    #[error("rate limit descriptor list must not be empty: send at least one descriptor")]
    NoDescriptors,
    #[error("{count} descriptors in one request, more than the {max} allowed (--max-descriptors)")]
    TooManyDescriptors { count: usize, max: usize },
    #[error(
        "descriptor {descriptor} has {count} entries, more than the {max} allowed (--max-entries)"
    )]
    TooManyEntries {
        descriptor: usize,
        count: usize,
        max: usize,
    },
    #[error("descriptor {descriptor}, entry {entry}: the key is empty; every entry needs a key")]
    EmptyKey { descriptor: usize, entry: usize },
    #[error("descriptor {descriptor}: the limit override has unit UNKNOWN; use SECOND, MINUTE, HOUR, DAY, MONTH or YEAR")]
    UnknownOverrideUnit { descriptor: usize },
    #[error(
        "descriptor {descriptor}: the limit override has unit_multiplier 0; it must be at least 1"
    )]
    ZeroOverrideMultiplier { descriptor: usize },
    /// The store cannot count a limit the request brought (only an Envoy limit override can
    /// bring one past the configuration checks); `reason` is the store's.
    #[error("{reason}; a limit override must stay within what the store counts exactly: send a shorter window or a smaller limit")]
    UncountableLimit { reason: String },
}

impl Request {
    /// Checks everything that does not depend on the configuration.
    pub fn validate(&self, bounds: &RequestBounds) -> Result<(), InvalidRequest> {
        if self.domain.is_empty() {
            return Err(InvalidRequest::EmptyDomain);
        }
        if self.descriptors.is_empty() {
            return Err(InvalidRequest::NoDescriptors);
        }
        if self.descriptors.len() > bounds.max_descriptors {
            return Err(InvalidRequest::TooManyDescriptors {
                count: self.descriptors.len(),
                max: bounds.max_descriptors,
            });
        }
        for (index, descriptor) in self.descriptors.iter().enumerate() {
            descriptor.validate(index, bounds)?;
        }
        Ok(())
    }

    /// What `descriptor` does to its counters; a check-only one is judged by `check`.
    pub fn hits_for(&self, descriptor: &Descriptor, check: CheckRule) -> Hits {
        let amount = descriptor
            .hits_addend
            .unwrap_or_else(|| u64::from(self.hits_addend.max(1)));
        match (amount, descriptor.is_negative_hits) {
            (0, _) => Hits::CheckOnly(check),
            (n, true) => Hits::Refund(n),
            (n, false) => Hits::Charge(n),
        }
    }
}

impl Descriptor {
    pub fn new(entries: Vec<Entry>) -> Self {
        Self {
            entries,
            ..Self::default()
        }
    }

    fn validate(&self, index: usize, bounds: &RequestBounds) -> Result<(), InvalidRequest> {
        if self.entries.len() > bounds.max_entries {
            return Err(InvalidRequest::TooManyEntries {
                descriptor: index,
                count: self.entries.len(),
                max: bounds.max_entries,
            });
        }
        if let Some(entry) = self.entries.iter().position(|e| e.key.is_empty()) {
            return Err(InvalidRequest::EmptyKey {
                descriptor: index,
                entry,
            });
        }
        if let Some(limit) = &self.limit_override {
            if limit.unit.is_none() {
                return Err(InvalidRequest::UnknownOverrideUnit { descriptor: index });
            }
            if limit.unit_multiplier == Some(0) {
                return Err(InvalidRequest::ZeroOverrideMultiplier { descriptor: index });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(descriptors: Vec<Descriptor>) -> Request {
        Request {
            domain: "edge".into(),
            descriptors,
            hits_addend: 0,
        }
    }

    fn one_entry() -> Descriptor {
        Descriptor::new(vec![Entry::new("k", "v")])
    }

    #[test]
    fn refuses_what_cannot_be_decided() {
        let bounds = RequestBounds::default();
        let mut empty_domain = request(vec![one_entry()]);
        empty_domain.domain.clear();
        assert_eq!(
            empty_domain.validate(&bounds),
            Err(InvalidRequest::EmptyDomain)
        );
        assert_eq!(
            request(vec![]).validate(&bounds),
            Err(InvalidRequest::NoDescriptors)
        );
        let too_many = request(vec![one_entry(); 65]);
        assert_eq!(
            too_many.validate(&bounds),
            Err(InvalidRequest::TooManyDescriptors { count: 65, max: 64 })
        );
        let wide = request(vec![Descriptor::new(vec![Entry::new("k", "v"); 33])]);
        assert!(matches!(
            wide.validate(&bounds),
            Err(InvalidRequest::TooManyEntries { .. })
        ));
        let keyless = request(vec![Descriptor::new(vec![
            Entry::new("a", "1"),
            Entry::new("", "2"),
        ])]);
        assert_eq!(
            keyless.validate(&bounds),
            Err(InvalidRequest::EmptyKey {
                descriptor: 0,
                entry: 1
            })
        );
        let mut unknown_unit = one_entry();
        unknown_unit.limit_override = Some(LimitOverride {
            requests_per_unit: 5,
            unit: None,
            unit_multiplier: None,
        });
        assert_eq!(
            request(vec![one_entry(), unknown_unit]).validate(&bounds),
            Err(InvalidRequest::UnknownOverrideUnit { descriptor: 1 })
        );
    }

    #[test]
    fn empty_values_and_entryless_descriptors_are_legal() {
        let request = request(vec![
            Descriptor::new(vec![Entry::new("client_id", "")]),
            Descriptor::default(),
        ]);
        assert_eq!(request.validate(&RequestBounds::default()), Ok(()));
    }

    #[test]
    fn hits_follow_the_reference_rules() {
        let one_more = CheckRule::OneMoreFits;
        let mut req = request(vec![]);
        let mut d = one_entry();
        assert_eq!(req.hits_for(&d, one_more), Hits::Charge(1));
        req.hits_addend = 5;
        assert_eq!(req.hits_for(&d, one_more), Hits::Charge(5));
        d.hits_addend = Some(0);
        assert_eq!(req.hits_for(&d, one_more), Hits::CheckOnly(one_more));
        assert_eq!(
            req.hits_for(&d, CheckRule::WithinLimit),
            Hits::CheckOnly(CheckRule::WithinLimit)
        );
        d.hits_addend = Some(u64::MAX);
        assert_eq!(req.hits_for(&d, one_more), Hits::Charge(u64::MAX));
        d.is_negative_hits = true;
        d.hits_addend = Some(3);
        assert_eq!(req.hits_for(&d, one_more), Hits::Refund(3));
    }
}
