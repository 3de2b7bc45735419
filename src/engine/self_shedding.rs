//! Probabilistic shedding of floodgate's own load (`--shed-above N`): past N calls in the
//! limiter at once, a new call is decided with probability `threshold / depth` and otherwise
//! answered at once with `--overload-answer`, without touching the store. The class a call is
//! treated with is its most important descriptor's (`Plan::call_share`), so the lower classes
//! shed first; `--max-in-flight` (`server::admission`) stays the hard bound behind it.
//!
//! Shed here, after planning, rather than at admission: only the plan knows a call's class,
//! and planning costs far less than the store round trip shedding saves.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::core::arithmetic::shed;
use crate::core::decision::overload::OverloadAnswer;
use crate::core::decision::plan::Plan;

/// `--shed-above` and the answer a shed call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfShedding {
    /// Calls in the limiter at once above which new calls may be shed (at least 1).
    pub above: u32,
    pub answer: OverloadAnswer,
}

impl SelfShedding {
    /// Whether a call planned as `plan`, arriving at `depth` calls in the limiter (itself
    /// included), is decided; `draw` is uniform in `0..2^32`.
    pub fn survives(&self, plan: &Plan<'_>, depth: u32, draw: u32) -> bool {
        shed::survives(
            shed::threshold_for(self.above, plan.call_share()),
            depth,
            draw,
        )
    }
}

/// Calls inside the limiter now: the depth shedding reads. Clones share the count.
#[derive(Debug, Clone, Default)]
pub struct CallDepth(Arc<AtomicU32>);

impl CallDepth {
    /// Counts a call until the guard drops (also when the caller's future is cancelled);
    /// returns the depth with it.
    pub fn enter(&self) -> (DepthGuard, u32) {
        let depth = self.0.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        (DepthGuard(Arc::clone(&self.0)), depth)
    }

    pub fn current(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One call counted in a [`CallDepth`].
#[derive(Debug)]
pub struct DepthGuard(Arc<AtomicU32>);

impl Drop for DepthGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_counts_calls_until_their_guards_drop() {
        let depth = CallDepth::default();
        let (first, at_first) = depth.enter();
        let (second, at_second) = depth.enter();
        assert_eq!((at_first, at_second, depth.current()), (1, 2, 2));
        drop(first);
        assert_eq!(depth.current(), 1);
        drop(second);
        assert_eq!(depth.current(), 0);
    }

    #[test]
    fn a_call_without_classes_sheds_at_the_full_threshold() {
        let shedding = SelfShedding {
            above: 4,
            answer: OverloadAnswer::OverLimit,
        };
        let plan = Plan::default();
        assert!(shedding.survives(&plan, 4, u32::MAX), "at the threshold");
        // 4 of 8 survive: a draw in the lower half survives, one in the upper half does not.
        assert!(shedding.survives(&plan, 8, u32::MAX / 2 - 1));
        assert!(!shedding.survives(&plan, 8, u32::MAX / 2 + 1));
    }
}
