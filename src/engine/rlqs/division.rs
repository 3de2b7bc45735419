//! What a bucket is divided under, as of a stream's last report on it (the rule's limit and
//! the bucket's priority class, or a fixed assignment), and this stream's assignment under it
//! now: the same at a report and at a push, which comes between two reports.

use std::sync::Arc;
use std::time::Instant;

use super::board::{DomainBuckets, QuotaBoard, StreamId};
use super::settings::QuotaSettings;
use super::stream::InForce;
use crate::core::arithmetic::priority::Priority;
use crate::core::policy::rlqs::{assign, opening, Assignment, BucketKey, BucketLimit};
use crate::core::policy::rules::DomainRules;

#[derive(Debug, Clone)]
pub(super) enum Division {
    /// Allow-all or deny-all whoever else reports: an unlimited rule, or no rule.
    Fixed(Assignment),
    /// A share of the rule's limit, in the bucket's priority class if it names one.
    Shared {
        limit: BucketLimit,
        per_second: f64,
        class: Option<(Arc<Priority>, usize)>,
    },
}

impl Division {
    /// The division of `key` in `domain` under the rules and adjustments in force.
    pub(super) fn of(
        key: &BucketKey,
        domain: &str,
        domain_rules: Option<&DomainRules>,
        in_force: InForce<'_>,
        settings: &QuotaSettings,
    ) -> Division {
        let matched = domain_rules.and_then(|rules| key.lookup(rules));
        // The bucket's priority class, when it names one of its rule's classes.
        let class = matched.as_ref().and_then(|matched| {
            let priority = matched.rule.priority.as_ref()?;
            matched.class_entry?;
            let index = priority.class_for(key.value_of(&priority.key)).index;
            Some((Arc::new((**priority).clone()), index))
        });
        let rule = matched
            .map(|matched| matched.rule)
            .or_else(|| domain_rules.and_then(|rules| settings.unmatched.default_rule(rules)));
        let Some(rule) = rule else {
            return Division::Fixed(settings.unmatched.fallback());
        };
        let adjustment = in_force
            .adjustments
            .effective(domain, &rule.path, in_force.now_unix_ms);
        match BucketLimit::of_adjusted_rule(rule, adjustment) {
            BucketLimit::Unlimited => Division::Fixed(Assignment::AllowAll),
            limit @ BucketLimit::Limited { per_second, .. } => Division::Shared {
                limit,
                per_second,
                class,
            },
        }
    }

    /// Requests per second divided (0 for a fixed assignment).
    pub(super) fn per_second(&self) -> f64 {
        match self {
            Division::Fixed(_) => 0.0,
            Division::Shared { per_second, .. } => *per_second,
        }
    }

    /// `stream`'s assignment on `key` now, from what every stream on it last reported. Until
    /// its demand there is measured the bucket is new on its Envoy, whose token bucket starts
    /// full: it opens with a part of its burst (`core::policy::rlqs::opening`).
    pub(super) fn assignment(
        &self,
        buckets: &mut DomainBuckets,
        key: &BucketKey,
        stream: StreamId,
        now: Instant,
        settings: &QuotaSettings,
    ) -> Assignment {
        let assignment = match self {
            Division::Fixed(assignment) => return *assignment,
            Division::Shared {
                limit,
                per_second,
                class,
            } => {
                let class = class
                    .as_ref()
                    .map(|(priority, index)| (&**priority, *index));
                let total = buckets.bucket_total(key, class, *per_second, settings.shares);
                // The last exchange's, however old: while the store cannot be reached the
                // total stays divided as it last was (under-admitting if a peer has gone,
                // never admitting the limit once per instance).
                let peers = buckets.peers.get(key).map(|peers| peers.demands.as_slice());
                let share = buckets.buckets.get_mut(key).map_or(0.0, |envoys| {
                    QuotaBoard::share(envoys, stream, (total, peers), now, settings)
                });
                assign(*limit, share)
            }
        };
        let measured = buckets
            .buckets
            .get(key)
            .into_iter()
            .flatten()
            .any(|envoy| envoy.stream == stream && envoy.demand.is_some());
        if measured {
            assignment
        } else {
            opening(assignment, settings.push)
        }
    }
}
