//! envoyproxy/ratelimit's `near_limit` statistic (reference §2.5), extended to every algorithm:
//! the hits that landed while a counter was past `ratio` of its capacity. Pure arithmetic.

use crate::decision::response::CounterOutcome;

/// The usage past which hits are near the limit: `floor(capacity × ratio)`, in `f32` as the
/// reference computes it (so 15 × 0.8 gives 12, 5 × 0.8 gives 4).
pub fn threshold(capacity: u64, ratio: f32) -> u64 {
    let near = (capacity as f32 * ratio).floor();
    // `as` saturates; a NaN ratio (refused by the flag parser anyway) gives 0.
    (near as u64).min(capacity)
}

/// Where a counter's count stood around one call's hits, as the reference reads it: its
/// `limitBeforeIncrease` and `limitAfterIncrease` (`base_limiter.go` lines 27-33), from which
/// it counts near-limit and over-limit hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Around {
    pub before: u64,
    pub after: u64,
}

impl Around {
    /// Hits on top of `before`: counted there, or judged there and not counted.
    pub fn from_before(before: u64, hits: u64) -> Self {
        Self {
            before,
            after: before.saturating_add(hits),
        }
    }

    /// A withheld charge ([`CounterOutcome::withheld`]) on a counter that holds `count`: the
    /// reference incremented its key by 0 and reads the count that answered as the count after
    /// the hits, and the count before as that less the hits, in Go's unsigned arithmetic,
    /// which wraps below 0 (`fixed_cache_impl.go` lines 211-212).
    pub fn withheld(count: u64, hits: u64) -> Self {
        Self {
            before: count.wrapping_sub(hits),
            after: count,
        }
    }

    /// The count around `hits` of a counter of `capacity`, from its `outcome`: the snapshot
    /// is after the charge when admitted and charged, as it stood otherwise
    /// (`core::decision::charging::outcome`).
    pub fn of(outcome: &CounterOutcome, capacity: u64, hits: u64) -> Self {
        let used = capacity.saturating_sub(outcome.snapshot.remaining);
        if outcome.withheld {
            Self::withheld(used, hits)
        } else if outcome.admitted && outcome.charged {
            Self::from_before(used.saturating_sub(hits), hits)
        } else {
            Self::from_before(used, hits)
        }
    }
}

