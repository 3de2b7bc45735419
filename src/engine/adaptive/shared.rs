//! Where an adaptive rule's effective limit lives between steps.
//!
//! * Memory store: in the process; each instance steps on its own signal reads.
//! * Redis store: in Redis, so every instance enforces the same limit:
//!
//!   ```text
//!   <prefix>{adaptive}:<rule digest>        the limit (a decimal integer), TTL 1 hour
//!   <prefix>{adaptive}:<rule digest>:lead   who steps this interval, TTL 0.9 interval (a
//!                                           concurrency rule's: who steps, held 3 intervals
//!                                           past each renewal, see `keep_lead`)
//!   <prefix>{adaptive}:signal:<name>        the last pushed value, TTL 2 intervals
//!   ```
//!
//!   `<rule digest>` is the first 64 bits of SHA-256 of the domain and the rule's config path,
//!   in hex (config paths hold config values, kept out of sight as in the counter keys). Each
//!   interval, every instance tries `SET …:lead NX PX <0.9 interval>`; the one that gets it
//!   reads the signals, steps from the stored limit and writes the new one; the others read it.
//!   So there is about one step per interval whatever the number of instances (the lead ends a
//!   little early so that a lone instance, ticking exactly one interval later, is never locked
//!   out by its own lead), and every instance
//!   enforces the stored value within one interval of its change. The value's TTL, refreshed at
//!   every step, forgets it an hour after the last instance stopped: the limit then starts
//!   again from `requests_per_unit`. A value pushed to any instance's admin API is written
//!   to Redis, with a TTL that makes it disappear once stale, so the instance that steps sees
//!   it whichever instance received it. Every key has the `{adaptive}` hash tag (one Cluster
//!   slot; a few keys, a few commands per interval).

use std::fmt::Write as _;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::core::arithmetic::aimd::Reading;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;
use crate::store::{SharedValues, Store, StoreError};

/// How long a stored limit outlives its last step.
const VALUE_TTL: Duration = Duration::from_secs(3600);
/// The deadline of one call (or `--redis-timeout-ms` if longer: `RedisStore::command`):
/// these calls are off the decision path, a slow Redis may take longer than a decision's 25 ms
/// without harm, but never a whole interval.
const COMMAND_DEADLINE: Duration = Duration::from_millis(500);

/// A store that can say where adaptive limits are kept.
pub trait SharesLimits: Store {
    /// The Redis store holding limits for every instance; `None`: each process keeps its own.
    fn shared_limits(&self) -> Option<&RedisStore>;
}

impl SharesLimits for MemoryStore {
    fn shared_limits(&self) -> Option<&RedisStore> {
        None
    }
}

impl SharesLimits for crate::store::hybrid::HybridStore {
    fn shared_limits(&self) -> Option<&RedisStore> {
        Some(self.redis())
    }
}

impl SharesLimits for RedisStore {
    fn shared_limits(&self) -> Option<&RedisStore> {
        Some(self)
    }
}

/// The Redis keys of one adaptive rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedKeys {
    pub value: String,
    pub lead: String,
}

impl SharedKeys {
    pub fn new(prefix: &str, domain: &str, rule_path: &str) -> Self {
        let mut digest = Sha256::new();
        for field in [domain, rule_path] {
            // Length-prefixed: ("a.b", "c") and ("a", "b.c") stay apart.
            digest.update((field.len() as u64).to_le_bytes());
            digest.update(field.as_bytes());
        }
        let mut value = format!("{prefix}{{adaptive}}:");
        for byte in &digest.finalize()[..8] {
            let _ = write!(value, "{byte:02x}");
        }
        let lead = format!("{value}:lead");
        Self { value, lead }
    }
}

/// Takes the lead of this interval for `keys`: whether this instance steps now.
pub async fn take_lead(
    shared: &impl SharedValues,
    keys: &SharedKeys,
    interval: Duration,
) -> Result<bool, StoreError> {
    let owner = format!("pid {}", std::process::id());
    shared
        .set_if_absent(&keys.lead, &owner, interval.mul_f64(0.9), COMMAND_DEADLINE)
        .await
}

