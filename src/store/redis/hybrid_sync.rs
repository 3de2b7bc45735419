//! The hybrid store's call to Redis (`--store hybrid`, `crate::store::hybrid`): one script
//! call (`lua/hybrid_sync.lua`) adds every unsent hit an instance holds to the counters' global
//! states, reads those states back, and registers the instance in the set of instances that
//! synced recently, whose size divides what is left of each limit between them. On a Cluster,
//! where a script touches keys of one slot only, a sync is one call per slot group of its
//! counters, run together, each with its own set of instances and of syncs applied in that
//! slot (`{<hash tag>}:hybrid:…`): an instance is counted where it syncs counters, and takes
//! the largest count of its groups (more instances, smaller budgets).

use std::borrow::Borrow;
use std::sync::OnceLock;
use std::time::Duration;

use redis::Script;

use super::errors::unavailable;
use super::script::{window_arg, Arg, Call};
use super::{Link, RedisStore};
use crate::core::arithmetic::algorithm::{Algorithm, Quota, State};
use crate::core::ground::time::Micros;
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
    /// Fixed or sliding window (`core::arithmetic::hybrid::supports`).
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

/// The keys of the set of instances and of the syncs applied: on one server the prefix's
/// own; on a Cluster those of the slot of `cluster_tag`, a hash tag of the call's counters.
fn bookkeeping_keys(prefix: &str, cluster_tag: Option<&str>) -> [String; 2] {
    match cluster_tag {
        None => [instances_key(prefix), format!("{prefix}hybrid:applied")],
        Some(tag) => [
            format!("{prefix}{{{tag}}}:hybrid:instances"),
            format!("{prefix}{{{tag}}}:hybrid:applied"),
        ],
    }
}

/// The tag of the bookkeeping keys of a Cluster call on `key`'s slot (`hybrid` for a call
/// without counters, or a key without a tag).
fn cluster_tag(key: Option<&str>) -> &str {
    key.and_then(hash_tag_of).unwrap_or("hybrid")
}

/// What Redis Cluster hashes of `key`: the text between its first `{` and the next `}`, when
/// not empty.
fn hash_tag_of(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.find('}')?;
    rest.get(..close).filter(|tag| !tag.is_empty())
}

/// One sync call's keys and arguments: the bookkeeping keys, then each distinct counter key.
fn sync_call<'i>(
    bookkeeping: [String; 2],
    items: impl ExactSizeIterator<Item = &'i SyncItem>,
    (now_arg, extra_ttl_ms): (Arg, u64),
    (instance, sequence): (u64, u64),
    horizon: Duration,
) -> Call {
    let mut keys = Vec::from(bookkeeping);
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
    Call { keys, args }
}

impl RedisStore {
    /// Sends `items` (one call, or one per slot group on a Cluster) and reads the counters
    /// back; `instance` (non-zero) is registered as present for `horizon`. `sequence` numbers
    /// the sync (increasing per instance): a sync sent again with the same number, after its
    /// answer was lost, adds nothing twice (on a Cluster, in each slot that applied it).
    /// Bypasses the circuit breaker: the caller retries on its own schedule.
    pub async fn sync_hits(
        &self,
        items: &[SyncItem],
        numbering: (u64, u64),
        horizon: Duration,
        deadline: Duration,
    ) -> Result<SyncReply, StoreError> {
        let prefix = self.key_prefix();
        let now = match self.now()? {
            super::script::Now::RedisTime => (Arg::Text(""), 0),
            super::script::Now::Given { now, extra_ttl_ms } => (Arg::Signed(now), extra_ttl_ms),
        };
        let cluster = match &self.link {
            Link::Server(connection) => {
                let call = sync_call(
                    bookkeeping_keys(prefix, None),
                    items.iter(),
                    now,
                    numbering,
                    horizon,
                );
                let reply = connection.invoke(sync_script(), &call, deadline).await?;
                return parse_sync_reply(&reply, items).map_err(unavailable);
            }
            Link::Cluster(cluster) => cluster,
        };
        // A sync with nothing to send still registers the instance: one call, on the slot
        // of the tag `hybrid`.
        let mut groups = super::slot::key_slot_groups(items.iter().map(|item| item.key.as_str()));
        if groups.is_empty() {
            groups.push(Vec::new());
        }
        let calls = groups.iter().map(|positions| {
            let group: Vec<&SyncItem> = positions
                .iter()
                .filter_map(|&position| items.get(position))
                .collect();
            let call = sync_call(
                bookkeeping_keys(
                    prefix,
                    Some(cluster_tag(group.first().map(|item| item.key.as_str()))),
                ),
                group.iter().copied(),
                now,
                numbering,
                horizon,
            );
            async move {
                let reply = cluster.invoke(sync_script(), &call, deadline).await?;
                parse_sync_reply(&reply, &group).map_err(unavailable)
            }
        });
        let replies = futures_util::future::try_join_all(calls).await?;
        merge_replies(items.len(), &groups, replies).map_err(unavailable)
    }
}

/// One reply from the slot groups' (`groups[i]` answered by `replies[i]`): states back in the
/// order of the items, the first group's clock, the largest count of instances.
fn merge_replies(
    items: usize,
    groups: &[Vec<usize>],
    replies: Vec<SyncReply>,
) -> Result<SyncReply, String> {
    let mut states: Vec<Option<Option<State>>> = vec![None; items];
    let mut now = None;
    let mut instances = 0;
    for (positions, reply) in groups.iter().zip(replies) {
        now.get_or_insert(reply.now);
        instances = instances.max(reply.instances);
        if reply.states.len() != positions.len() {
            return Err(format!(
                "a slot group of {} items got {} states back",
                positions.len(),
                reply.states.len()
            ));
        }
        for (&position, state) in positions.iter().zip(reply.states) {
            if let Some(slot) = states.get_mut(position) {
                *slot = Some(state);
            }
        }
    }
    let states: Option<Vec<Option<State>>> = states.into_iter().collect();
    match (now, states) {
        (Some(now), Some(states)) => Ok(SyncReply {
            now,
            instances,
            states,
        }),
        _ => Err(format!(
            "the slot groups' replies do not cover the {items} items"
        )),
    }
}

fn parse_sync_reply<I: Borrow<SyncItem>>(reply: &[i64], items: &[I]) -> Result<SyncReply, String> {
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
        states.push(match (held, item.borrow().quota.algorithm) {
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
