//! envoyproxy/ratelimit's `near_limit` statistic (reference §2.5), extended to every algorithm:
//! the hits that landed while a counter was past `ratio` of its capacity. Pure arithmetic.

/// The usage past which hits are near the limit: `floor(capacity × ratio)`, in `f32` as the
/// reference computes it (so 15 × 0.8 gives 12, 5 × 0.8 gives 4).
pub fn threshold(capacity: u64, ratio: f32) -> u64 {
    let near = (capacity as f32 * ratio).floor();
    // `as` saturates; a NaN ratio (refused by the flag parser anyway) gives 0.
    (near as u64).min(capacity)
}

/// How many of `hits` count as near the limit for one counter.
///
/// `before` is what the counter had used before this call, `near` the [`threshold`]. As in the
/// reference: hits that fit count from the threshold on; hits that did not fit count the room
/// that was left between the threshold and the limit (the rest is "over", not "near"); a
/// counter already full counts nothing.
pub fn near_limit_hits(capacity: u64, near: u64, before: u64, hits: u64, admitted: bool) -> u64 {
    if admitted {
        let after = before.saturating_add(hits);
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
                near_limit_hits(limit, near, before, hits, admitted),
                expected,
                "L={limit} a={hits} after={after}"
            );
        }
        assert_eq!(near_limit_hits(10, 8, 27, 3, false), 0);
    }

    #[test]
    fn never_more_than_the_hits_or_the_room_left() {
        for capacity in 0..30u64 {
            let near = threshold(capacity, 0.8);
            for before in 0..35 {
                for hits in 0..12 {
                    let admitted = before + hits <= capacity;
                    let counted = near_limit_hits(capacity, near, before, hits, admitted);
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
