//! One decided call counted in the metrics: [`record_call`] adds what `core::decision::outcome`
//! classified (each descriptor's verdict, near-limit hits, the call's decision) to the series
//! of the rules that decided, through handles resolved at each rule's first decision
//! ([`RuleSeriesTable`]).

use std::sync::{Arc, OnceLock};

use super::metrics::queue::{self, WaitingRules};
use super::metrics::{ClassSeries, Metrics, RuleSeries};
use crate::core::arithmetic::lease::LeaseOutcome;
use crate::core::decision::outcome::{
    classify_descriptor, descriptor_near_limit, detailed_label, Decision, DecisionTally,
    RejectReason, RuleVerdict,
};
use crate::core::decision::plan::{DescriptorPlan, LimitSource, Plan};
use crate::core::decision::response::{Decided, Response};
use crate::core::policy::request::Request;
use crate::core::policy::rules::{Rule, RuleSet};

/// Each rule's series for one rule set, resolved at the rule's first decision and kept, so
/// later decisions find their counters without a lock or a lookup. One slot per rule, at the
/// rule's [`Rule::index`]: the table lives exactly as long as its rule set (both are swapped
/// together), and a slot costs 16 bytes until its rule is hit (making every rule's series
/// when the set was swapped in cost kilobytes per rule).
#[derive(Debug, Default)]
pub struct RuleSeriesTable {
    /// `None` inside: the series could not be made (logged once).
    slots: Box<[OnceLock<Option<Arc<RuleSeries>>>]>,
}

impl RuleSeriesTable {
    /// A table for `rules`; empty when metrics are off.
    pub fn build(rules: &RuleSet, metrics: Option<&Metrics>) -> Self {
        let slots = match metrics {
            Some(_) => (0..rules.rule_count()).map(|_| OnceLock::new()).collect(),
            None => Box::default(),
        };
        Self { slots }
    }

    /// The series of `rule` (of this table's rule set, in `domain`), made on first use.
    fn get(&self, metrics: &Metrics, domain: &str, rule: &Rule) -> Option<&RuleSeries> {
        let slot = self.slots.get(rule.index)?;
        let series = slot.get_or_init(|| {
            metrics
                .rule_series(domain, rule)
                .inspect_err(
                    |error| tracing::warn!(rule = %rule.path, "no metrics for rule: {error}"),
                )
                .ok()
        });
        series.as_deref()
    }
}

/// The series of the priority class a descriptor was decided in, when it has one.
fn class_of<'s>(
    series: &'s RuleSeries,
    descriptor_plan: &DescriptorPlan<'_>,
) -> Option<&'s ClassSeries> {
    let (DescriptorPlan::Limited {
        class: Some(class), ..
    }
    | DescriptorPlan::Concurrency {
        class: Some(class), ..
    }) = descriptor_plan
    else {
        return None;
    };
    // Folded series (`other`) and per-value labels have no class series.
    series.class(class.index)
}

/// Everything [`record_call`] needs about one decided call.
pub struct DecidedCall<'a> {
    pub request: &'a Request,
    pub rules: &'a RuleSet,
    pub plan: &'a Plan<'a>,
    pub decided: &'a Decided,
    /// The outcomes of the plan's lease calls (concurrency rules), in order.
    pub leases: &'a [LeaseOutcome],
    pub response: &'a Response,
    pub global_shadow: bool,
    pub near_limit_ratio: f32,
}

/// Adds one decided call to the per-rule metrics and returns its decision (the caller records
/// it with the call's latency) and the queueing rules that gave it a later turn (counted while
/// the answer is held).
pub fn record_call(
    metrics: &Metrics,
    table: &RuleSeriesTable,
    call: &DecidedCall<'_>,
) -> (Decision, WaitingRules) {
    let mut tally = DecisionTally::default();
    let mut waiting = WaitingRules::default();
    let statuses = call.plan.descriptors.iter().zip(&call.response.statuses);
    for (index, (descriptor_plan, status)) in statuses.enumerate() {
        let verdict = classify_descriptor(descriptor_plan, status, call.global_shadow, call.leases);
        tally.add(verdict);
        let Some(verdict) = verdict else {
            continue;
        };
        let Some(series) = series_of(metrics, table, call, index, descriptor_plan) else {
            continue;
        };
        match verdict {
            RuleVerdict::Allowed => series.allowed(),
            RuleVerdict::Rejected(reason) => {
                let by_class =
                    class_of(&series, descriptor_plan).is_some_and(|class| class.rejected(reason));
                if !by_class {
                    series.rejected(reason);
                }
            }
        }
        if let DescriptorPlan::Limited { counters, .. } = descriptor_plan {
            let queued = (counters, call.decided);
            record_queue(&series, verdict, call.plan, queued, &mut waiting);
            series.near_limit(descriptor_near_limit(
                call.plan,
                counters,
                call.decided,
                call.near_limit_ratio,
            ));
        }
    }
    (tally.decision(call.response.overall_code), waiting)
}

