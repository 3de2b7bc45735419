//! The arithmetic of the hybrid store (`--store hybrid`): every instance decides from a local
//! copy of each counter and sends the hits it admitted to Redis in the background. Two pure
//! pieces live here, so the store and the Lua sync script (`hybrid_sync.lua`) agree:
//!
//! - [`add_hits`]: hits counted in the window starting at `window_start` added to a stored
//!   window state, as Redis adds another instance's hits and as an instance lays its own
//!   unsent hits over what Redis last said. Only counts that add can be merged this way:
//!   fixed and sliding windows ([`supports`]). A bucket's or a log's state depends on the
//!   order and the instant of every hit, so those algorithms are decided exactly, in Redis.
//!
//! - [`local_budget`]: how many hits an instance may admit on its own before it must hear
//!   from Redis again: `floor(share × remaining / instances)`, `remaining` being what the
//!   global state it last read leaves of the limit. Every instance's unsent hits stay within
//!   its budget, so when the global count crosses the limit, the hits no instance knew of are
//!   at most `share × limit` in all: the worst-case over-admission (docs/redis.md, "Hybrid").
//!   A budget of 0 means the counter is too close to its limit to share: it is decided
//!   exactly, in Redis, until its window ends.
//!
//! [`add_hits`], on a fixed window (start s, count c), hits h counted in window w:
//!
//! ```text
//! h = 0 → unchanged (a read)
//! no state, or s < w → (w, h)        s = w → (w, c + h)        s > w → unchanged
//! ```
//!
//! on a sliding window (start s, previous p, current c):
//!
//! ```text
//! no state → (w, 0, h)
//! s = w    → (w, p, c + h)
//! s < w    → (w, c, h) when s is the window just before w, else (w, 0, h)
//! s > w    → (s, p + h, c) when w is the window just before s, else unchanged
//! ```
//!
//! Counts stop at [`MAX_RECORDED_COUNT`], as a charge does.

use crate::arithmetic::algorithm::{evaluate, Algorithm, Hits, Quota, State, MAX_RECORDED_COUNT};
use crate::ground::time::Micros;

/// Whether the hybrid store can decide `algorithm` locally (its counts add).
pub fn supports(algorithm: Algorithm) -> bool {
    algorithm.counts_in_windows()
}

/// `state` with `hits` counted in the window that starts at `window_start` (a window of the
/// quota's tiling). No hits leave `state` as it is; a state of another algorithm is treated as
/// none.
pub fn add_hits(
    quota: &Quota,
    state: Option<&State>,
    window_start: Micros,
    hits: u64,
) -> Option<State> {
    if hits == 0 {
        // Nothing counted: a read, which leaves the state as it is.
        return state.cloned();
    }
    let add = |count: u64| count.saturating_add(hits).min(MAX_RECORDED_COUNT);
    let small = |count: u64| u32::try_from(count.min(MAX_RECORDED_COUNT)).unwrap_or(u32::MAX);
    let tiling = quota.tiling();
    match quota.algorithm {
        Algorithm::SlidingWindow => {
            let fresh = |previous: u32| State::SlidingWindow {
                window_start,
                previous,
                current: small(hits),
            };
            match state {
                Some(&State::SlidingWindow {
                    window_start: start,
                    previous,
                    current,
                }) => Some(if start == window_start {
                    State::SlidingWindow {
                        window_start,
                        previous,
                        current: small(add(u64::from(current))),
                    }
                } else if start < window_start {
                    let just_before = tiling.before(tiling.holding(window_start)).start == start;
                    fresh(if just_before { current } else { 0 })
                } else if tiling.before(tiling.holding(start)).start == window_start {
                    State::SlidingWindow {
                        window_start: start,
                        previous: small(add(u64::from(previous))),
                        current,
                    }
                } else {
                    State::SlidingWindow {
                        window_start: start,
                        previous,
                        current,
                    }
                }),
                _ => Some(fresh(0)),
            }
        }
        _ => match state {
            Some(&State::FixedWindow {
                window_start: start,
                count,
            }) => Some(if start == window_start {
                State::FixedWindow {
                    window_start,
                    count: add(count),
                }
            } else if start < window_start {
                State::FixedWindow {
                    window_start,
                    count: add(0),
                }
            } else {
                State::FixedWindow {
                    window_start: start,
                    count,
                }
            }),
            _ => Some(State::FixedWindow {
                window_start,
                count: add(0),
            }),
        },
    }
}

/// Where the window holding `now` starts, for `quota`.
pub fn window_start(quota: &Quota, now: Micros) -> Micros {
    quota.tiling().holding(now).start
}

/// Where the window holding `now` ends, for `quota`.
pub fn window_end(quota: &Quota, now: Micros) -> Micros {
    quota.tiling().holding(now).end
}

