//! Three `floodgate serve --store hybrid` processes on one redis-server, one hot key.
//!
//! - The bound: 64 clients over the three send CALLS requests for a key whose limit (LIMIT)
//!   is well above what one sync interval carries; the total admitted is at least LIMIT (no
//!   under-admission) and at most LIMIT + share × LIMIT (docs/redis.md, "Hybrid"), for fixed
//!   and sliding windows, with far fewer Redis calls than decisions.
//! - Redis killed under load and started again on its data (append-only file, fsync always),
//!   under `--redis-failure-policy local`: no call fails, and once it is back every admitted
//!   hit is counted in Redis (none lost; a sync that Redis ran but whose answer the kill cut
//!   may be sent again, counted twice: at most one interval's hits per instance).
//! - The same bound on a Redis Cluster, the descriptors' counters in different slots (a sync
//!   is one call per slot group).
//! - An instance killed (SIGKILL) under load loses at most the hits it admitted since its last
//!   sync: one interval's worth. The test watches Redis's count to see when each sync lands,
//!   so the bound is the hits admitted since the last one, however late a loaded machine ran it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use tokio::task::JoinHandle;

use floodgate_testkit::redis::{
    keep_clear_of_the_day_boundary, scan_keys, RedisCluster, RedisServer,
};
use floodgate_testkit::rls;
use floodgate_testkit::{subdir, Floodgate};

const PROCESSES: usize = 3;
const CLIENTS: usize = 48;
const LIMIT: u32 = 4_000;
const CALLS: usize = 6_000;
const _: () = assert!(CALLS.is_multiple_of(PROCESSES));
/// `--hybrid-local-share`: the bound on over-admission, as a share of the limit. Above the
/// default (0.01) so that a debug build's traffic per interval (about 30 hits per instance)
/// fits in a budget of `SHARE × LIMIT / 3` at first (66): most decisions are local.
const SHARE: f64 = 0.05;
const SYNC_MS: u64 = 100;

fn rules(limit: u32) -> String {
    format!(
        "domain: hot\ndescriptors:\n\
         \x20 - key: fixed_window\n    rate_limit: {{unit: day, requests_per_unit: {limit}, algorithm: fixed_window}}\n\
         \x20 - key: sliding_window\n    rate_limit: {{unit: day, requests_per_unit: {limit}, algorithm: sliding_window}}\n"
    )
}

struct Fleet {
    redis: RedisServer,
    processes: Vec<Floodgate>,
    dir: tempfile::TempDir,
}

fn fleet(redis: RedisServer, limit: u32, extra: &[&str]) -> Fleet {
    fleet_syncing(redis, limit, SYNC_MS, extra)
}

fn fleet_syncing(redis: RedisServer, limit: u32, sync_ms: u64, extra: &[&str]) -> Fleet {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
    let config = dir.path().join("hot.yaml");
    std::fs::write(&config, rules(limit)).unwrap_or_else(|error| panic!("write rules: {error}"));
    let url = redis.url();
    let processes = start_processes(
        &config,
        dir.path(),
        &["--store", "hybrid", "--redis-url", &url],
        sync_ms,
        extra,
    );
    Fleet {
        redis,
        processes,
        dir,
    }
}

/// PROCESSES floodgates on `config`, each in its own directory under `dir`: `store_flags`, a
/// Redis deadline generous for debug builds, syncs every `sync_ms`, then `extra`.
pub(super) fn start_processes(
    config: &std::path::Path,
    dir: &std::path::Path,
    store_flags: &[&str],
    sync_ms: u64,
    extra: &[&str],
) -> Vec<Floodgate> {
    let sync_ms = sync_ms.to_string();
    let mut flags = store_flags.to_vec();
    flags.extend(["--redis-timeout-ms", "2000", "--hybrid-sync-ms", &sync_ms]);
    flags.extend_from_slice(extra);
    (0..PROCESSES)
        .map(|index| Floodgate::start(config, &flags, &subdir(dir, &format!("p{index}"))))
        .collect()
}

