//! The hybrid store's call to Redis (`--store hybrid`, `crate::store::hybrid`): one script
//! call (`lua/hybrid_sync.lua`) adds every unsent hit an instance holds to the counters' global
//! states, reads those states back, and registers the instance in the set of instances that
//! synced recently, whose size divides what is left of each limit between them. Single server
//! and Sentinel only: the call touches keys of every slot, which a Cluster script cannot.

use std::sync::OnceLock;
use std::time::Duration;

use redis::Script;

use super::connection::{misconfigured, unavailable};
use super::script::{window_arg, Arg, Call};
use super::{Link, RedisStore};
use crate::core::algorithm::{Algorithm, Quota, State};
use crate::core::time::Micros;
use crate::store::StoreError;

/// The sync script: the shared helpers, then the merge.
pub const SYNC_SOURCE: &str = concat!(
    include_str!("lua/prelude.lua"),
    "\n",
    include_str!("lua/hybrid_sync.lua"),
);

/// Reply values before the items, and per item (`hybrid_sync.lua`).
const REPLY_HEADER: usize = 2;
const REPLY_FIELDS: usize = 4;

/// KEYS before the counters' (the set of instances, their last syncs applied).
const KEY_BASE: usize = 2;

fn sync_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(SYNC_SOURCE))
}

/// Hits of one counter counted in one window (0 hits: only read the counter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncItem {
    /// The counter's Redis key (`RedisStore::key_of`).
    pub key: String,
    /// Fixed or sliding window (`core::hybrid::supports`).
    pub quota: Quota,
    pub window_start: Micros,
    pub hits: u64,
}

/// What Redis holds after a sync.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncReply {
    /// Redis time (or the test clock's) when the call ran.
    pub now: Micros,
    /// Instances that synced within the horizon, this one included.
    pub instances: u64,
    /// Per item, its counter's global state after the item's hits.
    pub states: Vec<Option<State>>,
}

/// The Redis key of the set of instances, under `prefix`.
pub fn instances_key(prefix: &str) -> String {
    format!("{prefix}hybrid:instances")
}

impl RedisStore {
    /// Sends `items` in one call and reads the counters back; `instance` (non-zero) is
    /// registered as present for `horizon`. `sequence` numbers the sync (increasing per
    /// instance): a sync sent again with the same number, after its answer was lost, adds
    /// nothing twice. Bypasses the circuit breaker: the caller retries on its own schedule.
    pub async fn sync_hits(
        &self,
        items: &[SyncItem],
        (instance, sequence): (u64, u64),
        horizon: Duration,
        deadline: Duration,
    ) -> Result<SyncReply, StoreError> {
        let Link::Server(connection) = &self.link else {
            return Err(misconfigured(
                "--store hybrid needs one Redis server or Sentinel: a sync touches keys of \
                 every hash slot, which a Redis Cluster script cannot"
                    .to_owned(),
            ));
        };
        let prefix = self.key_prefix();
        let mut keys = vec![instances_key(prefix), format!("{prefix}hybrid:applied")];
        let (now_arg, extra_ttl_ms) = match self.now()? {
            super::script::Now::RedisTime => (Arg::Text(""), 0),
            super::script::Now::Given { now, extra_ttl_ms } => (Arg::Signed(now), extra_ttl_ms),
        };
        let mut args = Vec::with_capacity(6 + 5 * items.len());
        args.extend([
            Arg::from(items.len()),
            now_arg,
            Arg::Unsigned(extra_ttl_ms),
            if instance == 0 {
                Arg::Text("")
            } else {
                Arg::Unsigned(instance)
            },
            Arg::Unsigned(u64::try_from(horizon.as_millis()).unwrap_or(u64::MAX)),
            Arg::Unsigned(sequence),
        ]);
        for item in items {
            let index = match keys.iter().skip(KEY_BASE).position(|key| *key == item.key) {
                Some(index) => index + 1,
                None => {
                    keys.push(item.key.clone());
                    keys.len() - KEY_BASE
                }
            };
            args.extend([
                Arg::from(index),
                Arg::Text(match item.quota.algorithm {
                    Algorithm::SlidingWindow => "sliding_window",
                    _ => "fixed_window",
                }),
                Arg::Signed(window_arg(&item.quota)),
                Arg::Signed(item.window_start),
                Arg::Unsigned(item.hits),
            ]);
        }
        let reply = connection
            .invoke(sync_script(), &Call { keys, args }, deadline)
            .await?;
        parse_sync_reply(&reply, items).map_err(unavailable)
    }
}

fn parse_sync_reply(reply: &[i64], items: &[SyncItem]) -> Result<SyncReply, String> {
    if reply.len() != REPLY_HEADER + REPLY_FIELDS * items.len() {
        return Err(format!(
            "the hybrid sync script returned {} numbers for {} items",
            reply.len(),
            items.len()
        ));
    }
    let count = |value: i64| {
        u32::try_from(value)
            .map_err(|_| format!("the hybrid sync script returned a count of {value}"))
    };
    let mut states = Vec::with_capacity(items.len());
    for (item, fields) in items.iter().zip(
        reply
            .get(REPLY_HEADER..)
            .unwrap_or_default()
            .chunks_exact(REPLY_FIELDS),
    ) {
        let &[held, window_start, previous, current] = fields else {
            continue;
        };
        states.push(match (held, item.quota.algorithm) {
            (0, _) => None,
            (_, Algorithm::SlidingWindow) => Some(State::SlidingWindow {
                window_start,
                previous: count(previous)?,
                current: count(current)?,
            }),
            _ => Some(State::FixedWindow {
                window_start,
                count: u64::from(count(current)?),
            }),
        });
    }
    let (&now, &instances) = match reply {
        [now, instances, ..] => (now, instances),
        _ => return Err("the hybrid sync script returned no header".to_owned()),
    };
    Ok(SyncReply {
        now,
        instances: u64::try_from(instances).unwrap_or(0),
        states,
    })
}
