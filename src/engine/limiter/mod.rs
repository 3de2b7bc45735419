//! The service between the wire and the store: validates a request, plans it against the live
//! rules, lets the store count, and assembles the answer. Every protocol shell (gRPC, HTTP)
//! calls this and only converts.
//!
//! Each decision is also measured here, once for every shell: metrics (`telemetry::metrics`)
//! through handles resolved when the rules are swapped in, and, when tracing is on, a span
//! with a child for the store round trip (`telemetry::traces`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tracing::{field, Instrument as _, Span};

mod leases;

use self::leases::Leased;
use crate::core::adjustment::AdjustmentsAt;
use crate::core::dynamic_metadata::{self, RuleMetadata};
use crate::core::error_codes::{ErrorCodes, Undecided};
use crate::core::failure::{FailureAction, FailurePolicy, LogPace};
use crate::core::headers::HeaderMode;
use crate::core::lease;
use crate::core::outcome::{deciding_algorithm, deciding_descriptor, Decision, RejectReason};
use crate::core::overload::{overload_reply, OverloadReply};
use crate::core::plan::Plan;
use crate::core::plan::{plan_adjusted, PlanSettings};
use crate::core::request::{InvalidRequest, Request, RequestBounds};
use crate::core::response::{assemble_with_leases, fail_closed, Response};
use crate::core::rules::RuleSet;
use crate::core::semantics::Traces;
use crate::engine::adjustment_set::LiveAdjustments;
use crate::engine::lease_timings::LeaseTimings;
use crate::engine::self_shedding::{CallDepth, SelfShedding};
use crate::store::memory::MemoryStore;
use crate::store::{Decided, Store, StoreError};
use crate::telemetry::metrics::{self, Metrics, OverloadReason, StoreSeries, UNKNOWN_DOMAIN_LABEL};
use crate::telemetry::record::{
    call_decision, limited_series, record_call, DecidedCall, RuleSeriesTable,
};
use crate::telemetry::reference_stats::{self, ErrType, ReferenceKeyTable, ReferenceStats};
use crate::telemetry::traces::{self, hashed_value, RemoteParent};
use crate::telemetry::DecisionTelemetry;

/// Settings that shape every decision.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimiterSettings {
    pub bounds: RequestBounds,
    pub plan: PlanSettings,
    /// `--shadow-mode`: count and report, but answer OK.
    pub global_shadow: bool,
    pub header_mode: HeaderMode,
    /// What a request gets when the store fails, unless its domain says (`failure_policy:`).
    pub failure_policy: FailurePolicy,
    /// `--response-dynamic-metadata`: every decided answer carries `dynamic_metadata`
    /// (`core::dynamic_metadata`). Off, nothing of it is built.
    pub response_dynamic_metadata: bool,
    /// Which passed rules give their `metadata:` there (`core::semantics`).
    pub rule_metadata: RuleMetadata,
    /// What a call's spans are called (`--traces`).
    pub traces: Traces,
    /// `--shed-above`: shed calls past this many in the limiter (`engine::self_shedding`).
    pub shedding: Option<SelfShedding>,
    /// `--error-codes`: what the gRPC and HTTP shells answer a call that was not decided.
    pub error_codes: ErrorCodes,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error(transparent)]
    InvalidRequest(#[from] InvalidRequest),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Started without a configuration (envoyproxy/ratelimit's forced start) and none has
    /// loaded since: the reference's own answer.
    #[error("no rate limit configuration loaded")]
    NoConfiguration,
    /// Shed to protect floodgate (`--shed-above`) under `--overload-answer unavailable`; the
    /// other overload answers are responses.
    #[error("floodgate is overloaded: call shed past --shed-above calls in flight")]
    Overloaded,
}

