//! The answer a priority class gets (`core::decision::response::assemble`) for counters the memory store
//! decided: its share of the limit, what it can still use, and why it was refused.

use std::sync::Arc;

use crate::core::decision::headers::HeaderMode;
use crate::core::decision::headers::PRIORITY_HEADER;
use crate::core::decision::plan::{plan, PlanSettings};
use crate::core::decision::response::{assemble, Response};
use crate::core::decision::status::Code;
use crate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
use crate::core::policy::config::load_valid;
use crate::core::policy::request::Entry;
use crate::core::policy::request::{Descriptor, Request};
use crate::core::policy::rules::RuleSet;
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
