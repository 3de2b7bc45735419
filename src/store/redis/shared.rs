//! The shared values (`store::SharedValues`) in Redis: plain strings with a TTL (`SET … PX`,
//! `SET … NX PX`, `GET`) and one hash per map (`HSET`, `PEXPIRE`, `HDEL`, `HGETALL`), through
//! the store's connection and outside the decisions' circuit breaker.

use std::time::Duration;

use super::RedisStore;
use crate::store::{SharedValues, StoreError};

/// Milliseconds for `PX`/`PEXPIRE`: at least 1 (Redis refuses 0).
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

impl SharedValues for RedisStore {
    fn key_prefix(&self) -> &str {
        RedisStore::key_prefix(self)
    }

    async fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> Result<bool, StoreError> {
        let mut command = redis::cmd("SET");
        command
            .arg(key)
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        let answer: Option<String> = self.command(&command, deadline).await?;
        Ok(answer.is_some())
    }

    async fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> Result<(), StoreError> {
        let mut command = redis::cmd("SET");
        command.arg(key).arg(value).arg("PX").arg(millis(ttl));
        self.command::<()>(&command, deadline).await
    }

    async fn get(&self, key: &str, deadline: Duration) -> Result<Option<String>, StoreError> {
        let mut command = redis::cmd("GET");
        command.arg(key);
        self.command(&command, deadline).await
    }

    async fn put_field(
        &self,
        key: &str,
        field: &str,
        value: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> Result<(), StoreError> {
        self.command::<i64>(redis::cmd("HSET").arg(key).arg(field).arg(value), deadline)
            .await?;
        self.command::<i64>(redis::cmd("PEXPIRE").arg(key).arg(millis(ttl)), deadline)
            .await?;
        Ok(())
    }

    async fn remove_fields(
        &self,
        key: &str,
        fields: &[String],
        deadline: Duration,
    ) -> Result<u64, StoreError> {
        if fields.is_empty() {
            return Ok(0);
        }
        let mut command = redis::cmd("HDEL");
        command.arg(key).arg(fields);
        let removed: i64 = self.command(&command, deadline).await?;
        Ok(u64::try_from(removed).unwrap_or(0))
    }

    async fn fields(
        &self,
        key: &str,
        deadline: Duration,
    ) -> Result<Vec<(String, String)>, StoreError> {
        self.command(redis::cmd("HGETALL").arg(key), deadline).await
    }
}
