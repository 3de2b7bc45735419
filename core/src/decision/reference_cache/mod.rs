//! envoyproxy/ratelimit's counters in Redis, written as its code writes them, so that its pods
//! and floodgate's count together on one Redis: during a rolling swap from one to the other a
//! limit stays one limit, and no budget starts afresh at the swap.
//!
//! The reference keeps one Redis string per descriptor and window, named by
//! [`cache_key`] (its `src/limiter/cache_key.go`), and counts with `INCRBY key hits` then
//! `EXPIRE key seconds` on every call, pipelined (its `src/redis/fixed_cache_impl.go`), the
//! expiry a whole window plus a random jitter ([`ReferenceWindow::expiration_seconds`]). It
//! decides from the count `INCRBY` returns: over iff that count passes the limit
//! ([`outcome_of`]; the request's verdict is every store's, `response::Decided::from_outcomes`).
//! With `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` (all-or-refused charging) it reads every
//! key first and, when any descriptor would go over, increments only those
//! ([`stop_increments`]). Those are the only keys and the only arithmetic here; the store sends
//! the commands.
//!
//! Only what the reference can count is counted so ([`counts_under_reference_key`]): a fixed
//! window of one whole unit, the only limit of its descriptor, outside any priority class,
//! counted in Redis on every call (not `counting: hybrid`).
//! Rules that use floodgate's own extensions keep floodgate's keys, which a reference pod
//! could not share anyway.
//!
//! The reference's layout joins keys and values with `_`, so `("a_b", "c")` and
//! `("a", "b_c")` name one key and share one count. That comes with sharing its counters.

mod counts;
mod key;
mod stop_increment;
mod window;

pub use counts::{outcome_of, ReferenceHits};
pub use key::{cache_key, cache_key_of};
pub use stop_increment::{stop_increments, Read};
pub use window::{unit_to_divider, ReferenceWindow};

use crate::arithmetic::algorithm::{Algorithm, Counting, Share};
use crate::decision::plan::Counter;

/// Whether counter `index` of a request's `counters` is counted under the reference's key and
/// with its arithmetic: a fixed window of one whole unit (the reference has no multiplier),
/// outside any priority class (it has no reserves), not counted in parts (`counting: hybrid`
/// keeps its state under floodgate's keys), and the only counter of its descriptor (it has one
/// limit per descriptor; two limits of one descriptor would share one key).
pub fn counts_under_reference_key(counters: &[Counter], index: usize) -> bool {
    let Some(counter) = counters.get(index) else {
        return false;
    };
    let alone = counters
        .iter()
        .filter(|other| other.descriptor == counter.descriptor)
        .count()
        == 1;
    counter.quota.algorithm == Algorithm::FixedWindow
        && counter.quota.unit_multiplier <= 1
        && counter.share == Share::FULL
        && counter.quota.counting != Some(Counting::Hybrid)
        && alone
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arithmetic::algorithm::{Hits, Quota};
    use crate::ground::unit::Unit;
    use crate::ground::verdict::Role;

    fn counter(descriptor: usize, quota: Quota) -> Counter {
        Counter {
            descriptor,
            key: vec![],
            quota,
            hits: Hits::Charge(1),
            role: Role::Enforced,
            share: Share::FULL,
        }
    }

    #[test]
    fn only_what_the_reference_can_count_uses_its_keys() {
        let minute = || Quota::new(10, Unit::Minute);
        let plain = [counter(0, minute())];
        assert!(counts_under_reference_key(&plain, 0));
        assert!(!counts_under_reference_key(&plain, 1));
        let bucket = [counter(0, minute().with_algorithm(Algorithm::TokenBucket))];
        assert!(!counts_under_reference_key(&bucket, 0));
        let multiplied = [counter(0, minute().with_multiplier(5))];
        assert!(!counts_under_reference_key(&multiplied, 0));
        let mut classed = counter(0, minute());
        classed.share = Share::from_millionths(500_000).unwrap_or(Share::FULL);
        assert!(!counts_under_reference_key(&[classed], 0));
        let two_limits = [counter(0, minute()), counter(0, Quota::new(99, Unit::Hour))];
        assert!(!counts_under_reference_key(&two_limits, 0));
        let two_descriptors = [counter(0, minute()), counter(1, minute())];
        assert!(counts_under_reference_key(&two_descriptors, 1));
        let calendar = [counter(
            0,
            Quota::new(1, Unit::Month).with_calendar_months(true),
        )];
        assert!(counts_under_reference_key(&calendar, 0));
        let in_parts = Quota {
            counting: Some(Counting::Hybrid),
            ..minute()
        };
        assert!(!counts_under_reference_key(&[counter(0, in_parts)], 0));
    }
}
