//! The answer to a request, from the plan and what the store said about each counter: one status
//! per descriptor, in order, the overall code and the rate-limit headers.
//!
//! A descriptor decided in a priority class is reported as the class sees its counters:
//! `limit_remaining` is what the class can still use (the shared remaining minus its reserve),
//! `current_limit.requests_per_unit` its share of the limit (floor(L × share)), and
//! `duration_until_reset` of a refused class the time until the hit fits above its reserve.
//! A refused class also gets the `x-floodgate-priority` header (`headers::priority_headers`).

use super::algorithm::{Hits, Quota, Share, Snapshot};
use super::headers::{priority_headers, response_headers, ClassRefusal, HeaderMode, Refused};
use super::plan::{Counter, DescriptorPlan, LimitSource, Plan};
use super::priority::ClassChoice;
use super::time::Micros;
use super::unit::Unit;
use super::verdict::Role;

/// What the store found for one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterOutcome {
    pub admitted: bool,
    /// Budget and reset as they stand after the store acted (charged when the request passed).
    pub snapshot: Snapshot,
    /// When not admitted: time until the hits could fit.
    pub retry_after: Micros,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

/// `current_limit` of a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub unit_multiplier: u32,
    pub name: Option<String>,
}

impl CurrentLimit {
    /// `quota` as a class with `share` sees it: its part of the limit.
    fn of(quota: &Quota, name: Option<&str>, share: Share) -> Self {
        let requests_per_unit = share.of(u64::from(quota.requests_per_unit));
        Self {
            requests_per_unit: u32::try_from(requests_per_unit).unwrap_or(quota.requests_per_unit),
            unit: quota.unit,
            unit_multiplier: quota.unit_multiplier.max(1),
            name: name.map(str::to_owned),
        }
    }

    pub fn window_seconds(&self) -> u64 {
        self.unit.seconds() * u64::from(self.unit_multiplier)
    }
}

/// One descriptor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    pub code: Code,
    pub current_limit: Option<CurrentLimit>,
    pub limit_remaining: u32,
    /// Until the counter is whole again (OK) or until the request could pass (OVER_LIMIT).
    pub duration_until_reset: Option<Micros>,
    /// The rule that decided (its config path), for headers, logs and `check`.
    pub rule_path: Option<String>,
    /// The limit that decided was in shadow mode and over: reported as OK.
    pub shadowed: bool,
}

impl DescriptorStatus {
    fn without_limit(remaining: u32, rule_path: Option<String>) -> Self {
        Self {
            code: Code::Ok,
            current_limit: None,
            limit_remaining: remaining,
            duration_until_reset: None,
            rule_path,
            shadowed: false,
        }
    }
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub overall_code: Code,
    pub statuses: Vec<DescriptorStatus>,
    pub response_headers: Vec<(String, String)>,
}

/// Builds the answer. `over_limit` is the store's verdict (`verdict::request_over_limit`).
pub fn assemble(
    plan: &Plan<'_>,
    outcomes: &[CounterOutcome],
    over_limit: bool,
    header_mode: HeaderMode,
) -> Response {
    let statuses: Vec<DescriptorStatus> = plan
        .descriptors
        .iter()
        .map(|descriptor| status_of(descriptor, plan, outcomes))
        .collect();
    let overall_code = if over_limit {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let mut response_headers = response_headers(header_mode, &statuses);
    if let Some(refusal) = over_limit
        .then(|| class_refusal(plan, outcomes, &statuses))
        .flatten()
    {
        response_headers.extend(priority_headers(header_mode, &statuses, &refusal));
    }
    Response {
        overall_code,
        statuses,
        response_headers,
    }
}

fn status_of(
    descriptor: &DescriptorPlan<'_>,
    plan: &Plan<'_>,
    outcomes: &[CounterOutcome],
) -> DescriptorStatus {
    match descriptor {
        DescriptorPlan::NoRule => DescriptorStatus::without_limit(0, None),
        DescriptorPlan::Replaced { rule } => {
            DescriptorStatus::without_limit(0, Some(rule.path.clone()))
        }
        DescriptorPlan::Unlimited { rule } => {
            DescriptorStatus::without_limit(u32::MAX, Some(rule.path.clone()))
        }
        DescriptorPlan::Limited {
            limit, counters, ..
        } => match deciding_counter(plan, counters, outcomes) {
            Some((counter, outcome)) => limited_status(limit, plan, counters, counter, outcome),
            None => DescriptorStatus::without_limit(0, Some(limit.path().to_owned())),
        },
    }
}

/// The counter that answers for a descriptor: a refusing one before an admitting one, then the
/// least budget left for the descriptor's class. Metrics name its algorithm
/// (`telemetry::record::deciding_algorithm`), so they and the answer agree.
pub fn deciding_counter<'p>(
    plan: &'p Plan<'_>,
    counters: &std::ops::Range<usize>,
    outcomes: &'p [CounterOutcome],
) -> Option<(&'p Counter, &'p CounterOutcome)> {
    counters
        .clone()
        .filter_map(|index| Some((plan.counters.get(index)?, outcomes.get(index)?)))
        .min_by_key(|(counter, outcome)| (outcome.admitted, class_remaining(counter, outcome)))
}

