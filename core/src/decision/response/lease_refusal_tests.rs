//! What each concurrency refusal (the rule full, a class over its share, a shed lease) answers
//! in each header mode: Retry-After always, the mode's fields describing the in-flight limit,
//! `duration_until_reset` set and no `current_limit`.

use super::*;
use crate::arithmetic::lease::{settle, Leases, SHED_RETRY_AFTER};
use crate::decision::headers::{PlainHeaderNames, PRIORITY_HEADER};
use crate::decision::plan::{plan, PlanSettings};
use crate::ground::time::MICROS_PER_SECOND;
use crate::policy::config::load_valid;
use crate::policy::request::Entry;
use crate::policy::request::{Descriptor, Request};
use crate::policy::rules::RuleSet;

const RULES: &str = "
domain: d
descriptors:
  - key: pool
    concurrency: {name: pool_in_flight, max_in_flight: 4, shed_above: 2, lease: lease_id,
                  release: {key: phase, value: done}, ttl: 10s}
  - key: jobs
    concurrency: {max_in_flight: 4, lease: lease_id, release: {key: phase, value: done}, ttl: 10s}
    priority: {key: class, classes: {critical: 100%, batch: 50%}, default: batch}
";

const NOW: Micros = 1_796_083_200 * MICROS_PER_SECOND;
/// When the earliest held lease expires: past LEASE_REFUSAL_WAIT, which a refusal says instead.
const EARLIEST_EXPIRY: Micros = 7_300_000;

const MODES: [HeaderMode; 5] = [
    HeaderMode::None,
    HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
    HeaderMode::ReferenceRateLimit(PlainHeaderNames::REFERENCE),
    HeaderMode::Draft03,
    HeaderMode::Ietf,
];

fn rules() -> RuleSet {
    load_valid("d.yaml", RULES)
}

/// The answer to one acquire of `entries` (a lease entry added unless `lease_id` is `None`)
/// against a counter holding `held` leases, the first expiring in EARLIEST_EXPIRY; `draw` is
/// the shell's shedding draw.
fn answer(
    rules: &RuleSet,
    entries: &[(&str, &str)],
    lease_id: Option<&str>,
    counter: (usize, u32),
    mode: HeaderMode,
) -> Response {
    answer_at(rules, entries, lease_id, counter, EARLIEST_EXPIRY, mode)
}

/// [`answer`], the earliest held lease expiring in `earliest`.
fn answer_at(
    rules: &RuleSet,
    entries: &[(&str, &str)],
    lease_id: Option<&str>,
    (held, draw): (usize, u32),
    earliest: Micros,
    mode: HeaderMode,
) -> Response {
    let mut entries: Vec<Entry> = entries.iter().map(|(k, v)| Entry::new(*k, *v)).collect();
    entries.extend(lease_id.map(|id| Entry::new("lease_id", id)));
    let request = Request {
        domain: "d".to_owned(),
        descriptors: vec![Descriptor::new(entries)],
        hits_addend: 0,
    };
    let mut planned = plan(&request, rules.domain("d"), PlanSettings::default());
    for call in &mut planned.leases {
        call.draw = draw;
    }
    let held: Leases = (0..held)
        .map(|at| {
            let later = Micros::try_from(at).unwrap_or(0) * MICROS_PER_SECOND;
            (format!("held-{at}"), NOW + earliest + later)
        })
        .collect();
    let (settled, _) = settle(&planned.leases, NOW, |_| held.clone());
    let over_limit = crate::decision::plan::leases_over_limit(&planned, &settled.outcomes);
    assemble_with_leases(&planned, (&[], &settled.outcomes), over_limit, mode)
}

