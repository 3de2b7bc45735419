//! The service between the wire and the store: validates a request, plans it against the live
//! rules, lets the store count, and assembles the answer. Every protocol shell (gRPC, HTTP)
//! calls this and only converts.
//!
//! Each decision is also measured here, once for every shell, through one observer
//! (`observer`) that the decision calls at named points: metrics, the reference's stats, and
//! the call's spans when tracing is on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tracing::{Instrument as _, Span};

mod bans;
mod leases;
mod observer;

use self::leases::Leased;
use self::observer::{CallObserver, Telemetry};
use crate::core::arithmetic::failure::{FailureAction, FailurePolicy, LogPace};
use crate::core::arithmetic::lease::LeaseOutcome;
use crate::core::decision::dynamic_metadata::{self, RuleMetadata};
use crate::core::decision::error_codes::{ErrorCodes, Undecided};
use crate::core::decision::headers::HeaderMode;
use crate::core::decision::outcome::Decision;
use crate::core::decision::overload::{overload_reply, OverloadReply};
use crate::core::decision::plan::Plan;
use crate::core::decision::plan::{leases_over_limit, plan_adjusted, PlanSettings};
use crate::core::decision::response::{assemble_with_leases, fail_closed, Response};
use crate::core::decision::semantics::Traces;
use crate::core::decision::waiting::answer_wait;
use crate::core::policy::adjustment::{Adjustments, AdjustmentsAt};
use crate::core::policy::request::{InvalidRequest, Request, RequestBounds};
use crate::core::policy::rules::RuleSet;
use crate::engine::adjustment_set::LiveAdjustments;
use crate::engine::heavy_hitters::HitterBoard;
use crate::engine::lease_timings::LeaseTimings;
use crate::engine::self_shedding::{CallDepth, SelfShedding};
use crate::engine::waiting::{Seat, WaitingRoom};
use crate::store::memory::MemoryStore;
use crate::store::{Decided, Store, StoreError};
use crate::telemetry::record::{DecidedCall, RuleSeriesTable};
use crate::telemetry::reference::stats::ReferenceKeyTable;
use crate::telemetry::traces::{self, RemoteParent};
use crate::telemetry::DecisionTelemetry;

/// When a call's decision began, and how long its caller still waits for the answer.
#[derive(Debug, Clone, Copy)]
pub struct CallStart {
    /// Where the decision's duration (`floodgate_decision_duration_seconds`) is counted from:
    /// a shell that reads the clock anyway before deciding (gRPC admission, to spend what is
    /// left of the deadline) hands that reading over rather than the decision taking another.
    pub at: Instant,
    /// What is left of the caller's deadline; `None`: no deadline.
    pub budget: Option<Duration>,
}

