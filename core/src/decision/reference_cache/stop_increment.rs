//! The reference's count with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` (floodgate's
//! all-or-refused charging), as its `src/redis/fixed_cache_impl.go` `DoLimit` does it in two
//! round trips:
//!
//! 1. `GET` every key (lines 115-141), a missing one reading 0;
//! 2. each descriptor whose count plus its hits would pass its limit (`IsOverLimitThresholdReached`,
//!    lines 143-157 and `base_limiter.go` lines 76-79) is one that goes over; if any does, only
//!    those are incremented, every other key gets `INCRBY key 0` (`getHitsAddend`, lines 44-72,
//!    which looks at no role: shadow and quota mode act later, on the answer); if none does,
//!    every key is incremented by its hits (lines 160-187), `EXPIRE` renewed on each either way;
//! 3. each answer comes from the count `INCRBY` returned, as without the setting
//!    ([`outcome_of`](super::outcome_of)), a held-back charge judged on the count as it stands
//!    (lines 209-218).
//!
//! This module is step 2, and the inputs of step 3; the store sends the commands. Between the
//! two round trips other calls may change the counts, on this instance or another: the
//! decision is taken on the counts read, the answers on the counts `INCRBY` returns, exactly
//! as the reference's. The reference's local over-limit cache (lines 96-113,
//! `LOCAL_CACHE_SIZE_IN_BYTES`) is not read: floodgate has none.

use super::counts::ReferenceHits;

/// One counter's first round trip: what it asks and the count its key held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The counter's limit (`requests_per_unit`).
    pub limit: u64,
    pub hits: ReferenceHits,
    /// What `GET` answered: 0 for a missing key.
    pub count: i64,
    /// Counted whatever the verdicts (floodgate's `overflow: owe`, which the reference does
    /// not have: `core::decision::charging::Recording::Always`): never held back.
    pub recorded_always: bool,
}

impl Read {
    /// Whether the counter goes over: its count plus its hits pass its limit. A check asks
    /// what its rule asks (0 by the reference's; one more by floodgate's `one-more-fits`), and
    /// a refund never goes over.
    pub fn goes_over(&self) -> bool {
        let count = u64::try_from(self.count).unwrap_or(0);
        let asked = match self.hits {
            ReferenceHits::Add(n) => n,
            ReferenceHits::Check(rule) => rule.asked(),
            ReferenceHits::TakeBack(_) | ReferenceHits::Withheld { .. } => return false,
        };
        count.saturating_add(asked) > self.limit
    }
}

