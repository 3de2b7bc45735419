//! The lane without Redis: a fake target that holds each call until the test lets it go (or,
//! as a Redis connection does, until the call's deadline), and answers every counter with its
//! own hits as `remaining`, so each request can tell its answer from the others'.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Semaphore;

use super::*;
use crate::core::arithmetic::algorithm::{Hits, Quota, Share};
use crate::core::decision::plan::Counter;
use crate::core::ground::unit::Unit;
use crate::core::ground::verdict::Role;
use crate::store::redis::script::{build_request, Arg, Now, Settling};

const SECOND: Duration = Duration::from_secs(1);

struct Inner {
    calls: Mutex<Vec<Call>>,
    /// Each call's deadline, as the lane gave it.
    deadlines: Mutex<Vec<Duration>>,
    /// One permit per call allowed to answer.
    gate: Semaphore,
    fail: bool,
}

#[derive(Clone)]
struct Fake(Arc<Inner>);

impl Fake {
    fn new(fail: bool) -> Self {
        Self(Arc::new(Inner {
            calls: Mutex::new(Vec::new()),
            deadlines: Mutex::new(Vec::new()),
            gate: Semaphore::new(0),
            fail,
        }))
    }

    fn calls(&self) -> Vec<Call> {
        lock(&self.0.calls).clone()
    }

    fn deadlines(&self) -> Vec<Duration> {
        lock(&self.0.deadlines).clone()
    }

    fn release(&self, calls: usize) {
        self.0.gate.add_permits(calls);
    }
}

impl Target for Fake {
    async fn invoke(&self, call: &Call, deadline: Duration) -> Result<Vec<i64>, StoreError> {
        lock(&self.0.calls).push(call.clone());
        lock(&self.0.deadlines).push(deadline);
        tokio::time::timeout(deadline, self.0.gate.acquire())
            .await
            .map_err(|_| self.late(deadline))?
            .map_err(|error| unavailable(error.to_string()))?
            .forget();
        if self.0.fail {
            return Err(unavailable("Redis said no".to_owned()));
        }
        Ok(reply_to(call))
    }

    fn late(&self, deadline: Duration) -> StoreError {
        unavailable(format!("late after {deadline:?}"))
    }
}

fn number(arg: Option<&Arg>) -> i64 {
    match arg {
        Some(Arg::Unsigned(number)) => i64::try_from(*number).unwrap_or(i64::MAX),
        other => panic!("expected a number, got {other:?}"),
    }
}

/// Each request: not over; each counter admitted, charged, with its hits as `remaining`.
fn reply_to(call: &Call) -> Vec<i64> {
    let mut reply = Vec::new();
    for request in call.sent_requests() {
        reply.push(0); // not over
        for (_, template, _) in &request.counters {
            // The template's sixth value is the hits.
            reply.extend([1, number(template.get(5)), 0, 0, 1]);
        }
    }
    reply
}

/// A one-counter request whose answer will say `tag`.
fn request(tag: u64) -> RequestArgs {
    let counters = [Counter {
        descriptor: 0,
        key: b"k".to_vec(),
        quota: Quota::new(5, Unit::Minute),
        hits: Hits::Charge(tag),
        role: Role::Enforced,
        share: Share::FULL,
    }];
    build_request(&counters, Settling::default(), Now::RedisTime, |_| {
        "k".to_owned()
    })
}

fn tag_of(answer: &Answer) -> u64 {
    match answer {
        Ok(decided) => decided.outcomes[0].snapshot.remaining,
        Err(error) => panic!("no answer: {error}"),
    }
}

/// Requests per call, in the order the calls went.
fn batch_sizes(fake: &Fake) -> Vec<i64> {
    fake.calls()
        .iter()
        .map(|call| number(call.args.first()))
        .collect()
}

impl<T: Target> Lane<T> {
    fn waiting(&self) -> usize {
        lock(&self.queue).waiting.len()
    }
}

/// Starts `tag` in a task of its own and returns once its call is in flight.
async fn in_flight(
    lane: &Arc<Lane<Fake>>,
    fake: &Fake,
    tag: u64,
) -> tokio::task::JoinHandle<Answer> {
    let calls = fake.calls().len();
    let lane = Arc::clone(lane);
    let started = tokio::spawn(async move { lane.decide(request(tag), SECOND).await });
    while fake.calls().len() == calls {
        tokio::task::yield_now().await;
    }
    started
}

/// Starts `tags` in one task, in order, and returns once all of them wait in the lane.
async fn queued(
    lane: &Arc<Lane<Fake>>,
    tags: Vec<u64>,
    timeout: Duration,
) -> tokio::task::JoinHandle<Vec<Answer>> {
    let count = tags.len();
    let waiting = lane.waiting();
    let joining = Arc::clone(lane);
    let started = tokio::spawn(async move {
        join_all(
            tags.into_iter()
                .map(|tag| joining.decide(request(tag), timeout)),
        )
        .await
    });
    while lane.waiting() < waiting + count {
        tokio::task::yield_now().await;
    }
    started
}

async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
    task.await
        .unwrap_or_else(|error| panic!("task failed: {error}"))
}

#[tokio::test]
async fn a_lone_request_goes_at_once_in_a_call_of_its_own() {
    let fake = Fake::new(false);
    fake.release(2);
    let lane = Lane::new(fake.clone(), 8);
    assert_eq!(tag_of(&lane.decide(request(7), SECOND).await), 7);
    // Any timeout the flag can give, however long.
    assert_eq!(tag_of(&lane.decide(request(9), Duration::MAX).await), 9);
    assert_eq!(batch_sizes(&fake), [1, 1]);
    assert_eq!(fake.calls()[0], Call::single(request(7)));
}

