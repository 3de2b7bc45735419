//! What all algorithms share: how hits turn into an `Evaluation`, once an algorithm has brought
//! its stored state up to `now`. Keeping this in one place keeps the five algorithms (and their
//! Lua twins) agreeing on check-only, refund, retry and expiry semantics.
//!
//!   Charge(n) that fits → admitted, next = charged(n), retry 0
//!   Charge(n) otherwise → rejected, next = current, retry = max(1, retry_after(n))
//!   CheckOnly           → admitted ⇔ fits(1), next = current, retry as for Charge(1)
//!   Refund(n)           → admitted, next = refunded(n), retry 0
//!
//! A priority class's `reserve` (`share.rs`) joins the hits in the two questions only:
//! "fits" asks fits(n + reserve) and the retry asks retry_after(n + reserve); what is charged
//! is still n, and a refund ignores it.

use super::{Evaluation, Hits, Snapshot, State};
use crate::core::time::Micros;

/// One counter as seen at one instant: already normalized (stale windows, expired entries and
/// drained debt are gone), so every method answers for `now`.
pub(super) trait Counter: Sized {
    /// Whether `hits` more fit now.
    fn fits(&self, hits: u64) -> bool;
    /// The counter after taking `hits`; called only when they fit.
    fn charged(&self, hits: u64) -> Self;
    /// The counter after giving `hits` back, never beyond a fresh counter.
    fn refunded(&self, hits: u64) -> Self;
    fn snapshot(&self) -> Snapshot;
    /// Time until `hits` could fit; called only when they do not (the caller floors it at 1).
    fn retry_after(&self, hits: u64) -> Micros;
    /// After this instant the counter means the same as no state.
    fn expires_at(&self) -> Micros;
    fn into_state(self) -> State;
}

pub(super) fn decide(counter: impl Counter, hits: Hits, reserve: u64) -> Evaluation {
    match hits {
        Hits::Charge(n) if counter.fits(n.saturating_add(reserve)) => {
            let next = counter.charged(n);
            commit(counter.snapshot(), next)
        }
        Hits::Charge(n) => {
            let retry_after = counter.retry_after(n.saturating_add(reserve));
            unchanged(counter, false, retry_after)
        }
        Hits::CheckOnly if counter.fits(1u64.saturating_add(reserve)) => {
            unchanged(counter, true, 0)
        }
        Hits::CheckOnly => {
            let retry_after = counter.retry_after(1u64.saturating_add(reserve));
            unchanged(counter, false, retry_after)
        }
        Hits::Refund(n) => {
            let next = counter.refunded(n);
            commit(counter.snapshot(), next)
        }
    }
}

fn commit(before: Snapshot, next: impl Counter) -> Evaluation {
    Evaluation {
        admitted: true,
        committed: next.snapshot(),
        uncommitted: before,
        retry_after: 0,
        expires_at: next.expires_at(),
        next_state: next.into_state(),
    }
}

fn unchanged(counter: impl Counter, admitted: bool, retry_after: Micros) -> Evaluation {
    let snapshot = counter.snapshot();
    Evaluation {
        admitted,
        committed: snapshot,
        uncommitted: snapshot,
        retry_after: if admitted { 0 } else { retry_after.max(1) },
        expires_at: counter.expires_at(),
        next_state: counter.into_state(),
    }
}