impl LimitError {
    /// Why the call was not decided, for `--error-codes`; `None` for floodgate's own overload
    /// answer, which is the same at either door (the reference sheds nothing).
    pub fn undecided(&self) -> Option<Undecided> {
        match self {
            LimitError::InvalidRequest(_) => Some(Undecided::InvalidRequest),
            LimitError::Store(_) => Some(Undecided::StoreUnavailable),
            LimitError::NoConfiguration => Some(Undecided::NoConfiguration),
            LimitError::Overloaded => None,
        }
    }
}

/// The rules in force and their metric series, swapped together so a decision never looks up
/// one rule set's rule in another's table.
struct LiveRules {
    rules: Arc<RuleSet>,
    series: RuleSeriesTable,
    /// The reference's stats series of each rule's own key, as `series` for floodgate's.
    reference_keys: ReferenceKeyTable,
    /// False until a configuration loaded (a forced start without one).
    loaded: bool,
}

/// A rule set that was replaced, with its metric table; freed when dropped, unless a decision
/// that started before the swap still holds it.
pub struct RetiredRules(Arc<LiveRules>);

impl crate::engine::reload::Retired for RetiredRules {
    fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1 || Arc::strong_count(&self.0.rules) > 1
    }
}

/// The live rules and the store.
pub struct Limiter<S> {
    live: ArcSwap<LiveRules>,
    store: S,
    settings: LimiterSettings,
    telemetry: DecisionTelemetry,
    metrics: Option<&'static Metrics>,
    /// envoyproxy/ratelimit's stats, with USE_PROMETHEUS.
    reference_stats: Option<&'static ReferenceStats>,
    store_series: Option<StoreSeries>,
    /// Counters for `failure_policy: local`: decides while the shared store cannot.
    local_fallback: Option<MemoryStore>,
    /// Paces the failure-policy log line (a failed store fails every request).
    failure_log: std::sync::Mutex<LogPace>,
    /// The origin of `failure_log`'s clock.
    started: Instant,
    /// Limits changed at run time (overrides, adaptive values), planned with on every decision.
    adjustments: Arc<LiveAdjustments>,
    /// How long the leases of adaptive concurrency rules were held, for their controllers.
    lease_timings: LeaseTimings,
    /// Calls in `decide` now, which `--shed-above` sheds past.
    depth: CallDepth,
}

/// A call that got an answer: decided, or shed before the store was asked.
enum Answered {
    Decided(Response, Decision),
    Shed(Response),
}

impl Answered {
    fn into_response(self) -> Response {
        match self {
            Answered::Decided(response, _) | Answered::Shed(response) => response,
        }
    }
}

/// At most one failure-policy log line per this many milliseconds.
const FAILURE_LOG_INTERVAL_MS: u64 = 10_000;

impl<S: Store> Limiter<S> {
    pub fn new(rules: RuleSet, store: S, settings: LimiterSettings) -> Self {
        let metrics = metrics::global();
        if let Some(metrics) = metrics {
            metrics.follow_rules(&rules);
        }
        let reference_stats = reference_stats::global();
        if let Some(stats) = reference_stats {
            stats.follow_rules(&rules);
        }
        let store_series = metrics.and_then(|metrics| metrics.store_series(store.backend()).ok());
        Self {
            live: ArcSwap::from_pointee(live_rules(rules, metrics)),
            store,
            settings,
            telemetry: DecisionTelemetry::default(),
            metrics,
            reference_stats,
            store_series,
            local_fallback: None,
            failure_log: std::sync::Mutex::new(LogPace::new(FAILURE_LOG_INTERVAL_MS)),
            started: Instant::now(),
            adjustments: Arc::new(LiveAdjustments::default()),
            lease_timings: LeaseTimings::default(),
            depth: CallDepth::default(),
        }
    }

    /// Plans with `adjustments` (shared with whoever changes them) instead of a set of its own.
    pub fn with_adjustments(mut self, adjustments: Arc<LiveAdjustments>) -> Self {
        self.adjustments = adjustments;
        self
    }

