//! Expiry in Redis: every key the script writes carries a TTL no longer than the time its
//! state takes to mean nothing (window, or bucket refill), keys never hold raw descriptor
//! values, and counters that are only checked or rejected are never written.

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::Store;

use floodgate_testkit::redis::{counter, identity, scan_keys, RedisServer};

/// The longest a state of `quota` may matter, in ms (rounded up), as `expires_at` allows.
fn longest_ttl_ms(quota: &Quota) -> u64 {
    let window_ms = quota.window_micros().unsigned_abs().div_ceil(1_000);
    match quota.algorithm {
        Algorithm::FixedWindow | Algorithm::SlidingLog => window_ms,
        // The previous window still weighs during the current one.
        Algorithm::SlidingWindow => 2 * window_ms,
        // Full debt drains in C·W/L µs.
        Algorithm::TokenBucket | Algorithm::LeakyBucket => {
            let drain = (quota.capacity() * quota.window_micros().unsigned_abs())
                .div_ceil(u64::from(quota.requests_per_unit.max(1)));
            drain.div_ceil(1_000)
        }
    }
}

fn wall_clock_micros() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
}

fn quotas() -> Vec<Quota> {
    let mut quotas = Vec::new();
    for algorithm in Algorithm::ALL {
        for (limit, unit, multiplier) in [
            (5, Unit::Second, 1),
            (7, Unit::Minute, 1),
            (3, Unit::Hour, 2),
            (100, Unit::Day, 1),
        ] {
            let quota = Quota::new(limit, unit)
                .with_algorithm(algorithm)
                .with_multiplier(multiplier);
            quotas.push(quota.clone());
            if algorithm.accepts_burst() {
                quotas.push(quota.with_burst(2));
            }
        }
    }
    quotas
}

#[tokio::test]
async fn every_written_key_has_a_ttl_within_its_state_lifetime() {
    let server = RedisServer::start();
    let store = server.store(None).await;
    let mut inspector = server.inspector().await;

    let quotas = quotas();
    let secret_value = "203.0.113.77";
    let mut written = Vec::new();
    for (index, quota) in quotas.iter().enumerate() {
        let key = identity(
            "ttl",
            "remote_address",
            &format!("{secret_value}#{index}"),
            0,
            quota,
        );
        let first_window = quota.tiling().holding(wall_clock_micros());
        // Charge twice (the second may be rejected), refund once: every kind of write.
        for hits in [Hits::Charge(1), Hits::Charge(3), Hits::Refund(1)] {
            let counters = [counter(0, &key, quota, hits, Role::Enforced)];
            store
                .decide(&counters, false)
                .await
                .unwrap_or_else(|error| panic!("decide failed: {error}"));
        }
        written.push((store.key_for(&key), quota.clone(), first_window));
    }

    let keys = scan_keys(&mut inspector, "*").await;
    assert!(!keys.is_empty());
    for key in &keys {
        assert!(key.starts_with("floodgate:{ttl}:"), "{key}");
        assert!(
            !key.contains(secret_value) && !key.contains("remote_address"),
            "{key}"
        );
        let ttl_ms: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("PTTL failed: {error}"));
        let quota = written
            .iter()
            .find(|(written_key, _, _)| written_key == key)
            .map(|(_, quota, _)| quota)
            .unwrap_or_else(|| panic!("{key} was not written by this test"));
        // -1 would be a key without TTL. 0 (or -2: gone) only when the state had less than a
        // ms left, as when a 1 s window was charged right before it ended.
        let in_last_ms = ttl_ms == 0 || ttl_ms == -2;
        assert!(
            (ttl_ms > 0 || in_last_ms) && ttl_ms.unsigned_abs() <= longest_ttl_ms(quota),
            "{key} ({quota:?}) has PTTL {ttl_ms}, expected 1..={}",
            longest_ttl_ms(quota)
        );
        if in_last_ms {
            continue;
        }
        // A string, or a hash for a sliding log: DUMP shows either as bytes.
        let value: Vec<u8> = redis::cmd("DUMP")
            .arg(key)
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("DUMP failed: {error}"));
        let value = String::from_utf8_lossy(&value);
        assert!(!value.contains(secret_value), "{key} holds {value}");
    }
    // Window states outlive the request; a bucket or log that the refund emptied is deleted.
    // A window that ended while the test ran (a minute boundary under a loaded CI host) takes
    // its key with it: that expiry is the TTL doing its job, so only windows still open count.
    let scanned_at = wall_clock_micros();
    for (key, quota, first_window) in &written {
        let window = matches!(
            quota.algorithm,
            Algorithm::FixedWindow | Algorithm::SlidingWindow
        );
        let still_open = quota.tiling().holding(scanned_at) == *first_window;
        if window && still_open && longest_ttl_ms(quota) > 1_000 {
            assert!(keys.contains(key), "{key} ({quota:?}) is missing");
        }
    }
}

