//! The reference's decision from the count Redis returns (its `src/redis/fixed_cache_impl.go`
//! lines 209-217 and `src/limiter/base_limiter.go` lines 99-131): `INCRBY key hits` answers the
//! count after the hits; the hits before were `after - hits`; the descriptor is over iff
//! `after > limit`. So a check (`hits_addend: 0`) is over only once the count is already beyond
//! the limit, and every hit is counted, over the limit or not. A check under floodgate's own
//! rule (`--check-only one-more-fits`) asks one more hit to fit instead, on the same count.

use crate::arithmetic::algorithm::{CheckRule, Hits, Snapshot};
use crate::decision::response::CounterOutcome;
use crate::ground::time::Micros;

/// What one counter does to its reference key in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceHits {
    /// `INCRBY key n`, then `EXPIRE`.
    Add(u64),
    /// A check (`hits_addend: 0`): `INCRBY key 0`, then `EXPIRE`, which still renews the expiry
    /// as the reference does; admitted by its rule.
    Check(CheckRule),
    /// Takes `n` back (floodgate's `is_negative_hits`, which the reference does not read),
    /// never below an empty count.
    TakeBack(u64),
    /// Hits the reference's two-step count held back because another counter of the request
    /// goes over (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`, `stop_increment`): `INCRBY
    /// key 0`, then `EXPIRE`. `hits` of a charge, judged on the count as it stands; or a
    /// refund (`refund`, floodgate's), which is never refused.
    Withheld { hits: u64, refund: bool },
}

impl ReferenceHits {
    pub fn of(hits: Hits) -> Self {
        match hits {
            Hits::Charge(n) => ReferenceHits::Add(n),
            Hits::CheckOnly(rule) => ReferenceHits::Check(rule),
            Hits::Refund(n) => ReferenceHits::TakeBack(n),
        }
    }

    /// The hits `INCRBY` adds: a check's 0 included.
    pub fn added(self) -> u64 {
        match self {
            ReferenceHits::Add(n) => n,
            ReferenceHits::Check(_)
            | ReferenceHits::TakeBack(_)
            | ReferenceHits::Withheld { .. } => 0,
        }
    }
}

