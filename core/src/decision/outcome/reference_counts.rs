//! envoyproxy/ratelimit's per-key stats of one descriptor, with its meanings (its
//! `base_limiter.go`: `GetResponseDescriptorStatus`, `checkOverLimitThreshold`,
//! `checkNearLimitThreshold`, `increaseShadowModeStats`): everything counted in hits
//! (`hits_addend`), not descriptors. Telemetry adds these to the stats key's series.

use super::near_limit::{near_limit_hits, threshold, Around};
use crate::arithmetic::algorithm::Hits;
use crate::decision::plan::{DescriptorPlan, Plan};
use crate::decision::response::{deciding_counter, Decided};

/// What one descriptor adds to its stats key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReferenceCounts {
    /// Every hit of the descriptor.
    pub total_hits: u64,
    /// The hits past the limit: all of them when the counter was full before the call, else
    /// those beyond the limit. Counted in shadow mode too, as the reference does.
    pub over_limit: u64,
    /// The hits that landed between the near-limit threshold and the limit.
    pub near_limit: u64,
    /// All the hits of a descriptor within its limit.
    pub within_limit: u64,
    /// The over-limit hits of a rule in `shadow_mode` (answered OK).
    pub shadow_mode: u64,
}

/// The reference's counts for `descriptor_plan`, from the limit that decided it (the one the
/// answer reports: several limits on one rule must not count one hit several times). `None`
/// where the reference counts nothing: no rule, a replaced or `unlimited` rule, and hits that
/// take no budget (`hits_addend: 0`, negative hits).
pub fn reference_counts(
    plan: &Plan<'_>,
    descriptor_plan: &DescriptorPlan<'_>,
    decided: &Decided,
    ratio: f32,
) -> Option<ReferenceCounts> {
    let DescriptorPlan::Limited {
        counters, limit, ..
    } = descriptor_plan
    else {
        return None;
    };
    let (counter, outcome) = deciding_counter(plan, counters, &decided.outcomes)?;
    let Hits::Charge(hits) = counter.hits else {
        return None;
    };
    let capacity = counter.quota.capacity();
    let around = Around::of(outcome, capacity, hits);
    let near = threshold(capacity, ratio);
    let mut counts = ReferenceCounts {
        total_hits: hits,
        near_limit: near_limit_hits(capacity, near, around, hits, outcome.admitted),
        ..ReferenceCounts::default()
    };
    if outcome.admitted {
        counts.within_limit = hits;
    } else {
        // The reference adds the hits to its counter before judging them, so the hits past
        // the limit are `after - limit`, or all of them on a full counter.
        counts.over_limit = if around.before >= capacity {
            hits
        } else {
            around.after.saturating_sub(capacity)
        };
        if limit.shadow_mode() {
            counts.shadow_mode = counts.over_limit;
        }
    }
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arithmetic::algorithm::{Quota, Share, Snapshot};
    use crate::decision::plan::{Counter, LimitSource};
    use crate::decision::response::CounterOutcome;
    use crate::ground::unit::Unit;
    use crate::ground::verdict::Role;
    use crate::policy::config::{load, LoadOptions, SourceFile};

    const RATIO: f32 = 0.8;

    /// One descriptor limited by `source` at `limit`, hit `hits` times on a counter that had
    /// used `before`, admitted or not; charged as floodgate's default (all or nothing) does.
    fn counted(
        source: LimitSource<'_>,
        limit: u32,
        hits: u64,
        before: u64,
        admitted: bool,
    ) -> Option<ReferenceCounts> {
        let quota = Quota::new(limit, Unit::Minute);
        let capacity = quota.capacity();
        let plan = one_counter(source, quota, hits);
        let used = if admitted { before + hits } else { before };
        let decided = Decided {
            outcomes: vec![CounterOutcome {
                admitted,
                snapshot: Snapshot {
                    remaining: capacity.saturating_sub(used),
                    reset_after: 0,
                },
                retry_after: 0,
                charged: admitted,
                withheld: false,
                wait: 0,
            }],
            over_limit: !admitted,
        };
        reference_counts(&plan, &plan.descriptors[0], &decided, RATIO)
    }

    /// A plan of one descriptor limited by `source`, one counter of `quota` charged `hits`.
    fn one_counter(source: LimitSource<'_>, quota: Quota, hits: u64) -> Plan<'_> {
        Plan {
            descriptors: vec![DescriptorPlan::Limited {
                limit: source,
                counters: 0..1,
                class: None,
            }],
            counters: vec![Counter {
                descriptor: 0,
                key: b"k".to_vec(),
                quota,
                hits: Hits::Charge(hits),
                role: Role::Enforced,
                share: Share::FULL,
            }],
            leases: Vec::new(),
        }
    }

    fn an_override() -> LimitSource<'static> {
        LimitSource::Override {
            path: "d.k[override]".to_owned(),
            quotas: Vec::new(),
        }
    }

    fn overridden(limit: u32, hits: u64, before: u64) -> ReferenceCounts {
        let source = an_override();
        let admitted = before + hits <= u64::from(limit);
        counted(source, limit, hits, before, admitted).unwrap_or_default()
    }

    /// The worked examples of the reference's `fixed_cache_impl_test.go`: limit, hits, the
    /// count after INCRBY, then (over_limit, near_limit, within_limit).
    #[test]
    fn the_reference_examples() {
        type Case = (u32, u64, u64, (u64, u64, u64));
        let cases: [Case; 9] = [
            (10, 1, 5, (0, 0, 1)),
            (10, 1, 11, (1, 0, 0)),
            (10, 1, 13, (1, 0, 0)),
            (15, 1, 13, (0, 1, 1)),
            (20, 3, 19, (0, 3, 3)),
            (20, 3, 22, (2, 1, 0)),
            (20, 7, 22, (2, 4, 0)),
            (8, 2, 7, (0, 1, 2)),
            (20, 3, 5, (0, 0, 3)),
        ];
        for (limit, hits, after, (over, near, within)) in cases {
            let counts = overridden(limit, hits, after - hits);
            assert_eq!(
                counts,
                ReferenceCounts {
                    total_hits: hits,
                    over_limit: over,
                    near_limit: near,
                    within_limit: within,
                    shadow_mode: 0,
                },
                "L={limit} hits={hits} after={after}"
            );
        }
    }

    /// `TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig`'s last step for key4
    /// (`fixed_cache_impl_test.go` lines 732-755): limit 15, 2 hits held back at 13, OK with
    /// 2 left; the reference reads 11 → 13: 1 near-limit hit, 2 within, none over.
    #[test]
    fn a_withheld_charge_counts_as_the_reference_reads_it() {
        let plan = one_counter(an_override(), Quota::new(15, Unit::Hour), 2);
        let decided = Decided {
            outcomes: vec![CounterOutcome {
                admitted: true,
                snapshot: Snapshot {
                    remaining: 2,
                    reset_after: 0,
                },
                retry_after: 0,
                charged: false,
                withheld: true,
                wait: 0,
            }],
            over_limit: true,
        };
        assert_eq!(
            reference_counts(&plan, &plan.descriptors[0], &decided, RATIO),
            Some(ReferenceCounts {
                total_hits: 2,
                near_limit: 1,
                within_limit: 2,
                ..ReferenceCounts::default()
            })
        );
    }

    fn shadow_rules() -> crate::policy::rules::RuleSet {
        let file = SourceFile {
            name: "inline".to_owned(),
            text: "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    \
                   rate_limit: {unit: minute, requests_per_unit: 4}\n"
                .to_owned(),
        };
        load(&[file], &LoadOptions::default()).unwrap_or_else(|errors| panic!("{errors}"))
    }

    #[test]
    fn a_shadow_rule_over_its_limit_counts_over_and_shadow() {
        let rules = shadow_rules();
        let Some(rule) = rules
            .domain("d")
            .and_then(|domain| domain.rule_by_path("d.k"))
        else {
            panic!("d.k should be a rule");
        };
        let over = counted(LimitSource::Rule(rule), 4, 3, 2, false);
        assert_eq!(
            over.map(|counts| (counts.over_limit, counts.shadow_mode, counts.near_limit)),
            Some((1, 1, 1))
        );
        let within = counted(LimitSource::Rule(rule), 4, 1, 0, true);
        assert_eq!(within.map(|counts| counts.shadow_mode), Some(0));
    }

    #[test]
    fn nothing_is_counted_without_a_limit_or_hits() {
        let plan = Plan {
            descriptors: vec![DescriptorPlan::NoRule],
            counters: Vec::new(),
            leases: Vec::new(),
        };
        let decided = Decided {
            outcomes: Vec::new(),
            over_limit: false,
        };
        assert_eq!(
            reference_counts(&plan, &plan.descriptors[0], &decided, RATIO),
            None
        );
    }
}
