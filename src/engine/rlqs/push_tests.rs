//! Assignments pushed between reports: to the Envoys already on a bucket when another joins
//! or a demand moves, after the startup grace to the Envoys that kept their assignments
//! through it, and after the first exchange to a bucket new to a floodgate that has peers.

use std::time::{Duration, Instant};

use super::tests::{bucket_rate, in_force, only, open, prod, rules, usage, SharedDemands, NONE};
use super::*;
use crate::telemetry::paced_log::PacedLog;

/// `future` run to its end on a runtime of its own.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"))
        .block_on(future)
}

/// The one assignment pushed, as a rate; panics on any other number.
fn pushed_rate(stream: &mut QuotaStream, at: Instant) -> f64 {
    let mut actions = stream.pushes(at);
    assert_eq!(actions.len(), 1, "not one push: {actions:?}");
    bucket_rate(&actions.remove(0))
}

/// A report of `allowed + denied` requests over Envoy's `elapsed_seconds`, as a periodic one.
fn periodic(allowed: u64, denied: u64, elapsed_seconds: u64) -> Vec<BucketReport> {
    let mut report = usage(&[("name", "prod")], allowed, denied);
    report.elapsed_seconds = elapsed_seconds;
    vec![report]
}

#[test]
fn a_joining_envoy_makes_floodgate_push_the_smaller_share_to_the_one_already_there() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = rules();
    let start = Instant::now();
    let mut heavy = open(&board);
    only(heavy.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    let second = start + Duration::from_secs(1);
    let alone = bucket_rate(&only(heavy.report(
        "",
        &prod(100, 70),
        in_force(&rules, &NONE),
        second,
    )));
    assert!((alone - 100.0).abs() < 1e-9, "alone: {alone}");
    assert!(heavy.pushes(second).is_empty(), "nothing moved yet");

    // The light Envoy's first report: unmeasured, it asks an even share; the heavy one is
    // told its half at once rather than at its next report.
    let mut light = open(&board);
    only(light.report("acme", &prod(1, 0), in_force(&rules, &NONE), second));
    assert!((49.0..=50.0).contains(&pushed_rate(&mut heavy, second)));
    assert!(heavy.pushes(second).is_empty(), "pushed twice");

    // Its demand measured (30/s with the first report's request): the heavy one gets back
    // all but 30 × 1.05.
    let third = second + Duration::from_secs(1);
    only(light.report("", &prod(29, 0), in_force(&rules, &NONE), third));
    let back = pushed_rate(&mut heavy, third);
    assert!((68.0..=68.5).contains(&back), "{back}");

    // 33/s moves the light demand by 10 %, but the heavy share by 3.15, over 2 % of the
    // limit: pushed. 34/s moves it by 3 %: not looked at again.
    let fourth = third + Duration::from_secs(1);
    only(light.report("", &prod(33, 0), in_force(&rules, &NONE), fourth));
    let lower = pushed_rate(&mut heavy, fourth);
    assert!((65.0..=65.4).contains(&lower), "{lower}");
    let fifth = fourth + Duration::from_secs(1);
    only(light.report("", &prod(34, 0), in_force(&rules, &NONE), fifth));
    assert!(heavy.pushes(fifth).is_empty());
}

#[test]
fn a_change_under_the_push_threshold_waits_for_the_envoys_next_report() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = rules();
    let start = Instant::now();
    let (mut heavy, mut light) = (open(&board), open(&board));
    only(heavy.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    only(light.report("acme", &prod(1, 0), in_force(&rules, &NONE), start));
    let second = start + Duration::from_secs(1);
    only(heavy.report("", &prod(100, 300), in_force(&rules, &NONE), second));
    only(light.report("", &prod(10, 0), in_force(&rules, &NONE), second));
    heavy.pushes(second);
    // 10 → 11/s moves the light demand by 10 %, the heavy share by 1.05: under 2 of 100.
    let third = second + Duration::from_secs(1);
    only(light.report("", &prod(11, 0), in_force(&rules, &NONE), third));
    assert!(heavy.pushes(third).is_empty());
}

#[test]
fn after_a_restart_envoys_keep_their_assignments_until_the_grace_ends() {
    let board = QuotaBoard::new(QuotaSettings {
        startup_grace: Duration::from_secs(6),
        ..QuotaSettings::default()
    });
    let rules = rules();
    let start = Instant::now();
    // Both Envoys had the bucket before this floodgate: their first reports here cover 5 s.
    let (mut heavy, mut light) = (open(&board), open(&board));
    let answered = heavy.report(
        "acme",
        &periodic(500, 250, 5),
        in_force(&rules, &NONE),
        start,
    );
    assert_eq!(answered, Ok(vec![]));
    let later = start + Duration::from_secs(3);
    let answered = light.report("acme", &periodic(250, 0, 5), in_force(&rules, &NONE), later);
    assert_eq!(answered, Ok(vec![]));
    let again = start + Duration::from_secs(5);
    let answered = heavy.report("", &periodic(500, 250, 5), in_force(&rules, &NONE), again);
    assert_eq!(answered, Ok(vec![]), "answered within the grace");
    assert!(heavy.pushes(again).is_empty());
    // A bucket new on its Envoy (its creation's report: zero seconds) is answered at once.
    let mut newcomer = open(&board);
    let fresh = vec![usage(&[("name", "prod")], 1, 0)];
    only(newcomer.report("acme", &fresh, in_force(&rules, &NONE), again));
    drop(newcomer);

    // The grace over: 150/s and 50/s, measured over Envoy's 5 s, split evenly.
    let over = start + Duration::from_secs(6);
    let heavy_share = pushed_rate(&mut heavy, over);
    let light_share = pushed_rate(&mut light, over);
    assert!((49.0..=50.0).contains(&heavy_share), "{heavy_share}");
    assert!((49.0..=50.0).contains(&light_share), "{light_share}");
}

