//! Redis Cluster (`--redis-type cluster`): three masters made by `redis-cli --cluster create`,
//! started by each test on free loopback ports.
//!
//! * A floodgate process configured as envoyproxy/ratelimit is (`REDIS_TYPE=cluster`,
//!   `REDIS_URL=host:port,host:port,…`) with `--redis-hash-tag descriptor` decides requests
//!   whose descriptors live on three different masters: each descriptor admits exactly its
//!   limit under concurrency, the keys are the predicted ones on the predicted masters, and a
//!   `SCRIPT FLUSH` on every node costs no call.
//! * What all-or-nothing covers: with the domain tag a rejected request charges nothing; with
//!   the descriptor tag it charges the slot groups that admitted it (the documented
//!   over-count), never less; quota-mode descriptors still share one slot and one verdict.
//! * Over TLS (`REDIS_TLS=true`, `REDIS_TLS_CACERT`, cluster bus on TLS too) the same floodgate
//!   finds the masters' TLS ports through the seeds and decides there.
//! * A stopped master fails the requests that touch it, within the deadline, not the others,
//!   and decisions on it resume when it returns.
//! * Differential: for random request sequences on one manual clock, a cluster store with the
//!   domain tag decides exactly as `MemoryStore` deciding each request whole, and one with the
//!   descriptor tag exactly as `MemoryStore` deciding each slot group as its own request; with
//!   one script call per request, and with bursts of requests sharing calls per slot
//!   (`--redis-batch-max`).