/// What the counter's class can still use: the shared remaining above its reserve.
fn class_remaining(counter: &Counter, outcome: &CounterOutcome) -> u64 {
    let reserve = counter.quota.reserve(counter.share);
    outcome.snapshot.remaining.saturating_sub(reserve)
}

/// The first descriptor refused in its priority class (not in shadow mode), for the header.
fn class_refusal<'a>(
    plan: &Plan<'a>,
    outcomes: &[CounterOutcome],
    statuses: &[DescriptorStatus],
) -> Option<ClassRefusal<'a>> {
    plan.descriptors
        .iter()
        .zip(statuses)
        .filter(|(_, status)| status.code == Code::OverLimit && !status.shadowed)
        .find_map(|(descriptor, _)| {
            let DescriptorPlan::Limited {
                counters,
                class: Some(class),
                ..
            } = descriptor
            else {
                return None;
            };
            let (counter, outcome) = deciding_counter(plan, counters, outcomes)?;
            Some(refusal_of(*class, counter, outcome))
        })
}

/// Why a class was refused: the shared counter still had room for the hits (kept for the
/// classes above), or it had none.
fn refusal_of<'a>(
    class: ClassChoice<'a>,
    counter: &Counter,
    outcome: &CounterOutcome,
) -> ClassRefusal<'a> {
    let needed = match counter.hits {
        Hits::Charge(n) => n,
        _ => 1,
    };
    let reason = if outcome.snapshot.remaining >= needed {
        Refused::Reserved
    } else {
        Refused::Full
    };
    ClassRefusal {
        class: class.name(),
        reason,
        reserved_for: class.reserved_for(),
    }
}

