//! Heavy hitters merged across instances: two floodgate processes (`--store redis
//! --heavy-hitters`) share one redis-server; each decides traffic from values of its own and
//! from one value both see, and each one's `/status.json` shows the values of both with their
//! hits summed (raw where the rule says so, and hashed with the key they share otherwise: one
//! line for one client). With Redis gone, each shows its own hits only, and says so. Under
//! `--store redis` and `--store hybrid`.

use std::time::{Duration, Instant};

use floodgate_testkit::redis::{store_flags, RedisServer};
use floodgate_testkit::status::{rule, status_json};
use floodgate_testkit::{rls, subdir, Floodgate};
use serde_json::Value;

const RULES: &str = "domain: shop\n\
                     descriptors:\n\
                     \x20 - key: remote_address\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 5}\n\
                     \x20   heavy_hitters: raw\n\
                     \x20 - key: api_key\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 100}\n";

/// How long a merged view may take to appear: a few sync intervals on a loaded machine.
const MERGE_TIMEOUT: Duration = Duration::from_secs(20);

async fn hit(floodgate: &Floodgate, key: &str, value: &str, calls: usize) {
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    for _ in 0..calls {
        rls::call(&mut client, rls::request("shop", &[&[(key, value)]]))
            .await
            .unwrap_or_else(|status| panic!("call for {key}={value}: {status}"));
    }
}

fn status(floodgate: &Floodgate) -> Value {
    status_json(floodgate.debug_port)
}

fn top<'a>(status: &'a Value, path: &str) -> &'a Vec<Value> {
    rule(status, path)["last_ten_minutes"]["top"]
        .as_array()
        .unwrap_or_else(|| panic!("no top list for {path} in {status}"))
}

/// (admitted + refused) of `value` in `rule`'s top list.
fn hits_of(status: &Value, rule: &str, value: &str) -> Option<u64> {
    top(status, rule)
        .iter()
        .find(|hitter| hitter["value"] == value)
        .map(|hitter| {
            hitter["admitted"].as_u64().unwrap_or(0) + hitter["refused"].as_u64().unwrap_or(0)
        })
}

/// Polls `floodgate`'s status until `ready` holds, or fails with the last one seen.
fn status_once(floodgate: &Floodgate, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + MERGE_TIMEOUT;
    loop {
        let seen = status(floodgate);
        if ready(&seen) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {MERGE_TIMEOUT:?}: {seen}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_instance_shows_the_heavy_hitters_of_both_with_their_hits_summed() {
    merged_across_two_instances("redis").await;
}

/// The same under the hybrid store, whose instances decide locally between syncs: how many
/// hits each admitted may differ, what each value took does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_hybrid_store_too() {
    merged_across_two_instances("hybrid").await;
}

async fn merged_across_two_instances(store: &str) {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
    let url = redis.url();
    let mut flags = store_flags(&url, &["--heavy-hitters"]);
    // `--store redis` as store_flags writes it, or the store asked for.
    flags[1] = store;
    let [one, two] = ["one", "two"].map(|name| {
        Floodgate::start_with_rules(&subdir(dir.path(), name), "rules.yaml", RULES, &flags)
    });

    hit(&one, "remote_address", "10.0.0.7", 8).await;
    hit(&one, "remote_address", "10.0.1.1", 3).await;
    hit(&two, "remote_address", "10.0.0.7", 6).await;
    hit(&two, "remote_address", "10.0.2.2", 2).await;
    hit(&one, "api_key", "shared-key", 4).await;
    hit(&two, "api_key", "shared-key", 5).await;

    let merged = tokio::task::block_in_place(|| {
        status_once(&one, "the other instance's hits merged", |seen| {
            hits_of(seen, "shop.remote_address", "10.0.0.7") == Some(14)
                && hits_of(seen, "shop.remote_address", "10.0.2.2") == Some(2)
        })
    });
    assert_eq!(
        merged["heavy_hitters"]["scope"], "all instances",
        "{merged}"
    );
    assert_eq!(merged["heavy_hitters"]["instances"], 2, "{merged}");
    assert_eq!(hits_of(&merged, "shop.remote_address", "10.0.1.1"), Some(3));
    let ip = &rule(&merged, "shop.remote_address")["last_ten_minutes"];
    // 10.0.0.7's 14 hits on one counter of 5 that both share: 5 admitted, 9 refused; the
    // other two values' 5 hits admitted.
    let (admitted, refused) = (ip["admitted"].as_u64(), ip["refused"].as_u64());
    if store == "redis" {
        assert_eq!((admitted, refused), (Some(10), Some(9)), "{ip}");
    }
    assert_eq!(admitted.zip(refused).map(|(a, r)| a + r), Some(19), "{ip}");
    assert_eq!(ip["error_bound"], 0, "few values: every one kept, {ip}");
    // Hashed with the key both share: one line for one client, with its hits summed.
    let keys = top(&merged, "shop.api_key");
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0]["admitted"], 9, "{keys:?}");
    assert!(
        keys[0]["value"]
            .as_str()
            .is_some_and(|v| v.starts_with('#')),
        "{keys:?}"
    );

    // And the other instance sees the same merge from its side.
    let seen_by_two = tokio::task::block_in_place(|| {
        status_once(&two, "the first instance's hits merged", |seen| {
            hits_of(seen, "shop.remote_address", "10.0.1.1") == Some(3)
        })
    });
    assert_eq!(
        hits_of(&seen_by_two, "shop.remote_address", "10.0.0.7"),
        Some(14)
    );

    redis.kill();
    let alone = tokio::task::block_in_place(|| {
        status_once(&one, "a local view once Redis is gone", |seen| {
            seen["heavy_hitters"]["scope"] == "instance (Redis unreachable)"
        })
    });
    assert_eq!(
        hits_of(&alone, "shop.remote_address", "10.0.0.7"),
        Some(8),
        "{alone}"
    );
    assert_eq!(
        hits_of(&alone, "shop.remote_address", "10.0.2.2"),
        None,
        "{alone}"
    );
}