#[test]
fn a_bucket_new_to_a_floodgate_with_peers_waits_for_their_demand() {
    let store = SharedDemands::default();
    let settings = QuotaSettings {
        startup_grace: Duration::ZERO,
        ..QuotaSettings::default()
    };
    let (first_board, second_board) =
        (QuotaBoard::new(settings.clone()), QuotaBoard::new(settings));
    first_board.exchange_demands();
    second_board.exchange_demands();
    let rules = rules();
    let failed = PacedLog::every(Duration::from_secs(10));
    let start = Instant::now();
    let mut heavy = open(&first_board);
    let answered = heavy.report(
        "acme",
        &periodic(600, 400, 5),
        in_force(&rules, &NONE),
        start,
    );
    assert_eq!(answered, Ok(vec![]), "answered before an exchange");
    block_on(exchange::exchange_once(&first_board, &store, 1, &failed));
    let alone = pushed_rate(&mut heavy, start);
    assert!((alone - 100.0).abs() < 1e-9, "alone: {alone}");

    // Another Envoy on the other floodgate: its first assignment already counts the first
    // floodgate's demand, and the first is pushed its smaller part once it has exchanged.
    let mut light = open(&second_board);
    let answered = light.report("acme", &periodic(100, 0, 5), in_force(&rules, &NONE), start);
    assert_eq!(answered, Ok(vec![]));
    block_on(exchange::exchange_once(&second_board, &store, 2, &failed));
    let light_share = pushed_rate(&mut light, start);
    assert!((20.9..=21.0).contains(&light_share), "{light_share}");
    block_on(exchange::exchange_once(&first_board, &store, 1, &failed));
    let heavy_share = pushed_rate(&mut heavy, start);
    assert!((78.9..=79.0).contains(&heavy_share), "{heavy_share}");
}

/// A store that cannot be reached.
struct Unreachable;

impl crate::store::RlqsPeers for Unreachable {
    async fn exchange_demands(
        &self,
        _instance: u64,
        _items: &[crate::store::DemandItem<'_>],
        _terms: crate::store::ExchangeTerms,
    ) -> Result<Vec<Vec<Option<f64>>>, crate::store::StoreError> {
        Err(crate::store::StoreError::Unavailable {
            backend: "test",
            reason: "unreachable".to_owned(),
        })
    }
}

#[test]
fn a_failed_exchange_divides_a_waiting_bucket_among_this_floodgates_envoys() {
    let board = QuotaBoard::new(QuotaSettings::default());
    board.exchange_demands();
    let rules = rules();
    let start = Instant::now();
    let mut stream = open(&board);
    let answered = stream.report("acme", &prod(1, 0), in_force(&rules, &NONE), start);
    assert_eq!(answered, Ok(vec![]));
    let failed = PacedLog::every(Duration::from_secs(10));
    block_on(exchange::exchange_once(&board, &Unreachable, 1, &failed));
    assert!((pushed_rate(&mut stream, start) - 100.0).abs() < 1e-9);
}

#[test]
fn a_stream_wakes_for_its_push_once_something_is_posted() {
    let board = QuotaBoard::new(QuotaSettings::default());
    let rules = rules();
    let now = Instant::now();
    let (mut first, mut second) = (open(&board), open(&board));
    only(first.report("acme", &prod(1, 0), in_force(&rules, &NONE), now));
    only(second.report("acme", &prod(1, 0), in_force(&rules, &NONE), now));
    block_on(async { tokio::time::timeout(Duration::from_secs(10), first.push_due()).await })
        .unwrap_or_else(|_| panic!("the push never came due"));
    let half = pushed_rate(&mut first, Instant::now());
    assert!((49.0..=50.0).contains(&half), "{half}");
}

/// A store with no other floodgate that keeps whether each exchange retired the stopped ones.
#[derive(Default)]
struct Retirements {
    retired: parking_lot::Mutex<Vec<bool>>,
}

impl crate::store::RlqsPeers for Retirements {
    async fn exchange_demands(
        &self,
        _instance: u64,
        items: &[crate::store::DemandItem<'_>],
        terms: crate::store::ExchangeTerms,
    ) -> Result<Vec<Vec<Option<f64>>>, crate::store::StoreError> {
        self.retired.lock().push(terms.retire);
        Ok(vec![Vec::new(); items.len()])
    }
}

#[test]
fn a_restarted_floodgate_publishes_its_envoys_and_retires_the_stopped_ones_after_its_grace() {
    let board = QuotaBoard::new(QuotaSettings::default());
    board.exchange_demands();
    let store = Retirements::default();
    let failed = PacedLog::every(Duration::from_secs(10));
    let rules = rules();
    // Its first report came 10 s ago: the 6 s grace is over by now.
    let start = Instant::now() - Duration::from_secs(10);
    let mut stream = open(&board);
    let answered = stream.report(
        "acme",
        &periodic(600, 400, 5),
        in_force(&rules, &NONE),
        start,
    );
    assert_eq!(answered, Ok(vec![]));
    // Through the grace its Envoy stands for the instance it came from: not published.
    assert!(board
        .published_demands(start + Duration::from_secs(1))
        .is_empty());
    let over = start + Duration::from_secs(6);
    assert!(stream.pushes(over).is_empty(), "pushed before an exchange");
    block_on(exchange::exchange_once(&board, &store, 1, &failed));
    block_on(exchange::exchange_once(&board, &store, 1, &failed));
    assert_eq!(*store.retired.lock(), vec![true, false]);
    assert!((pushed_rate(&mut stream, over) - 100.0).abs() < 1e-9);
}