fn limited_status(
    limit: &LimitSource<'_>,
    plan: &Plan<'_>,
    counters: &std::ops::Range<usize>,
    counter: &Counter,
    outcome: &CounterOutcome,
) -> DescriptorStatus {
    let shadow = plan
        .counters
        .get(counters.start)
        .is_some_and(|counter| counter.role == Role::Shadow);
    let over = !outcome.admitted;
    let code = if over && !shadow {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let duration = if over {
        outcome.retry_after
    } else {
        outcome.snapshot.reset_after
    };
    DescriptorStatus {
        code,
        current_limit: Some(CurrentLimit::of(
            &counter.quota,
            limit.name(),
            counter.share,
        )),
        limit_remaining: if over {
            0
        } else {
            u32::try_from(class_remaining(counter, outcome)).unwrap_or(u32::MAX)
        },
        duration_until_reset: Some(duration.max(0)),
        rule_path: Some(limit.path().to_owned()),
        shadowed: over && shadow,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::core::config::load_valid;
    use crate::core::headers::PRIORITY_HEADER;
    use crate::core::plan::{plan, PlanSettings};
    use crate::core::request::{Descriptor, Request};
    use crate::core::rules::{Entry, RuleSet};
    use crate::core::time::{ManualClock, MICROS_PER_SECOND};
    use crate::store::memory::MemoryStore;

    const RULES: &str = "
domain: d
descriptors:
  - key: pool
    rate_limit: {unit: minute, requests_per_unit: 10}
    priority: {key: class, classes: {top: 100%, mid: 80%, bottom: 30%}, default: bottom}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
";

    fn rules() -> RuleSet {
        load_valid("d.yaml", RULES)
    }

    struct Fixture {
        rules: RuleSet,
        store: MemoryStore,
    }

    impl Fixture {
        fn new() -> Self {
            let clock = Arc::new(ManualClock::new(1_796_083_200 * MICROS_PER_SECOND));
            Self {
                rules: rules(),
                store: MemoryStore::new(100, clock),
            }
        }

        fn ask(&self, descriptors: &[&[(&str, &str)]], mode: HeaderMode) -> Response {
            let request = Request {
                domain: "d".into(),
                descriptors: descriptors
                    .iter()
                    .map(|pairs| {
                        Descriptor::new(pairs.iter().map(|(k, v)| Entry::new(*k, *v)).collect())
                    })
                    .collect(),
                hits_addend: 0,
            };
            let planned = plan(&request, self.rules.domain("d"), PlanSettings::default());
            let decided = self
                .store
                .decide_now(&planned.counters, false)
                .unwrap_or_else(|error| panic!("{error}"));
            assemble(&planned, &decided.outcomes, decided.over_limit, mode)
        }
    }

    fn header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
        response
            .response_headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    #[test]
    fn a_class_sees_its_share_of_the_limit_and_what_it_can_still_use() {
        let fixture = Fixture::new();
        let bottom = fixture.ask(&[&[("pool", "p"), ("class", "bottom")]], HeaderMode::None);
        let status = &bottom.statuses[0];
        assert_eq!(status.code, Code::Ok);
        assert_eq!(
            status.current_limit.as_ref().map(|l| l.requests_per_unit),
            Some(3)
        );
        // 9 left, 7 of them kept for mid and top.
        assert_eq!(status.limit_remaining, 2);
        let top = fixture.ask(&[&[("pool", "p"), ("class", "top")]], HeaderMode::None);
        assert_eq!(top.statuses[0].limit_remaining, 8);
        assert!(top.response_headers.is_empty());
    }

    #[test]
    fn a_refused_class_says_so_and_when_to_retry_whatever_the_header_mode() {
        let fixture = Fixture::new();
        for _ in 0..3 {
            fixture.ask(&[&[("pool", "p")]], HeaderMode::None);
        }
        let refused = fixture.ask(&[&[("pool", "p")]], HeaderMode::None);
        assert_eq!(refused.overall_code, Code::OverLimit);
        assert_eq!(
            header(&refused, PRIORITY_HEADER),
            Some("bottom;reason=reserved;reserved-for=\"mid top\"")
        );
        assert_eq!(header(&refused, "Retry-After"), Some("60"));
        let ietf = fixture.ask(&[&[("pool", "p")]], HeaderMode::Ietf);
        let retry_afters = ietf
            .response_headers
            .iter()
            .filter(|(key, _)| key == "Retry-After")
            .count();
        assert_eq!(retry_afters, 1);
        // A class refused because another descriptor was over gets no header: it was not
        // refused in its class.
        for _ in 0..10 {
            fixture.ask(&[&[("plain", "x")]], HeaderMode::None);
        }
        let other = fixture.ask(
            &[&[("pool", "p"), ("class", "top")], &[("plain", "x")]],
            HeaderMode::None,
        );
        assert_eq!(other.overall_code, Code::OverLimit);
        assert_eq!(header(&other, PRIORITY_HEADER), None);
    }

    #[test]
    fn a_class_refused_with_no_room_left_says_full() {
        let fixture = Fixture::new();
        for _ in 0..10 {
            fixture.ask(&[&[("pool", "p"), ("class", "top")]], HeaderMode::None);
        }
        let top = fixture.ask(&[&[("pool", "p"), ("class", "top")]], HeaderMode::None);
        assert_eq!(header(&top, PRIORITY_HEADER), Some("top;reason=full"));
        let mid = fixture.ask(&[&[("pool", "p"), ("class", "mid")]], HeaderMode::None);
        assert_eq!(
            header(&mid, PRIORITY_HEADER),
            Some("mid;reason=full;reserved-for=\"top\"")
        );
    }
}
