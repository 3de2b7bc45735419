//! The board and its streams: shares, defaults, abandonment and every bound.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::*;
use crate::core::policy::adjustment::{Adjustment, AdjustmentSource, Adjustments};
use crate::core::policy::config::load_valid;
use crate::core::policy::rlqs::{Assignment, TokenBucketShape, UnmatchedBucket};
use crate::core::policy::rules::RuleSet;

const RULES: &str = "
domain: acme
descriptors:
  - key: name
    value: prod
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: name
    value: free
    rate_limit: {unlimited: true}
  - key: tier
    value: guest
    rate_limit: {unit: second, requests_per_unit: 6, name: guests}
";

pub(super) static NONE: std::sync::LazyLock<Adjustments> =
    std::sync::LazyLock::new(Adjustments::default);

pub(super) fn in_force<'a>(rules: &'a RuleSet, adjustments: &'a Adjustments) -> InForce<'a> {
    InForce {
        rules,
        adjustments,
        now_unix_ms: 0,
    }
}

pub(super) fn rules() -> RuleSet {
    load_valid("acme.yaml", RULES)
}

pub(super) fn usage(pairs: &[(&str, &str)], allowed: u64, denied: u64) -> BucketReport {
    BucketReport {
        bucket_id: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        allowed,
        denied,
        elapsed_seconds: 0,
    }
}

pub(super) fn prod(allowed: u64, denied: u64) -> Vec<BucketReport> {
    vec![usage(&[("name", "prod")], allowed, denied)]
}

pub(super) fn only(actions: Result<Vec<StreamAction>, ReportError>) -> StreamAction {
    match actions {
        Ok(mut actions) if actions.len() == 1 => actions.remove(0),
        other => panic!("not one action: {other:?}"),
    }
}

pub(super) fn bucket_rate(action: &StreamAction) -> f64 {
    match action {
        StreamAction::Assign {
            assignment: Assignment::TokenBucket(shape),
            ..
        } => shape.rate(),
        other => panic!("not a token bucket: {other:?}"),
    }
}

/// The token-bucket rate `stream` is assigned for its one-bucket report `usage` at `at`.
fn assigned(
    stream: &mut QuotaStream,
    domain: &str,
    usage: &[BucketReport],
    rules: &RuleSet,
    at: Instant,
) -> f64 {
    bucket_rate(&only(stream.report(
        domain,
        usage,
        in_force(rules, &NONE),
        at,
    )))
}