use std::collections::BTreeSet;
use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::decision::key::counter_key;
use floodgate::core::decision::plan::Counter;
use floodgate::core::decision::response::CounterOutcome;
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::rules::MatchedLevel;
use floodgate::proto::rate_limit_response::Code;
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::{slot_groups, HashTag, KeyLayout, RedisStore, DEFAULT_PREFIX};
use floodgate::store::{Decided, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use floodgate_testkit as common;
use floodgate_testkit::ops;
use floodgate_testkit::redis::{
    burst, counter, decide_in_turn, decide_together, identity, RedisCluster, BATCH_MAXES,
};
use floodgate_testkit::rls;
use floodgate_testkit::testca;

const MASTERS: usize = 3;

/// Around 2025-11: realistic Redis TIME magnitudes for the manual clock.
const START: Micros = 1_764_000_000 * MICROS_PER_SECOND;

/// A token bucket refilling one hit per 6 h: nothing refills while the test runs, and there
/// is no window boundary to straddle.
const LIMIT: u32 = 4;
const E2E_RULES: &str = "domain: cluster\n\
                         descriptors:\n\
                         \x20 - key: user\n\
                         \x20   rate_limit: {unit: day, requests_per_unit: 4, algorithm: token_bucket, burst: 4}\n";

/// Concurrent gRPC clients, and the requests each sends (every request names all three
/// descriptors).
const CLIENTS: usize = 8;
const ROUNDS: usize = 3;

fn descriptor_layout(prefix: &str) -> KeyLayout {
    KeyLayout::new(prefix)
        .unwrap_or_else(|error| panic!("prefix {prefix}: {error}"))
        .with_hash_tag(HashTag::Descriptor)
}

/// The rule `cluster.user` as floodgate loads it: its path and its one limit.
fn e2e_rule() -> (String, Quota) {
    let files = [SourceFile {
        name: "cluster.yaml".to_owned(),
        text: E2E_RULES.to_owned(),
    }];
    let rules = load(&files, &LoadOptions::default())
        .unwrap_or_else(|errors| panic!("the test rules do not load: {errors:?}"));
    let rule = rules
        .all_rules()
        .next()
        .unwrap_or_else(|| panic!("the test rules have no rule"));
    (rule.path.clone(), rule.limits[0].clone())
}

/// The key floodgate (descriptor tag, default prefix) writes for `user=<value>`.
fn e2e_key(rule_path: &str, quota: &Quota, value: &str) -> String {
    let entries = [Entry::new("user", value)];
    let id = counter_key(
        "cluster",
        rule_path,
        0,
        quota,
        &entries,
        &[MatchedLevel::Default],
    );
    descriptor_layout(DEFAULT_PREFIX).key_for(&id)
}

/// floodgate on E2E_RULES configured as envoyproxy/ratelimit is (`REDIS_TYPE=cluster`,
/// `REDIS_URL=<seeds>`, plus `env`), with the descriptor hash tag.
fn start_floodgate(dir: &std::path::Path, seeds: &str, env: &[(&str, &str)]) -> ops::Server {
    let config = dir.join("cluster.yaml");
    std::fs::write(&config, E2E_RULES).unwrap_or_else(|error| panic!("write rules: {error}"));
    let config_arg = config.display().to_string();
    let mut env = env.to_vec();
    env.extend([("REDIS_TYPE", "cluster"), ("REDIS_URL", seeds)]);
    ops::start(
        &[
            "--config",
            &config_arg,
            "--store",
            "redis",
            "--redis-hash-tag",
            "descriptor",
        ],
        &env,
        dir,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floodgate_spreads_descriptors_over_the_masters_and_keeps_each_limit() {
    let cluster = RedisCluster::start(MASTERS);
    let (rule_path, quota) = e2e_rule();

    // One user value per master, chosen by where its key lands.
    let mut values: Vec<(String, String, usize)> = Vec::new();
    for n in 0..10_000 {
        let value = format!("u{n}");
        let key = e2e_key(&rule_path, &quota, &value);
        let owner = cluster.owner_of(cluster.slot_of(&key));
        if values.iter().all(|(_, _, known)| *known != owner) {
            values.push((value, key, owner));
        }
        if values.len() == MASTERS {
            break;
        }
    }
    assert_eq!(values.len(), MASTERS, "no value for some master");

    let dir = common::tempdir();
    let server = start_floodgate(dir.path(), &cluster.seeds(), &[]);
    let names: Vec<&str> = values.iter().map(|(value, _, _)| value.as_str()).collect();
    let entries: Vec<[(&str, &str); 1]> = names.iter().map(|value| [("user", *value)]).collect();
    let descriptors: Vec<&[(&str, &str)]> = entries.iter().map(|entry| &entry[..]).collect();
    let request = rls::request("cluster", &descriptors);

    let mut tasks = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let mut client = rls::connect(&server.grpc_url()).await;
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut codes = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                let response = rls::call(&mut client, request.clone()).await;
                codes.push(response.map(|response| {
                    response
                        .statuses
                        .iter()
                        .map(|status| status.code)
                        .collect::<Vec<_>>()
                }));
            }
            codes
        }));
    }
    let mut admitted = vec![0usize; MASTERS];
    for task in tasks {
        let codes = task
            .await
            .unwrap_or_else(|error| panic!("a client task failed: {error}"));
        for response in codes {
            let statuses = response.unwrap_or_else(|status| {
                panic!(
                    "a call failed: {status}\nfloodgate log:\n{}",
                    server.process.log_text()
                )
            });
            assert_eq!(statuses.len(), MASTERS);
            for (index, code) in statuses.into_iter().enumerate() {
                admitted[index] += usize::from(code == Code::Ok as i32);
            }
        }
    }
    assert_eq!(
        admitted,
        vec![LIMIT as usize; MASTERS],
        "each descriptor admits exactly its limit of the {} requests",
        CLIENTS * ROUNDS
    );

    // Each counter is one key, on the master its slot says, and nowhere else.
    let held = cluster.keys_per_node("floodgate:*").await;
    for (node, keys) in held.iter().enumerate() {
        let expected: BTreeSet<&str> = values
            .iter()
            .filter(|(_, _, owner)| *owner == node)
            .map(|(_, key, _)| key.as_str())
            .collect();
        let got: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
        assert_eq!(got, expected, "keys on node {node}");
    }
    assert!(
        held.iter().filter(|keys| !keys.is_empty()).count() >= 2,
        "the keys must spread over masters: {held:?}"
    );

    // Every node forgets the script: the next calls reload it and none fails.
    cluster.flush_scripts();
    let mut client = rls::connect(&server.grpc_url()).await;
    let fresh = rls::request("cluster", &[&[("user", "after-flush")]]);
    for expected_remaining in (0..LIMIT).rev() {
        let response = rls::call(&mut client, fresh.clone())
            .await
            .unwrap_or_else(|status| {
                panic!(
                    "a call after SCRIPT FLUSH failed: {status}\nfloodgate log:\n{}",
                    server.process.log_text()
                )
            });
        assert_eq!(response.overall_code, Code::Ok as i32);
        assert_eq!(response.statuses[0].limit_remaining, expected_remaining);
    }
}

