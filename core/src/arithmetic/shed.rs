//! Probabilistic shedding as arithmetic: past a soft threshold, a new call survives with
//! probability `soft / depth` (a queue's `max_queue / queue_depth`), so the refusals come early,
//! fast and spread over every caller instead of all at the hard bound, and the depth levels off
//! where the admitted rate meets what the protected resource can serve.
//!
//!   depth     = calls (or leases) in flight if this one is admitted
//!   soft_c    = max(1, floor(soft × share_c))    a class's own threshold: lower classes shed
//!                                                 earlier and harder, a 100 % class at `soft`
//!   survives  ⇔ depth ≤ soft_c, or draw × depth < soft_c × 2^32
//!               draw: uniform in 0..2^32, given by the shell (the core reads no randomness)
//!
//! Integer arithmetic, so the Redis script (doubles, exact below 2^53: both sides stay below
//! 2^46 for the bounds in force) decides exactly as Rust for the same draw. The hard bound
//! (`--max-in-flight`, `max_in_flight`) stays the last line: shedding only refuses earlier.

use crate::arithmetic::algorithm::Share;

/// One survival draw's range: a draw is uniform in `0..DRAW_RANGE`.
pub const DRAW_RANGE: u64 = 1 << 32;

/// The threshold of a class with `share` of `soft`: at least 1, so even the lowest class is
/// admitted while nothing else is in flight.
pub fn threshold_for(soft: u32, share: Share) -> u32 {
    u32::try_from(share.of(u64::from(soft)))
        .unwrap_or(soft)
        .max(1)
}

/// Whether a call survives at `depth` (in flight with it) under threshold `soft` (0: never
/// shed), given the shell's `draw`.
pub fn survives(soft: u32, depth: u32, draw: u32) -> bool {
    if soft == 0 || depth <= soft {
        return true;
    }
    u64::from(draw) * u64::from(depth) < u64::from(soft) * DRAW_RANGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_the_threshold_every_call_survives() {
        for depth in 0..=8 {
            assert!(survives(8, depth, u32::MAX));
        }
        assert!(survives(0, 1_000, u32::MAX), "0 turns shedding off");
    }

    #[test]
    fn past_the_threshold_the_survivors_are_soft_over_depth() {
        // Draws spread evenly over the range: the share that survives is soft / depth.
        let draws: Vec<u32> = (0..10_000u64)
            .map(|at| u32::try_from(at * DRAW_RANGE / 10_000).unwrap_or(u32::MAX))
            .collect();
        for (soft, depth) in [(8, 16), (8, 80), (100, 300), (1, 7)] {
            let survived = draws.iter().filter(|&&d| survives(soft, depth, d)).count();
            let expected = 10_000 * soft as usize / depth as usize;
            assert!(
                survived.abs_diff(expected) <= 1,
                "{soft}/{depth}: {survived} of 10000, expected {expected}"
            );
        }
    }

    #[test]
    fn lower_classes_shed_first() {
        let half = Share::from_millionths(500_000).unwrap_or(Share::FULL);
        assert_eq!(threshold_for(10, Share::FULL), 10);
        assert_eq!(threshold_for(10, half), 5);
        assert_eq!(threshold_for(1, half), 1);
        // At depth 8 a draw at 70 % of the range: critical (threshold 10) survives, low
        // (threshold 5, survival 5/8) does not.
        let draw = u32::MAX / 10 * 7;
        assert!(survives(threshold_for(10, Share::FULL), 8, draw));
        assert!(!survives(threshold_for(10, half), 8, draw));
    }

    #[test]
    fn extreme_values_neither_overflow_nor_admit_beyond_reason() {
        assert!(survives(u32::MAX, u32::MAX, u32::MAX));
        assert!(!survives(1, u32::MAX, u32::MAX));
        assert!(survives(1, u32::MAX, 0));
    }
}