/// One counter's outcome, from `after`, the count its key holds once the call's hits are in
/// (what `INCRBY` answered), and the time until its window ends. As for every store
/// (`core::decision::charging::outcome`), an admitted counter reports its budget after the hits, a
/// refused one as it stood before them.
pub fn outcome_of(
    limit: u64,
    hits: ReferenceHits,
    after: i64,
    reset_after: Micros,
) -> CounterOutcome {
    let after = u64::try_from(after).unwrap_or(0);
    // What the call still asks to fit on top of `after`: nothing for hits already in, or
    // held back (the reference judges those on the count as it stands, lines 211-214).
    let (added, charged, asked) = match hits {
        ReferenceHits::Add(n) => (n, n > 0, 0),
        ReferenceHits::Check(rule) => (0, false, rule.asked()),
        ReferenceHits::TakeBack(_) => (0, true, 0),
        ReferenceHits::Withheld { .. } => (0, false, 0),
    };
    let never_refused = matches!(hits, ReferenceHits::Withheld { refund: true, .. });
    let over = !never_refused && after.saturating_add(asked) > limit;
    let before = after.saturating_sub(added);
    let counted = if over { before } else { after };
    CounterOutcome {
        admitted: !over,
        snapshot: Snapshot {
            remaining: limit.saturating_sub(counted),
            reset_after,
        },
        retry_after: if over { reset_after.max(1) } else { 0 },
        charged,
        withheld: matches!(hits, ReferenceHits::Withheld { refund: false, .. }),
        wait: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arithmetic::algorithm::{Quota, Share};
    use crate::decision::plan::Counter;
    use crate::decision::response::Decided;
    use crate::ground::unit::Unit;
    use crate::ground::verdict::Role;

    const RESET: Micros = 30_000_000;

    fn admitted(limit: u64, hits: ReferenceHits, after: i64) -> bool {
        outcome_of(limit, hits, after, RESET).admitted
    }

    #[test]
    fn over_only_when_the_count_after_passes_the_limit() {
        // A limit of 3: the third hit is in, the fourth over.
        assert!(admitted(3, ReferenceHits::Add(1), 3));
        assert!(!admitted(3, ReferenceHits::Add(1), 4));
        // A charge of 10 000 against 100 left is over, and counted all the same.
        let big = outcome_of(100, ReferenceHits::Add(10_000), 10_050, RESET);
        assert!(!big.admitted && big.charged);
        assert_eq!(big.snapshot.remaining, 50, "as it stood before the charge");
        assert_eq!(big.retry_after, RESET);
    }

    #[test]
    fn a_check_is_over_only_beyond_the_limit() {
        // hits_addend 0 at count == limit: admitted (the reference's `after > limit`).
        let within = ReferenceHits::Check(CheckRule::WithinLimit);
        let at_limit = outcome_of(3, within, 3, RESET);
        assert!(at_limit.admitted && !at_limit.charged);
        assert_eq!(at_limit.snapshot.remaining, 0);
        assert!(!admitted(3, within, 4));
        assert!(admitted(3, within, 0));
    }

    #[test]
    fn a_check_by_floodgates_rule_asks_one_more_hit_to_fit() {
        let one_more = ReferenceHits::Check(CheckRule::OneMoreFits);
        assert!(admitted(3, one_more, 2));
        assert!(
            !admitted(3, one_more, 3),
            "at the limit one more does not fit"
        );
    }

    #[test]
    fn admitted_counters_report_their_budget_after_the_hits() {
        let fresh = outcome_of(10, ReferenceHits::Add(4), 4, RESET);
        assert_eq!(
            fresh.snapshot,
            Snapshot {
                remaining: 6,
                reset_after: RESET
            }
        );
        assert_eq!(fresh.retry_after, 0);
        let given_back = outcome_of(10, ReferenceHits::TakeBack(4), 0, RESET);
        assert!(given_back.admitted && given_back.charged);
        assert_eq!(given_back.snapshot.remaining, 10);
        // A count Redis reports below zero (written by hand) is an empty one.
        assert_eq!(
            outcome_of(10, ReferenceHits::Check(CheckRule::WithinLimit), -5, RESET)
                .snapshot
                .remaining,
            10
        );
    }

    #[test]
    fn hits_map_onto_the_references_commands() {
        assert_eq!(ReferenceHits::of(Hits::Charge(7)), ReferenceHits::Add(7));
        assert_eq!(
            ReferenceHits::of(Hits::CheckOnly(CheckRule::WithinLimit)),
            ReferenceHits::Check(CheckRule::WithinLimit)
        );
        assert_eq!(
            ReferenceHits::of(Hits::Refund(2)),
            ReferenceHits::TakeBack(2)
        );
    }

    #[test]
    fn the_verdict_takes_roles_into_account() {
        let counter = |descriptor, role| Counter {
            descriptor,
            key: vec![],
            quota: Quota::new(1, Unit::Minute),
            hits: Hits::Charge(1),
            role,
            share: Share::FULL,
        };
        let over = outcome_of(1, ReferenceHits::Add(1), 2, RESET);
        let within = outcome_of(1, ReferenceHits::Add(1), 1, RESET);
        let enforced = [counter(0, Role::Enforced), counter(1, Role::Enforced)];
        assert!(Decided::from_outcomes(&enforced, vec![within, over], false).over_limit);
        assert!(!Decided::from_outcomes(&enforced, vec![within, over], true).over_limit);
        let shadow = [counter(0, Role::Shadow)];
        assert!(!Decided::from_outcomes(&shadow, vec![over], false).over_limit);
        let quota = [counter(0, Role::Quota), counter(1, Role::Quota)];
        assert!(!Decided::from_outcomes(&quota, vec![within, over], false).over_limit);
        assert!(Decided::from_outcomes(&quota, vec![over, over], false).over_limit);
    }
}