async fn cluster_store(
    cluster: &RedisCluster,
    clock: &Arc<ManualClock>,
    prefix: &str,
    hash_tag: HashTag,
) -> RedisStore {
    let mut options = cluster.options(Some(clock.clone() as Arc<dyn Clock>));
    options.key_prefix = prefix.to_owned();
    options.hash_tag = hash_tag;
    RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to the cluster: {error}"))
}

async fn decide(store: &RedisStore, counters: &[Counter]) -> Decided {
    store
        .decide(counters, false)
        .await
        .unwrap_or_else(|error| panic!("decide failed: {error}"))
}

/// A counter of rule `edge.<key>_<value>` that lands in a different slot (under the descriptor
/// tag) than `other`, with `quota`.
fn identity_apart_from(other: &Counter, key: &str, quota: &Quota) -> Vec<u8> {
    let layout = descriptor_layout(DEFAULT_PREFIX);
    (0..1000)
        .map(|n| identity("edge", key, &format!("v{n}"), 0, quota))
        .find(|id| {
            let candidate = counter(1, id, quota, Hits::Charge(1), Role::Enforced);
            slot_groups(&[other.clone(), candidate], &layout).len() == 2
        })
        .unwrap_or_else(|| panic!("no value of {key} lands apart"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_covers_the_request_or_each_slot_group() {
    let cluster = RedisCluster::start(MASTERS);
    let clock = Arc::new(ManualClock::new(START));
    let whole = cluster_store(&cluster, &clock, "whole:", HashTag::Domain).await;
    let grouped = cluster_store(&cluster, &clock, "grouped:", HashTag::Descriptor).await;

    let tight_quota = Quota::new(2, Unit::Hour).with_algorithm(Algorithm::FixedWindow);
    let loose_quota = Quota::new(5, Unit::Hour).with_algorithm(Algorithm::SlidingWindow);
    let tight = identity("edge", "tight", "x", 0, &tight_quota);
    let tight_counter = counter(0, &tight, &tight_quota, Hits::Charge(1), Role::Enforced);
    let loose = identity_apart_from(&tight_counter, "loose", &loose_quota);
    let request = [
        tight_counter.clone(),
        counter(1, &loose, &loose_quota, Hits::Charge(1), Role::Enforced),
    ];
    let check_loose = [counter(0, &loose, &loose_quota, Hits::PEEK, Role::Enforced)];
    let check_tight = [counter(0, &tight, &tight_quota, Hits::PEEK, Role::Enforced)];

    for (name, store, loose_left) in [("domain", &whole, 3), ("descriptor", &grouped, 0)] {
        let mut answers = Vec::new();
        for _ in 0..5 {
            answers.push(decide(store, &request).await);
        }
        let verdicts: Vec<bool> = answers.iter().map(|answer| answer.over_limit).collect();
        assert_eq!(verdicts, [false, false, true, true, true], "{name} tag");
        // The third request: tight rejects, loose admits either way.
        assert!(!answers[2].outcomes[0].admitted, "{name} tag");
        assert!(answers[2].outcomes[1].admitted, "{name} tag");
        // Domain tag: rejected requests charged nothing, 5 − 2 left. Descriptor tag: loose was
        // charged by the three rejected requests too (its slot group admitted them): 0 left.
        let loose_now = decide(store, &check_loose).await;
        assert_eq!(
            loose_now.outcomes[0].snapshot.remaining, loose_left,
            "{name} tag"
        );
        // Never under-counted: tight holds exactly the two admitted requests.
        let tight_now = decide(store, &check_tight).await;
        assert_eq!(tight_now.outcomes[0].snapshot.remaining, 0, "{name} tag");
    }

    // The domain tag keeps every key of the domain in one slot; the descriptor tag spreads.
    let slots_of = |layout: KeyLayout, ids: [&[u8]; 2]| -> BTreeSet<u16> {
        ids.iter()
            .map(|id| cluster.slot_of(&layout.key_for(id)))
            .collect()
    };
    let whole_layout = KeyLayout::new("whole:").unwrap_or_else(|error| panic!("{error}"));
    let held: Vec<String> = cluster
        .keys_per_node("whole:*")
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    let held_slots: BTreeSet<u16> = held.iter().map(|key| cluster.slot_of(key)).collect();
    assert_eq!(held_slots.len(), 1, "{held:?}");
    assert_eq!(slots_of(whole_layout, [&tight, &loose]), held_slots);
    assert_eq!(
        slots_of(descriptor_layout("grouped:"), [&tight, &loose]).len(),
        2
    );

    // Quota mode under the descriptor tag: two quota descriptors that would land apart share
    // the domain's slot, so one call judges "every quota descriptor is over".
    let quota_a = identity("edge", "quota_a", "x", 0, &tight_quota);
    let quota_a_counter = counter(0, &quota_a, &tight_quota, Hits::Charge(1), Role::Quota);
    let enforced_a = counter(0, &quota_a, &tight_quota, Hits::Charge(1), Role::Enforced);
    let quota_b = identity_apart_from(&enforced_a, "quota_b", &tight_quota);
    let quota_request = [
        quota_a_counter.clone(),
        counter(1, &quota_b, &tight_quota, Hits::Charge(2), Role::Quota),
    ];
    let domain_layout = KeyLayout::new("grouped:").unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        slot_groups(&quota_request, &descriptor_layout("grouped:")).len(),
        1
    );
    assert_eq!(
        grouped.key_of(&quota_request[1]),
        domain_layout.key_for(&quota_b)
    );
    // a: 1 of 2 used; b: 2 of 2 used. Then a is still under: not over, a charged again.
    let first = decide(&grouped, &quota_request).await;
    assert!(!first.over_limit, "{first:?}");
    let second = decide(&grouped, &quota_request).await;
    assert!(!second.over_limit, "only b is over: {second:?}");
    assert!(second.outcomes[0].admitted && !second.outcomes[1].admitted);
    // Now both are over: the request is, and nothing is charged.
    let third = decide(&grouped, &quota_request).await;
    assert!(
        third.over_limit,
        "every quota descriptor is over: {third:?}"
    );
}

/// Descriptors for the differential: a rule per (key, value), one or two limits of different
/// algorithms and windows (so a descriptor's counters share a tag), a fixed role.
struct DescriptorSpec {
    limits: Vec<(Vec<u8>, Quota)>,
    role: Role,
}

fn random_quota(rng: &mut StdRng) -> Quota {
    let algorithm = Algorithm::ALL[rng.random_range(0..Algorithm::ALL.len())];
    let limit = [0, 1, 2, 3, 5, 8][rng.random_range(0..6)];
    let unit = [Unit::Second, Unit::Minute, Unit::Hour][rng.random_range(0..3)];
    let quota = Quota::new(limit, unit).with_algorithm(algorithm);
    if algorithm.accepts_burst() && rng.random_bool(0.5) {
        quota.with_burst(rng.random_range(0..=6))
    } else {
        quota
    }
}

fn random_descriptors(rng: &mut StdRng) -> Vec<DescriptorSpec> {
    (0..8)
        .map(|index| {
            let mut limits = Vec::new();
            let mut windows = BTreeSet::new();
            for limit_index in 0..rng.random_range(1..=2) {
                let quota = random_quota(rng);
                // Two limits of one rule never share algorithm and window (one identity).
                if !windows.insert((quota.algorithm.name(), quota.window_micros())) {
                    continue;
                }
                let id = identity("diff", "k", &format!("v{index}"), limit_index, &quota);
                limits.push((id, quota));
            }
            let role = match rng.random_range(0..10) {
                0..7 => Role::Enforced,
                7..9 => Role::Quota,
                _ => Role::Shadow,
            };
            DescriptorSpec { limits, role }
        })
        .collect()
}

fn random_hits(rng: &mut StdRng) -> Hits {
    match rng.random_range(0..20) {
        0..12 => Hits::Charge(1),
        12..15 => Hits::Charge(rng.random_range(2..=4)),
        15..18 => Hits::PEEK,
        _ => Hits::Refund(rng.random_range(1..=2)),
    }
}

fn random_request(rng: &mut StdRng, specs: &[DescriptorSpec]) -> Vec<Counter> {
    let mut counters = Vec::new();
    for descriptor in 0..rng.random_range(1..=4) {
        let spec = &specs[rng.random_range(0..specs.len())];
        let hits = random_hits(rng);
        for (id, quota) in &spec.limits {
            counters.push(counter(descriptor, id, quota, hits, spec.role));
        }
    }
    counters
}

/// `MemoryStore` deciding each of `groups` as its own request, merged as the cluster store
/// merges: outcomes in request order, over if any group is.
fn decide_in_groups(
    memory: &MemoryStore,
    counters: &[Counter],
    groups: &[Vec<usize>],
    global_shadow: bool,
) -> Decided {
    let mut outcomes: Vec<Option<CounterOutcome>> = vec![None; counters.len()];
    let mut over_limit = false;
    for positions in groups {
        let group: Vec<Counter> = positions
            .iter()
            .map(|&position| counters[position].clone())
            .collect();
        let decided = memory
            .decide_now(&group, global_shadow)
            .unwrap_or_else(|error| panic!("{error}"));
        over_limit |= decided.over_limit;
        for (&position, outcome) in positions.iter().zip(decided.outcomes) {
            outcomes[position] = Some(outcome);
        }
    }
    Decided {
        outcomes: outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|| panic!("a counter in no group")))
            .collect(),
        over_limit,
    }
}