/// How many of `hits` count as near the limit for one counter, `around` them (its count before
/// and after), `near` the [`threshold`]. As the reference (`checkNearLimitThreshold`,
/// `checkOverLimitThreshold`): admitted hits count from the threshold on; hits that did not
/// fit count the room that was left between the threshold and the limit (the rest is "over",
/// not "near"); a counter already full counts nothing.
pub fn near_limit_hits(capacity: u64, near: u64, around: Around, hits: u64, admitted: bool) -> u64 {
    let Around { before, after } = around;
    if admitted {
        if after <= near {
            0
        } else if before >= near {
            hits
        } else {
            after - near
        }
    } else if before >= capacity {
        0
    } else {
        capacity - near.max(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_match_the_reference() {
        for (limit, near) in [(15, 12), (20, 16), (8, 6), (10, 8), (5, 4), (0, 0), (1, 0)] {
            assert_eq!(threshold(limit, 0.8), near, "limit {limit}");
        }
        assert_eq!(threshold(10, 1.0), 10);
        assert_eq!(threshold(10, 0.0), 0);
        assert_eq!(threshold(10, f32::NAN), 0);
    }

    /// The worked examples of the reference's `fixed_cache_impl_test.go` (L, hits, count after
    /// INCRBY → near_limit). A fixed window admits exactly when `after <= L`.
    #[test]
    fn the_reference_examples() {
        let cases: [(u64, u64, u64, u64); 11] = [
            (10, 1, 5, 0),
            (10, 1, 11, 0),
            (10, 1, 13, 0),
            (15, 1, 11, 0),
            (15, 1, 13, 1),
            (15, 1, 16, 0),
            (20, 3, 5, 0),
            (8, 2, 7, 1),
            (20, 3, 19, 3),
            (20, 3, 22, 1),
            (20, 7, 22, 4),
        ];
        for (limit, hits, after, expected) in cases {
            let before = after - hits;
            let admitted = after <= limit;
            let near = threshold(limit, 0.8);
            assert_eq!(
                near_limit_hits(
                    limit,
                    near,
                    Around::from_before(before, hits),
                    hits,
                    admitted
                ),
                expected,
                "L={limit} a={hits} after={after}"
            );
        }
        assert_eq!(
            near_limit_hits(10, 8, Around::from_before(27, 3), 3, false),
            0
        );
    }

    /// `TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig`, its last step
    /// (`fixed_cache_impl_test.go` lines 732-756): key4 (limit 15, at 13) held back, `INCRBY
    /// key4 0` answers 13, read as 11 → 13: 1 near-limit hit (its NearLimit goes 1 → 2); key5
    /// (limit 14, at 13) incremented by 2 to 15, over: 14 − max(11, 13) = 1 (2 → 3).
    #[test]
    fn a_withheld_charge_counts_as_the_reference_reads_it() {
        let key4 = Around::withheld(13, 2);
        assert_eq!(
            key4,
            Around {
                before: 11,
                after: 13
            }
        );
        assert_eq!(near_limit_hits(15, threshold(15, 0.8), key4, 2, true), 1);
        let key5 = Around::from_before(13, 2);
        assert_eq!(near_limit_hits(14, threshold(14, 0.8), key5, 2, false), 1);
        // Fewer counted than the hits held back: Go's `after - hits` wraps, so every hit
        // counts once the count is past the threshold (a ratio of 0.1: 10 of 100).
        let wrapped = Around::withheld(11, 50);
        assert_eq!(wrapped.before, u64::MAX - 38);
        assert_eq!(
            near_limit_hits(100, threshold(100, 0.1), wrapped, 50, true),
            50
        );
        assert_eq!(
            near_limit_hits(100, threshold(100, 0.1), Around::withheld(9, 50), 50, true),
            0
        );
    }

    #[test]
    fn the_count_around_the_hits_follows_the_outcome() {
        use crate::arithmetic::algorithm::Snapshot;
        let outcome = |remaining, admitted, charged, withheld| CounterOutcome {
            admitted,
            snapshot: Snapshot {
                remaining,
                reset_after: 0,
            },
            retry_after: 0,
            charged,
            withheld,
            wait: 0,
        };
        // Charged: the snapshot is after the hits.
        assert_eq!(
            Around::of(&outcome(2, true, true, false), 15, 2),
            Around {
                before: 11,
                after: 13
            }
        );
        // Judged and not counted (all or nothing): the hits on top of the count.
        assert_eq!(
            Around::of(&outcome(2, true, false, false), 15, 2),
            Around {
                before: 13,
                after: 15
            }
        );
        // Withheld: the count is read as after the hits.
        assert_eq!(
            Around::of(&outcome(2, true, false, true), 15, 2),
            Around {
                before: 11,
                after: 13
            }
        );
        // Refused: as it stood before.
        assert_eq!(
            Around::of(&outcome(1, false, true, false), 14, 2),
            Around {
                before: 13,
                after: 15
            }
        );
    }

    #[test]
    fn never_more_than_the_hits_or_the_room_left() {
        for capacity in 0..30u64 {
            let near = threshold(capacity, 0.8);
            for before in 0..35 {
                for hits in 0..12 {
                    let admitted = before + hits <= capacity;
                    let around = Around::from_before(before, hits);
                    let counted = near_limit_hits(capacity, near, around, hits, admitted);
                    if admitted {
                        assert!(counted <= hits);
                    } else {
                        assert!(counted <= capacity - near);
                    }
                }
            }
        }
    }
}