/// The count Redis holds for the hot key of `algorithm` (0 when it holds none): the last
/// field of `F <expires> <start> <count>` or `S <expires> <start> <previous> <current>`.
async fn redis_count(redis: &RedisServer, algorithm: &str) -> u64 {
    count_on(&mut redis.inspector().await, algorithm).await
}

/// `redis_count` on a connection already open.
async fn count_on(inspector: &mut redis::aio::MultiplexedConnection, algorithm: &str) -> u64 {
    let tag = if algorithm == "sliding_window" {
        "S "
    } else {
        "F "
    };
    let mut total = 0;
    for key in scan_keys(inspector, "floodgate:*").await {
        let value: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(inspector)
            .await
            .unwrap_or(None);
        if let Some(value) = value.filter(|value| value.starts_with(tag)) {
            total += value
                .rsplit(' ')
                .next()
                .and_then(|count| count.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{key} holds {value}"));
        }
    }
    total
}

/// The decision script calls and the sync calls Redis has run (`INFO commandstats`).
pub(super) async fn evalsha_calls(redis: &RedisServer) -> u64 {
    let mut inspector = redis.inspector().await;
    floodgate_testkit::redis::script_calls(&mut inspector).await
}

#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    pub(super) admitted: u64,
    pub(super) over: u64,
    pub(super) failed: u64,
    /// When each admitted call returned, for the instance-kill test.
    pub(super) admitted_at: Vec<Instant>,
}

/// `clients` tasks on `url`, each calling for `algorithm` until `stop` (or `calls` calls in all
/// when given, spread over the tasks).
fn load(
    url: &str,
    algorithm: &'static str,
    clients: usize,
    calls: Option<usize>,
    stop: Arc<AtomicBool>,
) -> Vec<JoinHandle<Tally>> {
    (0..clients)
        .map(|index| {
            let url = url.to_owned();
            let stop = Arc::clone(&stop);
            let mine = calls.map(|calls| calls / clients + usize::from(index < calls % clients));
            tokio::spawn(async move {
                let mut client = rls::connect(&url).await;
                let mut tally = Tally::default();
                let mut made = 0;
                while !stop.load(Ordering::Relaxed) && mine.is_none_or(|mine| made < mine) {
                    made += 1;
                    let request = rls::request("hot", &[&[(algorithm, "one")]]);
                    match rls::call(&mut client, request).await {
                        Ok(response) => match Code::try_from(response.overall_code) {
                            Ok(Code::Ok) => {
                                tally.admitted += 1;
                                tally.admitted_at.push(Instant::now());
                            }
                            Ok(Code::OverLimit) => tally.over += 1,
                            other => panic!("unexpected code {other:?}"),
                        },
                        Err(_) => tally.failed += 1,
                    }
                }
                tally
            })
        })
        .collect()
}

pub(super) async fn tally_of(tasks: Vec<JoinHandle<Tally>>) -> Tally {
    let mut total = Tally::default();
    for task in tasks {
        let tally = task
            .await
            .unwrap_or_else(|error| panic!("load task failed: {error}"));
        total.admitted += tally.admitted;
        total.over += tally.over;
        total.failed += tally.failed;
        total.admitted_at.extend(tally.admitted_at);
    }
    total
}

