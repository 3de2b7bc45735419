//! The memory store's ban records (`ban:` rules, `core::arithmetic::ban`), behind one lock: a
//! ban call comes only with a refusal or a banning rule's request, rare beside decisions.
//! Bounded like the counters: past `max_keys` records, the expired ones are dropped, and a new
//! record that still does not fit is not kept (the key goes unbanned rather than a request
//! failing).

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::core::arithmetic::ban::{self, BanOutcome, BanState};
use crate::core::decision::bans::BanCall;
use crate::core::ground::time::Micros;

#[derive(Default)]
pub(super) struct BanTable {
    records: Mutex<HashMap<Vec<u8>, (BanState, Micros)>>,
}

impl BanTable {
    /// Decides `calls` in order at `now`.
    pub(super) fn decide(
        &self,
        calls: &[BanCall],
        now: Micros,
        max_keys: usize,
    ) -> Vec<BanOutcome> {
        let mut records = self.records.lock();
        calls
            .iter()
            .map(|call| {
                let state = records
                    .get(&call.key)
                    .filter(|(_, expires_at)| *expires_at > now)
                    .map(|(state, _)| *state);
                let (outcome, next) = ban::decide(&call.policy, state, now, call.action);
                match next {
                    Some(record) => {
                        if !records.contains_key(&call.key) && records.len() >= max_keys {
                            records.retain(|_, (_, expires_at)| *expires_at > now);
                        }
                        if records.contains_key(&call.key) || records.len() < max_keys {
                            records.insert(call.key.clone(), record);
                        }
                    }
                    None => {
                        records.remove(&call.key);
                    }
                }
                outcome
            })
            .collect()
    }

    /// Forgets the expired records: how many.
    pub(super) fn sweep(&self, now: Micros) -> usize {
        let mut records = self.records.lock();
        let before = records.len();
        records.retain(|_, (_, expires_at)| *expires_at > now);
        before - records.len()
    }
}
