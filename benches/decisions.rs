//! The decision path per algorithm: the pure arithmetic alone, then the memory store (hash,
//! shard lock, evaluate, verdict, commit) at growing key counts, up to 1 000 000 keys. Also prints
//! the memory each active key costs.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use floodgate::core::arithmetic::algorithm::{evaluate, Algorithm, Hits, Quota, Share};
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::memory::MemoryStore;
use floodgate::store::Decided;

const START: i64 = 1_796_083_200 * MICROS_PER_SECOND;

fn quota(algorithm: Algorithm) -> Quota {
    let quota = Quota::new(1_000, Unit::Second).with_algorithm(algorithm);
    match algorithm {
        Algorithm::TokenBucket | Algorithm::LeakyBucket => quota.with_burst(100),
        Algorithm::SlidingLog => Quota::new(100, Unit::Second).with_algorithm(algorithm),
        _ => quota,
    }
}

fn counter(algorithm: Algorithm, key: u64) -> Counter {
    let mut identity = b"edge\0per_client\0".to_vec();
    identity.extend_from_slice(&key.to_le_bytes());
    Counter {
        descriptor: 0,
        key: identity,
        quota: quota(algorithm),
        hits: Hits::Charge(1),
        role: Role::Enforced,
        share: Share::FULL,
    }
}

/// One decision; the store holds at most as many counters as it may, so it is never full.
fn decide(store: &MemoryStore, counter: &Counter) -> Decided {
    store
        .decide_now(std::slice::from_ref(counter), false)
        .unwrap_or_else(|error| panic!("{error}"))
}

fn pure_arithmetic(c: &mut Criterion) {
    let mut group = c.benchmark_group("evaluate");
    for algorithm in Algorithm::ALL {
        let quota = quota(algorithm);
        let state = evaluate(&quota, None, START, Hits::Charge(1)).next_state;
        let mut now = START;
        group.bench_function(algorithm.name(), |b| {
            b.iter(|| {
                now += 1_000;
                black_box(evaluate(
                    &quota,
                    Some(black_box(&state)),
                    now,
                    Hits::Charge(1),
                ))
            })
        });
    }
    group.finish();
}

fn memory_store(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store");
    group.throughput(Throughput::Elements(1));
    for algorithm in Algorithm::ALL {
        for keys in [1_000u64, 1_000_000] {
            let clock = Arc::new(ManualClock::new(START));
            let store = MemoryStore::new(2_000_000, clock.clone());
            let counters: Vec<Counter> = (0..keys).map(|k| counter(algorithm, k)).collect();
            for counter in &counters {
                decide(&store, counter);
            }
            let mut next = 0usize;
            group.bench_with_input(BenchmarkId::new(algorithm.name(), keys), &keys, |b, _| {
                b.iter(|| {
                    // A stride that is coprime with the key count visits keys in a scattered order.
                    next = (next + 7_919) % counters.len();
                    clock.advance(1);
                    black_box(decide(&store, &counters[next]))
                })
            });
        }
    }
    group.finish();
}

fn bytes_per_key(_: &mut Criterion) {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
    ] {
        let keys = 1_000_000u64;
        let clock = Arc::new(ManualClock::new(START));
        let store = MemoryStore::new(keys as usize, clock.clone());
        let mut batch = counter(algorithm, 0);
        for key in 0..keys {
            batch.key.truncate(batch.key.len() - 8);
            batch.key.extend_from_slice(&key.to_le_bytes());
            decide(&store, &batch);
        }
        println!(
            "memory/{}: {} keys held, {:.1} bytes per active key (hash tables incl. free slots)",
            algorithm.name(),
            store.len(),
            store.table_bytes() as f64 / store.len().max(1) as f64
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = pure_arithmetic, memory_store, bytes_per_key
}
criterion_main!(benches);