/// Polls until Redis counts `expected` hits of `algorithm` (bounded): the instances synced.
async fn synced_count(redis: &RedisServer, algorithm: &str, expected: u64) -> u64 {
    let mut count = 0;
    for _ in 0..100 {
        count = redis_count(redis, algorithm).await;
        if count >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(SYNC_MS)).await;
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_stay_within_the_stated_bound_on_one_hot_key() {
    keep_clear_of_the_day_boundary().await;
    let share = SHARE.to_string();
    let fleet = fleet(
        RedisServer::start(),
        LIMIT,
        &["--hybrid-local-share", &share],
    );
    let urls: Vec<String> = fleet.processes.iter().map(Floodgate::grpc_url).collect();
    let bound = LIMIT as u64 + (SHARE * f64::from(LIMIT)).floor() as u64;
    for algorithm in ["fixed_window", "sliding_window"] {
        let calls_before = evalsha_calls(&fleet.redis).await;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = urls
            .iter()
            .flat_map(|url| {
                // CALLS is a multiple of PROCESSES.
                let calls = CALLS / PROCESSES;
                load(
                    url,
                    algorithm,
                    CLIENTS / PROCESSES,
                    Some(calls),
                    Arc::clone(&stop),
                )
            })
            .collect();
        let tally = tally_of(tasks).await;
        let calls = evalsha_calls(&fleet.redis).await - calls_before;
        let in_redis = synced_count(&fleet.redis, algorithm, tally.admitted).await;
        println!(
            "{algorithm}: admitted {} of {CALLS} (limit {LIMIT}, bound {bound}), Redis counts \
             {in_redis}, {calls} script calls ({:.4} per decision)",
            tally.admitted,
            calls as f64 / CALLS as f64
        );
        assert_eq!(tally.failed, 0, "{algorithm}: failed calls");
        assert_eq!(tally.admitted + tally.over, CALLS as u64);
        assert!(
            tally.admitted >= u64::from(LIMIT) && tally.admitted <= bound,
            "{algorithm}: admitted {} outside [{LIMIT}, {bound}]",
            tally.admitted
        );
        assert_eq!(
            in_redis, tally.admitted,
            "{algorithm}: Redis counts every admitted hit"
        );
        assert!(
            calls < CALLS as u64 / 2,
            "{algorithm}: {calls} script calls for {CALLS} decisions"
        );
    }
    drop(fleet.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_fails_no_call_and_the_counts_reconcile() {
    keep_clear_of_the_day_boundary().await;
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut fleet = fleet(redis, 10_000_000, &["--redis-failure-policy", "local"]);
    let urls: Vec<String> = fleet.processes.iter().map(Floodgate::grpc_url).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = urls
        .iter()
        .flat_map(|url| load(url, "fixed_window", 8, None, Arc::clone(&stop)))
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    // `restart` kills the server, then starts it on the same port and directory: it reads
    // its append-only file. In between, some time without Redis.
    fleet.redis.kill();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let restarted = tokio::task::spawn_blocking(move || {
        fleet.redis.restart();
        fleet.redis
    })
    .await
    .unwrap_or_else(|error| panic!("restart failed: {error}"));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop.store(true, Ordering::Relaxed);
    let tally = tally_of(tasks).await;
    let in_redis = synced_count(&restarted, "fixed_window", tally.admitted).await;
    println!(
        "admitted {}, failed {}, Redis counts {in_redis} after the restart",
        tally.admitted, tally.failed
    );
    assert_eq!(tally.failed, 0, "calls failed while Redis was away");
    assert!(tally.admitted > 0);
    assert!(
        in_redis >= tally.admitted,
        "Redis counts {in_redis} of {} admitted hits: some were lost",
        tally.admitted
    );
    // A double count is one interval of one instance's hits, in a run of 28 intervals.
    assert!(
        in_redis <= tally.admitted + tally.admitted / 20,
        "Redis counts {in_redis} for {} admitted hits",
        tally.admitted
    );
}

#[test]
fn three_instances_stay_within_the_bound_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
    let config = dir.path().join("hot.yaml");
    std::fs::write(&config, rules(LIMIT)).unwrap_or_else(|error| panic!("write rules: {error}"));
    let (seeds, share) = (cluster.seeds(), SHARE.to_string());
    let processes = start_processes(
        &config,
        dir.path(),
        &[
            "--store",
            "hybrid",
            "--redis-type",
            "cluster",
            "--redis-url",
            &seeds,
            "--redis-hash-tag",
            "descriptor",
        ],
        SYNC_MS,
        &["--hybrid-local-share", &share],
    );
    let urls: Vec<String> = processes.iter().map(Floodgate::grpc_url).collect();
    let bound = LIMIT as u64 + (SHARE * f64::from(LIMIT)).floor() as u64;
    floodgate_testkit::runtime().block_on(async {
        keep_clear_of_the_day_boundary().await;
        // The other descriptor is read by every sync too: two slot groups per sync.
        let warm = Arc::new(AtomicBool::new(false));
        let warmed = urls
            .iter()
            .flat_map(|url| load(url, "sliding_window", 1, Some(1), Arc::clone(&warm)))
            .collect();
        let warm_tally = tally_of(warmed).await;
        assert_eq!(warm_tally.failed, 0);
        let calls_before = cluster_script_calls(&cluster).await;
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = urls
            .iter()
            .flat_map(|url| {
                load(
                    url,
                    "fixed_window",
                    CLIENTS / PROCESSES,
                    Some(CALLS / PROCESSES),
                    Arc::clone(&stop),
                )
            })
            .collect();
        let tally = tally_of(tasks).await;
        let calls = cluster_script_calls(&cluster).await - calls_before;
        let mut in_redis = 0;
        for _ in 0..100 {
            in_redis = cluster_count(&cluster, "fixed_window").await;
            if in_redis >= tally.admitted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(SYNC_MS)).await;
        }
        let sliding = cluster_count(&cluster, "sliding_window").await;
        println!(
            "cluster: admitted {} of {CALLS} (limit {LIMIT}, bound {bound}), Redis counts \
             {in_redis} (and {sliding} of the other descriptor), {calls} script calls",
            tally.admitted
        );
        assert_eq!(tally.failed, 0, "failed calls");
        assert!(
            tally.admitted >= u64::from(LIMIT) && tally.admitted <= bound,
            "admitted {} outside [{LIMIT}, {bound}]",
            tally.admitted
        );
        assert_eq!(in_redis, tally.admitted, "Redis counts every admitted hit");
        assert_eq!(sliding, warm_tally.admitted, "the other slot's counter");
        assert!(
            calls < CALLS as u64 / 2,
            "{calls} script calls for {CALLS} decisions"
        );
    });
    drop(processes);
}

/// `redis_count` summed over a cluster's nodes.
async fn cluster_count(cluster: &RedisCluster, algorithm: &str) -> u64 {
    let mut total = 0;
    for node in &cluster.nodes {
        total += redis_count(node, algorithm).await;
    }
    total
}

/// `evalsha_calls` summed over a cluster's nodes.
async fn cluster_script_calls(cluster: &RedisCluster) -> u64 {
    let mut total = 0;
    for node in &cluster.nodes {
        total += evalsha_calls(node).await;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_killed_under_load_loses_at_most_its_last_interval() {
    keep_clear_of_the_day_boundary().await;
    const KILL_SYNC_MS: u64 = 1_000;
    let mut fleet = fleet_syncing(RedisServer::start(), 10_000_000, KILL_SYNC_MS, &[]);
    let urls: Vec<String> = fleet.processes.iter().map(Floodgate::grpc_url).collect();
    // Everyone under load, then quiet until Redis counts every hit.
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = urls
        .iter()
        .flat_map(|url| load(url, "fixed_window", 8, None, Arc::clone(&stop)))
        .collect();
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.store(true, Ordering::Relaxed);
    let before = tally_of(tasks).await;
    let synced = synced_count(&fleet.redis, "fixed_window", before.admitted).await;
    assert_eq!(
        synced, before.admitted,
        "everything admitted so far is in Redis"
    );

    // The last instance under load, and killed while its clients still call; the others are
    // idle, so every rise of Redis's count now is one of its syncs landing.
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(
        &urls[PROCESSES - 1],
        "fixed_window",
        16,
        None,
        Arc::clone(&stop),
    );
    let watching = Arc::new(AtomicBool::new(true));
    let watch = tokio::spawn(watch_count(
        fleet.redis.inspector().await,
        Arc::clone(&watching),
    ));
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let victim = fleet
        .processes
        .last_mut()
        .unwrap_or_else(|| panic!("no process"));
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &victim.process.pid().to_string()])
        .status()
        .unwrap_or_else(|error| panic!("kill failed: {error}"));
    assert!(killed.success());
    let killed_at = Instant::now();
    let _ = victim.process.exit_within(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let during = tally_of(tasks).await;
    // Give the dead one's last sync time to land, if it was sent.
    tokio::time::sleep(Duration::from_millis(KILL_SYNC_MS)).await;
    watching.store(false, Ordering::Relaxed);
    let samples = watch
        .await
        .unwrap_or_else(|error| panic!("the watch failed: {error}"));
    let in_redis = redis_count(&fleet.redis, "fixed_window").await;
    let admitted = before.admitted + during.admitted;
    let lost = admitted.saturating_sub(in_redis);
    let last_sync = last_sync_taken(&samples, killed_at)
        .unwrap_or_else(|| panic!("no sync of the killed instance landed: {samples:?}"));
    let since_last_sync = during
        .admitted_at
        .iter()
        .filter(|at| **at >= last_sync)
        .count() as u64;
    let gaps = sync_gaps(&samples);
    println!(
        "killed instance admitted {} before the kill; lost {lost}; it admitted \
         {since_last_sync} since its last sync ({:?} before the kill); syncs landed every {gaps:?}",
        during.admitted,
        killed_at.saturating_duration_since(last_sync),
    );
    // A call the instance admitted and synced may have lost its answer in the kill: at most
    // one per client.
    assert!(
        in_redis <= admitted + 16,
        "Redis counts {in_redis} of {admitted}"
    );
    assert!(
        lost <= since_last_sync,
        "lost {lost} hits, more than the {since_last_sync} it admitted since its last sync"
    );
    assert!(
        lost < during.admitted,
        "nothing the killed instance admitted was synced"
    );
}

/// How long a sync may take from its snapshot of pending hits to Redis running it: hits
/// admitted in that time are not in the sync that lands, so they count as "since" it.
const SYNC_FLIGHT: Duration = Duration::from_millis(100);

/// Redis's count of fixed-window hits, read back to back until `watching` ends, each with the
/// moment its read began.
async fn watch_count(
    mut inspector: redis::aio::MultiplexedConnection,
    watching: Arc<AtomicBool>,
) -> Vec<(Instant, u64)> {
    let mut samples = Vec::new();
    while watching.load(Ordering::Relaxed) {
        let began = Instant::now();
        samples.push((began, count_on(&mut inspector, "fixed_window").await));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    samples
}

/// When the snapshot of the last sync that landed was taken, at the latest: the count rose
/// after the read before the rise began, and the snapshot preceded that by one flight.
fn last_sync_taken(samples: &[(Instant, u64)], killed_at: Instant) -> Option<Instant> {
    let rise = samples.windows(2).rposition(|pair| pair[1].1 > pair[0].1)?;
    let before_rise = samples[rise].0.min(killed_at);
    before_rise.checked_sub(SYNC_FLIGHT)
}

/// The time between successive rises of the count: how often syncs landed.
fn sync_gaps(samples: &[(Instant, u64)]) -> Vec<Duration> {
    let rises: Vec<Instant> = samples
        .windows(2)
        .filter(|pair| pair[1].1 > pair[0].1)
        .map(|pair| pair[1].0)
        .collect();
    rises
        .windows(2)
        .map(|pair| pair[1].duration_since(pair[0]))
        .collect()
}
