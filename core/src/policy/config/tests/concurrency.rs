//! `concurrency:` rules: what loads, how the lease and release entries meet the tree and the
//! plan, and the errors.

use super::*;
use crate::arithmetic::lease::LeaseAction;
use crate::decision::plan::{plan, DescriptorPlan, PlanSettings};
use crate::policy::request::{Descriptor, Request};

const CONCURRENCY: &str = "{max_in_flight: 4, lease: request_id, release: {key: phase, value: \
                           done}, ttl: 30s}";

fn with_concurrency(concurrency: &str, extra: &str) -> String {
    format!(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: backend\n\
         \x20   value: slow\n\
         \x20   concurrency: {concurrency}\n\
         {extra}"
    )
}

fn request(pairs: &[&[(&str, &str)]]) -> Request {
    Request {
        domain: "d".into(),
        descriptors: pairs
            .iter()
            .map(|pairs| Descriptor::new(entries(pairs)))
            .collect(),
        hits_addend: 0,
    }
}

#[test]
fn a_concurrency_rule_loads_with_its_settings() {
    let rules = loaded(&with_concurrency(CONCURRENCY, ""));
    let rule = rule_at(&rules, "d", "d.backend_slow");
    let Some(concurrency) = &rule.concurrency else {
        panic!("no concurrency on {rule:?}");
    };
    assert_eq!(concurrency.max_in_flight, 4);
    assert_eq!(concurrency.lease_ttl, 30_000_000);
    assert_eq!(concurrency.lease_key, "request_id");
    assert_eq!(
        (
            concurrency.release.key.as_str(),
            concurrency.release.value.as_str()
        ),
        ("phase", "done")
    );
    assert!(rule.limits.is_empty() && !rule.unlimited);
}

#[test]
fn start_and_release_calls_plan_one_counter_without_the_lease_entries() {
    let rules = loaded(&with_concurrency(CONCURRENCY, ""));
    let request = request(&[
        &[("backend", "slow"), ("request_id", "r1")],
        &[("backend", "slow"), ("request_id", "r2"), ("phase", "done")],
        &[("backend", "slow")],
        &[("backend", "slow"), ("request_id", "r\u{0}2")],
    ]);
    let planned = plan(&request, rules.domain("d"), PlanSettings::default());
    assert!(planned.counters.is_empty());
    assert_eq!(planned.leases.len(), 2);
    assert_eq!(planned.leases[0].key, planned.leases[1].key);
    let calls: Vec<(&str, LeaseAction)> = planned
        .leases
        .iter()
        .map(|call| (call.lease_id.as_str(), call.action))
        .collect();
    assert_eq!(
        calls,
        [("r1", LeaseAction::Acquire), ("r2", LeaseAction::Release)]
    );
    let leases: Vec<Option<usize>> = planned
        .descriptors
        .iter()
        .map(|descriptor| match descriptor {
            DescriptorPlan::Concurrency { lease, .. } => *lease,
            other => panic!("not a concurrency plan: {other:?}"),
        })
        .collect();
    // No lease entry, or an id with a NUL (the Redis store's slot separator): nothing to count
    // with, refused by `lease::over_limit`.
    assert_eq!(leases, [Some(0), Some(1), None, None]);
    assert!(crate::decision::plan::leases_over_limit(&planned, &[]));
}

#[test]
fn another_release_value_or_an_unknown_entry_matches_nothing() {
    let rules = loaded(&with_concurrency(CONCURRENCY, ""));
    for pairs in [
        &[("backend", "slow"), ("request_id", "r"), ("phase", "start")][..],
        &[("backend", "slow"), ("request_id", "r"), ("other", "x")],
        &[
            ("backend", "slow"),
            ("request_id", "r"),
            ("request_id", "s"),
        ],
    ] {
        assert_eq!(rule_path(&rules, "d", pairs), None, "{pairs:?}");
    }
}

#[test]
fn a_class_reserves_slots_for_the_classes_above() {
    let text = with_concurrency(
        CONCURRENCY,
        "\x20   priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}\n",
    );
    let rules = loaded(&text);
    let request = request(&[
        &[
            ("backend", "slow"),
            ("request_id", "a"),
            ("priority", "critical"),
        ],
        &[("backend", "slow"), ("request_id", "b")],
    ]);
    let planned = plan(&request, rules.domain("d"), PlanSettings::default());
    let reserves: Vec<u32> = planned.leases.iter().map(|call| call.reserve).collect();
    assert_eq!(reserves, [0, 2]);
}

