//! Heavy hitters shared by every instance on one Redis (`engine::heavy_hitters_sync`): each
//! publishes its rules' one-minute summaries (`core::arithmetic::heavy_hitters::merge`) and reads the
//! others', which the status page merges.
//!
//! ```text
//! <prefix>heavy_hitters:<minute>     a hash per minute since the epoch: a field per rule and
//!                                    instance, `<rule digest>:<instance>` (16 hex digits each),
//!                                    the value that bucket's summary as JSON (at most K values);
//!                                    TTL SUMMARY_TTL from its last write
//! <prefix>heavy_hitters:hash_key     the key under which every instance hashes values, so one
//!                                    client is one line across instances; TTL refreshed by each
//!                                    sync
//! ```
//!
//! The rule digest is the first 64 bits of SHA-256 of the rule's path, in hex: rule paths hold
//! config values, kept out of sight as in the counter keys. Each command names one key, so
//! single server, Sentinel and Cluster alike.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use redis::Script;
use sha2::{Digest, Sha256};

use super::RedisStore;
use crate::core::arithmetic::heavy_hitters::merge::BucketSummary;
use crate::store::StoreError;

/// Reads the hash key, or sets it to the candidate when there is none, and keeps it for
/// ARGV[2] ms more: every instance adopts whichever key came first.
const HASH_KEY_SOURCE: &str = "local key = redis.call('GET', KEYS[1])\n\
     if not key then redis.call('SET', KEYS[1], ARGV[1]); key = ARGV[1] end\n\
     redis.call('PEXPIRE', KEYS[1], ARGV[2])\n\
     return key\n";

fn hash_key_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(HASH_KEY_SOURCE))
}

/// One rule's summary of one minute, as this instance publishes it.
#[derive(Debug, Clone, Copy)]
pub struct PublishedSummary<'a> {
    /// The rule's path (`Rule::path`).
    pub rule: &'a str,
    pub summary: &'a BucketSummary,
}

/// The rules whose summaries are read, by the digest their fields carry.
#[derive(Debug, Clone, Default)]
pub struct HitterRules {
    by_digest: HashMap<String, usize>,
}

impl HitterRules {
    /// The rules at `paths`; a summary names one by its index here.
    pub fn new(paths: &[&str]) -> Self {
        let by_digest = paths
            .iter()
            .enumerate()
            .map(|(index, path)| (rule_digest(path), index))
            .collect();
        Self { by_digest }
    }

    /// `<rule digest>:<instance>` as (instance, the rule's index).
    fn parse_field(&self, field: &str) -> Option<(u64, usize)> {
        let (digest, instance) = field.split_once(':')?;
        let rule = *self.by_digest.get(digest)?;
        Some((u64::from_str_radix(instance, 16).ok()?, rule))
    }
}

/// A summary another instance published for one of the rules asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSummary {
    pub instance: u64,
    /// The rule's index in the [`HitterRules`] asked for.
    pub rule: usize,
    pub summary: BucketSummary,
}

/// Milliseconds for `PEXPIRE`: at least 1 (Redis refuses 0).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn rule_digest(path: &str) -> String {
    hex::encode(&Sha256::digest(path.as_bytes())[..8])
}

impl RedisStore {
    fn hitters_key(&self, minute: i64) -> String {
        format!("{}heavy_hitters:{minute}", self.key_prefix())
    }

    /// The key every instance hashes heavy-hitter values with: the one in Redis, or
    /// `candidate` when there was none; kept `ttl` more.
    pub async fn hitter_hash_key(
        &self,
        candidate: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> Result<String, StoreError> {
        let mut invocation = hash_key_script().prepare_invoke();
        invocation
            .key(format!("{}heavy_hitters:hash_key", self.key_prefix()))
            .arg(candidate)
            .arg(millis(ttl));
        self.run(&invocation, deadline).await
    }

    /// Publishes `summaries` as `instance`'s, each minute's hash kept `ttl` from now.
    pub async fn publish_hitters(
        &self,
        instance: u64,
        summaries: &[PublishedSummary<'_>],
        ttl: Duration,
        deadline: Duration,
    ) -> Result<(), StoreError> {
        let mut minutes: Vec<i64> = summaries.iter().map(|s| s.summary.minute).collect();
        minutes.sort_unstable();
        minutes.dedup();
        for minute in minutes {
            let key = self.hitters_key(minute);
            let mut command = redis::cmd("HSET");
            command.arg(&key);
            for published in summaries.iter().filter(|s| s.summary.minute == minute) {
                let value = serde_json::to_string(published.summary).map_err(|error| {
                    super::errors::unavailable(format!("cannot encode a summary: {error}"))
                })?;
                command
                    .arg(format!("{}:{instance:016x}", rule_digest(published.rule)))
                    .arg(value);
            }
            self.command::<i64>(&command, deadline).await?;
            self.command::<i64>(redis::cmd("PEXPIRE").arg(&key).arg(millis(ttl)), deadline)
                .await?;
        }
        Ok(())
    }

    /// The summaries of `minute` that instances other than `instance` published for `rules`;
    /// fields of other rules, and values that cannot be read, are skipped.
    pub async fn read_hitters(
        &self,
        minute: i64,
        rules: &HitterRules,
        instance: u64,
        deadline: Duration,
    ) -> Result<Vec<PeerSummary>, StoreError> {
        let fields: Vec<(String, String)> = self
            .command(
                redis::cmd("HGETALL").arg(self.hitters_key(minute)),
                deadline,
            )
            .await?;
        let mut peers = Vec::new();
        for (field, value) in fields {
            let Some(peer) = rules
                .parse_field(&field)
                .filter(|(publisher, _)| *publisher != instance)
            else {
                continue;
            };
            match serde_json::from_str::<BucketSummary>(&value) {
                Ok(summary) if summary.minute == minute => peers.push(PeerSummary {
                    instance: peer.0,
                    rule: peer.1,
                    summary: summary.bounded(),
                }),
                Ok(_) => tracing::debug!(field, minute, "a summary filed under another minute"),
                Err(error) => tracing::debug!(field, "a summary that cannot be read: {error}"),
            }
        }
        Ok(peers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_names_a_known_rule_and_an_instance() {
        let rules = HitterRules::new(&["shop.a", "shop.b"]);
        let field = format!("{}:{:016x}", rule_digest("shop.b"), 42_u64);
        assert_eq!(rules.parse_field(&field), Some((42, 1)));
        let other = format!("{}:{:016x}", rule_digest("shop.c"), 42_u64);
        assert_eq!(rules.parse_field(&other), None);
        assert_eq!(rules.parse_field("nonsense"), None);
    }
}