#[tokio::test]
async fn requests_that_arrive_during_a_call_go_together_in_order_up_to_the_max() {
    let fake = Fake::new(false);
    let lane = Lane::new(fake.clone(), 3);
    let first = in_flight(&lane, &fake, 1).await;
    let rest = queued(&lane, (2..=6).collect(), SECOND).await;
    fake.release(3);
    assert_eq!(tag_of(&joined(first).await), 1);
    let tags: Vec<u64> = joined(rest).await.iter().map(tag_of).collect();
    assert_eq!(tags, [2, 3, 4, 5, 6]);
    assert_eq!(batch_sizes(&fake), [1, 3, 2]);
    let second = &fake.calls()[1];
    let expected = Call::batch([request(2), request(3), request(4)].iter());
    assert_eq!(*second, expected);
    // Idle again: the next request goes alone.
    fake.release(1);
    assert_eq!(tag_of(&lane.decide(request(8), SECOND).await), 8);
    assert_eq!(batch_sizes(&fake), [1, 3, 2, 1]);
}

#[tokio::test]
async fn a_request_out_of_time_while_waiting_is_late_and_never_sent() {
    let fake = Fake::new(false);
    let lane = Lane::new(fake.clone(), 8);
    let first = in_flight(&lane, &fake, 1).await;
    let short = queued(&lane, vec![2], Duration::from_millis(20)).await;
    // Past the short deadline while the first call is still in flight.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let long = queued(&lane, vec![3], SECOND).await;
    fake.release(2);
    let answers = joined(short).await;
    assert!(
        matches!(&answers[0], Err(StoreError::Unavailable { reason, .. }) if reason.contains("late")),
        "{answers:?}"
    );
    assert_eq!(tag_of(&joined(first).await), 1);
    assert_eq!(tag_of(&joined(long).await[0]), 3);
    assert_eq!(batch_sizes(&fake), [1, 1]);
    assert_eq!(fake.calls()[1], Call::single(request(3)));
}

#[tokio::test]
async fn a_call_ends_by_its_earliest_request_deadline() {
    let fake = Fake::new(false);
    let lane = Lane::new(fake.clone(), 8);
    let first = in_flight(&lane, &fake, 1).await;
    let later = queued(&lane, vec![2], 10 * SECOND).await;
    let sooner = queued(&lane, vec![3], SECOND).await;
    fake.release(1);
    assert_eq!(tag_of(&joined(first).await), 1);
    // Nobody lets the second call go: it ends at its deadline, the sooner request's.
    let answers = [joined(later).await, joined(sooner).await];
    for answer in answers.iter().flatten() {
        assert!(
            matches!(answer, Err(StoreError::Unavailable { reason, .. }) if reason.contains("late")),
            "{answers:?}"
        );
    }
    let deadlines = fake.deadlines();
    assert_eq!(deadlines.len(), 2, "{deadlines:?}");
    assert!(deadlines[1] <= SECOND, "{deadlines:?}");
    assert_eq!(batch_sizes(&fake), [1, 2]);
}

#[tokio::test]
async fn an_error_of_the_call_fails_each_of_its_requests() {
    let fake = Fake::new(true);
    let lane = Lane::new(fake.clone(), 8);
    let first = in_flight(&lane, &fake, 1).await;
    let rest = queued(&lane, vec![2, 3], SECOND).await;
    fake.release(2);
    let mut answers = joined(rest).await;
    answers.push(joined(first).await);
    for answer in answers {
        assert!(
            matches!(&answer, Err(StoreError::Unavailable { reason, .. }) if reason == "Redis said no"),
            "{answer:?}"
        );
    }
    assert_eq!(batch_sizes(&fake), [1, 2]);
}

#[tokio::test]
async fn a_call_goes_on_for_the_others_when_the_request_that_started_it_is_given_up() {
    let fake = Fake::new(false);
    let lane = Lane::new(fake.clone(), 8);
    let first = in_flight(&lane, &fake, 1).await;
    let rest = queued(&lane, vec![2, 3], SECOND).await;
    first.abort();
    fake.release(2);
    let tags: Vec<u64> = joined(rest).await.iter().map(tag_of).collect();
    assert_eq!(tags, [2, 3]);
    assert_eq!(batch_sizes(&fake), [1, 2]);
}

#[tokio::test]
async fn a_lane_nobody_holds_any_more_is_dropped_with_its_caller() {
    let fake = Fake::new(false);
    fake.release(1);
    let lane = Lane::new(fake.clone(), 8);
    assert_eq!(tag_of(&lane.decide(request(7), SECOND).await), 7);
    drop(lane);
    // The caller, asleep, holds the lane only weakly: the lane, and the target in it, go.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(Arc::strong_count(&fake.0), 1);
}

/// A store outlives a runtime in tests that build one per step: the lane's caller, gone with
/// the first runtime (in the middle of a call, here), is replaced in the next.
#[test]
fn a_lane_calls_again_on_a_new_runtime_after_its_first_one_shut_down() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|error| panic!("no runtime: {error}"))
    };
    let fake = Fake::new(false);
    let lane = Lane::new(fake.clone(), 8);
    let first = runtime();
    first.block_on(async {
        let unanswered = in_flight(&lane, &fake, 1).await;
        unanswered.abort();
    });
    drop(first);
    fake.release(1);
    let answer = runtime()
        .block_on(async { tokio::time::timeout(SECOND, lane.decide(request(2), SECOND)).await });
    match answer {
        Ok(answer) => assert_eq!(tag_of(&answer), 2),
        Err(_) => panic!("the lane never called on the new runtime"),
    }
}
