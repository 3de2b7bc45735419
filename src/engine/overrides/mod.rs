//! Operators' overrides as the admin API asks for them (`server::admin` decodes the request
//! and encodes the answer): a new one is checked against the rules in force and what the store
//! can decide, stored where every instance reads it (when the store is shared), put in force
//! and written to the audit log; a deletion goes the same way.

pub(crate) mod audit;
mod checks;
pub(crate) mod sync;

use std::sync::Arc;
use std::time::Duration;

use crate::core::policy::adjustment::InvalidAdjustment;
use crate::core::policy::request::Entry;
use crate::core::policy::rules::RuleSet;
use crate::engine::adjustment_set::OverrideRecord;
use crate::engine::limiter::Limiter;
use crate::store::redis::UnsupportedQuota;
use crate::store::{Store, StoreError};
use sync::SharedOverrides;

/// The longest `reason` accepted (it is logged and listed).
pub const MAX_REASON_CHARS: usize = 500;

/// A new override, as the caller asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideRequest {
    pub domain: String,
    pub rule: RuleChoice,
    pub requests_per_unit: u64,
    /// Which of the rule's limits, by unit name; needed only for a rule with several.
    pub unit: Option<String>,
    pub ttl: Duration,
    pub reason: String,
}

/// How the caller names the rule to override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleChoice {
    /// Its config path, as `/rlconfig` shows it.
    Path(String),
    /// Descriptor entries that match it, as a request would send them.
    Descriptor(Vec<Entry>),
}

/// Why a new override cannot apply: each message names the field at fault and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOverride {
    #[error("domain: {domain:?} is not in the current configuration (domains: {known})")]
    UnknownDomain { domain: String, known: String },
    #[error(
        "rule: no rule {path:?} in domain {domain:?}; give a config path as /rlconfig shows \
         it{example}"
    )]
    UnknownRule {
        path: String,
        domain: String,
        /// `, e.g. "<a rule's path>"`, or empty for a domain without rules.
        example: String,
    },
    #[error(
        "descriptor: [{entries}] matches no rule of domain {domain:?}; check it with \
         `floodgate check --explain`"
    )]
    NoRuleMatches { entries: String, domain: String },
    #[error("unit: {text:?} is not one of {units}")]
    UnknownUnit { text: String, units: String },
    #[error("requests_per_unit: {0}")]
    Limit(InvalidAdjustment),
    #[error("requests_per_unit: the Redis store cannot decide this limit: {0}")]
    Uncountable(UnsupportedQuota),
    #[error(
        "ttl: an override must last at least 1 s (to end one now, DELETE /v1/overrides/{{id}}); \
         give a duration such as \"90s\", \"15m\" or \"2h\" (or seconds as a number)"
    )]
    TooShort,
    #[error(
        "ttl: at most 24h: an override is for an incident; change the configuration for longer"
    )]
    TooLong,
    #[error(
        "reason: say why (it is logged and listed), e.g. \"incident 42: shed load from bots\""
    )]
    NoReason,
    #[error("reason: at most {MAX_REASON_CHARS} characters; put details in the incident ticket")]
    ReasonTooLong,
}

/// Why an override was not set.
#[derive(Debug, thiserror::Error)]
pub enum SetRefused {
    #[error(transparent)]
    Invalid(#[from] InvalidOverride),
    #[error(
        "the override was not set: it could not be stored in Redis, where every instance reads \
         it ({0}); try again when Redis answers"
    )]
    NotShared(StoreError),
}

/// Why an override was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteRefused {
    #[error(
        "no override with id {0:?}: it may have expired already (GET /v1/overrides lists the \
         active ones)"
    )]
    NotFound(String),
    #[error(
        "the override was not deleted: Redis, where every instance reads it, did not answer \
         ({0}); try again when Redis answers"
    )]
    NotShared(StoreError),
}

/// An override in force, with the rules it was checked against.
#[derive(Debug)]
pub struct SetOverride {
    pub record: OverrideRecord,
    /// The id of the rule's earlier override, which this one replaced.
    pub replaced: Option<String>,
    pub rules: Arc<RuleSet>,
}

/// The overrides in force, the rules they apply to, and the time they were read at.
#[derive(Debug)]
pub struct OverrideListing {
    pub overrides: Vec<OverrideRecord>,
    pub rules: Arc<RuleSet>,
    pub now_unix_ms: u64,
}

/// Sets, lists and deletes the overrides of a limiter (and of every instance sharing its store).
pub struct OverrideDesk<S> {
    limiter: Arc<Limiter<S>>,
    /// The overrides every instance shares (a store on Redis); `None`: this process only.
    shared: Option<Arc<SharedOverrides>>,
}

impl<S: Store> OverrideDesk<S> {
    pub fn new(limiter: Arc<Limiter<S>>, shared: Option<Arc<SharedOverrides>>) -> Self {
        Self { limiter, shared }
    }

    /// The time overrides are measured against (the adjustments' clock).
    pub fn now_unix_ms(&self) -> u64 {
        self.limiter.adjustments().now_unix_ms()
    }

    pub fn list(&self) -> OverrideListing {
        let adjustments = self.limiter.adjustments();
        OverrideListing {
            now_unix_ms: adjustments.now_unix_ms(),
            rules: self.limiter.rules(),
            overrides: adjustments.overrides(),
        }
    }

    /// Checks `request`, shares it, puts it in force in place of the rule's earlier override,
    /// and logs it as `from`'s.
    pub async fn set(
        &self,
        request: &OverrideRequest,
        from: &str,
    ) -> Result<SetOverride, SetRefused> {
        let rules = self.limiter.rules();
        let record = checks::record(request, &rules, self.limiter.store(), self.now_unix_ms())?;
        let previous = self.current_override(&record);
        self.share(&record, previous.as_ref(), from).await?;
        let adjustments = self.limiter.adjustments();
        let replaced = adjustments.set_override(record.clone());
        adjustments.publish_metrics(&rules);
        audit::set(&record, replaced.as_ref(), from);
        Ok(SetOverride {
            replaced: replaced.or(previous).map(|old| old.id),
            record,
            rules,
        })
    }

    /// Ends override `id` here and, when shared, on every instance; logs it as `from`'s.
    pub async fn delete(&self, id: &str, from: &str) -> Result<(), DeleteRefused> {
        let found_shared = match &self.shared {
            Some(shared) => shared.remove(id).await.map_err(DeleteRefused::NotShared)?,
            None => false,
        };
        let adjustments = self.limiter.adjustments();
        let removed = adjustments.remove_override(id);
        if removed.is_none() && !found_shared {
            return Err(DeleteRefused::NotFound(id.to_owned()));
        }
        adjustments.publish_metrics(&self.limiter.rules());
        audit::deleted(id, removed.as_ref(), from);
        Ok(())
    }

    /// The override in force on `record`'s rule, which `record` replaces.
    fn current_override(&self, record: &OverrideRecord) -> Option<OverrideRecord> {
        self.limiter
            .adjustments()
            .overrides()
            .into_iter()
            .find(|old| old.domain == record.domain && old.rule == record.rule)
    }

    /// Stores `record` where every instance reads it, in place of `previous`; nothing to do
    /// when this process is alone.
    async fn share(
        &self,
        record: &OverrideRecord,
        previous: Option<&OverrideRecord>,
        from: &str,
    ) -> Result<(), SetRefused> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        shared
            .put(record, previous.map(|old| old.id.as_str()))
            .await
            .map_err(|error| {
                audit::not_set(&error, from);
                SetRefused::NotShared(error)
            })
    }
}
