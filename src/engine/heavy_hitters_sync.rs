//! Heavy hitters merged across the instances that share a Redis (`--heavy-hitters` with
//! `--store redis` or `hybrid`): every [`SYNC_INTERVAL`], beside the decisions and never on
//! their path, each instance adopts the value-hashing key every instance shares, publishes the
//! one-minute summaries of its rules that changed since it last did
//! (`store::redis::heavy_hitters`: at most K values per rule, instance and minute) and reads the
//! others' for the last ten minutes into its board, which the status page merges with its own
//! (`core::arithmetic::heavy_hitters::merge`, with the error bound).
//!
//! A minute's summaries expire [`SUMMARY_TTL`] after their last write, so an instance that
//! stopped leaves its hits in the window they happened in, then they are gone. Minutes older
//! than the previous one no longer change (an instance publishes a minute's last hits within an
//! interval of its end), so each is read once. While Redis does not answer, the board shows this
//! instance's hits only and says so; the next sync that succeeds restores the merged view.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::core::arithmetic::heavy_hitters::merge::{self as hitter_merge, BucketSummary};
use crate::core::policy::rules::RuleSet;
use crate::engine::adaptive::shared::SharesLimits;
use crate::engine::heavy_hitters::{HitterBoard, PeerView, Sharing};
use crate::engine::limiter::Limiter;
use crate::engine::shutdown::{self, Shutdown};
use crate::store::redis::{HitterRules, PeerSummary, PublishedSummary, RedisStore};
use crate::store::StoreError;

/// How often each instance publishes and reads: the page refreshes every 2 s.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(2);

/// A minute's summaries outlive their last write by the ten minutes shown and one to spare.
pub const SUMMARY_TTL: Duration = Duration::from_secs(11 * 60);

/// The shared hashing key outlives the last instance that syncs by this much.
const HASH_KEY_TTL: Duration = Duration::from_secs(3600);

/// The deadline of one call (or `--redis-timeout-ms` if longer): beside the decisions.
const CALL_DEADLINE: Duration = Duration::from_millis(500);

const MINUTE_MICROS: i64 = 60_000_000;

/// One instance's share of the heavy hitters.
pub struct HitterSharing {
    board: Arc<HitterBoard>,
    instance: u64,
    /// Per rule path, the hits of each minute's summary when last published: unchanged ones
    /// are not built or sent.
    published: HashMap<String, Vec<(i64, u64)>>,
    /// The peers' summaries of minutes that no longer change, read once.
    settled: BTreeMap<i64, Vec<(String, u64, BucketSummary)>>,
    /// Whether the last sync failed: log the change only.
    failing: bool,
    /// Found again only when a reload brings another rule set.
    known: Option<KnownRules>,
}

/// Shares `limiter`'s heavy hitters through the Redis beneath its store: syncs once, so values
/// are hashed with the shared key from the first decision on, then every interval in the
/// background until `shutdown`. Nothing when either is missing.
pub async fn start<S: SharesLimits>(limiter: &Arc<Limiter<S>>, shutdown: Shutdown) {
    let Some(board) = limiter.heavy_hitters().cloned() else {
        return;
    };
    if limiter.store().shared_limits().is_none() {
        return;
    }
    let sharing = Arc::new(Mutex::new(HitterSharing::new(board)));
    sync(&sharing, limiter).await;
    let limiter = Arc::clone(limiter);
    tokio::spawn(async move {
        shutdown::every(SYNC_INTERVAL, shutdown, || sync(&sharing, &limiter)).await;
    });
}

async fn sync<S: SharesLimits>(sharing: &Mutex<HitterSharing>, limiter: &Limiter<S>) {
    if let Some(redis) = limiter.store().shared_limits() {
        sharing.lock().await.sync(redis, limiter.rules()).await;
    }
}

/// The rules in force, by path and by the digest their summaries are filed under.
struct KnownRules {
    set: Arc<RuleSet>,
    paths: Vec<String>,
    digests: HitterRules,
}

impl KnownRules {
    fn of(set: Arc<RuleSet>) -> Self {
        let paths: Vec<String> = set.all_rules().map(|rule| rule.path.clone()).collect();
        let digests = HitterRules::new(&paths.iter().map(String::as_str).collect::<Vec<_>>());
        Self {
            set,
            paths,
            digests,
        }
    }
}

impl HitterSharing {
    pub fn new(board: Arc<HitterBoard>) -> Self {
        Self {
            board,
            instance: rand::random(),
            published: HashMap::new(),
            settled: BTreeMap::new(),
            failing: false,
            known: None,
        }
    }

