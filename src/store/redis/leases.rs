//! The Redis store's lease calls (concurrency rules, `core::arithmetic::lease`): one `EVALSHA` of
//! `lua/leases.lua` per request, which reads each counter's sorted set once, decides every
//! call as the core does and writes all of them or none. The keys carry the domain's hash tag
//! whatever `--redis-hash-tag` says, so on a cluster a request's leases share one slot.

use std::sync::OnceLock;

use redis::{Script, ScriptInvocation};

use super::keys::KeyLayout;
use super::script::Now;
use crate::core::arithmetic::lease::{LeaseAction, LeaseCall, LeaseOutcome};

fn lease_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("lua/clock.lua"),
            "\n",
            include_str!("lua/leases.lua")
        ))
    })
}

/// Values the script answers per call.
const REPLY_FIELDS: usize = 6;

/// The script call deciding `calls` at `now`.
pub(super) fn lease_invocation(
    calls: &[LeaseCall],
    now: Now,
    keys: &KeyLayout,
) -> ScriptInvocation<'static> {
    let mut distinct: Vec<&[u8]> = Vec::new();
    let mut key_indexes = Vec::with_capacity(calls.len());
    for call in calls {
        let index = match distinct.iter().position(|key| *key == call.key.as_slice()) {
            Some(at) => at,
            None => {
                distinct.push(&call.key);
                distinct.len() - 1
            }
        };
        key_indexes.push(index + 1);
    }
    let mut invocation = lease_script().prepare_invoke();
    for identity in &distinct {
        invocation.key(keys.domain_key_for(identity));
    }
    match now {
        Now::RedisTime => invocation.arg("time").arg(0),
        Now::Given { now, extra_ttl_ms } => invocation.arg(now).arg(extra_ttl_ms),
    };
    for (call, key_index) in calls.iter().zip(key_indexes) {
        let action = match call.action {
            LeaseAction::Acquire => "acquire",
            LeaseAction::Release => "release",
        };
        invocation
            .arg(key_index)
            .arg(action)
            .arg(call.lease_id.as_str())
            .arg(call.max_in_flight)
            .arg(call.reserve)
            .arg(call.lease_ttl)
            .arg(call.shed_above)
            .arg(call.draw);
    }
    invocation
}

/// The script's reply as one outcome per call.
pub(super) fn parse_lease_reply(reply: &[i64], calls: usize) -> Result<Vec<LeaseOutcome>, String> {
    if reply.len() != calls * REPLY_FIELDS {
        return Err(format!(
            "the lease script answered {} values for {calls} calls, not {}",
            reply.len(),
            calls * REPLY_FIELDS
        ));
    }
    reply
        .chunks_exact(REPLY_FIELDS)
        .map(|fields| match fields {
            [admitted, in_flight, retry_after, released, held_for, shed] => Ok(LeaseOutcome {
                admitted: *admitted == 1,
                in_flight: u32::try_from(*in_flight)
                    .map_err(|_| format!("the lease script answered {in_flight} in flight"))?,
                retry_after: *retry_after,
                released: *released == 1,
                held_for: *held_for,
                shed: *shed == 1,
            }),
            _ => Err("the lease script's reply is cut short".to_owned()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_odd_reply_is_an_error() {
        assert!(parse_lease_reply(&[1, 0, 0, 0, 0], 1).is_err());
        assert!(parse_lease_reply(&[1, -1, 0, 0, 0, 0], 1).is_err());
        let outcomes = parse_lease_reply(&[0, 3, 250, 0, 0, 1, 1, 2, 0, 1, 4200, 0], 2);
        assert_eq!(
            outcomes.map(|o| o
                .iter()
                .map(|o| (o.admitted, o.in_flight, o.held_for))
                .collect::<Vec<_>>()),
            Ok(vec![(false, 3, 0), (true, 2, 4200)])
        );
    }
}