/// The second round trip's hits for each of `reads`, in order: all as asked when none goes
/// over; else those that go over (and those counted whatever the verdicts) as asked, and the
/// others held back ([`ReferenceHits::Withheld`]: `INCRBY key 0`).
pub fn stop_increments(reads: &[Read]) -> Vec<ReferenceHits> {
    let any_over = reads.iter().any(Read::goes_over);
    reads
        .iter()
        .map(|read| {
            if !any_over || read.goes_over() || read.recorded_always {
                return read.hits;
            }
            match read.hits {
                ReferenceHits::Add(hits) => ReferenceHits::Withheld {
                    hits,
                    refund: false,
                },
                ReferenceHits::TakeBack(hits) => ReferenceHits::Withheld { hits, refund: true },
                // A check adds nothing either way.
                held @ (ReferenceHits::Check(_) | ReferenceHits::Withheld { .. }) => held,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::outcome_of;
    use super::*;
    use crate::arithmetic::algorithm::CheckRule;

    const RESET: i64 = 30_000_000;

    fn read(limit: u64, hits: ReferenceHits, count: i64) -> Read {
        Read {
            limit,
            hits,
            count,
            recorded_always: false,
        }
    }

    /// `TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig` (`fixed_cache_impl_test.go`
    /// lines 639-757): key4 (limit 15) and key5 (limit 14), each read then incremented.
    #[test]
    fn the_references_own_sequence() {
        // Lines 657-666: both at 10, one hit each: neither goes over, both incremented to 11.
        let first = [
            read(15, ReferenceHits::Add(1), 10),
            read(14, ReferenceHits::Add(1), 10),
        ];
        assert_eq!(stop_increments(&first), [ReferenceHits::Add(1); 2]);
        // Lines 698-705: at 11, two hits each: 13 ≤ 15 and 13 ≤ 14, both incremented.
        let second = [
            read(15, ReferenceHits::Add(2), 11),
            read(14, ReferenceHits::Add(2), 11),
        ];
        assert_eq!(stop_increments(&second), [ReferenceHits::Add(2); 2]);
        // Lines 732-739: at 13, two hits each: key5 goes over (15 > 14), so key4 gets
        // `INCRBY … 0` and key5 `INCRBY … 2`.
        let third = [
            read(15, ReferenceHits::Add(2), 13),
            read(14, ReferenceHits::Add(2), 13),
        ];
        let hits = stop_increments(&third);
        assert_eq!(
            hits,
            [
                ReferenceHits::Withheld {
                    hits: 2,
                    refund: false
                },
                ReferenceHits::Add(2)
            ]
        );
        let added: Vec<u64> = hits.iter().map(|hits| hits.added()).collect();
        assert_eq!(added, [0, 2]);
        // Lines 744-745: key4 OK with 2 left (15 − 13, from `INCRBY … 0` answering 13); key5
        // OVER_LIMIT with 0 (`INCRBY … 2` answered 15).
        let key4 = outcome_of(15, hits[0], 13, RESET);
        assert!(key4.admitted && !key4.charged && key4.withheld);
        assert_eq!(key4.snapshot.remaining, 2);
        let key5 = outcome_of(14, hits[1], 15, RESET);
        assert!(!key5.admitted && key5.charged && !key5.withheld);
        assert_eq!(key5.snapshot.remaining, 1, "as it stood: 14 − 13");
    }

    #[test]
    fn a_count_at_the_limit_does_not_go_over_and_one_beyond_does() {
        assert!(!read(10, ReferenceHits::Add(3), 7).goes_over());
        assert!(read(10, ReferenceHits::Add(4), 7).goes_over());
        // The reference's check (`hits_addend: 0`): over only beyond the limit.
        let within = ReferenceHits::Check(CheckRule::WithinLimit);
        assert!(!read(10, within, 10).goes_over());
        assert!(read(10, within, 11).goes_over());
        // floodgate's check asks one more.
        assert!(read(10, ReferenceHits::Check(CheckRule::OneMoreFits), 10).goes_over());
        assert!(!read(10, ReferenceHits::TakeBack(5), 99).goes_over());
        // A count below zero (written by hand) reads as an empty one.
        assert!(!read(1, ReferenceHits::Add(1), -7).goes_over());
    }

    #[test]
    fn a_check_past_its_limit_stops_the_others_and_adds_nothing_itself() {
        let check = ReferenceHits::Check(CheckRule::WithinLimit);
        let reads = [
            read(10, ReferenceHits::Add(1), 0),
            read(10, check, 11),
            read(10, ReferenceHits::TakeBack(2), 5),
        ];
        assert_eq!(
            stop_increments(&reads),
            [
                ReferenceHits::Withheld {
                    hits: 1,
                    refund: false
                },
                check,
                ReferenceHits::Withheld {
                    hits: 2,
                    refund: true
                },
            ]
        );
        // A refund held back is never refused, even on a count past the limit.
        let held = outcome_of(1, stop_increments(&reads)[2], 5, RESET);
        assert!(held.admitted && !held.charged && !held.withheld);
        assert_eq!(held.snapshot.remaining, 0);
    }

    #[test]
    fn what_is_counted_whatever_the_verdicts_is_never_held_back() {
        let owed = Read {
            recorded_always: true,
            ..read(100, ReferenceHits::Add(5), 10)
        };
        let reads = [owed, read(1, ReferenceHits::Add(1), 1)];
        assert_eq!(
            stop_increments(&reads),
            [ReferenceHits::Add(5), ReferenceHits::Add(1)]
        );
    }

    #[test]
    fn a_held_back_charge_is_judged_on_the_count_as_it_stands() {
        let held = ReferenceHits::Withheld {
            hits: 4,
            refund: false,
        };
        // Another call raised the count past the limit between the two round trips: over.
        let raced = outcome_of(10, held, 12, RESET);
        assert!(!raced.admitted && raced.withheld && !raced.charged);
        assert_eq!(raced.snapshot.remaining, 0);
        assert_eq!(raced.retry_after, RESET);
        let within = outcome_of(10, held, 10, RESET);
        assert!(within.admitted);
        assert_eq!(within.snapshot.remaining, 0);
    }
}
