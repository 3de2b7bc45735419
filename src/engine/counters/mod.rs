//! One counter read or reset at an operator's request (`server::admin` decodes the request
//! and encodes the answer): the descriptor is planned as a request would be, with the limits
//! in force (overrides included), and the store is asked what it holds for each of its
//! counters and how a request of one hit would find it now (a check-only look, which charges
//! nothing), or told to forget them. A reset is written to the audit log.

use std::sync::Arc;

use crate::core::arithmetic::algorithm::Quota;
use crate::core::arithmetic::ban::{BanAction, BanOutcome};
use crate::core::decision::bans::{ban_calls, BanCall};
use crate::core::decision::plan::{plan_adjusted, Counter, DescriptorPlan, Plan};
use crate::core::decision::response::CounterOutcome;
use crate::core::policy::adjustment::AdjustmentsAt;
use crate::core::policy::request::{Descriptor, Entry, Request};
use crate::core::policy::rules::RuleSet;
use crate::engine::limiter::Limiter;
use crate::engine::overrides::audit;
use crate::store::{HeldCounter, Store, StoreError};

/// The descriptor whose counters an operator asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterQuery {
    pub domain: String,
    pub entries: Vec<Entry>,
}

impl CounterQuery {
    /// The entries as `key=value, …`, for messages and the audit log.
    pub fn shown(&self) -> String {
        self.entries
            .iter()
            .map(|entry| format!("{}={}", entry.key, entry.value))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One counter of the descriptor: its rule and limit, what the store holds, and how a
/// request of one hit would find it.
#[derive(Debug, Clone)]
pub struct CounterReading {
    pub rule: String,
    pub quota: Quota,
    /// `None`: the store holds nothing (a fresh counter).
    pub held: Option<HeldCounter>,
    pub now: CounterOutcome,
}

/// A descriptor's counters and its ban record.
#[derive(Debug, Clone)]
pub struct Reading {
    pub counters: Vec<CounterReading>,
    /// `None`: the rule does not ban.
    pub ban: Option<BanOutcome>,
}

/// A descriptor planned: its counters, each one's rule path, and its ban check (if its rule
/// bans).
struct Planned {
    counters: Vec<Counter>,
    paths: Vec<String>,
    bans: Vec<BanCall>,
}

/// Why a descriptor's counters cannot be read or reset.
#[derive(Debug, thiserror::Error)]
pub enum CounterRefused {
    #[error("domain: {domain:?} is not in the current configuration (domains: {known})")]
    UnknownDomain { domain: String, known: String },
    #[error(
        "descriptor: [{entries}] matches no rule of domain {domain:?} that counts; check it \
         with `floodgate check --explain`"
    )]
    NotCounted { entries: String, domain: String },
    #[error(
        "descriptor: [{entries}] is decided by a {kind} rule, which keeps no counter to show \
         or reset"
    )]
    NoCounter { entries: String, kind: &'static str },
    #[error("the store did not answer: {0}; try again when it does")]
    Store(#[from] StoreError),
}

/// Reads and resets the counters of a limiter's store.
pub struct CounterDesk<S> {
    limiter: Arc<Limiter<S>>,
}

impl<S: Store> CounterDesk<S> {
    pub fn new(limiter: Arc<Limiter<S>>) -> Self {
        Self { limiter }
    }

    /// What the store holds for `query`'s counters, one reading per limit of its rule, and
    /// its ban record when the rule bans.
    pub async fn read(&self, query: &CounterQuery) -> Result<Reading, CounterRefused> {
        let rules = self.limiter.rules();
        let planned = self.plan(&rules, query)?;
        let store = self.limiter.store();
        let held = store.held(&planned.counters).await?;
        let looked = store.look(&planned.counters).await?;
        let ban = ban_record(store, &planned.bans, BanAction::Check).await?;
        let counters = planned
            .counters
            .iter()
            .zip(held)
            .zip(looked.outcomes)
            .zip(planned.paths)
            .map(|(((counter, held), now), rule)| CounterReading {
                rule,
                quota: counter.quota.clone(),
                held,
                now,
            })
            .collect();
        Ok(Reading { counters, ban })
    }

    /// Forgets `query`'s counters and lifts its ban, logged as `from`'s: how many counters
    /// the store held.
    pub async fn reset(&self, query: &CounterQuery, from: &str) -> Result<usize, CounterRefused> {
        let rules = self.limiter.rules();
        let planned = self.plan(&rules, query)?;
        let store = self.limiter.store();
        let removed = store.reset(&planned.counters).await?;
        ban_record(store, &planned.bans, BanAction::Lift).await?;
        // What `failure_policy: local` counted while the shared store failed goes too: the
        // descriptor would meet those counts (or that ban) again at the next failure.
        if let Some(fallback) = self.limiter.local_fallback() {
            fallback.reset(&planned.counters).await?;
            ban_record(fallback, &planned.bans, BanAction::Lift).await?;
        }
        if let (Some(board), Some(path)) = (self.limiter.heavy_hitters(), planned.paths.first()) {
            board.lifted(path, &Descriptor::new(query.entries.clone()));
        }
        let rule = planned.paths.first().map_or("", String::as_str);
        audit::counters_reset(&query.domain, rule, &query.shown(), removed, from);
        Ok(removed)
    }

    /// `query` planned as a check-only request (charging nothing), with the rule path of
    /// each counter.
    fn plan(&self, rules: &RuleSet, query: &CounterQuery) -> Result<Planned, CounterRefused> {
        let domain = rules
            .domain(&query.domain)
            .ok_or_else(|| CounterRefused::UnknownDomain {
                domain: query.domain.clone(),
                known: rules
                    .domains()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let request = Request {
            domain: query.domain.clone(),
            descriptors: vec![Descriptor {
                hits_addend: Some(0),
                ..Descriptor::new(query.entries.clone())
            }],
            hits_addend: 0,
        };
        let adjustments = self.limiter.adjustments();
        let snapshot = adjustments.snapshot();
        let adjusted = AdjustmentsAt {
            adjustments: &snapshot,
            now_unix_ms: adjustments.now_unix_ms(),
        };
        let plan = plan_adjusted(
            &request,
            Some(domain),
            self.limiter.settings().plan,
            Some(adjusted),
        );
        let paths = counter_paths(&plan, query)?;
        let bans = ban_calls(&plan, BanAction::Check, |_, _| true);
        Ok(Planned {
            counters: plan.counters,
            paths,
            bans,
        })
    }
}

/// `action` on the descriptor's ban record in `store`, if its rule bans.
async fn ban_record(
    store: &impl Store,
    checks: &[BanCall],
    action: BanAction,
) -> Result<Option<BanOutcome>, StoreError> {
    if checks.is_empty() {
        return Ok(None);
    }
    let calls: Vec<BanCall> = checks
        .iter()
        .map(|call| BanCall {
            action,
            ..call.clone()
        })
        .collect();
    let outcomes = store.bans(&calls).await?;
    Ok(outcomes.first().copied())
}

/// The rule path of each counter of a one-descriptor plan, or why it has none.
fn counter_paths(plan: &Plan<'_>, query: &CounterQuery) -> Result<Vec<String>, CounterRefused> {
    let shown = || query.shown();
    let kind = match plan.descriptors.first() {
        Some(DescriptorPlan::Limited {
            limit, counters, ..
        }) if !counters.is_empty() => {
            return Ok(vec![limit.path().to_owned(); counters.len()]);
        }
        Some(DescriptorPlan::Unlimited { .. }) => "unlimited",
        Some(DescriptorPlan::Concurrency { .. }) => "concurrency",
        _ => {
            return Err(CounterRefused::NotCounted {
                entries: shown(),
                domain: query.domain.clone(),
            })
        }
    };
    Err(CounterRefused::NoCounter {
        entries: shown(),
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::config::load_valid;
    use crate::engine::limiter::LimiterSettings;
    use crate::engine::test_rules::{memory_store, SHOP};

    /// `request`'s counters, charging one hit each.
    fn charging(rules: &RuleSet, request: &Request) -> Vec<Counter> {
        let domain = rules.domain(&request.domain);
        plan_adjusted(request, domain, LimiterSettings::default().plan, None).counters
    }

    #[tokio::test]
    async fn a_reset_forgets_the_local_fallbacks_counts_and_ban_too() {
        let rules = load_valid("shop.yaml", SHOP);
        let alice = vec![Entry::new("user", "alice")];
        let request = Request {
            domain: "shop".to_owned(),
            descriptors: vec![Descriptor::new(alice.clone())],
            hits_addend: 1,
        };
        let counters = charging(&rules, &request);
        let limiter = Limiter::new(rules, memory_store(), LimiterSettings::default())
            .with_local_fallback(memory_store());
        let desk = CounterDesk::new(Arc::new(limiter));
        let fallback = desk
            .limiter
            .local_fallback()
            .unwrap_or_else(|| panic!("the limiter has its fallback"));
        // What the fallback decided while the shared store failed: past the limit, and the
        // strike that banned the value (`after: 1`).
        for _ in 0..3 {
            fallback
                .decide(&counters, false)
                .await
                .unwrap_or_else(|error| panic!("the fallback decides: {error}"));
        }
        let query = CounterQuery {
            domain: "shop".to_owned(),
            entries: alice,
        };
        let planned = desk
            .plan(&desk.limiter.rules(), &query)
            .unwrap_or_else(|refused| panic!("{refused}"));
        let banned = ban_record(fallback, &planned.bans, BanAction::Strike).await;
        assert!(
            matches!(banned, Ok(Some(ban)) if ban.banned_for > 0),
            "{banned:?}"
        );

        desk.reset(&query, "test")
            .await
            .unwrap_or_else(|refused| panic!("{refused}"));

        let held = fallback.held(&planned.counters).await;
        assert!(
            matches!(&held, Ok(held) if held.iter().all(Option::is_none)),
            "{held:?}"
        );
        let banned = ban_record(fallback, &planned.bans, BanAction::Check).await;
        assert!(
            matches!(banned, Ok(Some(ban)) if ban.banned_for == 0),
            "{banned:?}"
        );
    }
}
