//! The limiter's bans (`ban:` rules, `core::decision::bans`): a request with a banning rule
//! first asks whether any of its keys is banned. A banned request is refused without charging
//! anything (its counters are only looked at, for the answer), its Retry-After the ban's end;
//! otherwise it is counted, and each banning descriptor its limits refused is a strike, which
//! may start a ban. Rules without `ban:` cost nothing here; `--shadow-mode` bans nothing.

use super::observer::CallObserver;
use super::Limiter;
use crate::core::arithmetic::algorithm::Hits;
use crate::core::arithmetic::ban::{BanAction, BanOutcome};
use crate::core::decision::bans::{apply_bans, ban_calls, bans_apply, strike_calls, BanCall};
use crate::core::decision::plan::{Counter, DescriptorPlan, Plan};
use crate::core::policy::request::Request;
use crate::store::{Decided, Store, StoreError};

impl<S: Store> Limiter<S> {
    /// `count`, with the plan's bans checked before and struck after.
    pub(super) async fn count_with_bans(
        &self,
        request: &Request,
        plan: &Plan<'_>,
        leases_refuse: bool,
        observer: &CallObserver<'_>,
    ) -> Result<Decided, StoreError> {
        if leases_refuse || self.settings.global_shadow || !bans_apply(plan) {
            return self.count(plan, leases_refuse, observer).await;
        }
        let checks = ban_calls(plan, BanAction::Check, |_, _| true);
        let found = match self.store.bans(&checks).await {
            Ok(found) => found,
            Err(error) => return Err(finished(observer, error)),
        };
        if !found.iter().any(|outcome| outcome.banned_for > 0) {
            let mut decided = self.count(plan, false, observer).await?;
            self.strike(request, plan, &mut decided).await;
            return Ok(decided);
        }
        self.list_bans(request, plan, &checks, &found);
        let looked: Vec<Counter> = plan
            .counters
            .iter()
            .map(|counter| Counter {
                hits: Hits::PEEK,
                ..counter.clone()
            })
            .collect();
        let mut decided = match self.store.decide(&looked, false).await {
            Ok(decided) => decided,
            Err(error) => return Err(finished(observer, error)),
        };
        observer.store_answered(true);
        observer.store_finished();
        apply_bans(plan, &checks, &found, &mut decided);
        Ok(decided)
    }

    /// Records a strike for each banning descriptor `decided` refused; a ban one starts shows
    /// in this answer's retry. A store that fails here leaves the answer as it was (it
    /// refused already), logged.
    async fn strike(&self, request: &Request, plan: &Plan<'_>, decided: &mut Decided) {
        let strikes = strike_calls(plan, decided);
        if strikes.is_empty() {
            return;
        }
        match self.store.bans(&strikes).await {
            Ok(struck) => {
                apply_bans(plan, &strikes, &struck, decided);
                self.list_bans(request, plan, &strikes, &struck);
            }
            Err(error) => tracing::warn!(
                %error,
                "could not record a refusal towards a ban; the request stays refused"
            ),
        }
    }
}

impl<S: Store> Limiter<S> {
    /// Each ban in force that `outcomes` found, listed among its rule's banned values
    /// (`--heavy-hitters`).
    fn list_bans(
        &self,
        request: &Request,
        plan: &Plan<'_>,
        calls: &[BanCall],
        outcomes: &[BanOutcome],
    ) {
        let Some(board) = self.heavy_hitters() else {
            return;
        };
        for (call, outcome) in calls.iter().zip(outcomes) {
            let rule = match plan.descriptors.get(call.descriptor) {
                Some(DescriptorPlan::Limited { limit, .. }) => limit.rule(),
                _ => None,
            };
            if let (Some(rule), Some(descriptor)) = (rule, request.descriptors.get(call.descriptor))
            {
                board.banned(rule, descriptor, outcome);
            }
        }
    }
}

/// The store's time told to the call's telemetry, for a store that failed with `error`.
fn finished(observer: &CallObserver<'_>, error: StoreError) -> StoreError {
    observer.store_answered(false);
    observer.store_finished();
    error
}
