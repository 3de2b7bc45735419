//! The memory store's lease counters (concurrency rules, `core::arithmetic::lease`): the slots of each
//! lease id, with their expiries, per counter, behind one lock, since a lease call is rare beside a rate-limit decision
//! and touches one or two counters. Bounded like the counters: a new lease counter past
//! `max_keys` is refused ([`StoreError::Full`]) after the expired ones are dropped.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::super::StoreError;
use crate::core::arithmetic::lease::{self, LeaseCall, LeaseOutcome, Leases};
use crate::core::ground::time::Micros;

#[derive(Default)]
pub(super) struct LeaseTable {
    counters: Mutex<HashMap<Vec<u8>, Leases>>,
}

impl LeaseTable {
    /// Decides `calls` at `now`, all or nothing (`lease::settle`).
    pub(super) fn decide(
        &self,
        calls: &[LeaseCall],
        now: Micros,
        max_keys: usize,
    ) -> Result<Vec<LeaseOutcome>, StoreError> {
        let mut counters = self.counters.lock();
        let new_keys = calls
            .iter()
            .filter(|call| !counters.contains_key(&call.key))
            .count();
        if new_keys > 0 && counters.len() + new_keys > max_keys {
            drop_expired(&mut counters, now);
            if counters.len() + new_keys > max_keys {
                return Err(StoreError::Full { max_keys });
            }
        }
        let (settled, next) = lease::settle(calls, now, |key| {
            counters.get(key).cloned().unwrap_or_default()
        });
        for (key, leases) in next {
            if leases.is_empty() {
                counters.remove(&key);
            } else {
                counters.insert(key, leases);
            }
        }
        Ok(settled.outcomes)
    }

    /// Forgets the counters whose every lease has expired: how many.
    pub(super) fn sweep(&self, now: Micros) -> usize {
        drop_expired(&mut self.counters.lock(), now)
    }

    pub(super) fn len(&self) -> usize {
        self.counters.lock().len()
    }
}

fn drop_expired(counters: &mut HashMap<Vec<u8>, Leases>, now: Micros) -> usize {
    let before = counters.len();
    counters.retain(|_, leases| leases.latest_expiry().is_some_and(|at| at > now));
    before - counters.len()
}