    /// One sync: the board shows every instance's hits after it, or this one's and why.
    pub async fn sync(&mut self, redis: &RedisStore, rules: Arc<RuleSet>) {
        if !self
            .known
            .as_ref()
            .is_some_and(|known| Arc::ptr_eq(&known.set, &rules))
        {
            self.known = Some(KnownRules::of(rules));
        }
        match self.exchange(redis).await {
            Ok(view) => {
                if std::mem::replace(&mut self.failing, false) {
                    tracing::info!("heavy hitters merged across instances again");
                }
                self.board.set_peers(view);
            }
            Err(error) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        "cannot share heavy hitters through Redis; the status page shows this \
                         instance's only: {error}"
                    );
                }
                self.board.set_peers(PeerView {
                    sharing: Sharing::Unreachable(error.to_string()),
                    ..PeerView::default()
                });
            }
        }
    }

    async fn exchange(&mut self, redis: &RedisStore) -> Result<PeerView, StoreError> {
        self.adopt_hash_keys(redis).await?;
        self.publish(redis).await?;
        self.read(redis).await
    }

    /// Hashes values as every instance on this Redis does.
    async fn adopt_hash_keys(&mut self, redis: &RedisStore) -> Result<(), StoreError> {
        let candidate = format!(
            "{:016x}{:016x}",
            rand::random::<u64>(),
            rand::random::<u64>()
        );
        let key = redis
            .hitter_hash_key(&candidate, HASH_KEY_TTL, CALL_DEADLINE)
            .await?;
        let keys = parse_hash_keys(&key).ok_or_else(|| StoreError::Unavailable {
            backend: "redis",
            reason: format!(
                "the shared heavy-hitter key is not 32 hex digits ({} characters); delete \
                 `heavy_hitters:hash_key` under the key prefix and every instance draws a new one",
                key.len()
            ),
        })?;
        if self.board.adopt_hash_keys(keys) {
            self.published.clear();
        }
        Ok(())
    }

    /// Sends the summaries whose hits changed since they were last sent.
    async fn publish(&mut self, redis: &RedisStore) -> Result<(), StoreError> {
        let published = &self.published;
        let rules = self.board.summaries_where(|rule, minute, hits| {
            !published
                .get(rule)
                .is_some_and(|sent| sent.contains(&(minute, hits)))
        });
        let changed: Vec<PublishedSummary<'_>> = rules
            .iter()
            .flat_map(|(rule, summaries)| {
                summaries.iter().map(move |summary| PublishedSummary {
                    rule: rule.as_str(),
                    summary,
                })
            })
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        redis
            .publish_hitters(self.instance, &changed, SUMMARY_TTL, CALL_DEADLINE)
            .await?;
        let now = self.board.now();
        for item in &changed {
            let sent = self.published.entry(item.rule.to_owned()).or_default();
            sent.retain(|(minute, _)| {
                *minute != item.summary.minute && hitter_merge::within_ten_minutes(*minute, now)
            });
            sent.push((item.summary.minute, hits(item.summary)));
        }
        Ok(())
    }

    /// The other instances' summaries of the last ten minutes.
    async fn read(&mut self, redis: &RedisStore) -> Result<PeerView, StoreError> {
        let Some(known) = &self.known else {
            return Ok(PeerView::default());
        };
        let now = self.board.now();
        let current = now.div_euclid(MINUTE_MICROS);
        self.settled
            .retain(|minute, _| hitter_merge::within_ten_minutes(*minute, now));
        let mut view = PeerView {
            sharing: Sharing::Shared,
            ..PeerView::default()
        };
        let mut instances = HashSet::new();
        for age in 0..crate::core::arithmetic::heavy_hitters::BUCKETS as i64 {
            let minute = current - age;
            let fresh;
            let peers = match self.settled.get(&minute) {
                Some(peers) => peers,
                None => {
                    let read = redis
                        .read_hitters(minute, &known.digests, self.instance, CALL_DEADLINE)
                        .await?;
                    fresh = by_path(read, &known.paths);
                    if age >= 2 {
                        self.settled.insert(minute, fresh.clone());
                    }
                    &fresh
                }
            };
            for (path, instance, summary) in peers {
                instances.insert(*instance);
                view.summaries
                    .entry(path.clone())
                    .or_default()
                    .push(summary.clone());
            }
        }
        view.instances = instances.len();
        Ok(view)
    }
}

/// Every hit a summary counted: it changed when this did.
fn hits(summary: &BucketSummary) -> u64 {
    summary.admitted + summary.refused
}

fn by_path(read: Vec<PeerSummary>, paths: &[String]) -> Vec<(String, u64, BucketSummary)> {
    read.into_iter()
        .filter_map(|peer| {
            let path = paths.get(peer.rule)?.clone();
            Some((path, peer.instance, peer.summary))
        })
        .collect()
}

/// 32 hex digits as the two SipHash keys.
fn parse_hash_keys(text: &str) -> Option<(u64, u64)> {
    if text.len() != 32 || !text.is_ascii() {
        return None;
    }
    let (first, second) = text.split_at(16);
    Some((
        u64::from_str_radix(first, 16).ok()?,
        u64::from_str_radix(second, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_key_is_two_hex_halves() {
        assert_eq!(
            parse_hash_keys("000000000000002a0000000000000007"),
            Some((42, 7))
        );
        assert_eq!(parse_hash_keys("2a"), None);
        assert_eq!(parse_hash_keys(&"z".repeat(32)), None);
    }
}