const DIFFERENTIAL_STEPS: usize = 250;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_decisions_equal_memory_decisions() {
    let cluster = RedisCluster::start(MASTERS);
    for batch_max in BATCH_MAXES {
        cluster_differential(&cluster, batch_max).await;
    }
}

/// The differential with stores deciding up to `batch_max` requests per call: with more than
/// one, each step is a burst of up to that many requests made at once (each slot's lane takes
/// them in order), which the memory stores decide one after the other.
async fn cluster_differential(cluster: &RedisCluster, batch_max: usize) {
    let mut rng = StdRng::seed_from_u64(7);
    let clock = Arc::new(ManualClock::new(START));
    let (whole_prefix, grouped_prefix) =
        (format!("whole{batch_max}:"), format!("grouped{batch_max}:"));
    let store = |prefix, hash_tag| {
        let clock = &clock;
        async move {
            let mut options = cluster.options(Some(clock.clone() as Arc<dyn Clock>));
            options.key_prefix = prefix;
            options.hash_tag = hash_tag;
            options.batch_max = batch_max;
            RedisStore::connect(&options)
                .await
                .unwrap_or_else(|error| panic!("cannot connect to the cluster: {error}"))
        }
    };
    let whole_store = store(whole_prefix, HashTag::Domain).await;
    let grouped_store = store(grouped_prefix.clone(), HashTag::Descriptor).await;
    let whole_memory = MemoryStore::new(1_000_000, clock.clone());
    let grouped_memory = MemoryStore::new(1_000_000, clock.clone());
    let layout = descriptor_layout(&grouped_prefix);
    let specs = random_descriptors(&mut rng);

    let mut multi_group_requests = 0;
    for step in 0..DIFFERENTIAL_STEPS {
        clock.advance(match rng.random_range(0..10) {
            0..3 => 0,
            3..8 => rng.random_range(0..MICROS_PER_SECOND / 2),
            8 => rng.random_range(0..90 * MICROS_PER_SECOND),
            _ => -rng.random_range(0..MICROS_PER_SECOND / 4),
        });
        let requests = burst(&mut rng, batch_max, |rng| random_request(rng, &specs));

        let expected = decide_in_turn(&whole_memory, &requests);
        let got = decide_together(&whole_store, &requests).await;
        assert_each_alike(got, &expected, |index| {
            format!(
                "domain tag, batch max {batch_max}, step {step}, request {index}: cluster \
                 (left) and memory (right) disagree on {:#?}",
                requests[index]
            )
        });

        let groups: Vec<Vec<Vec<usize>>> = requests
            .iter()
            .map(|(counters, _)| slot_groups(counters, &layout))
            .collect();
        multi_group_requests += groups.iter().filter(|groups| groups.len() > 1).count();
        let expected: Vec<Decided> = requests
            .iter()
            .zip(&groups)
            .map(|((counters, global_shadow), groups)| {
                decide_in_groups(&grouped_memory, counters, groups, *global_shadow)
            })
            .collect();
        let got = decide_together(&grouped_store, &requests).await;
        assert_each_alike(got, &expected, |index| {
            format!(
                "descriptor tag, batch max {batch_max}, step {step}, request {index}: cluster \
                 (left) and memory by slot group (right) disagree on {:#?} in groups {:?}",
                requests[index], groups[index]
            )
        });
    }
    assert!(
        multi_group_requests > DIFFERENTIAL_STEPS / 4,
        "too few requests spanned several slots ({multi_group_requests}) to test grouping"
    );
}

