//! The service between the wire and the store: validates a request, plans it against the live
//! rules, lets the store count, and assembles the answer. Every protocol shell (gRPC, HTTP)
//! calls this and only converts.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::core::headers::HeaderMode;
use crate::core::plan::{plan, PlanSettings};
use crate::core::request::{InvalidRequest, Request, RequestBounds};
use crate::core::response::{assemble, Response};
use crate::core::rules::RuleSet;
use crate::store::{Store, StoreError};

/// Settings that shape every decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimiterSettings {
    pub bounds: RequestBounds,
    pub plan: PlanSettings,
    /// `--shadow-mode`: count and report, but answer OK.
    pub global_shadow: bool,
    pub header_mode: HeaderMode,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error(transparent)]
    InvalidRequest(#[from] InvalidRequest),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The live rules and the store.
pub struct Limiter<S> {
    rules: ArcSwap<RuleSet>,
    store: S,
    settings: LimiterSettings,
}

impl<S: Store> Limiter<S> {
    pub fn new(rules: RuleSet, store: S, settings: LimiterSettings) -> Self {
        Self {
            rules: ArcSwap::from_pointee(rules),
            store,
            settings,
        }
    }

    /// The rule set in force now.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Swaps in a new rule set whole: a request sees the old one or the new one, never a mix.
    pub fn replace_rules(&self, rules: RuleSet) {
        self.rules.store(Arc::new(rules));
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn settings(&self) -> &LimiterSettings {
        &self.settings
    }

    /// Decides one request.
    pub async fn decide(&self, request: &Request) -> Result<Response, LimitError> {
        request.validate(&self.settings.bounds)?;
        let rules = self.rules.load_full();
        let plan = plan(request, rules.domain(&request.domain), self.settings.plan);
        let decided = self
            .store
            .decide(&plan.counters, self.settings.global_shadow)
            .await?;
        Ok(assemble(
            &plan,
            &decided.outcomes,
            decided.over_limit,
            self.settings.header_mode,
        ))
    }
}