/// What a queueing rule (`queue: true`) did with its descriptor: the wait of an admitted one
/// (the rule joins `waiting` when it made the descriptor wait), the refusal of a refused one.
fn record_queue(
    series: &RuleSeries,
    verdict: RuleVerdict,
    plan: &Plan<'_>,
    (counters, decided): (&std::ops::Range<usize>, &Decided),
    waiting: &mut WaitingRules,
) {
    let queues = plan
        .counters
        .get(counters.clone())
        .is_some_and(|counters| counters.iter().any(|counter| counter.quota.queue.is_some()));
    if !queues {
        return;
    }
    match verdict {
        RuleVerdict::Allowed => {
            let wait = decided
                .outcomes
                .get(counters.clone())
                .and_then(|outcomes| outcomes.iter().map(|outcome| outcome.wait).max());
            queue::rule_admitted(series, wait.unwrap_or(0), waiting);
        }
        RuleVerdict::Rejected(RejectReason::Limit) => queue::rule_refused(series),
        RuleVerdict::Rejected(_) => {}
    }
}

/// The call's decision alone (when metrics are off).
pub fn call_decision(call: &DecidedCall<'_>) -> Decision {
    let mut tally = DecisionTally::default();
    for (descriptor_plan, status) in call.plan.descriptors.iter().zip(&call.response.statuses) {
        tally.add(classify_descriptor(
            descriptor_plan,
            status,
            call.global_shadow,
            call.leases,
        ));
    }
    tally.decision(call.response.overall_code)
}

/// A rule's series: borrowed from the table for configured rules (no reference counting on
/// the hot path), owned for labels made per call.
pub enum SeriesRef<'t> {
    Table(&'t RuleSeries),
    Made(Arc<RuleSeries>),
}

impl std::ops::Deref for SeriesRef<'_> {
    type Target = RuleSeries;
    fn deref(&self) -> &RuleSeries {
        match self {
            SeriesRef::Table(series) => series,
            SeriesRef::Made(series) => series,
        }
    }
}

fn series_of<'t>(
    metrics: &Metrics,
    table: &'t RuleSeriesTable,
    call: &DecidedCall<'_>,
    index: usize,
    descriptor_plan: &DescriptorPlan<'_>,
) -> Option<SeriesRef<'t>> {
    let domain = &call.request.domain;
    let made = |label: &str, owner: Option<&str>| {
        metrics
            .value_series(domain, label, owner)
            .ok()
            .map(SeriesRef::Made)
    };
    let rule = match descriptor_plan {
        DescriptorPlan::Limited {
            limit: LimitSource::Rule(rule) | LimitSource::Adjusted { rule, .. },
            ..
        }
        | DescriptorPlan::Unlimited { rule }
        | DescriptorPlan::Concurrency { rule, .. } => *rule,
        DescriptorPlan::Limited {
            limit: LimitSource::Override { path, .. },
            ..
        } => return made(path, None),
        DescriptorPlan::NoRule | DescriptorPlan::Replaced { .. } => return None,
    };
    if rule.detailed_metric {
        let label = call
            .rules
            .domain(domain)
            .zip(call.request.descriptors.get(index))
            .and_then(|(domain_rules, descriptor)| {
                detailed_label(domain_rules, &descriptor.entries)
            });
        if let Some(label) = label {
            return made(&label, Some(&rule.path));
        }
    }
    table.get(metrics, domain, rule).map(SeriesRef::Table)
}