/// Each answer `got` equal to the one `expected` at its position; `what(index)` says which.
fn assert_each_alike(
    got: Vec<Result<Decided, floodgate::store::StoreError>>,
    expected: &[Decided],
    what: impl Fn(usize) -> String,
) {
    assert_eq!(got.len(), expected.len(), "{}", what(0));
    for (index, (got, expected)) in got.into_iter().zip(expected).enumerate() {
        let got = got.unwrap_or_else(|error| panic!("{}: {error}", what(index)));
        assert_eq!(&got, expected, "{}", what(index));
    }
}

/// A counter of rule `edge.<key>_<value>` whose key (descriptor tag) lands on master `node`.
fn identity_on(cluster: &RedisCluster, node: usize, key: &str, quota: &Quota) -> Vec<u8> {
    let layout = descriptor_layout(DEFAULT_PREFIX);
    (0..10_000)
        .map(|n| identity("edge", key, &format!("v{n}"), 0, quota))
        .find(|id| cluster.owner_of(cluster.slot_of(&layout.key_for(id))) == node)
        .unwrap_or_else(|| panic!("no value of {key} lands on node {node}"))
}

/// How long a test waits for any one call before calling it a hang.
const HANG: std::time::Duration = std::time::Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_fails_only_its_groups_and_recovers() {
    let cluster = RedisCluster::start(MASTERS);
    let clock = Arc::new(ManualClock::new(START));
    let mut options = cluster.options(Some(clock.clone() as Arc<dyn Clock>));
    options.hash_tag = HashTag::Descriptor;
    options.timeout = std::time::Duration::from_millis(300);
    // The breaker stays out of this test: every failure here is expected.
    options.breaker_threshold = 0;
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to the cluster: {error}"));
    let quota = Quota::new(10, Unit::Hour).with_algorithm(Algorithm::FixedWindow);
    let on_stopped = identity_on(&cluster, 0, "stopped", &quota);
    let on_running = identity_on(&cluster, 1, "running", &quota);
    let charge =
        |id: &[u8], descriptor| counter(descriptor, id, &quota, Hits::Charge(1), Role::Enforced);
    let decide_bounded = |counters: Vec<Counter>| {
        let store = &store;
        async move {
            tokio::time::timeout(HANG, store.decide(&counters, false))
                .await
                .unwrap_or_else(|_| panic!("a decision hung past its deadline"))
        }
    };

    cluster.nodes[0].pause();
    let stopped = decide_bounded(vec![charge(&on_stopped, 0)]).await;
    assert!(stopped.is_err(), "{stopped:?}");
    let running = decide_bounded(vec![charge(&on_running, 0)]).await;
    assert_eq!(
        running.map(|decided| decided.outcomes[0].snapshot.remaining),
        Ok(9)
    );
    // Both: the request fails, and the group that answered has charged (documented).
    let both = decide_bounded(vec![charge(&on_stopped, 0), charge(&on_running, 1)]).await;
    assert!(both.is_err(), "{both:?}");
    let check = counter(0, &on_running, &quota, Hits::PEEK, Role::Enforced);
    let running = decide_bounded(vec![check]).await;
    assert_eq!(
        running.map(|decided| decided.outcomes[0].snapshot.remaining),
        Ok(8)
    );

    cluster.nodes[0].resume();
    let mut recovered = None;
    for _ in 0..50 {
        if let Ok(decided) = decide_bounded(vec![charge(&on_stopped, 0)]).await {
            recovered = Some(decided);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let recovered = recovered.unwrap_or_else(|| panic!("the resumed master never answered"));
    assert!(!recovered.over_limit, "{recovered:?}");
}

/// The call timeout decides how long a decision waits for a master, also when it is longer
/// than the connect timeout (which the cluster client's own response timeout used to be).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_shorter_than_the_call_timeout_is_waited_out() {
    let pause = std::time::Duration::from_millis(1500);
    let cluster = RedisCluster::start(MASTERS);
    let mut options = cluster.options(None);
    options.timeout = std::time::Duration::from_millis(3000);
    options.connect_timeout = std::time::Duration::from_millis(1000);
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to the cluster: {error}"));
    let quota = Quota::new(10, Unit::Hour).with_algorithm(Algorithm::FixedWindow);
    let on_paused = identity_on(&cluster, 0, "paused", &quota);
    let charge = vec![counter(
        0,
        &on_paused,
        &quota,
        Hits::Charge(1),
        Role::Enforced,
    )];
    assert!(store.decide(&charge, false).await.is_ok());

    cluster.nodes[0].pause();
    let waiting = tokio::time::timeout(HANG, store.decide(&charge, false));
    let resuming = async {
        tokio::time::sleep(pause).await;
        cluster.nodes[0].resume();
    };
    let (decided, ()) = tokio::join!(waiting, resuming);
    let decided = decided.unwrap_or_else(|_| panic!("a decision hung past its deadline"));
    assert_eq!(
        decided.map(|decided| decided.outcomes[0].snapshot.remaining),
        Ok(8),
        "master paused for {pause:?} under a {:?} call timeout",
        options.timeout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floodgate_reaches_a_tls_cluster_through_tls_seeds() {
    let dir = common::tempdir();
    let ca = testca::TestCa::new("floodgate cluster test CA");
    let server = ca.server();
    // Nodes dial each other on the TLS cluster bus as clients, with a client certificate.
    let node_client = ca.client("cluster-node");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap_or_else(|error| panic!("write {name}: {error}"));
        path.display().to_string()
    };
    let (ca_file, cert_file, key_file) = (
        write("ca.pem", &ca.pem()),
        write("server.pem", &server.cert),
        write("server.key", &server.key),
    );
    let (client_cert_file, client_key_file) = (
        write("node-client.pem", &node_client.cert),
        write("node-client.key", &node_client.key),
    );
    let cluster = RedisCluster::start_tls(
        MASTERS,
        &[
            "--tls-cert-file",
            &cert_file,
            "--tls-key-file",
            &key_file,
            "--tls-ca-cert-file",
            &ca_file,
            "--tls-client-cert-file",
            &client_cert_file,
            "--tls-client-key-file",
            &client_key_file,
            "--tls-auth-clients",
            "no",
        ],
    );
    let floodgate = start_floodgate(
        dir.path(),
        &cluster.tls_seeds(),
        &[
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", ca_file.as_str()),
        ],
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let values: Vec<String> = (0..12).map(|n| format!("tls{n}")).collect();
    for value in &values {
        let request = rls::request("cluster", &[&[("user", value.as_str())]]);
        for expected_remaining in [LIMIT - 1, LIMIT - 2] {
            let response = rls::call(&mut client, request.clone())
                .await
                .unwrap_or_else(|status| {
                    panic!(
                        "a call over TLS failed: {status}\nfloodgate log:\n{}",
                        floodgate.process.log_text()
                    )
                });
            assert_eq!(response.statuses[0].limit_remaining, expected_remaining);
        }
    }
    let held = cluster.keys_per_node("floodgate:*").await;
    assert_eq!(held.iter().map(Vec::len).sum::<usize>(), values.len());
    assert!(
        held.iter().filter(|keys| !keys.is_empty()).count() >= 2,
        "twelve descriptors should reach more than one master: {held:?}"
    );
}