    /// What the adaptive concurrency controllers read: the times held of their rules' leases.
    pub fn lease_timings(&self) -> &LeaseTimings {
        &self.lease_timings
    }

    /// The runtime adjustments this limiter plans with: set overrides and adaptive values here.
    pub fn adjustments(&self) -> &Arc<LiveAdjustments> {
        &self.adjustments
    }

    /// The in-process store that `failure_policy: local` decides with while this limiter's
    /// store fails. Without one, `local` answers as `error`.
    pub fn with_local_fallback(mut self, fallback: MemoryStore) -> Self {
        self.local_fallback = Some(fallback);
        self
    }

    /// The fallback store, for sweeping its expired counters.
    pub fn local_fallback(&self) -> Option<&MemoryStore> {
        self.local_fallback.as_ref()
    }

    /// How decisions are reported (near-limit ratio, descriptor values in spans).
    pub fn with_telemetry(mut self, telemetry: DecisionTelemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// A limiter whose rules are a stand-in until the first configuration loads: every call
    /// fails with [`LimitError::NoConfiguration`] until [`Limiter::replace_rules`].
    pub fn awaiting_configuration(self) -> Self {
        let current = self.live.load_full();
        self.live.store(Arc::new(LiveRules {
            rules: Arc::clone(&current.rules),
            series: RuleSeriesTable::build(&current.rules, None),
            reference_keys: ReferenceKeyTable::build(&current.rules, None),
            loaded: false,
        }));
        self
    }

    /// The rule set in force now.
    pub fn rules(&self) -> Arc<RuleSet> {
        Arc::clone(&self.live.load().rules)
    }

    /// Swaps in a new rule set whole: a request sees the old one or the new one, never a mix.
    /// Returns the old one, for the caller to free where it likes once decisions are done with
    /// it; the rule labels of its rules that are gone are released.
    pub fn replace_rules(&self, rules: RuleSet) -> RetiredRules {
        let live = Arc::new(live_rules(rules, self.metrics));
        let rules = Arc::clone(&live.rules);
        let old = self.live.swap(live);
        if let Some(metrics) = self.metrics {
            metrics.follow_rules(&rules);
        }
        if let Some(stats) = self.reference_stats {
            stats.follow_rules(&rules);
        }
        RetiredRules(old)
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn settings(&self) -> &LimiterSettings {
        &self.settings
    }

    /// Decides one request.
    pub async fn decide(&self, request: &Request) -> Result<Response, LimitError> {
        self.decide_traced(request, RemoteParent::none()).await
    }

    /// Decides one request whose caller may have sent its trace context (`parent`).
    pub async fn decide_traced(
        &self,
        request: &Request,
        parent: RemoteParent,
    ) -> Result<Response, LimitError> {
        if !traces::enabled() {
            return self.decide_measured(request, &Span::none()).await;
        }
        let (name, kind) = traces::decision_span(self.settings.traces);
        let span = tracing::info_span!(
            "ShouldRateLimit",
            otel.name = name,
            otel.kind = kind,
            otel.status_code = field::Empty,
            floodgate.domain = %request.domain,
            floodgate.descriptor_count = span_int(request.descriptors.len()),
            floodgate.descriptors = %self.descriptors_for_span(request),
            floodgate.decision = field::Empty,
            floodgate.rule = field::Empty,
            floodgate.algorithm = field::Empty,
            floodgate.store.backend = self.store.backend(),
            floodgate.store.duration_seconds = field::Empty,
            error.message = field::Empty,
        );
        parent.adopt(&span);
        self.decide_measured(request, &span)
            .instrument(span.clone())
            .await
    }

    /// The decision with its metrics; `span` (disabled when tracing is off) gets the outcome.
    async fn decide_measured(
        &self,
        request: &Request,
        span: &Span,
    ) -> Result<Response, LimitError> {
        let started = Instant::now();
        let _in_flight = self.metrics.map(Metrics::call_started);
        // Counted only when something reads it: no shared atomic on every call otherwise.
        let counted = self.settings.shedding.map(|_| self.depth.enter());
        let depth = counted.as_ref().map_or(0, |(_, depth)| *depth);
        let result = self.decide_recorded(request, span, depth).await;
        let decision = match &result {
            Ok(Answered::Decided(_, decision)) => *decision,
            // Shed, not decided: counted as an overload rejection, not as a call.
            Ok(Answered::Shed(_)) | Err(LimitError::Overloaded) => {
                span.record("floodgate.decision", "shed");
                return result.map(Answered::into_response);
            }
            Err(error) => {
                span.record("otel.status_code", "ERROR");
                span.record("error.message", field::display(error));
                if let Some(stats) = self.reference_stats {
                    stats.should_rate_limit_error(match error {
                        LimitError::Store(_) => ErrType::Store,
                        LimitError::InvalidRequest(_)
                        | LimitError::NoConfiguration
                        | LimitError::Overloaded => ErrType::Service,
                    });
                }
                Decision::Error
            }
        };
        span.record("floodgate.decision", decision.label());
        if let Some(metrics) = self.metrics {
            metrics.call_finished(decision, started.elapsed().as_secs_f64());
        }
        result.map(Answered::into_response)
    }

    async fn decide_recorded(
        &self,
        request: &Request,
        span: &Span,
        depth: u32,
    ) -> Result<Answered, LimitError> {
        // Owned: the plan borrows these rules across the store's await.
        let live = self.live.load_full();
        if !live.loaded {
            return Err(LimitError::NoConfiguration);
        }
        if let Err(invalid) = request.validate(&self.settings.bounds) {
            if let Some(metrics) = self.metrics {
                // The domain is request text: a label only when it is configured.
                let domain = match live.rules.domain(&request.domain) {
                    Some(domain) => domain.name.as_str(),
                    None => UNKNOWN_DOMAIN_LABEL,
                };
                metrics.invalid_request(domain);
            }
            return Err(invalid.into());
        }
        // Owned for the same reason; an empty set costs no clock read.
        let adjustments = self.adjustments.snapshot();
        let adjusted = (!adjustments.is_empty()).then(|| AdjustmentsAt {
            adjustments: &adjustments,
            now_unix_ms: self.adjustments.now_unix_ms(),
        });
        let mut plan = plan_adjusted(
            request,
            live.rules.domain(&request.domain),
            self.settings.plan,
            adjusted,
        );
        if let Some(shedding) = self.settings.shedding {
            if !shedding.survives(&plan, depth, rand::random()) {
                metrics::overload_rejected(OverloadReason::Shed);
                return match overload_reply(shedding.answer, request.descriptors.len()) {
                    OverloadReply::Unavailable => Err(LimitError::Overloaded),
                    OverloadReply::Answer(response) => Ok(Answered::Shed(response)),
                };
            }
        }
        // The core reads no randomness: the shell draws for every lease that may be shed.
        for call in plan.leases.iter_mut().filter(|call| call.shed_above > 0) {
            call.draw = rand::random();
        }

        let store_span = if span.is_disabled() {
            Span::none()
        } else {
            let backend = self.store.backend();
            tracing::info_span!(
                parent: span,
                "store.decide",
                otel.name = traces::store_span_name(self.settings.traces, backend),
                floodgate.store.backend = backend,
                floodgate.store.counters = span_int(plan.counters.len()),
                otel.status_code = field::Empty,
                error.message = field::Empty,
            )
        };
        let store_started = Instant::now();
        let policy = || {
            FailurePolicy::for_domain(
                live.rules
                    .domain(&request.domain)
                    .and_then(|domain| domain.failure_policy),
                self.settings.failure_policy,
            )
        };
        // Leases first: a request refused for want of a slot charges no rate limit.
        let lease_outcomes = match self.decide_leases(&plan, policy).await? {
            Leased::Decided(outcomes) => outcomes,
            Leased::Rejected(mut response) => {
                self.record_failure_rejection(&live, &request.domain, &plan);
                self.add_dynamic_metadata(&mut response, request, (&plan, &live.rules));
                return Ok(Answered::Decided(response, Decision::OverLimit));
            }
        };
        self.time_leases(&request.domain, &plan, &lease_outcomes);
        let leases_refuse = lease::over_limit(&plan, &lease_outcomes);
        // No counter (no rule matched, unlimited, replaced): nothing to ask the store.
        let decided = if leases_refuse && !self.settings.global_shadow {
            Ok(leases::refused_before_counting())
        } else if plan.counters.is_empty() {
            Ok(Decided::default())
        } else {
            let decided = self
                .store
                .decide(&plan.counters, self.settings.global_shadow)
                .instrument(store_span.clone())
                .await;
            if let Some(series) = &self.store_series {
                series.call(store_started.elapsed().as_secs_f64(), decided.is_ok());
            }
            decided
        };
        let store_seconds = store_started.elapsed().as_secs_f64();
        span.record("floodgate.store.duration_seconds", store_seconds);
        let decided = match decided {
            Ok(decided) => decided,
            Err(error @ StoreError::Unsupported { .. }) => {
                // The request's fault, not the store's: no failure policy answers it.
                let reason = error.to_string();
                return Err(LimitError::InvalidRequest(
                    InvalidRequest::UncountableLimit { reason },
                ));
            }
            Err(error) => {
                store_span.record("otel.status_code", "ERROR");
                store_span.record("error.message", field::display(&error));
                match self.apply_failure_policy(policy(), &plan, error).await? {
                    StoreFallback::Decided(decided) => decided,
                    StoreFallback::Rejected(mut response) => {
                        self.record_failure_rejection(&live, &request.domain, &plan);
                        self.add_dynamic_metadata(&mut response, request, (&plan, &live.rules));
                        return Ok(Answered::Decided(response, Decision::OverLimit));
                    }
                }
            }
        };
        drop(store_span);
        if decided.over_limit && !leases_refuse && !self.settings.global_shadow {
            self.undo_leases(&plan, &lease_outcomes).await;
        }

        let over_limit = decided.over_limit || (leases_refuse && !self.settings.global_shadow);
        let mut response = assemble_with_leases(
            &plan,
            (&decided.outcomes, &lease_outcomes),
            over_limit,
            self.settings.header_mode,
        );
        self.add_dynamic_metadata(&mut response, request, (&plan, &live.rules));
        let call = DecidedCall {
            request,
            rules: &live.rules,
            plan: &plan,
            decided: &decided,
            leases: &lease_outcomes,
            response: &response,
            global_shadow: self.settings.global_shadow,
            near_limit_ratio: self.telemetry.near_limit_ratio,
        };
        let decision = match self.metrics {
            Some(metrics) => record_call(metrics, &live.series, &call),
            None => call_decision(&call),
        };
        if let Some(stats) = self.reference_stats {
            stats.record_call(&live.reference_keys, &call);
        }
        if !span.is_disabled() {
            if let Some(index) = deciding_descriptor(&plan, &response) {
                if let Some(rule) = response
                    .statuses
                    .get(index)
                    .and_then(|s| s.rule_path.as_deref())
                {
                    span.record("floodgate.rule", rule);
                }
                if let Some(algorithm) = deciding_algorithm(&plan, &decided, index) {
                    span.record("floodgate.algorithm", algorithm.name());
                }
            }
        }
        Ok(Answered::Decided(response, decision))
    }

    /// The answer's `dynamic_metadata`, when `--response-dynamic-metadata` asks for it.
    fn add_dynamic_metadata(
        &self,
        response: &mut Response,
        request: &Request,
        (plan, rules): (&Plan<'_>, &RuleSet),
    ) {
        if self.settings.response_dynamic_metadata {
            let domain = rules.domain(&request.domain);
            let choice = self.settings.rule_metadata;
            dynamic_metadata::attach(response, request, plan, choice, domain);
        }
    }

    /// What the failure `policy` makes of a request the store failed with `error`.
    async fn apply_failure_policy(
        &self,
        policy: FailurePolicy,
        plan: &Plan<'_>,
        error: StoreError,
    ) -> Result<StoreFallback, StoreError> {
        match self.failure_action(policy, &error) {
            FailureAction::Unavailable => Err(error),
            // No outcomes: every limited descriptor is answered OK without a limit.
            FailureAction::Admit => Ok(StoreFallback::Decided(Decided::default())),
            FailureAction::Reject => Ok(StoreFallback::Rejected(fail_closed(
                plan,
                self.settings.header_mode,
                self.store.backend(),
            ))),
            FailureAction::DecideLocally => match &self.local_fallback {
                Some(fallback) => fallback
                    .decide(&plan.counters, self.settings.global_shadow)
                    .await
                    .map(StoreFallback::Decided),
                None => Err(error),
            },
        }
    }

    /// The action `policy` takes for a failed store call, counted and logged.
    fn failure_action(&self, policy: FailurePolicy, error: &StoreError) -> FailureAction {
        let action = policy.resolve(self.local_fallback.is_some(), self.settings.global_shadow);
        if let Some(metrics) = self.metrics {
            metrics.failure_policy_applied(policy.name());
        }
        self.log_failure(policy, error);
        action
    }

    /// One line per FAILURE_LOG_INTERVAL_MS at most, with how many were left out.
    fn log_failure(&self, policy: FailurePolicy, error: &StoreError) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let allowed = match self.failure_log.lock() {
            Ok(mut pace) => pace.allow(now),
            Err(poisoned) => poisoned.into_inner().allow(now),
        };
        if let Some(suppressed) = allowed {
            tracing::warn!(
                policy = policy.name(),
                suppressed,
                "store failed, answered by the failure policy: {error}"
            );
        }
    }

    /// `floodgate_requests_rejected_total{reason="failure_policy"}` for each limited rule.
    fn record_failure_rejection(&self, live: &LiveRules, domain: &str, plan: &Plan<'_>) {
        let Some(metrics) = self.metrics else {
            return;
        };
        let Some(domain) = live.rules.domain(domain) else {
            return;
        };
        for descriptor in &plan.descriptors {
            if let Some(series) = limited_series(metrics, &live.series, &domain.name, descriptor) {
                series.rejected(RejectReason::FailurePolicy);
            }
        }
    }

    /// The request's descriptors for its span, `key=value` joined by `,` and descriptors by
    /// `;`; values hashed unless `--trace-descriptor-values` (they may identify people).
    fn descriptors_for_span(&self, request: &Request) -> String {
        let mut text = String::new();
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            if index > 0 {
                text.push(';');
            }
            for (position, entry) in descriptor.entries.iter().enumerate() {
                if position > 0 {
                    text.push(',');
                }
                if self.telemetry.trace_descriptor_values {
                    let _ = write!(text, "{}={}", entry.key, entry.value);
                } else {
                    let _ = write!(text, "{}={}", entry.key, hashed_value(&entry.value));
                }
            }
        }
        text
    }
}

/// What a failure policy made of a failed store call.
enum StoreFallback {
    /// Carry on as if the store had answered this.
    Decided(Decided),
    /// The answer, complete (fail_closed).
    Rejected(Response),
}

/// A count as a span attribute: OpenTelemetry integers are signed (an unsigned value would be
/// exported as text).
fn span_int(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn live_rules(rules: RuleSet, metrics: Option<&Metrics>) -> LiveRules {
    let series = RuleSeriesTable::build(&rules, metrics);
    let reference_keys = ReferenceKeyTable::build(&rules, reference_stats::global());
    LiveRules {
        rules: Arc::new(rules),
        series,
        reference_keys,
        loaded: true,
    }
}
