//! What the limiter tells telemetry, at named points of a call: the metrics
//! (`telemetry::metrics`, through series resolved when the rules are swapped in), the
//! reference's stats (`telemetry::reference::stats`), and, when tracing is on, the call's span
//! with a child for the store round trip (`telemetry::traces`). The decision calls these
//! points and holds no telemetry handle of its own. On the hot path: nothing here allocates
//! (but a traced call's span attributes), and the clock is read where the decision always read
//! it, at the call's start and around the store. The points every call passes are `#[inline]`:
//! the generic limiter that calls them is compiled elsewhere, where they could not be inlined
//! otherwise.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use tracing::{field, Span};

use super::{LimitError, LiveRules};
use crate::core::arithmetic::failure::FailurePolicy;
use crate::core::decision::outcome::{
    deciding_algorithm, deciding_descriptor, Decision, RejectReason,
};
use crate::core::decision::plan::Plan;
use crate::core::decision::response::Response;
use crate::core::decision::semantics::Traces;
use crate::core::policy::request::Request;
use crate::core::policy::rules::RuleSet;
use crate::engine::heavy_hitters::HitterBoard;
use crate::store::{Decided, StoreError};
use crate::telemetry::metrics::queue::WaitingRules;
use crate::telemetry::metrics::{
    self, InFlight, Metrics, OverloadReason, StoreSeries, UNKNOWN_DOMAIN_LABEL,
};
use crate::telemetry::record::{
    call_decision, limited_series, record_call, DecidedCall, RuleSeriesTable,
};
use crate::telemetry::reference::stats::{
    self as reference_stats, ErrType, ReferenceKeyTable, ReferenceStats,
};
use crate::telemetry::traces::{self, hashed_value};
use crate::telemetry::DecisionTelemetry;

/// The limiter's telemetry: the handles resolved once, and how decisions are reported.
pub(super) struct Telemetry {
    metrics: Option<&'static Metrics>,
    /// envoyproxy/ratelimit's stats, with USE_PROMETHEUS.
    reference_stats: Option<&'static ReferenceStats>,
    store_series: Option<StoreSeries>,
    pub(super) decision: DecisionTelemetry,
    /// Each rule's heavy hitters (`--heavy-hitters`), fed with every answer.
    pub(super) hitters: Option<Arc<HitterBoard>>,
}

impl Telemetry {
    /// The global metrics and stats (when on), following `rules`, and the series of the store
    /// called `backend`.
    pub(super) fn new(rules: &RuleSet, backend: &str) -> Self {
        let metrics = metrics::global();
        let telemetry = Self {
            metrics,
            reference_stats: reference_stats::global(),
            store_series: metrics.and_then(|metrics| metrics.store_series(backend).ok()),
            decision: DecisionTelemetry::default(),
            hitters: None,
        };
        telemetry.follow_rules(rules);
        telemetry
    }

    /// Keeps the per-rule label sets and heavy hitters in step with `rules`, now in force.
    pub(super) fn follow_rules(&self, rules: &RuleSet) {
        if let Some(metrics) = self.metrics {
            metrics.follow_rules(rules);
        }
        if let Some(stats) = self.reference_stats {
            stats.follow_rules(rules);
        }
        if let Some(hitters) = &self.hitters {
            hitters.follow_rules(rules);
        }
    }

    /// The series of `rules`' rules, floodgate's and the reference's (empty tables when off).
    pub(super) fn tables(&self, rules: &RuleSet) -> (RuleSeriesTable, ReferenceKeyTable) {
        (
            RuleSeriesTable::build(rules, self.metrics),
            ReferenceKeyTable::build(rules, self.reference_stats),
        )
    }

    /// The span of a traced call, its outcome fields empty until the decision fills them.
    pub(super) fn decision_span(&self, request: &Request, traces: Traces, backend: &str) -> Span {
        let (name, kind) = traces::decision_span(traces);
        tracing::info_span!(
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
            floodgate.store.backend = backend,
            floodgate.store.duration_seconds = field::Empty,
            error.message = field::Empty,
        )
    }

    /// One call's observer, timed from `started`: in flight until it is dropped.
    #[inline]
    pub(super) fn call<'a>(&'a self, span: &'a Span, started: Instant) -> CallObserver<'a> {
        CallObserver {
            telemetry: self,
            span,
            started,
            _in_flight: self.metrics.map(Metrics::call_started),
            store_span: Span::none(),
            store_started: None,
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
                if self.decision.trace_descriptor_values {
                    let _ = write!(text, "{}={}", entry.key, entry.value);
                } else {
                    let _ = write!(text, "{}={}", entry.key, hashed_value(&entry.value));
                }
            }
        }
        text
    }
}

/// What one call reports, point by point (`span` is disabled when tracing is off).
pub(super) struct CallObserver<'a> {
    telemetry: &'a Telemetry,
    span: &'a Span,
    started: Instant,
    _in_flight: Option<InFlight<'a>>,
    /// The store round trip's span, from [`CallObserver::store_asked`] until
    /// [`CallObserver::store_done`].
    store_span: Span,
    store_started: Option<Instant>,
}

