//! A leaky bucket that queues, over gRPC: answers held until each request's turn, in order,
//! refused at once past the queue, the caller's deadline or the process's cap, and sent at
//! once when the process stops. Real time: only order and generous bounds are asserted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::core::ground::time::SystemClock;
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::engine::shutdown;
use floodgate::engine::waiting::WaitingRoom;
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::RateLimitRequest;
use floodgate::store::memory::MemoryStore;
use floodgate_testkit::descriptor;
use tonic::transport::Channel;

use floodgate_testkit::in_process::{serve_limiter, Served};

const RULES: &str = r#"
domain: queue
descriptors:
  - key: smooth
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 20,
                 queue: true}
  - key: delayed
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 20,
                 queue: true, delay: 5}
  - key: short
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 20,
                 queue: true, max_wait_ms: 250}
"#;

struct Server {
    client: RateLimitServiceClient<Channel>,
    room: WaitingRoom,
    trigger: shutdown::ShutdownTrigger,
    task: tokio::task::JoinHandle<()>,
}

async fn start(max_waiting: usize) -> Server {
    let rules = load(
        &[SourceFile {
            name: "queue.yaml".into(),
            text: RULES.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|errors| panic!("test rules do not load: {errors}"));
    let store = MemoryStore::new(1000, Arc::new(SystemClock));
    let room = WaitingRoom::new(max_waiting);
    let limiter = Arc::new(
        Limiter::new(rules, store, LimiterSettings::default()).with_waiting_room(room.clone()),
    );
    let Served {
        client,
        trigger,
        task,
        ..
    } = serve_limiter(limiter).await;
    Server {
        client,
        room,
        trigger,
        task,
    }
}

impl Server {
    async fn stop(self) {
        self.trigger.fire();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

fn request(key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "queue".into(),
        descriptors: vec![descriptor(&[(key, value)])],
        hits_addend: 0,
    }
}

/// Sends `count` calls at once, optionally with a gRPC deadline; each answer's code and when
/// it came (from the first call), sorted by that time. The turns need not follow the order
/// the calls were made: tasks on a shared machine may reach the server in any order.
async fn burst(
    client: &RateLimitServiceClient<Channel>,
    key: &str,
    count: usize,
    timeout: Option<Duration>,
) -> Vec<(Code, Duration)> {
    let started = Instant::now();
    let mut calls = Vec::with_capacity(count);
    for _ in 0..count {
        let mut client = client.clone();
        let mut call = tonic::Request::new(request(key, "one"));
        if let Some(timeout) = timeout {
            call.set_timeout(timeout);
        }
        calls.push(tokio::spawn(async move {
            let code = match client.should_rate_limit(call).await {
                Ok(answer) => {
                    Code::try_from(answer.into_inner().overall_code).unwrap_or(Code::Unknown)
                }
                Err(status) => panic!("call failed: {status:?}"),
            };
            (code, started.elapsed())
        }));
    }
    let mut answers = Vec::with_capacity(count);
    for call in calls {
        answers.push(
            call.await
                .unwrap_or_else(|error| panic!("call task: {error}")),
        );
    }
    answers.sort_by_key(|(_, at)| *at);
    answers
}

/// How many of `answers` have `code`.
fn count(answers: &[(Code, Duration)], code: Code) -> usize {
    answers
        .iter()
        .filter(|(answered, _)| *answered == code)
        .count()
}

fn codes(answers: &[(Code, Duration)]) -> Vec<Code> {
    answers.iter().map(|(code, _)| *code).collect()
}

fn oks(answers: &[(Code, Duration)]) -> Vec<Duration> {
    answers
        .iter()
        .filter(|(code, _)| *code == Code::Ok)
        .map(|(_, at)| *at)
        .collect()
}

#[tokio::test]
async fn a_burst_is_answered_in_turn_and_past_the_queue_at_once() {
    let server = start(100).await;
    let answers = burst(&server.client, "smooth", 25, None).await;
    assert_eq!(count(&answers, Code::Ok), 21, "{answers:?}");
    assert_eq!(count(&answers, Code::OverLimit), 4, "{answers:?}");
    // The refused are answered at once, before the second admitted one's turn; the admitted
    // one turn apart, the last about 2 s after the first (generous bounds: a shared machine).
    let admitted = oks(&answers);
    assert!(
        answers
            .iter()
            .filter(|(code, _)| *code == Code::OverLimit)
            .all(|(_, at)| *at < admitted[1]),
        "{answers:?}"
    );
    let spread = admitted[20] - admitted[0];
    assert!(spread >= Duration::from_millis(1_500), "{admitted:?}");
    assert!(spread <= Duration::from_secs(6), "{admitted:?}");
    assert_eq!(server.room.waiting(), 0);
    server.stop().await;
}

#[tokio::test]
async fn delay_lets_the_first_excess_through_at_once() {
    let server = start(100).await;
    let answers = burst(&server.client, "delayed", 21, None).await;
    assert_eq!(codes(&answers), vec![Code::Ok; 21]);
    let admitted = oks(&answers);
    // The first six (one and delay=5) pass at once, the seventh waits 100 ms, the last 1.5 s.
    // Held answers are never early, so their lower bounds are tight; the sixth's upper bound is
    // only what tells `delay` apart from a queue without it (which holds the sixth 500 ms),
    // with room for a loaded machine.
    assert!(admitted[5] < Duration::from_millis(300), "{admitted:?}");
    assert!(admitted[6] >= Duration::from_millis(80), "{admitted:?}");
    assert!(admitted[20] >= Duration::from_millis(1_100), "{admitted:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_wait_past_max_wait_or_the_deadline_is_refused_at_once_without_its_turn() {
    let server = start(100).await;
    // max_wait_ms 250: turns 0, 100 and 200 ms are held; the rest refused.
    let answers = burst(&server.client, "short", 6, None).await;
    assert_eq!(count(&answers, Code::Ok), 3, "{answers:?}");
    assert_eq!(count(&answers, Code::OverLimit), 3, "{answers:?}");
    // A deadline of 60 ms: the first passes at once, the second (100 ms) is refused rather
    // than answered after the caller gave up, and leaves its turn to the next caller.
    let hurried = burst(&server.client, "smooth", 2, Some(Duration::from_millis(60))).await;
    assert_eq!(count(&hurried, Code::Ok), 1, "{hurried:?}");
    assert_eq!(count(&hurried, Code::OverLimit), 1, "{hurried:?}");
    let next = burst(&server.client, "smooth", 1, None).await;
    assert_eq!(codes(&next), [Code::Ok]);
    assert!(next[0].1 < Duration::from_millis(400), "{next:?}");
    server.stop().await;
}

#[tokio::test]
async fn past_max_waiting_a_request_that_would_wait_is_refused() {
    let server = start(2).await;
    let answers = burst(&server.client, "smooth", 4, None).await;
    // One is answered at once; two wait; the fourth finds the room full.
    assert_eq!(count(&answers, Code::Ok), 3, "{answers:?}");
    assert_eq!(count(&answers, Code::OverLimit), 1, "{answers:?}");
    server.stop().await;
}

#[tokio::test]
async fn held_answers_are_sent_at_once_when_the_process_stops() {
    let server = start(100).await;
    let client = server.client.clone();
    let held = tokio::spawn(async move { burst(&client, "smooth", 21, None).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.room.waiting() > 10, "{}", server.room.waiting());
    let released = Instant::now();
    server.room.release_all();
    let answers = held.await.unwrap_or_else(|error| panic!("burst: {error}"));
    assert_eq!(codes(&answers), vec![Code::Ok; 21]);
    assert!(
        released.elapsed() < Duration::from_millis(1_000),
        "{answers:?}"
    );
    server.stop().await;
}