#[tokio::test]
async fn checks_and_rejected_requests_write_nothing() {
    let server = RedisServer::start();
    let store = server.store(None).await;
    let mut inspector = server.inspector().await;

    for algorithm in Algorithm::ALL {
        let quota = Quota::new(2, Unit::Minute).with_algorithm(algorithm);
        let key = identity("quiet", "user", algorithm.name(), 0, &quota);
        let check = [counter(0, &key, &quota, Hits::PEEK, Role::Enforced)];
        let too_many = [counter(0, &key, &quota, Hits::Charge(50), Role::Enforced)];
        let decided = store.decide(&check, false).await;
        assert!(decided.is_ok_and(|decided| !decided.over_limit));
        let decided = store.decide(&too_many, false).await;
        assert!(decided.is_ok_and(|decided| decided.over_limit));
    }
    let keys = scan_keys(&mut inspector, "*").await;
    assert!(keys.is_empty(), "{keys:?}");
}

/// A descriptor's own `hits_addend: 0` charges nothing. On an empty bucket that leaves a state
/// that means nothing at once (a TTL of 0, which `SET … PX` refuses): the bucket's key is
/// deleted rather than written, and the call answers as any other.
#[tokio::test]
async fn charging_nothing_to_an_empty_bucket_answers_and_leaves_no_key() {
    let server = RedisServer::start();
    let store = server.store(None).await;
    let mut inspector = server.inspector().await;

    for algorithm in Algorithm::ALL {
        let quota = Quota::new(2, Unit::Minute).with_algorithm(algorithm);
        let key = identity("nothing", "user", algorithm.name(), 0, &quota);
        let nothing = [counter(0, &key, &quota, Hits::Charge(0), Role::Enforced)];
        let before = scan_keys(&mut inspector, "*").await.len();
        let decided = store
            .decide(&nothing, false)
            .await
            .unwrap_or_else(|error| panic!("{}: decide failed: {error}", algorithm.name()));
        assert!(!decided.over_limit, "{}: {decided:?}", algorithm.name());
        if !algorithm.accepts_burst() {
            continue;
        }
        let keys = scan_keys(&mut inspector, "*").await;
        assert_eq!(keys.len(), before, "{}: {keys:?}", algorithm.name());
    }
}

#[tokio::test]
async fn a_one_second_window_vanishes_after_it_ends() {
    let server = RedisServer::start();
    let store = server.store(None).await;
    let mut inspector = server.inspector().await;

    let quota = Quota::new(10, Unit::Second);
    let key = identity("vanish", "user", "u", 0, &quota);
    let counters: [Counter; 1] = [counter(0, &key, &quota, Hits::Charge(1), Role::Enforced)];
    store
        .decide(&counters, false)
        .await
        .unwrap_or_else(|error| panic!("decide failed: {error}"));
    assert_eq!(scan_keys(&mut inspector, "*").await.len(), 1);
    // Redis expires keys on its own clock: this one real second is the point of the test.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let left: i64 = redis::cmd("DBSIZE")
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("DBSIZE failed: {error}"));
    assert_eq!(left, 0);
}