impl CallObserver<'_> {
    /// A request out of bounds. Its domain is request text: a label only when it is configured.
    pub(super) fn invalid_request(&self, live: &LiveRules, request: &Request) {
        if let Some(metrics) = self.telemetry.metrics {
            let domain = match live.rules.domain(&request.domain) {
                Some(domain) => domain.name.as_str(),
                None => UNKNOWN_DOMAIN_LABEL,
            };
            metrics.invalid_request(domain);
        }
    }

    /// Shed by `--shed-above` before the store was asked.
    pub(super) fn shed(&self) {
        metrics::overload_rejected(OverloadReason::Shed);
    }

    /// The store is about to be asked (leases, then counters) for a plan of `counters`.
    #[inline]
    pub(super) fn store_asked(&mut self, traces: Traces, backend: &str, counters: usize) {
        if !self.span.is_disabled() {
            self.store_span = tracing::info_span!(
                parent: self.span,
                "store.decide",
                otel.name = traces::store_span_name(traces, backend),
                floodgate.store.backend = backend,
                floodgate.store.counters = span_int(counters),
                otel.status_code = field::Empty,
                error.message = field::Empty,
            );
        }
        self.store_started = Some(Instant::now());
    }

    /// The span the store's own work runs in.
    #[inline]
    pub(super) fn store_span(&self) -> &Span {
        &self.store_span
    }

    /// The store answered the counters (`ok`) or failed.
    #[inline]
    pub(super) fn store_answered(&self, ok: bool) {
        if let Some(series) = &self.telemetry.store_series {
            series.call(self.store_seconds(), ok);
        }
    }

    /// The leases and counters are decided: the call's span gets how long it took.
    #[inline]
    pub(super) fn store_finished(&self) {
        // Untraced, no clock read for a span that records nothing.
        if !self.span.is_disabled() {
            self.span
                .record("floodgate.store.duration_seconds", self.store_seconds());
        }
    }

    pub(super) fn store_failed(&self, error: &StoreError) {
        self.store_span.record("otel.status_code", "ERROR");
        self.store_span
            .record("error.message", field::display(error));
    }

    /// Nothing more to say of the store: its span ends.
    #[inline]
    pub(super) fn store_done(&mut self) {
        self.store_span = Span::none();
    }

    /// A failed store call answered by `policy`.
    pub(super) fn failure_policy_applied(&self, policy: FailurePolicy) {
        if let Some(metrics) = self.telemetry.metrics {
            metrics.failure_policy_applied(policy.name());
        }
    }

    /// `floodgate_requests_rejected_total{reason="failure_policy"}` for each limited rule.
    pub(super) fn rejected_by_failure_policy(
        &self,
        live: &LiveRules,
        domain: &str,
        plan: &Plan<'_>,
    ) {
        let Some(metrics) = self.telemetry.metrics else {
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

    /// How near the limit a hit counts as near it (`--near-limit-ratio`).
    #[inline]
    pub(super) fn near_limit_ratio(&self) -> f32 {
        self.telemetry.decision.near_limit_ratio
    }

    /// A decided call, counted in the per-rule series: its decision, and the queueing rules
    /// that gave it a later turn.
    #[inline]
    pub(super) fn decided(
        &self,
        live: &LiveRules,
        call: &DecidedCall<'_>,
    ) -> (Decision, WaitingRules) {
        let recorded = match self.telemetry.metrics {
            Some(metrics) => record_call(metrics, &live.series, call),
            None => (call_decision(call), WaitingRules::default()),
        };
        if let Some(stats) = self.telemetry.reference_stats {
            stats.record_call(&live.reference_keys, call);
        }
        if let Some(hitters) = &self.telemetry.hitters {
            hitters.record(call.request, call.plan, call.response);
        }
        recorded
    }

    /// The traced call's deciding rule and algorithm.
    #[inline]
    pub(super) fn deciding_rule(&self, plan: &Plan<'_>, decided: &Decided, response: &Response) {
        if self.span.is_disabled() {
            return;
        }
        let Some(index) = deciding_descriptor(plan, response) else {
            return;
        };
        if let Some(rule) = response
            .statuses
            .get(index)
            .and_then(|s| s.rule_path.as_deref())
        {
            self.span.record("floodgate.rule", rule);
        }
        if let Some(algorithm) = deciding_algorithm(plan, decided, index) {
            self.span.record("floodgate.algorithm", algorithm.name());
        }
    }

    /// The call ended as `decision`.
    #[inline]
    pub(super) fn finished(&self, decision: Decision) {
        self.span.record("floodgate.decision", decision.label());
        if let Some(metrics) = self.telemetry.metrics {
            metrics.call_finished(decision, self.started.elapsed().as_secs_f64());
        }
    }

    /// Shed, not decided: counted as an overload rejection ([`CallObserver::shed`]), not as
    /// a call.
    pub(super) fn shed_finished(&self) {
        self.span.record("floodgate.decision", "shed");
    }

    /// The call was not decided: `error`.
    pub(super) fn failed(&self, error: &LimitError) {
        self.span.record("otel.status_code", "ERROR");
        self.span.record("error.message", field::display(error));
        if let Some(stats) = self.telemetry.reference_stats {
            stats.should_rate_limit_error(match error {
                LimitError::Store(_) => ErrType::Store,
                LimitError::InvalidRequest(_)
                | LimitError::NoConfiguration
                | LimitError::Overloaded => ErrType::Service,
            });
        }
        self.finished(Decision::Error);
    }

    #[inline]
    fn store_seconds(&self) -> f64 {
        self.store_started
            .map_or(0.0, |started| started.elapsed().as_secs_f64())
    }
}

/// A count as a span attribute: OpenTelemetry integers are signed (an unsigned value would be
/// exported as text).
fn span_int(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}