#[track_caller]
fn assert_refused(text: &str, hints: &[&str]) {
    let message = lines(&errors_of(text));
    for hint in hints {
        assert!(message.contains(hint), "{hint:?} not in:\n{message}");
    }
}

#[test]
fn wrong_settings_are_refused_with_what_to_write() {
    assert_refused(
        &with_concurrency(
            "{lease: request_id, release: {key: phase, value: done}, ttl: 30s}",
            "",
        ),
        &[
            "`concurrency.max_in_flight` is missing",
            "max_in_flight: 10",
        ],
    );
    assert_refused(
        &with_concurrency(
            "{max_in_flight: 0, lease: request_id, release: {key: phase, value: done}, ttl: 30s}",
            "",
        ),
        &["from 1 to 10000"],
    );
    assert_refused(
        &with_concurrency(
            "{max_in_flight: 2, release: {key: phase, value: done}, ttl: 30s}",
            "",
        ),
        &["`concurrency.lease` is missing", "x-request-id"],
    );
    assert_refused(
        &with_concurrency("{max_in_flight: 2, lease: request_id, ttl: 30s}", ""),
        &["`concurrency.release` is missing", "apply_on_stream_done"],
    );
    assert_refused(
        &with_concurrency(
            "{max_in_flight: 2, lease: request_id, release: {key: phase}, ttl: 30s}",
            "",
        ),
        &["needs a `key` and a `value`"],
    );
    assert_refused(
        &with_concurrency(
            "{max_in_flight: 2, lease: phase, release: {key: phase, value: done}, ttl: 30s}",
            "",
        ),
        &["different keys"],
    );
    for ttl in ["30", "0s", "25h", "soon"] {
        assert_refused(
            &with_concurrency(
                &format!(
                    "{{max_in_flight: 2, lease: request_id, release: {{key: phase, value: \
                     done}}, ttl: {ttl}}}"
                ),
                "",
            ),
            &["concurrency.ttl"],
        );
    }
    assert_refused(
        &with_concurrency(
            "{max_in_flight: 2, lease: request_id, release: {key: phase, value: done}, ttl: \
             30s, limit: 3}",
            "",
        ),
        &["unknown key 'limit' in `concurrency`"],
    );
}

#[test]
fn it_stands_alone_on_its_descriptor() {
    assert_refused(
        &with_concurrency(
            CONCURRENCY,
            "\x20   rate_limit: {unit: second, requests_per_unit: 10}\n",
        ),
        &["either `rate_limit` (or `rate_limits`) or `concurrency`"],
    );
    assert_refused(
        &with_concurrency(CONCURRENCY, "\x20   shadow_mode: true\n"),
        &["`shadow_mode` cannot be used with `concurrency`"],
    );
    assert_refused(
        &with_concurrency(
            CONCURRENCY,
            "\x20   descriptors:\n\x20     - key: request_id\n\x20       rate_limit: {unit: \
             second, requests_per_unit: 1}\n",
        ),
        &["`request_id` is read by `concurrency`"],
    );
}

#[test]
fn shed_above_sets_each_class_its_own_threshold_and_must_be_below_the_limit() {
    let text = with_concurrency(
        "{max_in_flight: 10, shed_above: 6, lease: request_id, release: {key: phase, value: \
         done}, ttl: 30s}",
        "\x20   priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}\n",
    );
    let rules = loaded(&text);
    let classed = request(&[
        &[
            ("backend", "slow"),
            ("request_id", "a"),
            ("priority", "critical"),
        ],
        &[("backend", "slow"), ("request_id", "b")],
    ]);
    let planned = plan(&classed, rules.domain("d"), PlanSettings::default());
    let thresholds: Vec<u32> = planned.leases.iter().map(|c| c.shed_above).collect();
    assert_eq!(
        thresholds,
        [6, 3],
        "low sheds from half the critical threshold"
    );
    let plain = loaded(&with_concurrency(CONCURRENCY, ""));
    let planned = plan(
        &request(&[&[("backend", "slow"), ("request_id", "a")]]),
        plain.domain("d"),
        PlanSettings::default(),
    );
    assert_eq!(
        planned.leases[0].shed_above, 0,
        "no shed_above: nothing shed"
    );
    for soft in ["0", "10", "11"] {
        assert_refused(
            &with_concurrency(
                &format!(
                    "{{max_in_flight: 10, shed_above: {soft}, lease: request_id, release: \
                     {{key: phase, value: done}}, ttl: 30s}}"
                ),
                "",
            ),
            &[
                &format!("`concurrency.shed_above` is {soft}"),
                "from 1 to 9",
            ],
        );
    }
}