pub(super) fn open(board: &std::sync::Arc<QuotaBoard>) -> QuotaStream {
    board.open_stream().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn two_envoys_with_unequal_demand_share_the_limit() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = rules();
    let start = Instant::now();
    let mut light = open(&board);
    let mut heavy = open(&board);
    // First reports: no rate yet, each asks an even share.
    let first = only(light.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    assert!((bucket_rate(&first) - 100.0).abs() < 1.0, "{first:?}");
    only(heavy.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    // One second later: light offered 10/s, heavy 400/s. Heavy, reporting first, still sees
    // light as a newcomer asking an even share; light then sees heavy's demand.
    let later = start + Duration::from_secs(1);
    let early = bucket_rate(&only(heavy.report(
        "",
        &prod(99, 300),
        in_force(&rules, &NONE),
        later,
    )));
    assert!(
        (49.0..=50.0).contains(&early),
        "heavy before light's rate: {early}"
    );
    let light_share = bucket_rate(&only(light.report(
        "",
        &prod(9, 0),
        in_force(&rules, &NONE),
        later,
    )));
    let later = later + Duration::from_secs(1);
    let heavy_share = bucket_rate(&only(heavy.report(
        "",
        &prod(100, 300),
        in_force(&rules, &NONE),
        later,
    )));
    assert!((10.4..=10.5).contains(&light_share), "light {light_share}");
    assert!((89.0..=89.5).contains(&heavy_share), "heavy {heavy_share}");
    assert!(light_share + heavy_share <= 100.0);
    // The heavy one alone once the light one's stream ends.
    drop(light);
    let alone = bucket_rate(&only(heavy.report(
        "",
        &prod(88, 300),
        in_force(&rules, &NONE),
        later + Duration::from_secs(1),
    )));
    assert!((alone - 100.0).abs() < 1e-9, "{alone}");
}

#[test]
fn buckets_without_a_rule_get_the_named_default_rule_in_its_domain_and_allow_all_elsewhere() {
    let board = QuotaBoard::new(QuotaSettings {
        unmatched: UnmatchedBucket::Rule("guests".into()),
        ..QuotaSettings::default()
    });
    let now = Instant::now();
    let mut stream = open(&board);
    let dev = vec![usage(&[("name", "dev")], 1, 0)];
    let held = only(stream.report("acme", &dev, in_force(&rules(), &NONE), now));
    // The only Envoy on the bucket gets all of the guests rule's 6 a second.
    assert!((bucket_rate(&held) - 6.0).abs() < 1e-9, "{held:?}");
    let mut other_domain = open(&board);
    let StreamAction::Assign { assignment, .. } =
        only(other_domain.report("elsewhere", &prod(1, 0), in_force(&rules(), &NONE), now))
    else {
        panic!("abandoned");
    };
    assert_eq!(assignment, Assignment::AllowAll);
    assert_eq!(
        UnmatchedBucket::parse("rule:guests"),
        Some(UnmatchedBucket::Rule("guests".into()))
    );
    assert_eq!(UnmatchedBucket::parse("rule:"), None);
    assert_eq!(UnmatchedBucket::parse("rules"), None);
}

#[test]
fn buckets_without_a_rule_get_the_configured_default_and_unlimited_ones_allow() {
    for (unmatched, expected) in [
        (UnmatchedBucket::AllowAll, Assignment::AllowAll),
        (UnmatchedBucket::DenyAll, Assignment::DenyAll),
    ] {
        let board = QuotaBoard::new(QuotaSettings {
            unmatched: unmatched.clone(),
            ..QuotaSettings::default()
        });
        let mut stream = open(&board);
        let now = Instant::now();
        let dev = vec![usage(&[("name", "dev")], 1, 0)];
        let StreamAction::Assign { assignment, .. } =
            only(stream.report("acme", &dev, in_force(&rules(), &NONE), now))
        else {
            panic!("abandoned");
        };
        assert_eq!(assignment, expected);
        let mut other_domain = open(&board);
        let StreamAction::Assign { assignment, .. } =
            only(other_domain.report("elsewhere", &prod(1, 0), in_force(&rules(), &NONE), now))
        else {
            panic!("abandoned");
        };
        assert_eq!(assignment, expected);
    }
    let board = QuotaBoard::new(QuotaSettings::default());
    let free = vec![usage(&[("name", "free")], 1, 0)];
    let action =
        only(open(&board).report("acme", &free, in_force(&rules(), &NONE), Instant::now()));
    assert!(matches!(
        action,
        StreamAction::Assign {
            assignment: Assignment::AllowAll,
            ..
        }
    ));
}

#[test]
fn a_bucket_idle_for_abandon_after_is_abandoned_and_forgotten() {
    let board = QuotaBoard::new(QuotaSettings {
        abandon_after: Duration::from_secs(5),
        ..QuotaSettings::default()
    });
    let rules = rules();
    let mut stream = open(&board);
    let start = Instant::now();
    only(stream.report("acme", &prod(3, 0), in_force(&rules, &NONE), start));
    for second in 1..=5 {
        let at = start + Duration::from_secs(second);
        let action = only(stream.report("", &prod(0, 0), in_force(&rules, &NONE), at));
        assert!(
            matches!(action, StreamAction::Assign { .. }),
            "{second}: {action:?}"
        );
    }
    assert_eq!(board.buckets("acme"), 1);
    let action = only(stream.report(
        "",
        &prod(0, 0),
        in_force(&rules, &NONE),
        start + Duration::from_secs(6),
    ));
    assert!(matches!(action, StreamAction::Abandon { .. }), "{action:?}");
    assert_eq!(board.buckets("acme"), 0);
    // A request after that starts the bucket afresh.
    let action = only(stream.report(
        "",
        &prod(1, 0),
        in_force(&rules, &NONE),
        start + Duration::from_secs(7),
    ));
    assert!(matches!(action, StreamAction::Assign { .. }));
}

#[test]
fn reports_a_few_milliseconds_apart_carry_their_requests_into_the_next_rate() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = load_valid(
        "acme.yaml",
        "domain: acme\ndescriptors:\n  - key: name\n    value: prod\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
    );
    let mut stream = open(&board);
    let mut other = open(&board);
    let start = Instant::now();
    only(other.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    only(other.report(
        "",
        &prod(2000, 0),
        in_force(&rules, &NONE),
        start + Duration::from_secs(1),
    ));
    only(stream.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    only(stream.report(
        "",
        &prod(99, 0),
        in_force(&rules, &NONE),
        start + Duration::from_millis(3),
    ));
    // 100 + 100 requests over one second: 200/s, asking 210 of the 1000.
    let share = bucket_rate(&only(stream.report(
        "",
        &prod(100, 0),
        in_force(&rules, &NONE),
        start + Duration::from_secs(1),
    )));
    assert!((209.0..=210.0).contains(&share), "{share}");
}

#[test]
fn malformed_reports_close_the_stream_with_what_is_wrong() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = rules();
    let now = Instant::now();
    let error = |result: Result<Vec<StreamAction>, ReportError>| match result {
        Err(error) => error,
        Ok(actions) => panic!("accepted: {actions:?}"),
    };
    assert_eq!(
        error(open(&board).report("", &prod(1, 0), in_force(&rules, &NONE), now)),
        ReportError::MissingDomain
    );
    let mut stream = open(&board);
    only(stream.report("acme", &prod(1, 0), in_force(&rules, &NONE), now));
    assert!(matches!(
        error(stream.report("other", &prod(1, 0), in_force(&rules, &NONE), now)),
        ReportError::DomainChanged { .. }
    ));
    let empty = vec![usage(&[], 1, 0)];
    let message =
        error(open(&board).report("acme", &empty, in_force(&rules, &NONE), now)).to_string();
    assert!(
        message.contains("bucket 0") && message.contains("bucket_id"),
        "{message}"
    );
}

#[test]
fn buckets_per_stream_per_domain_and_streams_are_bounded() {
    let board = QuotaBoard::new(QuotaSettings {
        max_buckets_per_stream: 3,
        max_buckets_per_domain: 5,
        max_streams: 2,
        ..QuotaSettings::default()
    });
    let rules = rules();
    let now = Instant::now();
    let users = |range: std::ops::Range<u32>| -> Vec<BucketReport> {
        range
            .map(|i| usage(&[("user", &i.to_string())], 1, 0))
            .collect()
    };
    let mut first = open(&board);
    assert_eq!(
        first
            .report("acme", &users(0..3), in_force(&rules, &NONE), now)
            .map(|a| a.len()),
        Ok(3)
    );
    // The same buckets again are no new buckets.
    assert!(first
        .report("acme", &users(0..3), in_force(&rules, &NONE), now)
        .is_ok());
    assert_eq!(
        first.report("acme", &users(3..4), in_force(&rules, &NONE), now),
        Err(ReportError::TooManyStreamBuckets { buckets: 4, max: 3 })
    );
    let mut second = open(&board);
    assert!(second
        .report("acme", &users(3..5), in_force(&rules, &NONE), now)
        .is_ok());
    assert_eq!(
        second.report("acme", &users(5..6), in_force(&rules, &NONE), now),
        Err(ReportError::TooManyDomainBuckets {
            domain: "acme".to_owned(),
            buckets: 5
        })
    );
    assert_eq!(
        board.open_stream().err(),
        Some(StreamsExhausted { open: 2 })
    );
    drop(first);
    assert_eq!(board.buckets("acme"), 2);
    assert!(board.open_stream().is_ok());
}

#[test]
fn the_assignment_carries_the_configured_time_to_live() {
    let board = QuotaBoard::new(QuotaSettings {
        assignment_ttl: Duration::from_secs(7),
        ..QuotaSettings::default()
    });
    let action = only(open(&board).report(
        "acme",
        &prod(1, 0),
        in_force(&rules(), &NONE),
        Instant::now(),
    ));
    assert_eq!(
        action,
        StreamAction::Assign {
            bucket: crate::core::policy::rlqs::BucketKey::from_map(
                &usage(&[("name", "prod")], 0, 0).bucket_id,
                Default::default()
            )
            .unwrap_or_else(|e| panic!("{e}")),
            // The bucket's first assignment on this Envoy: a quarter of its burst.
            assignment: Assignment::TokenBucket(TokenBucketShape {
                max_tokens: 25,
                tokens_per_fill: 100,
                fill_interval_seconds: 1,
            }),
            ttl: Duration::from_secs(7),
        }
    );
}

#[test]
fn an_override_or_adaptive_value_changes_the_total_divided() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = rules();
    let mut adjustments = Adjustments::default();
    adjustments.set_adaptive(
        "acme",
        "acme.name_prod",
        Adjustment {
            requests_per_unit: 40,
            limit_index: 0,
            source: AdjustmentSource::Adaptive {
                signal: "p99".to_owned(),
            },
        },
    );
    let action = only(open(&board).report(
        "acme",
        &prod(1, 0),
        in_force(&rules, &adjustments),
        Instant::now(),
    ));
    assert!((bucket_rate(&action) - 40.0).abs() < 1e-9, "{action:?}");
}

/// Each instance's last demand on one bucket of one domain.
type Published = HashMap<(String, crate::core::policy::rlqs::BucketKey), HashMap<u64, Option<f64>>>;

/// A store that every board of the test publishes to, as Redis does for floodgates.
#[derive(Default)]
pub(super) struct SharedDemands {
    published: parking_lot::Mutex<Published>,
}

impl crate::store::RlqsPeers for SharedDemands {
    async fn exchange_demands(
        &self,
        instance: u64,
        items: &[crate::store::DemandItem<'_>],
        _terms: crate::store::ExchangeTerms,
    ) -> Result<Vec<Vec<Option<f64>>>, crate::store::StoreError> {
        let mut published = self.published.lock();
        Ok(items
            .iter()
            .map(|item| {
                let entries = published
                    .entry((item.domain.to_owned(), item.bucket.clone()))
                    .or_default();
                entries.insert(instance, item.demand);
                entries
                    .iter()
                    .filter(|(other, _)| **other != instance)
                    .map(|(_, demand)| *demand)
                    .collect()
            })
            .collect())
    }
}

#[test]
fn floodgates_that_exchange_demands_divide_one_limit_between_their_envoys() {
    let store = SharedDemands::default();
    let (light_board, heavy_board) = (
        QuotaBoard::new(QuotaSettings::default()),
        QuotaBoard::new(QuotaSettings::default()),
    );
    let rules = rules();
    let start = Instant::now();
    let (mut light, mut heavy) = (open(&light_board), open(&heavy_board));
    only(light.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    only(heavy.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    // One second: light offered 10/s, heavy 400/s, each to its own floodgate.
    let later = start + Duration::from_secs(1);
    only(light.report("", &prod(9, 0), in_force(&rules, &NONE), later));
    only(heavy.report("", &prod(99, 300), in_force(&rules, &NONE), later));
    // Alone, each floodgate gives its Envoy the whole limit.
    let alone = bucket_rate(&only(heavy.report(
        "",
        &prod(0, 0),
        in_force(&rules, &NONE),
        later,
    )));
    assert!((99.0..=100.0).contains(&alone), "heavy alone: {alone}");
    let failed = crate::telemetry::paced_log::PacedLog::every(Duration::from_secs(10));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"));
    runtime.block_on(async {
        for (board, instance) in [(&light_board, 1), (&heavy_board, 2), (&light_board, 1)] {
            exchange::exchange_once(board, &store, instance, &failed).await;
        }
    });
    let later = later + Duration::from_secs(1);
    let light_share = bucket_rate(&only(light.report(
        "",
        &prod(10, 0),
        in_force(&rules, &NONE),
        later,
    )));
    let heavy_share = bucket_rate(&only(heavy.report(
        "",
        &prod(100, 300),
        in_force(&rules, &NONE),
        later,
    )));
    // As two Envoys of one floodgate: 10 × 1.05 and the rest.
    assert!((10.4..=10.6).contains(&light_share), "light {light_share}");
    assert!((89.0..=89.6).contains(&heavy_share), "heavy {heavy_share}");
    assert!(light_share + heavy_share <= 100.0 + 1e-9);
}

#[test]
fn buckets_of_a_rules_priority_classes_divide_its_limit_higher_class_first() {
    let rules = load_valid(
        "acme.yaml",
        "
domain: acme
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 30}
    priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}
",
    );
    let board = QuotaBoard::new(QuotaSettings::default());
    let class = |name: &str, allowed, denied| {
        vec![usage(
            &[("tenant", "t1"), ("priority", name)],
            allowed,
            denied,
        )]
    };
    let start = Instant::now();
    let (mut critical, mut low) = (open(&board), open(&board));
    only(critical.report(
        "acme",
        &class("critical", 1, 0),
        in_force(&rules, &NONE),
        start,
    ));
    only(low.report("acme", &class("low", 1, 0), in_force(&rules, &NONE), start));
    // Critical offers 10/s, low 60/s: critical asks 12, low gets its cap of 15, and the 3
    // nobody asked for go back to critical.
    let later = start + Duration::from_secs(1);
    only(critical.report(
        "",
        &class("critical", 10, 0),
        in_force(&rules, &NONE),
        later,
    ));
    only(low.report("", &class("low", 15, 45), in_force(&rules, &NONE), later));
    let later = later + Duration::from_secs(1);
    let critical_share = assigned(&mut critical, "", &class("critical", 10, 0), &rules, later);
    let low_share = assigned(&mut low, "", &class("low", 15, 45), &rules, later);
    assert!(
        (14.9..=15.0).contains(&critical_share),
        "critical {critical_share}"
    );
    assert!((14.9..=15.0).contains(&low_share), "low {low_share}");
    // Critical rises past the limit: low yields everything.
    let later = later + Duration::from_secs(1);
    only(critical.report(
        "",
        &class("critical", 15, 25),
        in_force(&rules, &NONE),
        later,
    ));
    let yielded = only(low.report("", &class("low", 15, 45), in_force(&rules, &NONE), later));
    assert!(
        matches!(
            yielded,
            StreamAction::Assign {
                assignment: Assignment::DenyAll,
                ..
            }
        ),
        "low yields all: {yielded:?}"
    );
    let critical_share = assigned(&mut critical, "", &class("critical", 0, 0), &rules, later);
    assert!(critical_share > 29.9, "critical {critical_share}");
    // The low stream ends: its bucket leaves the class group.
    drop(low);
    let alone = assigned(&mut critical, "", &class("critical", 0, 0), &rules, later);
    assert!(alone > 29.9, "critical alone {alone}");
}

#[test]
fn a_class_alone_has_up_to_its_share_whatever_classes_have_no_bucket() {
    let rules = load_valid(
        "acme.yaml",
        "
domain: acme
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 30}
    priority: {key: priority, classes: {critical: 100%, normal: 80%, low: 50%}, default: low}
",
    );
    let board = QuotaBoard::new(QuotaSettings::default());
    let low_usage = |allowed, denied| {
        vec![usage(
            &[("tenant", "t1"), ("priority", "low")],
            allowed,
            denied,
        )]
    };
    let start = Instant::now();
    let mut low = open(&board);
    // Unmeasured and alone: an even part of the limit among the classes present, its cap.
    let first = assigned(&mut low, "acme", &low_usage(1, 0), &rules, start);
    assert!((14.9..=15.0).contains(&first), "low first {first}");
    let later = start + Duration::from_secs(1);
    let share = assigned(&mut low, "", &low_usage(15, 45), &rules, later);
    assert!((14.9..=15.0).contains(&share), "low {share}");
}
