//! What all algorithms share: how hits turn into an `Evaluation`, once an algorithm has brought
//! its stored state up to `now`. Keeping this in one place keeps the five algorithms (and their
//! Lua twins) agreeing on check-only, refund, retry and expiry semantics.
//!
//!   Charge(n) that fits → admitted, next = charged(n), retry 0
//!   Charge(n) otherwise → rejected, next = current, retry = max(1, retry_after(n))
//!     …when refused hits are recorded (`Refused::Recorded`: a counting algorithm in the
//!     reference's charging mode, `core::decision::charging`): rejected, next = charged(n), and the
//!     retry is asked of that next counter, max(1, next.retry_after(n))
//!   CheckOnly(rule)     → admitted ⇔ fits(rule.asked()): fits(1) (one more fits) or fits(0)
//!                         (the count is within the limit); next = current, retry as for
//!                         Charge(1)
//!   Refund(n)           → admitted, next = refunded(n), retry 0
//!
//! Only an admitted charge waits (`wait`, a queueing leaky bucket's turn, `queue.rs`): a check
//! or a refund holds no turn, and a refused charge is answered at once.
//!
//! Every evaluation also says how full `next` is (`Fullness`): used = (C − remaining) / C in
//! 65 535ths, and, when not even one hit fits (fits(1) fails: `has_room`), exhausted_for =
//! retry_after(1), at least 1: with no traffic a counter only regains room, so it is exhausted
//! exactly until then. A store that must forget counters forgets exhausted ones last.
//!
//! A priority class's `reserve` (`share.rs`) joins the hits in the two questions only:
//! "fits" asks fits(n + reserve) and the retry asks retry_after(n + reserve); what is charged
//! is still n, and a refund ignores it.

use super::{Evaluation, Fullness, Hits, Refused, Snapshot, State};
use crate::ground::time::Micros;

/// One counter as seen at one instant: already normalized (stale windows, expired entries and
/// drained debt are gone), so every method answers for `now`.
pub(super) trait Counter: Sized {
    /// Whether `hits` more fit now.
    fn fits(&self, hits: u64) -> bool;
    /// `fits(1)`, given the counter's own snapshot: where `remaining` is exact integer
    /// arithmetic it already says, and costs nothing more.
    fn has_room(&self, snapshot: &Snapshot) -> bool {
        let _ = snapshot;
        self.fits(1)
    }
    /// The counter after taking `hits`; called when they fit, and for a counting algorithm
    /// (fixed and sliding window) also when they do not but are recorded anyway.
    fn charged(&self, hits: u64) -> Self;
    /// The counter after giving `hits` back, never beyond a fresh counter.
    fn refunded(&self, hits: u64) -> Self;
    fn snapshot(&self) -> Snapshot;
    /// Time until `hits` could fit; called only when they do not (the caller floors it at 1).
    fn retry_after(&self, hits: u64) -> Micros;
    /// After this instant the counter means the same as no state.
    fn expires_at(&self) -> Micros;
    /// How long an admitted charge waits for its turn (a queueing leaky bucket); 0 for the
    /// others, which answer at once.
    fn wait(&self) -> Micros {
        0
    }
    /// The most `remaining` can be (`Quota::capacity`; 0 when nothing ever fits).
    fn capacity(&self) -> u64;
    fn into_state(self) -> State;
}

pub(super) fn decide(
    counter: impl Counter,
    hits: Hits,
    reserve: u64,
    refused: Refused,
) -> Evaluation {
    match hits {
        Hits::Charge(n) if counter.fits(n.saturating_add(reserve)) => {
            let wait = counter.wait();
            let next = counter.charged(n);
            Evaluation {
                wait,
                ..commit(counter.snapshot(), next)
            }
        }
        Hits::Charge(n) if refused == Refused::Recorded => {
            let needed = n.saturating_add(reserve);
            let before = counter.snapshot();
            let next = counter.charged(n);
            let retry_after = next.retry_after(needed);
            recorded(before, next, (needed, retry_after))
        }
        Hits::Charge(n) => {
            let needed = n.saturating_add(reserve);
            let retry_after = counter.retry_after(needed);
            unchanged(counter, false, (needed, retry_after))
        }
        Hits::CheckOnly(rule) if counter.fits(rule.asked().saturating_add(reserve)) => {
            unchanged(counter, true, (0, 0))
        }
        // Refused, the check waits as a request of one hit would: fits(rule.asked() + reserve)
        // failed, so fits(1 + reserve) fails too and retry_after may be asked of it.
        Hits::CheckOnly(_) => {
            let needed = 1u64.saturating_add(reserve);
            let retry_after = counter.retry_after(needed);
            unchanged(counter, false, (needed, retry_after))
        }
        Hits::Refund(n) => {
            let next = counter.refunded(n);
            commit(counter.snapshot(), next)
        }
    }
}

fn commit(before: Snapshot, next: impl Counter) -> Evaluation {
    let committed = next.snapshot();
    Evaluation {
        admitted: true,
        committed,
        uncommitted: before,
        retry_after: 0,
        wait: 0,
        fullness: fullness(&next, &committed, None),
        expires_at: next.expires_at(),
        next_state: next.into_state(),
    }
}

/// Refused hits recorded all the same: `next` holds them, and `retry` (the hits asked for, with
/// the reserve, and when they fit) is asked of `next`.
fn recorded(before: Snapshot, next: impl Counter, retry: (u64, Micros)) -> Evaluation {
    let committed = next.snapshot();
    let (needed, retry_after) = retry;
    let known = (needed == 1).then_some(retry_after);
    Evaluation {
        admitted: false,
        committed,
        uncommitted: before,
        retry_after: retry_after.max(1),
        wait: 0,
        fullness: fullness(&next, &committed, known),
        expires_at: next.expires_at(),
        next_state: next.into_state(),
    }
}

/// `retry`: the hits asked for (with the reserve) and when they fit, as `decide` computed it.
fn unchanged(counter: impl Counter, admitted: bool, retry: (u64, Micros)) -> Evaluation {
    let snapshot = counter.snapshot();
    let (needed, retry_after) = retry;
    // The usual rejection asks for one hit: its retry is when the counter has room again.
    let known = (needed == 1).then_some(retry_after);
    Evaluation {
        admitted,
        committed: snapshot,
        uncommitted: snapshot,
        retry_after: if admitted { 0 } else { retry_after.max(1) },
        wait: 0,
        fullness: fullness(&counter, &snapshot, known),
        expires_at: counter.expires_at(),
        next_state: counter.into_state(),
    }
}

/// How full `counter` is; `retry_one`: its `retry_after(1)` when already known.
fn fullness(counter: &impl Counter, snapshot: &Snapshot, retry_one: Option<Micros>) -> Fullness {
    let exhausted_for = (!counter.has_room(snapshot))
        .then(|| retry_one.unwrap_or_else(|| counter.retry_after(1)).max(1));
    Fullness {
        used: Fullness::share_used(snapshot.remaining, counter.capacity()),
        exhausted_for,
    }
}