/// The series a failure-policy rejection of `descriptor_plan` counts in (`None`: not limited).
pub fn limited_series<'t>(
    metrics: &Metrics,
    table: &'t RuleSeriesTable,
    domain: &str,
    descriptor_plan: &DescriptorPlan<'_>,
) -> Option<SeriesRef<'t>> {
    let DescriptorPlan::Limited { limit, .. } = descriptor_plan else {
        return None;
    };
    match limit.rule() {
        Some(rule) => table.get(metrics, domain, rule).map(SeriesRef::Table),
        None => metrics
            .value_series(domain, limit.path(), None)
            .ok()
            .map(SeriesRef::Made),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::arithmetic::algorithm::Algorithm;
    use crate::core::decision::headers::HeaderMode;
    use crate::core::decision::outcome::{
        deciding_algorithm, deciding_descriptor, RejectReason, MAX_DETAILED_LABEL_BYTES,
    };
    use crate::core::decision::plan::{plan, PlanSettings};
    use crate::core::decision::response::assemble;
    use crate::core::decision::status::{Code, DescriptorStatus};
    use crate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
    use crate::core::policy::config::load_valid;
    use crate::core::policy::request::Descriptor;
    use crate::core::policy::request::Entry;
    use crate::store::memory::MemoryStore;

    const RULES: &str = r#"
domain: d
descriptors:
  - key: tight
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: roomy
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: two
    rate_limits:
      - {unit: second, requests_per_unit: 5, algorithm: token_bucket}
      - {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: path
    value: "/files/*"
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
"#;

    fn rules() -> RuleSet {
        load_valid("d.yaml", RULES)
    }

    fn request(descriptors: &[&[(&str, &str)]]) -> Request {
        Request {
            domain: "d".into(),
            descriptors: descriptors
                .iter()
                .map(|entries| {
                    Descriptor::new(entries.iter().map(|(k, v)| Entry::new(*k, *v)).collect())
                })
                .collect(),
            hits_addend: 0,
        }
    }

    struct Fixture {
        rules: RuleSet,
        store: MemoryStore,
        metrics: Metrics,
        table: RuleSeriesTable,
    }

    impl Fixture {
        fn new() -> Self {
            let rules = rules();
            let metrics = Metrics::new(100).unwrap_or_else(|error| panic!("{error}"));
            let table = RuleSeriesTable::build(&rules, Some(&metrics));
            let clock = Arc::new(ManualClock::new(1_796_083_210 * MICROS_PER_SECOND));
            Self {
                rules,
                store: MemoryStore::new(1000, clock),
                metrics,
                table,
            }
        }

        /// Decides `request` and records it; the decision and the deciding rule and algorithm.
        fn call(
            &self,
            request: &Request,
            global_shadow: bool,
        ) -> (Decision, Option<String>, Option<Algorithm>) {
            let plan = plan(request, self.rules.domain("d"), PlanSettings::default());
            let decided = self
                .store
                .decide_now(&plan.counters, global_shadow)
                .unwrap_or_else(|error| panic!("{error}"));
            let response = assemble(
                &plan,
                &decided.outcomes,
                decided.over_limit,
                HeaderMode::None,
            );
            let call = DecidedCall {
                request,
                rules: &self.rules,
                plan: &plan,
                decided: &decided,
                leases: &[],
                response: &response,
                global_shadow,
                near_limit_ratio: 0.8,
            };
            let (decision, _) = record_call(&self.metrics, &self.table, &call);
            assert_eq!(decision, call_decision(&call), "with and without metrics");
            let deciding = deciding_descriptor(&plan, &response);
            let rule = deciding
                .and_then(|index| response.statuses.get(index))
                .and_then(|status| status.rule_path.clone());
            let algorithm = deciding.and_then(|index| deciding_algorithm(&plan, &decided, index));
            (decision, rule, algorithm)
        }

        fn text(&self) -> String {
            self.metrics
                .render()
                .unwrap_or_else(|error| panic!("{error}"))
        }
    }

    #[test]
    fn each_descriptor_is_counted_under_its_rule() {
        let fixture = Fixture::new();
        for _ in 0..3 {
            fixture.call(&request(&[&[("tight", "a")]]), false);
        }
        let text = fixture.text();
        assert!(text.contains("floodgate_requests_allowed_total{domain=\"d\",rule=\"d.tight\"} 2"));
        assert!(text.contains(
            "floodgate_requests_rejected_total{class=\"\",domain=\"d\",reason=\"limit\",rule=\"d.tight\"} 1"
        ));
        // 80 % of 2 is 1: the second hit is near, the third (over, counter full) is not.
        assert!(text.contains("floodgate_near_limit_total{domain=\"d\",rule=\"d.tight\"} 1"));
    }

    #[test]
    fn decisions() {
        let fixture = Fixture::new();
        let decision = |descriptors: &[&[(&str, &str)]], global_shadow: bool| {
            fixture.call(&request(descriptors), global_shadow).0
        };
        assert_eq!(decision(&[&[("nothing", "x")]], false), Decision::Unknown);
        assert_eq!(decision(&[&[("roomy", "x")]], false), Decision::Ok);
        assert_eq!(decision(&[&[("free", "")]], false), Decision::Ok);
        assert_eq!(decision(&[&[("shadowed", "x")]], false), Decision::Ok);
        assert_eq!(decision(&[&[("shadowed", "x")]], false), Decision::Shadow);
        assert_eq!(decision(&[&[("tight", "x")]], false), Decision::Ok);
        assert_eq!(decision(&[&[("tight", "x")]], false), Decision::Ok);
        assert_eq!(decision(&[&[("tight", "x")]], true), Decision::Shadow);
        assert_eq!(
            decision(&[&[("roomy", "x")], &[("tight", "x")]], false),
            Decision::OverLimit
        );
        let text = fixture.text();
        assert!(text.contains(
            "floodgate_requests_rejected_total{class=\"\",domain=\"d\",reason=\"shadow\",rule=\"d.tight\"} 1"
        ));
        assert!(text.contains(
            "floodgate_requests_rejected_total{class=\"\",domain=\"d\",reason=\"shadow\",rule=\"d.shadowed\"} 1"
        ));
        // The roomy descriptor admitted the last call although another rejected it.
        assert!(text.contains("floodgate_requests_allowed_total{domain=\"d\",rule=\"d.roomy\"} 2"));
        assert!(text.contains("floodgate_requests_allowed_total{domain=\"d\",rule=\"d.free\"} 1"));
    }

    #[test]
    fn several_limits_on_one_descriptor_count_a_near_hit_once() {
        let fixture = Fixture::new();
        for _ in 0..5 {
            fixture.call(&request(&[&[("two", "x")]]), false);
        }
        // Both limits are 5: hits 5 is past 4 on both, counted once.
        assert!(fixture
            .text()
            .contains("floodgate_near_limit_total{domain=\"d\",rule=\"d.two\"} 1"));
    }

    #[test]
    fn the_deciding_rule_and_algorithm() {
        let fixture = Fixture::new();
        let (_, rule, algorithm) =
            fixture.call(&request(&[&[("roomy", "x")], &[("two", "y")]]), false);
        assert_eq!(rule.as_deref(), Some("d.two"), "the least budget left");
        assert!(matches!(
            algorithm,
            Some(Algorithm::TokenBucket | Algorithm::SlidingLog)
        ));
        fixture.call(&request(&[&[("tight", "z")]]), false);
        fixture.call(&request(&[&[("tight", "z")]]), false);
        let (decision, rule, algorithm) =
            fixture.call(&request(&[&[("two", "y")], &[("tight", "z")]]), false);
        assert_eq!(decision, Decision::OverLimit);
        assert_eq!(rule.as_deref(), Some("d.tight"), "the one over its limit");
        assert_eq!(algorithm, Some(Algorithm::FixedWindow));
        let (_, rule, algorithm) = fixture.call(&request(&[&[("nothing", "")]]), false);
        assert_eq!((rule, algorithm), (None, None));
    }

    #[test]
    fn detailed_metric_labels_use_values_but_share_threshold_patterns() {
        let rules = rules();
        let domain = rules.domain("d").unwrap_or_else(|| panic!("no domain"));
        let entries = [Entry::new("path", "/files/report.pdf")];
        assert_eq!(
            detailed_label(domain, &entries).as_deref(),
            Some("d.path_/files/*")
        );
        let roomy = [Entry::new("roomy", "x".repeat(1000))];
        let long = detailed_label(domain, &roomy).unwrap_or_default();
        assert_eq!(long.len(), MAX_DETAILED_LABEL_BYTES);
        let multibyte = [Entry::new("roomy", "é".repeat(300))];
        let cut = detailed_label(domain, &multibyte).unwrap_or_default();
        assert!(cut.len() <= MAX_DETAILED_LABEL_BYTES && cut.ends_with('é'));
        assert_eq!(detailed_label(domain, &[Entry::new("nothing", "x")]), None);
    }

    #[test]
    fn global_shadow_turns_an_over_limit_status_into_a_shadow_verdict() {
        let status = DescriptorStatus {
            code: Code::OverLimit,
            current_limit: None,
            in_flight_limit: None,
            limit_remaining: 0,
            duration_until_reset: None,
            rule_path: Some("d.tight".into()),
            shadowed: false,
            quota: false,
        };
        let rules = rules();
        let domain = rules.domain("d");
        let planned = plan(
            &request(&[&[("tight", "x")]]),
            domain,
            PlanSettings::default(),
        );
        let limited = &planned.descriptors[0];
        assert_eq!(
            classify_descriptor(limited, &status, false, &[]),
            Some(RuleVerdict::Rejected(RejectReason::Limit))
        );
        assert_eq!(
            classify_descriptor(limited, &status, true, &[]),
            Some(RuleVerdict::Rejected(RejectReason::Shadow))
        );
        assert_eq!(
            classify_descriptor(&DescriptorPlan::NoRule, &status, false, &[]),
            None
        );
    }
}
