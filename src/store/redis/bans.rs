//! The Redis store's ban calls (`ban:` rules, `core::arithmetic::ban`): one `EVALSHA` of
//! `lua/ban.lua` per request, deciding its calls in order. The keys carry the domain's hash
//! tag whatever `--redis-hash-tag` says, so on a cluster a request's records share one slot.

use std::sync::OnceLock;

use redis::{Script, ScriptInvocation};

use super::keys::KeyLayout;
use super::script::Now;
use crate::core::arithmetic::ban::{BanAction, BanOutcome};
use crate::core::decision::bans::BanCall;

fn ban_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("lua/clock.lua"),
            "\n",
            include_str!("lua/ban.lua")
        ))
    })
}

/// Values the script answers per call.
const REPLY_FIELDS: usize = 3;

/// The script call deciding `calls` at `now`.
pub(super) fn ban_invocation(
    calls: &[BanCall],
    now: Now,
    keys: &KeyLayout,
) -> ScriptInvocation<'static> {
    let mut invocation = ban_script().prepare_invoke();
    for call in calls {
        invocation.key(keys.domain_key_for(&call.key));
    }
    match now {
        Now::RedisTime => invocation.arg("time").arg(0),
        Now::Given { now, extra_ttl_ms } => invocation.arg(now).arg(extra_ttl_ms),
    };
    for call in calls {
        let action = match call.action {
            BanAction::Check => "check",
            BanAction::Strike => "strike",
            BanAction::Lift => "lift",
        };
        invocation
            .arg(action)
            .arg(call.policy.after)
            .arg(call.policy.within)
            .arg(call.policy.ban_for)
            .arg(call.policy.max);
    }
    invocation
}

/// The script's reply as one outcome per call.
pub(super) fn parse_ban_reply(reply: &[i64], calls: usize) -> Result<Vec<BanOutcome>, String> {
    if reply.len() != calls * REPLY_FIELDS {
        return Err(format!(
            "the ban script answered {} values for {calls} calls, not {}",
            reply.len(),
            calls * REPLY_FIELDS
        ));
    }
    reply
        .chunks_exact(REPLY_FIELDS)
        .map(|fields| match fields {
            [banned_for, strikes, level] => Ok(BanOutcome {
                banned_for: *banned_for,
                strikes: u32::try_from(*strikes)
                    .map_err(|_| format!("the ban script answered {strikes} strikes"))?,
                level: u32::try_from(*level)
                    .map_err(|_| format!("the ban script answered level {level}"))?,
            }),
            _ => Err("the ban script's reply is cut short".to_owned()),
        })
        .collect()
}
