//! The Redis store's Limitador-format counters (`store::held_windows`): one `EVALSHA` of
//! `lua/held_window.lua` per call, which reads every counter of the call, decides as
//! `core::arithmetic::held_window` does and writes all of them or none. A call's keys carry
//! its namespace's hash tag, so on a cluster they share one slot.

use std::sync::OnceLock;

use async_trait::async_trait;
use redis::{Script, ScriptInvocation};

use super::errors::unavailable;
use super::script::Now;
use super::RedisStore;
use crate::core::arithmetic::held_window::Admission;
use crate::core::decision::key::lease_key;
use crate::store::held_windows::{
    CounterSpec, HeldWindows, HoldRequest, LiveCounter, WindowsDecided,
};
use crate::store::StoreError;

fn held_window_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("lua/clock.lua"),
            "\n",
            include_str!("lua/held_window.lua")
        ))
    })
}

/// The rule path Limitador-format counters' identities carry, apart from every rule's.
const RULE_PATH: &str = "limitador:held_window";

/// The namespace a counter's key (`engine::limitador::limits_file`, a JSON array) starts with.
fn namespace_of(key: &str) -> String {
    let rest = key.strip_prefix('[').unwrap_or(key);
    serde_json::Deserializer::from_str(rest)
        .into_iter::<String>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_default()
}

impl RedisStore {
    pub(super) fn held_window_key(&self, key: &str) -> String {
        let mut identity = lease_key(&namespace_of(key), RULE_PATH, &[], &[]);
        identity.extend_from_slice(key.as_bytes());
        self.keys.domain_key_for(&identity)
    }

    /// The script call of `operation` on `counters`.
    fn held_window_invocation(
        &self,
        operation: &str,
        counters: &[CounterSpec],
        (amount, hold): (u64, Option<&HoldRequest<'_>>),
    ) -> Result<ScriptInvocation<'static>, StoreError> {
        let mut invocation = held_window_script().prepare_invoke();
        for counter in counters {
            invocation.key(self.held_window_key(&counter.key));
        }
        match self.now()? {
            Now::RedisTime => invocation.arg("time").arg(0),
            Now::Given { now, extra_ttl_ms } => invocation.arg(now).arg(extra_ttl_ms),
        };
        invocation
            .arg(operation)
            .arg(amount)
            .arg(hold.map_or(0, |hold| hold.hold_amount))
            .arg(hold.map_or(0, |hold| hold.ttl))
            .arg(hold.map_or("", |hold| hold.id));
        for counter in counters {
            invocation
                .arg(counter.max_value)
                .arg(counter.window)
                .arg(counter.key.as_str());
        }
        Ok(invocation)
    }

    /// One call of the script, behind the circuit breaker as every decision is: a Redis that
    /// keeps failing is not called (the caller sees `Unavailable` at once) until a probe
    /// succeeds.
    async fn held_window_call(
        &self,
        operation: &str,
        counters: &[CounterSpec],
        arguments: (u64, Option<&HoldRequest<'_>>),
    ) -> Result<Vec<i64>, StoreError> {
        let invocation = self.held_window_invocation(operation, counters, arguments)?;
        self.guarded(self.run(&invocation, self.timeout)).await
    }
}

/// The script's decision: limited_by, then remaining and window ttl per counter.
fn parse_decided(reply: &[i64], counters: usize) -> Result<WindowsDecided, StoreError> {
    let (limited_by, fields) = reply
        .split_first()
        .ok_or_else(|| unavailable("the held-window script answered nothing".to_owned()))?;
    if fields.len() != counters * 2 || fields.iter().any(|field| *field < 0) {
        return Err(unavailable(format!(
            "the held-window script answered {reply:?} for {counters} counters"
        )));
    }
    let unsigned = |field: &i64| u64::try_from(*field).unwrap_or_default();
    let limited_by = usize::try_from(*limited_by)
        .ok()
        .and_then(|index| index.checked_sub(1));
    Ok(WindowsDecided {
        admission: Admission {
            limited_by,
            remaining: fields.iter().step_by(2).map(unsigned).collect(),
        },
        window_ttls: fields.iter().skip(1).step_by(2).map(unsigned).collect(),
    })
}

#[async_trait]
impl HeldWindows for RedisStore {
    async fn check(
        &self,
        counters: &[CounterSpec],
        delta: u64,
        apply: bool,
    ) -> Result<WindowsDecided, StoreError> {
        let operation = if apply { "check_apply" } else { "check" };
        let reply = self
            .held_window_call(operation, counters, (delta, None))
            .await?;
        parse_decided(&reply, counters.len())
    }

    async fn add(&self, counters: &[CounterSpec], delta: u64) -> Result<(), StoreError> {
        self.held_window_call("add", counters, (delta, None))
            .await
            .map(drop)
    }

    async fn reserve(
        &self,
        counters: &[CounterSpec],
        hold: HoldRequest<'_>,
    ) -> Result<WindowsDecided, StoreError> {
        let reply = self
            .held_window_call("reserve", counters, (hold.check_amount, Some(&hold)))
            .await?;
        parse_decided(&reply, counters.len())
    }

    async fn release(&self, counters: &[CounterSpec], id: &str) -> Result<bool, StoreError> {
        let hold = HoldRequest {
            id,
            check_amount: 0,
            hold_amount: 0,
            ttl: 0,
        };
        let reply = self
            .held_window_call("release", counters, (0, Some(&hold)))
            .await?;
        Ok(reply.first() == Some(&1))
    }

    async fn live_counters(&self, prefix: &str) -> Result<Vec<LiveCounter>, StoreError> {
        self.guarded(self.list_held_windows(prefix)).await
    }
}
