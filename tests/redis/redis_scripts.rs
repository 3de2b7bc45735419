//! The script's life in Redis: one EVALSHA per decision and nothing else, reloaded without a
//! failed call after SCRIPT FLUSH, and found again after Redis restarts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits};
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::time::{Clock, ManualClock, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::memory::MemoryStore;
use floodgate::store::{Store, StoreError};

use floodgate_testkit::redis::{counter, identity, quota_admitting, RedisServer};

/// A request touching one counter of every algorithm.
fn request_over_every_algorithm(user: usize) -> Vec<Counter> {
    Algorithm::ALL
        .iter()
        .enumerate()
        .map(|(descriptor, &algorithm)| {
            let quota = quota_admitting(algorithm, 5, Unit::Second);
            let key = identity("scripts", "user", &format!("{algorithm}-{user}"), 0, &quota);
            counter(descriptor, &key, &quota, Hits::Charge(1), Role::Enforced)
        })
        .collect()
}

/// MONITOR shows every command Redis runs, those a script runs marked `[<db> lua]`: apart
/// from them, each decision must be exactly one EVALSHA.
#[tokio::test]
async fn each_decision_is_one_evalsha_and_nothing_else() {
    let server = RedisServer::start();
    let store = server.store(None).await;
    let monitor = Monitor::start(server.port());

    const DECISIONS: usize = 50;
    for user in 0..DECISIONS {
        store
            .decide(&request_over_every_algorithm(user % 3), false)
            .await
            .unwrap_or_else(|error| panic!("decide failed: {error}"));
    }
    let commands = monitor.stop();
    let from_clients: Vec<&String> = commands
        .iter()
        .filter(|line| !line.contains(" lua] "))
        .collect();
    assert_eq!(from_clients.len(), DECISIONS, "{from_clients:#?}");
    assert!(
        from_clients.iter().all(|line| line
            .to_lowercase()
            .contains(&format!("\"evalsha\" \"{}\"", store.script_sha()))),
        "{from_clients:#?}"
    );
}

/// `redis-cli monitor`, collecting the lines it prints.
struct Monitor {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Monitor {
    fn start(port: u16) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "monitor"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run redis-cli: {error}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("redis-cli has no stdout"));
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        // MONITOR answers OK once it is watching.
        let first = lines
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|error| panic!("redis-cli monitor did not start: {error}"));
        assert_eq!(first, "OK");
        Self { child, lines }
    }

    fn stop(mut self) -> Vec<String> {
        // Let the last commands reach the monitor before stopping it.
        std::thread::sleep(Duration::from_millis(200));
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.lines.try_iter().collect()
    }
}

#[tokio::test]
async fn script_flush_mid_run_fails_no_call_and_loses_no_count() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_764_000_000 * MICROS_PER_SECOND));
    let store = server.store(Some(clock.clone() as Arc<dyn Clock>)).await;
    let memory = MemoryStore::new(10_000, clock.clone());
    let mut inspector = server.inspector().await;

    for step in 0..200 {
        if step % 50 == 25 {
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut inspector)
                .await
                .unwrap_or_else(|error| panic!("SCRIPT FLUSH failed: {error}"));
            assert!(!script_loaded(&mut inspector, store.script_sha()).await);
        }
        clock.advance(37_000);
        let counters = request_over_every_algorithm(step % 4);
        let got = store
            .decide(&counters, false)
            .await
            .unwrap_or_else(|error| panic!("step {step}: {error}"));
        assert_eq!(
            got,
            memory
                .decide_now(&counters, false)
                .unwrap_or_else(|error| panic!("{error}")),
            "step {step}"
        );
    }
    assert!(
        script_loaded(&mut inspector, store.script_sha()).await,
        "the script was loaded again"
    );
}

/// Whether Redis holds the script whose SHA-1 is `sha` (`SCRIPT EXISTS`).
async fn script_loaded(inspector: &mut redis::aio::MultiplexedConnection, sha: &str) -> bool {
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("SCRIPT EXISTS failed: {error}"));
    match loaded.as_slice() {
        [exists] => *exists,
        other => panic!("SCRIPT EXISTS of one script answered {other:?}"),
    }
}

#[tokio::test]
async fn a_restarted_redis_is_found_again_and_the_script_reloaded() {
    let mut server = RedisServer::start();
    let mut options = server.options(None);
    options.timeout = Duration::from_millis(200);
    let store = floodgate::store::redis::RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect: {error}"));
    let counters = request_over_every_algorithm(0);
    assert!(store.decide(&counters, false).await.is_ok());

    server.kill();
    let down = store.decide(&counters, false).await;
    assert!(
        matches!(
            down,
            Err(StoreError::Unavailable {
                backend: "redis",
                ..
            })
        ),
        "{down:?}"
    );

    server.restart();
    // A fresh server: no script, no connection. The store reconnects in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.decide(&counters, false).await {
            Ok(decided) => {
                // The restarted server kept nothing (no persistence): a fresh budget.
                assert!(decided
                    .outcomes
                    .iter()
                    .all(|outcome| outcome.snapshot.remaining == 4));
                break;
            }
            Err(error) if Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("still failing 10 s after the restart: {error}"),
        }
    }
}
