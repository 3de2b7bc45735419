//! RLQS across floodgates (`RlqsPeers` on the Redis store): each instance sees every other
//! instance's last published demand on a bucket, never its own, within the horizon, or within
//! the memory unless retired (as `core::policy::rlqs::peer_entry` decides), and buckets of several
//! domains in one exchange, on a single server and on a Cluster (each domain's buckets share
//! its hash tag).

use std::collections::HashMap;
use std::time::Duration;

use floodgate::core::policy::rlqs::{peer_entry, BucketKey, BucketKeyBounds};
use floodgate::store::redis::RedisStore;
use floodgate::store::{DemandItem, ExchangeTerms, RlqsPeers};
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use floodgate_testkit::runtime;

fn bucket(tenant: &str) -> BucketKey {
    let map = HashMap::from([("tenant".to_owned(), tenant.to_owned())]);
    BucketKey::from_map(&map, BucketKeyBounds::default())
        .unwrap_or_else(|error| panic!("bucket: {error}"))
}

const DEADLINE: Duration = Duration::from_secs(2);

/// Live within `horizon`, nobody remembered past it.
fn within(horizon: Duration) -> ExchangeTerms {
    ExchangeTerms {
        horizon,
        memory: horizon,
        retire: false,
        deadline: DEADLINE,
    }
}

async fn exchange(
    store: &RedisStore,
    instance: u64,
    items: &[(&str, &BucketKey, Option<f64>)],
    terms: ExchangeTerms,
) -> Vec<Vec<Option<f64>>> {
    let items: Vec<DemandItem<'_>> = items
        .iter()
        .map(|&(domain, bucket, demand)| DemandItem {
            domain,
            bucket,
            demand,
        })
        .collect();
    store
        .exchange_demands(instance, &items, terms)
        .await
        .unwrap_or_else(|error| panic!("exchange: {error}"))
}

async fn peers_see_each_other(store: &RedisStore) {
    let (acme, globex) = (bucket("acme"), bucket("globex"));
    let horizon = within(Duration::from_secs(30));
    // The first instance alone: no peers anywhere.
    let first = exchange(
        store,
        1,
        &[("edge", &acme, Some(12.5)), ("api", &globex, None)],
        horizon,
    )
    .await;
    assert_eq!(first, vec![vec![], vec![]]);
    // The second sees the first's demands (an unmeasured one as None), per bucket.
    let second = exchange(
        store,
        2,
        &[("edge", &acme, Some(40.0)), ("api", &globex, Some(3.0))],
        horizon,
    )
    .await;
    assert_eq!(second, vec![vec![Some(12.5)], vec![None]]);
    // The first, again: the second's, never its own; a bucket only it knows has none.
    let again = exchange(
        store,
        1,
        &[
            ("edge", &acme, Some(11.0)),
            ("edge", &bucket("initech"), Some(1.0)),
        ],
        horizon,
    )
    .await;
    assert_eq!(again, vec![vec![Some(40.0)], vec![]]);
}

#[test]
fn instances_see_each_others_demands_per_bucket_on_a_single_server() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let store = RedisStore::connect(&server.options(None))
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        peers_see_each_other(&store).await;
        // Past the horizon an instance that stopped publishing is gone.
        let short = within(Duration::from_millis(300));
        let stale = bucket("stale");
        exchange(&store, 7, &[("edge", &stale, Some(5.0))], short).await;
        assert_eq!(
            exchange(&store, 8, &[("edge", &stale, Some(6.0))], short).await,
            vec![vec![Some(5.0)]]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            exchange(&store, 8, &[("edge", &stale, Some(6.0))], short).await,
            vec![vec![]]
        );
    });
}

/// An entry published about 300 ms before, read under each combination of horizon, memory
/// and retirement whose thresholds are far from that age: counted exactly when
/// `core::policy::rlqs::peer_entry` says it counts, and deleted when it does not.
#[test]
fn the_script_counts_a_peers_entry_as_the_core_does() {
    let server = RedisServer::start();
    let ms = Duration::from_millis;
    let cases = [
        (ms(30_000), ms(60_000), false),
        (ms(30_000), ms(60_000), true),
        (ms(50), ms(30_000), false),
        (ms(50), ms(30_000), true),
        (ms(50), ms(100), false),
    ];
    runtime().block_on(async {
        let store = RedisStore::connect(&server.options(None))
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let long = within(ms(60_000));
        let buckets: Vec<BucketKey> = (0..cases.len())
            .map(|case| bucket(&format!("case-{case}")))
            .collect();
        for bucket in &buckets {
            exchange(&store, 7, &[("edge", bucket, Some(5.0))], long).await;
        }
        tokio::time::sleep(ms(300)).await;
        for ((horizon, memory, retire), bucket) in cases.into_iter().zip(&buckets) {
            let terms = ExchangeTerms {
                horizon,
                memory,
                retire,
                deadline: DEADLINE,
            };
            let counts = peer_entry(
                300,
                horizon.as_millis() as u64,
                memory.as_millis() as u64,
                retire,
            )
            .counts();
            let seen = exchange(&store, 8, &[("edge", bucket, Some(6.0))], terms).await;
            let expected = if counts {
                vec![vec![Some(5.0)]]
            } else {
                vec![vec![]]
            };
            assert_eq!(seen, expected, "{terms:?}");
            // What did not count is gone: read again with a long memory.
            let again = exchange(&store, 8, &[("edge", bucket, Some(6.0))], long).await;
            assert_eq!(again, expected, "{terms:?}, read again");
        }
    });
}

#[test]
fn instances_see_each_others_demands_per_bucket_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    runtime().block_on(async {
        let store = RedisStore::connect(&cluster.options(None))
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        peers_see_each_other(&store).await;
    });
}