/// The hits an instance may admit on its own, beyond `global` (the state Redis last gave),
/// at `now`: `floor(share × remaining / instances)`; 0 when the counter must be decided
/// exactly. `share` is clamped to [0, 1] and `instances` is at least 1.
pub fn local_budget(
    quota: &Quota,
    global: Option<&State>,
    now: Micros,
    instances: u64,
    share: f64,
) -> u64 {
    let remaining = evaluate(quota, global, now, Hits::PEEK)
        .uncommitted
        .remaining;
    let share = if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        0.0
    };
    // remaining ≤ 2^32: exact in a double, and so is the floor of the product.
    let budget = (share * remaining as f64 / instances.max(1) as f64).floor();
    if budget >= 1.0 {
        budget as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground::time::MICROS_PER_SECOND;
    use crate::ground::unit::Unit;

    const MINUTE: Micros = 60 * MICROS_PER_SECOND;
    const T: Micros = 1_796_083_200 * MICROS_PER_SECOND;

    fn fixed(limit: u32) -> Quota {
        Quota::new(limit, Unit::Minute).with_algorithm(Algorithm::FixedWindow)
    }

    fn sliding(limit: u32) -> Quota {
        Quota::new(limit, Unit::Minute).with_algorithm(Algorithm::SlidingWindow)
    }

    fn window(count: u64, start: Micros) -> State {
        State::FixedWindow {
            window_start: start,
            count,
        }
    }

    fn slid(previous: u32, current: u32, start: Micros) -> State {
        State::SlidingWindow {
            window_start: start,
            previous,
            current,
        }
    }

    #[test]
    fn only_counts_that_add_are_local() {
        let local: Vec<_> = Algorithm::ALL
            .into_iter()
            .filter(|a| supports(*a))
            .collect();
        assert_eq!(
            local,
            vec![Algorithm::FixedWindow, Algorithm::SlidingWindow]
        );
    }

    #[test]
    fn fixed_window_hits_add_in_their_window_only() {
        let q = fixed(100);
        assert_eq!(add_hits(&q, None, T, 0), None);
        assert_eq!(
            add_hits(&q, Some(&window(3, T)), T + MINUTE, 0),
            Some(window(3, T))
        );
        assert_eq!(add_hits(&q, None, T, 3), Some(window(3, T)));
        assert_eq!(add_hits(&q, Some(&window(3, T)), T, 4), Some(window(7, T)));
        // A newer window starts afresh; hits of an older one change nothing.
        assert_eq!(
            add_hits(&q, Some(&window(7, T)), T + MINUTE, 2),
            Some(window(2, T + MINUTE))
        );
        assert_eq!(
            add_hits(&q, Some(&window(7, T + MINUTE)), T, 2),
            Some(window(7, T + MINUTE))
        );
        assert_eq!(
            add_hits(&q, Some(&window(u32::MAX.into(), T)), T, 9),
            Some(window(MAX_RECORDED_COUNT, T))
        );
    }

    #[test]
    fn sliding_window_hits_of_the_previous_window_still_count() {
        let q = sliding(100);
        assert_eq!(add_hits(&q, None, T, 5), Some(slid(0, 5, T)));
        assert_eq!(
            add_hits(&q, Some(&slid(1, 5, T)), T, 2),
            Some(slid(1, 7, T))
        );
        // The next window carries the current count over as its previous one.
        assert_eq!(
            add_hits(&q, Some(&slid(1, 7, T)), T + MINUTE, 2),
            Some(slid(7, 2, T + MINUTE))
        );
        assert_eq!(
            add_hits(&q, Some(&slid(1, 7, T)), T + 2 * MINUTE, 2),
            Some(slid(0, 2, T + 2 * MINUTE))
        );
        // Late hits of the window just before land in `previous`; older ones nowhere.
        assert_eq!(
            add_hits(&q, Some(&slid(7, 2, T + MINUTE)), T, 3),
            Some(slid(10, 2, T + MINUTE))
        );
        assert_eq!(
            add_hits(&q, Some(&slid(7, 2, T + MINUTE)), T - MINUTE, 3),
            Some(slid(7, 2, T + MINUTE))
        );
    }

    #[test]
    fn the_budget_is_a_share_of_what_is_left_split_among_instances() {
        let q = fixed(10_000);
        assert_eq!(local_budget(&q, None, T, 1, 0.01), 100);
        assert_eq!(local_budget(&q, None, T, 3, 0.01), 33);
        assert_eq!(local_budget(&q, Some(&window(9_000, T)), T, 3, 0.01), 3);
        // Too close to the limit to share: decided exactly.
        assert_eq!(local_budget(&q, Some(&window(9_800, T)), T, 3, 0.01), 0);
        assert_eq!(local_budget(&q, Some(&window(10_000, T)), T, 1, 1.0), 0);
        // The state of a window gone by leaves the whole limit.
        assert_eq!(
            local_budget(&q, Some(&window(10_000, T)), T + MINUTE, 2, 0.5),
            2_500
        );
        assert_eq!(local_budget(&q, None, T, 0, 2.0), 10_000);
        assert_eq!(local_budget(&q, None, T, 1, f64::NAN), 0);
        let s = sliding(1_000);
        // Half a minute in, half of the previous 1 000 still weighs: 500 left.
        assert_eq!(
            local_budget(&s, Some(&slid(1_000, 0, T)), T + MINUTE / 2, 1, 0.1),
            50
        );
    }
}
