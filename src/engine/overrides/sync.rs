//! Overrides shared by every instance through Redis, when Redis is the store (`--store redis`,
//! or beneath `--store hybrid`).
//!
//! One hash, `<prefix>overrides`: a field per override (its id), the value the
//! [`OverrideRecord`] as JSON. An instance writes there first (an override it cannot share is
//! refused, so instances never disagree for long) and every instance reads the whole hash every
//! [`POLL_INTERVAL`], replacing its own set: an override set or deleted on one instance applies
//! on all within that interval. Expiry needs no coordination: each record carries its end,
//! decisions ignore it past that instant, and pollers delete expired fields. Each write also
//! pushes the hash's TTL to [`MAX_OVERRIDE_TTL`] ahead, so a hash that no instance reads any more
//! still disappears.
//!
//! While Redis does not answer, an instance keeps the overrides it last read (each still
//! expires on time) and says so once in the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::core::policy::adjustment::MAX_OVERRIDE_TTL;
use crate::engine::adaptive::shared::SharesLimits;
use crate::engine::adjustment_set::LiveAdjustments;
use crate::engine::adjustment_set::OverrideRecord;
use crate::engine::limiter::Limiter;
use crate::engine::shutdown::{self, Shutdown};
use crate::store::redis::RedisStore;
use crate::store::{SharedValues, StoreError};

/// How often each instance reads the shared overrides.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The deadline of one call (or `--redis-timeout-ms` if longer: `RedisStore::command`): beside
/// the decisions, not on their path.
const CALL_DEADLINE: Duration = Duration::from_secs(1);

/// What the shared overrides need of a limiter: the Redis they live in, the adjustments they
/// are read into.
pub trait OverrideHost: Send + Sync {
    fn redis(&self) -> Option<&RedisStore>;
    fn adjustments(&self) -> &Arc<LiveAdjustments>;
}

impl<S: SharesLimits> OverrideHost for Limiter<S> {
    fn redis(&self) -> Option<&RedisStore> {
        self.store().shared_limits()
    }

    fn adjustments(&self) -> &Arc<LiveAdjustments> {
        Limiter::adjustments(self)
    }
}

/// The overrides of every instance that shares this Redis and key prefix.
pub struct SharedOverrides {
    limiter: Arc<dyn OverrideHost>,
    key: String,
    /// Whether the last poll failed: log the change only.
    failing: AtomicBool,
    /// Counts this instance's writes. A poll whose read may predate a write (the count moved
    /// while it read) is dropped, or it would undo for a moment an override just set here.
    writes: Mutex<u64>,
}

impl SharedOverrides {
    /// `None` when the limiter's store shares nothing through Redis.
    pub fn new(limiter: Arc<dyn OverrideHost>) -> Option<Self> {
        let key = format!("{}overrides", limiter.redis()?.key_prefix());
        Some(Self {
            limiter,
            key,
            failing: AtomicBool::new(false),
            writes: Mutex::new(0),
        })
    }

    fn redis(&self) -> Result<&RedisStore, StoreError> {
        self.limiter.redis().ok_or_else(|| StoreError::Unavailable {
            backend: "redis",
            reason: "the store shares nothing through Redis".to_owned(),
        })
    }

    /// Stores `record`, and removes `replaced` (the rule's earlier override) if given.
    pub async fn put(
        &self,
        record: &OverrideRecord,
        replaced: Option<&str>,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(record).map_err(|error| StoreError::Unavailable {
            backend: "redis",
            reason: format!("cannot encode the override: {error}"),
        })?;
        let horizon = MAX_OVERRIDE_TTL + Duration::from_secs(60);
        self.redis()?
            .put_field(&self.key, &record.id, &json, horizon, CALL_DEADLINE)
            .await?;
        if let Some(replaced) = replaced.filter(|replaced| *replaced != record.id) {
            self.remove(replaced).await?;
        }
        *self.writes.lock() += 1;
        Ok(())
    }

    /// Deletes override `id`; whether it was there.
    pub async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let removed = self
            .redis()?
            .remove_fields(&self.key, &[id.to_owned()], CALL_DEADLINE)
            .await?;
        *self.writes.lock() += 1;
        Ok(removed > 0)
    }

    /// Every override in Redis not yet expired; expired ones are deleted on the way.
    pub async fn load(&self) -> Result<Vec<OverrideRecord>, StoreError> {
        let fields = self.redis()?.fields(&self.key, CALL_DEADLINE).await?;
        let now = self.limiter.adjustments().now_unix_ms();
        let mut records = Vec::with_capacity(fields.len());
        let mut expired = Vec::new();
        for (id, json) in fields {
            match serde_json::from_str::<OverrideRecord>(&json) {
                Ok(record) if record.expires_at_unix_ms <= now => expired.push(id),
                Ok(record) => records.push(record),
                Err(error) => {
                    // Another version's format, or a hand edit: not ours to delete.
                    tracing::warn!(key = %self.key, field = %id, "ignoring an override that cannot be read: {error}");
                }
            }
        }
        self.redis()?
            .remove_fields(&self.key, &expired, CALL_DEADLINE)
            .await?;
        Ok(records)
    }

    /// Reads the shared set into the limiter's adjustments.
    pub async fn poll(&self) {
        let writes_before = *self.writes.lock();
        match self.load().await {
            Ok(records) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!(key = %self.key, "shared overrides read from Redis again");
                }
                // Held while replacing: a write counted after this applies after it.
                let writes = self.writes.lock();
                if *writes == writes_before {
                    self.limiter.adjustments().replace_overrides(records);
                }
            }
            Err(error) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        key = %self.key,
                        "cannot read the shared overrides; the last ones read stay in force \
                         until they expire: {error}"
                    );
                }
            }
        }
    }

    /// Polls until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown) {
        shutdown::every(POLL_INTERVAL, shutdown, || {
            let shared = Arc::clone(&self);
            async move { shared.poll().await }
        })
        .await;
    }
}