async fn pttl(inspector: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("PTTL {key} failed: {error}"))
}

/// The server's major version, from `INFO server`.
async fn redis_major_version(inspector: &mut redis::aio::MultiplexedConnection) -> u32 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("INFO server failed: {error}"));
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|version| version.split('.').next())
        .and_then(|major| major.trim().parse().ok())
        .unwrap_or_else(|| panic!("no redis_version in INFO server: {info}"))
}

/// From Redis 7, which tells scripts its version, a write that leaves a state's expiry where it
/// was keeps the key's TTL (`SET … KEEPTTL`, which costs Redis less than setting it again),
/// on both of the script's paths (a request of one counter, and of several); a write that
/// moves the expiry (a bucket's, at every charge) sets the TTL again. Seen by stretching each
/// key's TTL between two charges. Before Redis 7 every write sets it again.
#[tokio::test]
async fn a_write_that_leaves_the_expiry_keeps_the_ttl() {
    const STRETCHED_MS: i64 = 3_600_000;
    let server = RedisServer::start();
    let store = server.store(None).await;
    let mut inspector = server.inspector().await;
    let keeps = redis_major_version(&mut inspector).await >= 7;

    let window = Quota::new(100, Unit::Minute);
    let sliding = window.clone().with_algorithm(Algorithm::SlidingWindow);
    let bucket = window.clone().with_algorithm(Algorithm::TokenBucket);
    let lone = identity("keep", "user", "lone", 0, &window);
    let first = identity("keep", "user", "first", 0, &window);
    let second = identity("keep", "user", "second", 0, &sliding);
    let drained = identity("keep", "user", "bucket", 0, &bucket);
    let charge = |descriptor, key: &[u8], quota: &Quota| {
        counter(descriptor, key, quota, Hits::Charge(1), Role::Enforced)
    };
    let requests = [
        vec![charge(0, &lone, &window)],
        vec![charge(0, &first, &window), charge(1, &second, &sliding)],
        vec![charge(0, &drained, &bucket)],
    ];
    let windowed = [&lone, &first, &second].map(|identity| store.key_for(identity));
    let bucket_key = store.key_for(&drained);

    for _attempt in 0..4 {
        let minute = window.tiling().holding(wall_clock_micros());
        for round in 0..2 {
            for request in &requests {
                store
                    .decide(request, false)
                    .await
                    .unwrap_or_else(|error| panic!("decide failed: {error}"));
            }
            if round == 0 {
                for key in windowed.iter().chain([&bucket_key]) {
                    let _: i64 = redis::cmd("PEXPIRE")
                        .arg(key)
                        .arg(STRETCHED_MS)
                        .query_async(&mut inspector)
                        .await
                        .unwrap_or_else(|error| panic!("PEXPIRE {key} failed: {error}"));
                }
            }
        }
        if window.tiling().holding(wall_clock_micros()) != minute {
            continue; // a minute ended between the charges: the windows moved
        }
        for key in &windowed {
            let ttl_ms = pttl(&mut inspector, key).await;
            // Without KEEPTTL: at most the state's lifetime, two minutes for a sliding window.
            let kept = ttl_ms > 120_000;
            assert_eq!(
                kept, keeps,
                "{key}: PTTL {ttl_ms} ms after a charge in its window"
            );
        }
        let ttl_ms = pttl(&mut inspector, &bucket_key).await;
        assert!(
            ttl_ms > 0 && ttl_ms.unsigned_abs() <= longest_ttl_ms(&bucket),
            "{bucket_key}: PTTL {ttl_ms} ms after a charge that moved its expiry"
        );
        return;
    }
    panic!("a minute ended during each of four attempts");
}