fn headers(response: &Response) -> Vec<(&str, &str)> {
    response
        .response_headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

/// The fields `mode` gives a refusal of a class that may hold `limit` leases, told to wait
/// `wait` seconds, as `policy`.
fn expected(mode: HeaderMode, limit: &str, wait: &str, policy: &str) -> Vec<(String, String)> {
    let fields = match mode {
        // The reference's three headers describe rate limits only, as its choice of descriptor
        // takes none without a `current_limit`.
        HeaderMode::None | HeaderMode::ReferenceRateLimit(_) => vec![],
        HeaderMode::RateLimit(_) => vec![
            ("RateLimit-Limit", limit.to_owned()),
            ("RateLimit-Remaining", "0".to_owned()),
            ("RateLimit-Reset", wait.to_owned()),
        ],
        HeaderMode::Draft03 => vec![
            ("X-RateLimit-Limit", limit.to_owned()),
            ("X-RateLimit-Remaining", "0".to_owned()),
            ("X-RateLimit-Reset", wait.to_owned()),
        ],
        HeaderMode::Ietf => vec![
            (
                "RateLimit-Policy",
                format!("\"{policy}\";q={limit};qu=\"concurrent-requests\""),
            ),
            ("RateLimit", format!("\"{policy}\";r=0;t={wait}")),
        ],
    };
    fields
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .chain([("Retry-After".to_owned(), wait.to_owned())])
        .collect()
}

fn owned(headers: Vec<(&str, &str)>) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn assert_refused(response: &Response, wait: Micros) {
    assert_eq!(response.overall_code, Code::OverLimit);
    let status = &response.statuses[0];
    assert_eq!(status.code, Code::OverLimit);
    assert_eq!(status.duration_until_reset, Some(wait));
    assert_eq!(status.current_limit, None, "no rate is invented");
}

/// One acquire of `entries` refused in every mode: `duration_until_reset` is `wait`, the
/// headers those `wanted` gives for the mode.
fn assert_refused_in_every_mode(
    entries: &[(&str, &str)],
    counter: (usize, u32),
    wait: Micros,
    wanted: impl Fn(HeaderMode) -> Vec<(String, String)>,
) {
    let rules = rules();
    for mode in MODES {
        let refused = answer(&rules, entries, Some("new"), counter, mode);
        assert_refused(&refused, wait);
        assert_eq!(owned(headers(&refused)), wanted(mode), "{mode:?}");
    }
}

#[test]
fn a_full_rule_says_one_second_at_most_in_every_mode() {
    assert_refused_in_every_mode(&[("pool", "p")], (4, 0), LEASE_REFUSAL_WAIT, |mode| {
        expected(mode, "4", "1", "pool_in_flight")
    });
}

#[test]
fn a_full_rule_whose_earliest_lease_expires_sooner_says_when() {
    let rules = rules();
    let refused = answer_at(
        &rules,
        &[("pool", "p")],
        Some("new"),
        (4, 0),
        300_000,
        HeaderMode::None,
    );
    assert_refused(&refused, 300_000);
    assert_eq!(headers(&refused), [("Retry-After", "1")], "rounded up");
}

#[test]
fn a_class_over_its_share_shows_its_share_and_its_priority_header_in_every_mode() {
    // batch may hold 2 of the 4 slots; 2 are held, so the 2 free are critical's.
    assert_refused_in_every_mode(&[("jobs", "j")], (2, 0), LEASE_REFUSAL_WAIT, |mode| {
        let mut wanted = expected(mode, "2", "1", "d.jobs");
        wanted.push((
            PRIORITY_HEADER.to_owned(),
            "batch;reason=reserved;reserved-for=\"critical\"".to_owned(),
        ));
        wanted
    });
}

#[test]
fn a_shed_lease_is_told_one_second_at_most_in_every_mode() {
    // 2 held, past shed_above 2 at depth 3: the highest draw does not survive.
    assert_refused_in_every_mode(&[("pool", "p")], (2, u32::MAX), SHED_RETRY_AFTER, |mode| {
        expected(mode, "4", "1", "pool_in_flight")
    });
}

#[test]
fn a_refusal_with_no_lease_outcome_gets_the_short_wait() {
    let rules = rules();
    let no_lease_id = answer(&rules, &[("pool", "p")], None, (0, 0), HeaderMode::None);
    assert_refused(&no_lease_id, LEASE_REFUSAL_WAIT);
    assert_eq!(headers(&no_lease_id), [("Retry-After", "1")]);
    let request = Request {
        domain: "d".to_owned(),
        descriptors: vec![Descriptor::new(vec![
            Entry::new("jobs", "j"),
            Entry::new("lease_id", "x"),
        ])],
        hits_addend: 0,
    };
    let planned = plan(&request, rules.domain("d"), PlanSettings::default());
    let closed = fail_closed(&planned, HeaderMode::Draft03, "redis");
    assert_refused(&closed, LEASE_REFUSAL_WAIT);
    assert_eq!(
        headers(&closed),
        [
            ("X-RateLimit-Limit", "2"),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", "1"),
            ("Retry-After", "1"),
            (UNAVAILABLE_HEADER, "redis"),
        ]
    );
}

#[test]
fn an_admitted_lease_adds_no_header() {
    let rules = rules();
    for mode in MODES {
        let admitted = answer(&rules, &[("pool", "p")], Some("new"), (1, 0), mode);
        assert_eq!(admitted.overall_code, Code::Ok);
        assert_eq!(admitted.statuses[0].limit_remaining, 2);
        assert!(admitted.response_headers.is_empty(), "{mode:?}");
    }
}
