//! Who is being limited, per rule (`--heavy-hitters`): each decided descriptor's value counted
//! in its rule's bounded top list (`core::arithmetic::heavy_hitters`, at most
//! `HeavyHitters::BYTES` per rule that saw traffic), as admitted or refused. Fed by the
//! limiter's observer after each answer; read by the status page (`server::debug`). Per
//! instance: each floodgate shows the hits it decided.
//!
//! A value is identified by a hash of its entries' values under a key drawn at start, so the
//! same client is one line within this process; only a rule that says `heavy_hitters: raw`
//! keeps the values themselves.

use std::collections::HashMap;
use std::hash::Hasher as _;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use siphasher::sip::SipHasher13;

use crate::core::arithmetic::heavy_hitters::{HeavyHitters, Hitter, HitterValues, HitterWindow};
use crate::core::decision::plan::{DescriptorPlan, Plan};
use crate::core::decision::response::Response;
use crate::core::decision::status::Code;
use crate::core::ground::time::{Clock, Micros, SystemClock};
use crate::core::policy::request::{Descriptor, Request};

/// Every rule's heavy hitters, by rule path.
pub struct HitterBoard {
    rules: RwLock<HashMap<String, Mutex<HeavyHitters>>>,
    hash_keys: (u64, u64),
    clock: Arc<dyn Clock>,
}

/// One rule's view over a window.
#[derive(Debug, Clone)]
pub struct RuleHitters {
    pub admitted: u64,
    pub refused: u64,
    pub top: Vec<Hitter>,
    /// Each of the last ten minutes, oldest first: (admitted, refused).
    pub per_minute: Vec<(u64, u64)>,
}

impl Default for HitterBoard {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl HitterBoard {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            rules: RwLock::new(HashMap::new()),
            hash_keys: (rand::random(), rand::random()),
            clock,
        }
    }

    /// Counts each descriptor a rule decided in `response`.
    pub fn record(&self, request: &Request, plan: &Plan<'_>, response: &Response) {
        let now = self.clock.now();
        for (index, planned) in plan.descriptors.iter().enumerate() {
            let DescriptorPlan::Limited { limit, .. } = planned else {
                continue;
            };
            let (Some(rule), Some(descriptor), Some(status)) = (
                limit.rule(),
                request.descriptors.get(index),
                response.statuses.get(index),
            ) else {
                continue;
            };
            let admitted = status.code != Code::OverLimit;
            self.count(&rule.path, rule.hitter_values, descriptor, now, admitted);
        }
    }

    fn count(
        &self,
        path: &str,
        values: HitterValues,
        descriptor: &Descriptor,
        now: Micros,
        admitted: bool,
    ) {
        let id = self.id_of(descriptor);
        let mut label = String::new();
        if values == HitterValues::Raw {
            label = value_text(descriptor);
        }
        if let Some(hitters) = self.rules.read().get(path) {
            hitters.lock().record(now, id, &label, admitted);
            return;
        }
        self.rules
            .write()
            .entry(path.to_owned())
            .or_default()
            .lock()
            .record(now, id, &label, admitted);
    }

    fn id_of(&self, descriptor: &Descriptor) -> u64 {
        let mut hasher = SipHasher13::new_with_keys(self.hash_keys.0, self.hash_keys.1);
        for entry in &descriptor.entries {
            hasher.write(entry.value.as_bytes());
            hasher.write_u8(0xFF);
        }
        hasher.finish()
    }

    /// `path`'s hits over `window`, with its top values (`None`: no hit recorded yet).
    pub fn rule(&self, path: &str, window: HitterWindow) -> Option<RuleHitters> {
        let now = self.clock.now();
        let rules = self.rules.read();
        let hitters = rules.get(path)?.lock();
        let (admitted, refused) = hitters.totals(now, window);
        Some(RuleHitters {
            admitted,
            refused,
            top: hitters.top(now, window),
            per_minute: hitters.per_minute(now).to_vec(),
        })
    }

    /// Bytes the top lists hold now.
    pub fn bytes(&self) -> usize {
        self.rules.read().len() * HeavyHitters::BYTES
    }
}

/// The descriptor's values joined by `,` (as `key=value` would show them without the keys).
fn value_text(descriptor: &Descriptor) -> String {
    let mut text = String::new();
    for (index, entry) in descriptor.entries.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str(&entry.value);
    }
    text
}

/// How a hitter is shown: its value (raw) or `#` and its hash.
pub fn shown(hitter: &Hitter) -> String {
    if hitter.label.is_empty() {
        format!("#{:016x}", hitter.id)
    } else {
        hitter.label.clone()
    }
}