/// Takes the lead for `keys` or keeps it, for `hold` after each renewal: whether this instance
/// steps now. A concurrency rule's gradient controller needs one leader for as long as it
/// lives (its probe and the service time it measured are its own); when the leader stops
/// renewing, another instance takes over once `hold` has passed, and probes first.
pub async fn keep_lead(
    shared: &impl SharedValues,
    keys: &SharedKeys,
    hold: Duration,
) -> Result<bool, StoreError> {
    let owner = instance_id();
    match shared.get(&keys.lead, COMMAND_DEADLINE).await? {
        Some(leader) if leader == owner => {
            shared
                .set(&keys.lead, owner, hold, COMMAND_DEADLINE)
                .await?;
            Ok(true)
        }
        Some(_) => Ok(false),
        None => {
            shared
                .set_if_absent(&keys.lead, owner, hold, COMMAND_DEADLINE)
                .await
        }
    }
}

/// This process among all instances: its pid is not enough (every container's is 1).
fn instance_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        format!(
            "pid {} instance {:016x}",
            std::process::id(),
            rand::random::<u64>()
        )
    })
}

/// The stored limit; `None` when there is none (or it is not a number, which only a hand
/// edit makes: the next step overwrites it).
pub async fn read_limit(
    shared: &impl SharedValues,
    keys: &SharedKeys,
) -> Result<Option<u32>, StoreError> {
    let stored = shared.get(&keys.value, COMMAND_DEADLINE).await?;
    Ok(stored.and_then(|text| text.trim().parse().ok()))
}

pub async fn write_limit(
    shared: &impl SharedValues,
    keys: &SharedKeys,
    limit: u32,
) -> Result<(), StoreError> {
    shared
        .set(&keys.value, &limit.to_string(), VALUE_TTL, COMMAND_DEADLINE)
        .await
}

fn signal_key(prefix: &str, name: &str) -> String {
    format!("{prefix}{{adaptive}}:signal:{name}")
}

/// Shares a pushed value of `name` for `fresh` (then it is gone, as stale).
pub async fn write_signal(
    shared: &impl SharedValues,
    name: &str,
    value: f64,
    fresh: Duration,
) -> Result<(), StoreError> {
    let key = signal_key(shared.key_prefix(), name);
    shared
        .set(&key, &value.to_string(), fresh, COMMAND_DEADLINE)
        .await
}

/// The value of `name` pushed to any instance within its freshness; `Err` says why there is
/// none.
pub async fn read_signal(shared: &impl SharedValues, name: &str) -> Reading {
    let stored = shared
        .get(&signal_key(shared.key_prefix(), name), COMMAND_DEADLINE)
        .await
        .map_err(|error| format!("cannot read the pushed signal {name} from Redis: {error}"))?;
    let Some(text) = stored else {
        return Err(format!(
            "nothing was pushed to /v1/signals/{name} (on any instance) within 2 intervals"
        ));
    };
    text.trim()
        .parse()
        .map_err(|_| format!("the pushed signal {name} holds '{text}' in Redis, not a number"))
}

#[cfg(test)]
mod tests {
    use super::SharedKeys;

    #[test]
    fn keys_carry_the_prefix_and_the_adaptive_tag_not_the_path() {
        let keys = SharedKeys::new("floodgate:", "edge", "edge.pool_checkout");
        assert!(keys.value.starts_with("floodgate:{adaptive}:"), "{keys:?}");
        assert_eq!(keys.value.len(), "floodgate:{adaptive}:".len() + 16);
        assert_eq!(keys.lead, format!("{}:lead", keys.value));
        assert!(!keys.value.contains("checkout"));
        assert_ne!(keys, SharedKeys::new("floodgate:", "edge.pool", "checkout"));
        assert_ne!(
            keys,
            SharedKeys::new("other:", "edge", "edge.pool_checkout")
        );
    }
}
