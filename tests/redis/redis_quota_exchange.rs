//! RLQS across floodgates (`QuotaPeers` on the Redis store): each instance sees every other
//! instance's last published demand on a bucket, never its own, only within the horizon, and
//! buckets of several domains in one exchange, on a single server and on a Cluster (each
//! domain's buckets share its hash tag).

use std::collections::HashMap;
use std::time::Duration;

use floodgate::core::quota::{BucketKey, BucketKeyBounds};
use floodgate::store::redis::RedisStore;
use floodgate::store::{DemandItem, QuotaPeers};
use floodgate_testkit::redis::{RedisCluster, RedisServer};
use floodgate_testkit::runtime;

fn bucket(tenant: &str) -> BucketKey {
    let map = HashMap::from([("tenant".to_owned(), tenant.to_owned())]);
    BucketKey::from_map(&map, BucketKeyBounds::default())
        .unwrap_or_else(|error| panic!("bucket: {error}"))
}

const DEADLINE: Duration = Duration::from_secs(2);

async fn exchange(
    store: &RedisStore,
    instance: u64,
    items: &[(&str, &BucketKey, Option<f64>)],
    horizon: Duration,
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
        .exchange_demands(instance, &items, horizon, DEADLINE)
        .await
        .unwrap_or_else(|error| panic!("exchange: {error}"))
}

async fn peers_see_each_other(store: &RedisStore) {
    let (acme, globex) = (bucket("acme"), bucket("globex"));
    let horizon = Duration::from_secs(30);
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
        let short = Duration::from_millis(300);
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