impl CallStart {
    /// A call starting now, with no deadline.
    pub fn now() -> Self {
        Self {
            at: Instant::now(),
            budget: None,
        }
    }
}

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
    /// (`core::decision::dynamic_metadata`). Off, nothing of it is built.
    pub response_dynamic_metadata: bool,
    /// Which passed rules give their `metadata:` there (`core::decision::semantics`).
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
    telemetry: Telemetry,
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
    /// The answers held until their turn (queueing leaky buckets).
    waiting: WaitingRoom,
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
        let telemetry = Telemetry::new(&rules, store.backend());
        Self {
            live: ArcSwap::from_pointee(live_rules(rules, &telemetry)),
            store,
            settings,
            telemetry,
            local_fallback: None,
            failure_log: std::sync::Mutex::new(LogPace::new(FAILURE_LOG_INTERVAL_MS)),
            started: Instant::now(),
            adjustments: Arc::new(LiveAdjustments::default()),
            lease_timings: LeaseTimings::default(),
            depth: CallDepth::default(),
            waiting: WaitingRoom::default(),
        }
    }

    /// The heavy hitters, when counted.
    pub fn heavy_hitters(&self) -> Option<&Arc<HitterBoard>> {
        self.telemetry.hitters.as_ref()
    }

    /// Holds answers in `room` (`--max-waiting`) rather than a room of the default size.
    pub fn with_waiting_room(mut self, room: WaitingRoom) -> Self {
        self.waiting = room;
        self
    }

    /// The answers held until their turn.
    pub fn waiting_room(&self) -> &WaitingRoom {
        &self.waiting
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
        if telemetry.heavy_hitters && self.telemetry.hitters.is_none() {
            self.telemetry.hitters = Some(Arc::new(HitterBoard::default()));
        }
        self.telemetry.decision = telemetry;
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
        let live = Arc::new(live_rules(rules, &self.telemetry));
        let rules = Arc::clone(&live.rules);
        let old = self.live.swap(live);
        self.telemetry.follow_rules(&rules);
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
        self.decide_within(request, parent, CallStart::now()).await
    }

    /// Decides one request whose caller waits at most `start.budget` more for the answer: an
    /// answer held for its turn (a queueing leaky bucket) past it is refused at once.
    pub async fn decide_within(
        &self,
        request: &Request,
        parent: RemoteParent,
        start: CallStart,
    ) -> Result<Response, LimitError> {
        let mut seat = Seat::within(start.budget);
        let decided = if traces::enabled() {
            let span =
                self.telemetry
                    .decision_span(request, self.settings.traces, self.store.backend());
            parent.adopt(&span);
            self.decide_measured(request, &span, start.at, &mut seat)
                .instrument(span.clone())
                .await
        } else {
            self.decide_measured(request, &Span::none(), start.at, &mut seat)
                .await
        };
        seat.hold().await;
        decided
    }

    /// The decision with its telemetry, timed from `started`; `span` (disabled when tracing is
    /// off) gets the outcome.
    async fn decide_measured(
        &self,
        request: &Request,
        span: &Span,
        started: Instant,
        seat: &mut Seat,
    ) -> Result<Response, LimitError> {
        let mut observer = self.telemetry.call(span, started);
        // Counted only when something reads it: no shared atomic on every call otherwise.
        let counted = self.settings.shedding.map(|_| self.depth.enter());
        let depth = counted.as_ref().map_or(0, |(_, depth)| *depth);
        let result = self
            .decide_recorded(request, &mut observer, depth, seat)
            .await;
        match &result {
            Ok(Answered::Decided(_, decision)) => observer.finished(*decision),
            Ok(Answered::Shed(_)) | Err(LimitError::Overloaded) => observer.shed_finished(),
            Err(error) => observer.failed(error),
        }
        result.map(Answered::into_response)
    }

    /// Admitted, planned, shed or not; leases then counters asked of the store, the failure
    /// policy answering for a store that fails; answered.
    async fn decide_recorded(
        &self,
        request: &Request,
        observer: &mut CallObserver<'_>,
        depth: u32,
        seat: &mut Seat,
    ) -> Result<Answered, LimitError> {
        // Owned: the plan borrows these rules across the store's await.
        let live = self.live.load_full();
        self.admit(&live, request, observer)?;
        // Owned for the same reason.
        let adjustments = self.adjustments.snapshot();
        let mut plan = self.plan(&live, request, &adjustments);
        if let Some(shed) = self.shed(&plan, request, depth, observer) {
            return shed;
        }
        draw_lease_shedding(&mut plan);
        self.waiting.seat(&mut plan, seat);
        observer.store_asked(
            self.settings.traces,
            self.store.backend(),
            plan.counters.len(),
        );
        let policy = || self.failure_policy(&live, &request.domain);
        // Leases first: a request refused for want of a slot charges no rate limit.
        let leases = match self.decide_leases(&plan, policy, observer).await? {
            Leased::Decided(outcomes) => outcomes,
            Leased::Rejected(response) => {
                return Ok(self.rejected(response, request, (&live, &plan), observer))
            }
        };
        self.time_leases(&request.domain, &plan, &leases);
        let leases_refuse = leases_over_limit(&plan, &leases);
        let counted = self
            .count_with_bans(request, &plan, leases_refuse, observer)
            .await;
        let decided = match self.settle(counted, policy, &plan, observer).await? {
            StoreFallback::Decided(decided) => decided,
            StoreFallback::Rejected(response) => {
                return Ok(self.rejected(response, request, (&live, &plan), observer))
            }
        };
        observer.store_done();
        if decided.over_limit && !leases_refuse && !self.settings.global_shadow {
            self.undo_leases(&plan, &leases).await;
        }
        let over_limit = decided.over_limit || (leases_refuse && !self.settings.global_shadow);
        if !over_limit {
            let global_shadow = self.settings.global_shadow;
            seat.answer_after(answer_wait(
                &plan.counters,
                &decided.outcomes,
                global_shadow,
            ));
        }
        let counts = (&decided, leases.as_slice());
        let answered = (over_limit, &*observer, seat);
        Ok(self.answer(request, (&live, &plan), counts, answered))
    }

    /// Refuses a call while no configuration is loaded, and a request out of bounds.
    fn admit(
        &self,
        live: &LiveRules,
        request: &Request,
        observer: &CallObserver<'_>,
    ) -> Result<(), LimitError> {
        if !live.loaded {
            return Err(LimitError::NoConfiguration);
        }
        request.validate(&self.settings.bounds).map_err(|invalid| {
            observer.invalid_request(live, request);
            invalid.into()
        })
    }

    /// `request` planned against `live` with `adjustments` in force.
    fn plan<'a>(
        &self,
        live: &'a LiveRules,
        request: &Request,
        adjustments: &'a Adjustments,
    ) -> Plan<'a> {
        // An empty set costs no clock read.
        let adjusted = (!adjustments.is_empty()).then(|| AdjustmentsAt {
            adjustments,
            now_unix_ms: self.adjustments.now_unix_ms(),
        });
        let domain = live.rules.domain(&request.domain);
        plan_adjusted(request, domain, self.settings.plan, adjusted)
    }

    /// The answer to a call `--shed-above` sheds, if it sheds this one.
    fn shed(
        &self,
        plan: &Plan<'_>,
        request: &Request,
        depth: u32,
        observer: &CallObserver<'_>,
    ) -> Option<Result<Answered, LimitError>> {
        let shedding = self.settings.shedding?;
        if shedding.survives(plan, depth, rand::random()) {
            return None;
        }
        observer.shed();
        Some(
            match overload_reply(shedding.answer, request.descriptors.len()) {
                OverloadReply::Unavailable => Err(LimitError::Overloaded),
                OverloadReply::Answer(response) => Ok(Answered::Shed(response)),
            },
        )
    }

    /// The failure policy of `domain` (its own, or the limiter's).
    fn failure_policy(&self, live: &LiveRules, domain: &str) -> FailurePolicy {
        FailurePolicy::for_domain(
            live.rules
                .domain(domain)
                .and_then(|domain| domain.failure_policy),
            self.settings.failure_policy,
        )
    }

    /// Asks the store for the plan's counters, unless the leases refused the request already
    /// or there is no counter (no rule matched, unlimited, replaced).
    async fn count(
        &self,
        plan: &Plan<'_>,
        leases_refuse: bool,
        observer: &CallObserver<'_>,
    ) -> Result<Decided, StoreError> {
        let decided = if leases_refuse && !self.settings.global_shadow {
            Ok(leases::refused_before_counting())
        } else if plan.counters.is_empty() {
            Ok(Decided::default())
        } else {
            let deciding = self
                .store
                .decide(&plan.counters, self.settings.global_shadow);
            // Wrapped only when traced: the wrapper would take a copy of the store's future.
            let span = observer.store_span();
            let decided = if span.is_disabled() {
                deciding.await
            } else {
                deciding.instrument(span.clone()).await
            };
            observer.store_answered(decided.is_ok());
            decided
        };
        observer.store_finished();
        decided
    }

    /// What the store `counted`, or what the failure policy makes of its failure. A limit the
    /// store cannot count is the request's fault, not the store's: no policy answers it.
    async fn settle(
        &self,
        counted: Result<Decided, StoreError>,
        policy: impl FnOnce() -> FailurePolicy,
        plan: &Plan<'_>,
        observer: &mut CallObserver<'_>,
    ) -> Result<StoreFallback, LimitError> {
        match counted {
            Ok(decided) => Ok(StoreFallback::Decided(decided)),
            Err(error @ StoreError::Unsupported { .. }) => {
                observer.store_done();
                let reason = error.to_string();
                Err(LimitError::InvalidRequest(
                    InvalidRequest::UncountableLimit { reason },
                ))
            }
            Err(error) => {
                observer.store_failed(&error);
                Ok(self
                    .apply_failure_policy(policy(), plan, error, observer)
                    .await?)
            }
        }
    }

    /// The failure policy's complete answer (fail_closed): over the limit.
    fn rejected(
        &self,
        mut response: Response,
        request: &Request,
        (live, plan): (&LiveRules, &Plan<'_>),
        observer: &mut CallObserver<'_>,
    ) -> Answered {
        observer.rejected_by_failure_policy(live, &request.domain, plan);
        self.add_dynamic_metadata(&mut response, request, (plan, &live.rules));
        observer.store_done();
        Answered::Decided(response, Decision::OverLimit)
    }

    /// The answer to a decided request, as the store `decided` it and the leases came out;
    /// `seat` learns the queueing rules its held answer waits under.
    fn answer(
        &self,
        request: &Request,
        (live, plan): (&LiveRules, &Plan<'_>),
        (decided, leases): (&Decided, &[LeaseOutcome]),
        (over_limit, observer, seat): (bool, &CallObserver<'_>, &mut Seat),
    ) -> Answered {
        let mut response = assemble_with_leases(
            plan,
            (&decided.outcomes, leases),
            over_limit,
            self.settings.header_mode,
        );
        self.add_dynamic_metadata(&mut response, request, (plan, &live.rules));
        let (decision, waiting) = observer.decided(
            live,
            &DecidedCall {
                request,
                rules: &live.rules,
                plan,
                decided,
                leases,
                response: &response,
                global_shadow: self.settings.global_shadow,
                near_limit_ratio: observer.near_limit_ratio(),
            },
        );
        seat.waits_under(waiting);
        observer.deciding_rule(plan, decided, &response);
        Answered::Decided(response, decision)
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
        observer: &CallObserver<'_>,
    ) -> Result<StoreFallback, StoreError> {
        match self.failure_action(policy, &error, observer) {
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
    fn failure_action(
        &self,
        policy: FailurePolicy,
        error: &StoreError,
        observer: &CallObserver<'_>,
    ) -> FailureAction {
        let action = policy.resolve(self.local_fallback.is_some(), self.settings.global_shadow);
        observer.failure_policy_applied(policy);
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
}

/// What a failure policy made of a failed store call.
enum StoreFallback {
    /// Carry on as if the store had answered this.
    Decided(Decided),
    /// The answer, complete (fail_closed).
    Rejected(Response),
}

/// The core reads no randomness: the shell draws for every lease that may be shed.
fn draw_lease_shedding(plan: &mut Plan<'_>) {
    for call in plan.leases.iter_mut().filter(|call| call.shed_above > 0) {
        call.draw = rand::random();
    }
}

fn live_rules(rules: RuleSet, telemetry: &Telemetry) -> LiveRules {
    let (series, reference_keys) = telemetry.tables(&rules);
    LiveRules {
        rules: Arc::new(rules),
        series,
        reference_keys,
        loaded: true,
    }
}
