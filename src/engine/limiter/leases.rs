//! The limiter's lease calls (concurrency rules, `core::arithmetic::lease`): asked of the store before the
//! rate-limit counters, so that a request refused for want of a slot charges nothing; the
//! failure policy answers a store that cannot decide them, as it does for counters.

use super::observer::CallObserver;
use super::Limiter;
use crate::core::arithmetic::failure::{FailureAction, FailurePolicy};
use crate::core::arithmetic::lease::{self, LeaseOutcome};
use crate::core::decision::plan::{DescriptorPlan, Plan};
use crate::core::decision::response::fail_closed;
use crate::store::{Decided, Store, StoreError};

/// What the lease calls came to.
pub(super) enum Leased {
    /// One outcome per call of the plan.
    Decided(Vec<LeaseOutcome>),
    /// The failure policy's answer, complete.
    Rejected(crate::core::decision::response::Response),
}

impl<S: Store> Limiter<S> {
    /// Decides `plan`'s lease calls (none: nothing asked).
    pub(super) async fn decide_leases(
        &self,
        plan: &Plan<'_>,
        policy: impl FnOnce() -> FailurePolicy,
        observer: &CallObserver<'_>,
    ) -> Result<Leased, StoreError> {
        if plan.leases.is_empty() {
            return Ok(Leased::Decided(Vec::new()));
        }
        let error = match self.store.leases(&plan.leases).await {
            Ok(outcomes) => return Ok(Leased::Decided(outcomes)),
            Err(error) => error,
        };
        let policy = policy();
        match self.failure_action(policy, &error, observer) {
            FailureAction::Unavailable => Err(error),
            FailureAction::Admit => {
                Ok(Leased::Decided(lease::admitted_without_store(&plan.leases)))
            }
            FailureAction::Reject => Ok(Leased::Rejected(fail_closed(
                plan,
                self.settings.header_mode,
                self.store.backend(),
            ))),
            FailureAction::DecideLocally => match &self.local_fallback {
                Some(fallback) => fallback.leases(&plan.leases).await.map(Leased::Decided),
                None => Err(error),
            },
        }
    }

    /// Tells the adaptive concurrency controllers what the lease calls found.
    pub(super) fn time_leases(&self, domain: &str, plan: &Plan<'_>, outcomes: &[LeaseOutcome]) {
        if outcomes.is_empty() || !self.lease_timings.any() {
            return;
        }
        for (call, outcome) in plan.leases.iter().zip(outcomes) {
            if let Some(DescriptorPlan::Concurrency { rule, .. }) =
                plan.descriptors.get(call.descriptor)
            {
                if rule.adaptive.is_some() {
                    self.lease_timings.record(domain, &rule.path, call, outcome);
                }
            }
        }
    }

    /// Gives back the slots a request acquired when its rate limits refused it. A failure
    /// here is logged: the leases then free themselves after their TTL.
    pub(super) async fn undo_leases(&self, plan: &Plan<'_>, outcomes: &[LeaseOutcome]) {
        let undo = lease::undo_acquired(&plan.leases, outcomes);
        if undo.is_empty() {
            return;
        }
        if let Err(error) = self.store.leases(&undo).await {
            tracing::warn!(
                %error,
                "could not give back the leases of a request its rate limits refused; they \
                 free themselves after their ttl"
            );
        }
    }
}

/// What stands for the counters when the leases refused the request: nothing asked, nothing
/// charged, over the limit (its rate-limit descriptors are answered without a limit).
pub(super) fn refused_before_counting() -> Decided {
    Decided {
        outcomes: Vec::new(),
        over_limit: true,
    }
}
