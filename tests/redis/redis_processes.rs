//! Three floodgate processes (`--store redis`) share one Redis: 64 concurrent gRPC clients,
//! spread over the three, send CALLS requests for one descriptor whose limit is LIMIT, and
//! exactly LIMIT are admitted in total, for every algorithm.
//!
//! What this proves: each decision is one atomic script call, so requests from different
//! processes (different connections, different tokio runtimes) never interleave between reading
//! and writing a counter. It also shows that "now" is not the process's: every decision reads
//! Redis `TIME` inside the script. The three processes here share the machine's clock; that
//! instances with skewed clocks agree is shown by `redis_clock_skew.rs` (one process runs
//! minutes ahead under libfaketime).
//!
//! The same again with `--redis-batch-max 64`: requests that meet in a process share a script
//! call (fewer calls than decisions, counted by Redis), and the total is still exactly LIMIT.

use floodgate::core::arithmetic::algorithm::Algorithm;
use floodgate::core::ground::unit::Unit;
use floodgate::proto::rate_limit_response::Code;

use floodgate_testkit::redis::{
    every_algorithm_rules, keep_clear_of_the_day_boundary, script_calls, store_flags, RedisServer,
};
use floodgate_testkit::rls;
use floodgate_testkit::{subdir, Floodgate};

const LIMIT: u32 = 200;
const CALLS: usize = 1000;
const CLIENTS: usize = 64;
const PROCESSES: usize = 3;

/// Per day, so windows roll over only at midnight UTC (the test waits if that is near) and
/// buckets refill one hit per 432 s, far longer than the test.
const UNIT: Unit = Unit::Day;

/// Sends CALLS requests for `key` from CLIENTS tasks, task `i` talking to process `i % 3`;
/// returns (admitted, over limit).
async fn admitted_across_processes(urls: &[String], key: &str) -> (usize, usize) {
    let mut clients = Vec::with_capacity(CLIENTS);
    for index in 0..CLIENTS {
        clients.push(rls::connect(&urls[index % urls.len()]).await);
    }
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(index, mut client)| {
            let key = key.to_owned();
            // CALLS spread as evenly as possible over the clients.
            let calls = CALLS / CLIENTS + usize::from(index < CALLS % CLIENTS);
            tokio::spawn(async move {
                let (mut admitted, mut over) = (0, 0);
                for call in 0..calls {
                    let value = "one";
                    let request = rls::request("shared", &[&[(key.as_str(), value)]]);
                    let response = rls::call(&mut client, request)
                        .await
                        .unwrap_or_else(|status| panic!("call {call} for {key}: {status}"));
                    match Code::try_from(response.overall_code) {
                        Ok(Code::Ok) => admitted += 1,
                        Ok(Code::OverLimit) => over += 1,
                        other => panic!("unexpected code {other:?} for {key}"),
                    }
                }
                (admitted, over)
            })
        })
        .collect();
    let (mut admitted, mut over) = (0, 0);
    for task in tasks {
        let (a, o) = task
            .await
            .unwrap_or_else(|error| panic!("client task failed: {error}"));
        admitted += a;
        over += o;
    }
    (admitted, over)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_processes_admit_exactly_the_limit_for_every_algorithm() {
    three_processes_admit_exactly_the_limit("1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_batching_processes_admit_exactly_the_limit_for_every_algorithm() {
    three_processes_admit_exactly_the_limit("64").await;
}

/// Every algorithm through three processes deciding up to `batch_max` requests per call.
async fn three_processes_admit_exactly_the_limit(batch_max: &str) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
    let config = dir.path().join("shared.yaml");
    let rules = every_algorithm_rules("shared", LIMIT, UNIT);
    std::fs::write(&config, rules).unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    let url = redis.url();
    let extra = store_flags(&url, &["--redis-batch-max", batch_max]);
    let processes: Vec<Floodgate> = (0..PROCESSES)
        .map(|index| Floodgate::start(&config, &extra, &subdir(dir.path(), &format!("p{index}"))))
        .collect();
    let urls: Vec<String> = processes.iter().map(Floodgate::grpc_url).collect();

    keep_clear_of_the_day_boundary().await;
    let mut inspector = redis.inspector().await;
    for algorithm in Algorithm::ALL.map(Algorithm::name) {
        let calls_before = script_calls(&mut inspector).await;
        let (admitted, over) = admitted_across_processes(&urls, algorithm).await;
        assert_eq!(
            (admitted, over),
            (LIMIT as usize, CALLS - LIMIT as usize),
            "{algorithm}, batch max {batch_max}: admitted, over limit"
        );
        let calls = script_calls(&mut inspector).await - calls_before;
        let decisions = CALLS as u64;
        if batch_max == "1" {
            assert_eq!(calls, decisions, "{algorithm}: one call per decision");
        } else {
            // 64 clients over three processes: requests meet in every process.
            assert!(
                calls < decisions,
                "{algorithm}: {calls} script calls for {decisions} decisions"
            );
        }
    }
}
