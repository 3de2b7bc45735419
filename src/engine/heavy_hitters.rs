//! Who is being limited, per rule (`--heavy-hitters`): each decided descriptor's value counted
//! in its rule's bounded top list (`core::arithmetic::heavy_hitters`, at most
//! `HeavyHitters::BYTES` per rule that saw traffic), as admitted or refused. Fed by the
//! limiter's observer after each answer; read by the status page (`server::debug`). Each
//! instance counts the hits it decided; when the store is shared through Redis, the
//! summaries the others publish (`engine::heavy_hitters_sync`) are merged in when read
//! (`core::arithmetic::heavy_hitters::merge`).
//!
//! A value is identified by a hash of its entries' values under a key drawn at start (or, when
//! shared, the key every instance adopts from Redis), so the same client is one line; only a
//! rule that says `heavy_hitters: raw` keeps the values themselves.

use std::collections::{HashMap, HashSet};
use std::hash::Hasher as _;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use siphasher::sip::SipHasher13;

use crate::core::arithmetic::ban::BanOutcome;
use crate::core::arithmetic::heavy_hitters::merge::{self as hitter_merge, BucketSummary};
use crate::core::arithmetic::heavy_hitters::{HeavyHitters, Hitter, HitterValues, HitterWindow};
use crate::core::decision::plan::{DescriptorPlan, Plan};
use crate::core::decision::response::Response;
use crate::core::decision::status::Code;
use crate::core::ground::time::{Clock, Micros, SystemClock};
use crate::core::policy::request::{Descriptor, Request};
use crate::core::policy::rules::{Rule, RuleSet};

/// Banned values listed per rule: the ones whose bans end last.
pub const BANS_SHOWN: usize = 20;

/// Every rule's heavy hitters, by rule path.
pub struct HitterBoard {
    counted: RwLock<Counted>,
    /// Per rule path, the bans in force this instance found or started.
    bans: Mutex<HashMap<String, Vec<BannedValue>>>,
    peers: RwLock<PeerView>,
    clock: Arc<dyn Clock>,
}

/// A value its rule refuses outright until `until` (on the board's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BannedValue {
    /// As a heavy hitter's: the value (raw) or empty (hashed).
    pub label: String,
    pub id: u64,
    pub until: Micros,
    /// Bans started so far for this value (`core::arithmetic::ban`).
    pub level: u32,
}

impl BannedValue {
    /// How the value is shown: as sent (raw) or `#` and its hash.
    pub fn shown(&self) -> String {
        shown_value(&self.label, self.id)
    }
}

/// What this instance counted, and the key its values are hashed with.
struct Counted {
    hash_keys: (u64, u64),
    rules: HashMap<String, Mutex<HeavyHitters>>,
}

/// What the other instances that share the store published, as last read.
#[derive(Debug, Clone, Default)]
pub struct PeerView {
    pub sharing: Sharing,
    /// Their summaries of the last ten minutes, by rule path.
    pub summaries: HashMap<String, Vec<BucketSummary>>,
    /// Other instances whose summaries are merged.
    pub instances: usize,
}

/// Whether the heavy hitters shown are this instance's or every instance's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Sharing {
    /// The store is this process's: each instance shows its own.
    #[default]
    Local,
    /// Merged with every instance's that shares the store's Redis.
    Shared,
    /// The store is shared, but Redis did not answer the last sync: this instance's only.
    Unreachable(String),
}

impl Sharing {
    pub fn name(&self) -> &'static str {
        match self {
            Sharing::Local => "instance",
            Sharing::Shared => "all instances",
            Sharing::Unreachable(_) => "instance (Redis unreachable)",
        }
    }
}

/// One rule's view over a window.
#[derive(Debug, Clone)]
pub struct RuleHitters {
    pub admitted: u64,
    pub refused: u64,
    pub top: Vec<Hitter>,
    /// Each of the last ten minutes, oldest first: (admitted, refused).
    pub per_minute: Vec<(u64, u64)>,
    /// No value's hits exceed what `top` shows by more (`core::arithmetic::heavy_hitters::merge`).
    pub error_bound: u64,
}

impl Default for HitterBoard {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl HitterBoard {
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            counted: RwLock::new(Counted {
                hash_keys: (rand::random(), rand::random()),
                rules: HashMap::new(),
            }),
            bans: Mutex::new(HashMap::new()),
            peers: RwLock::new(PeerView::default()),
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
        let label = label_of(values, descriptor);
        {
            let counted = self.counted.read();
            let id = id_of(counted.hash_keys, descriptor);
            if let Some(hitters) = counted.rules.get(path) {
                hitters.lock().record(now, id, &label, admitted);
                return;
            }
        }
        let mut counted = self.counted.write();
        let id = id_of(counted.hash_keys, descriptor);
        counted
            .rules
            .entry(path.to_owned())
            .or_default()
            .lock()
            .record(now, id, &label, admitted);
    }

    /// `path`'s hits over `window`, this instance's and the peers' last read, with its top
    /// values (`None`: no hit recorded yet).
    pub fn rule(&self, path: &str, window: HitterWindow) -> Option<RuleHitters> {
        let now = self.clock.now();
        let mut summaries = self
            .counted
            .read()
            .rules
            .get(path)
            .map(|hitters| hitters.lock().summaries(now))
            .unwrap_or_default();
        if let Some(theirs) = self.peers.read().summaries.get(path) {
            summaries.extend(theirs.iter().cloned());
        }
        if summaries.is_empty() {
            return None;
        }
        let merged = hitter_merge::merge(&summaries, now, window);
        Some(RuleHitters {
            admitted: merged.admitted,
            refused: merged.refused,
            top: merged.top,
            per_minute: hitter_merge::per_minute(&summaries, now).to_vec(),
            error_bound: merged.error_bound,
        })
    }

    /// `descriptor`'s ban under `rule`, as a ban call found it: listed while in force (the
    /// [`BANS_SHOWN`] ending last per rule), dropped when `outcome` says none is.
    pub fn banned(&self, rule: &Rule, descriptor: &Descriptor, outcome: &BanOutcome) {
        let now = self.clock.now();
        let id = id_of(self.counted.read().hash_keys, descriptor);
        let mut bans = self.bans.lock();
        let listed = bans.entry(rule.path.clone()).or_default();
        listed.retain(|ban| ban.id != id && ban.until > now);
        if outcome.banned_for <= 0 {
            return;
        }
        let label = label_of(rule.hitter_values, descriptor);
        listed.push(BannedValue {
            label,
            id,
            until: now.saturating_add(outcome.banned_for),
            level: outcome.level,
        });
        listed.sort_by(|a, b| b.until.cmp(&a.until).then(a.id.cmp(&b.id)));
        listed.truncate(BANS_SHOWN);
    }

    /// `descriptor`'s ban under the rule at `path` was lifted (its counters reset).
    pub fn lifted(&self, path: &str, descriptor: &Descriptor) {
        let id = id_of(self.counted.read().hash_keys, descriptor);
        if let Some(listed) = self.bans.lock().get_mut(path) {
            listed.retain(|ban| ban.id != id);
        }
    }

    /// The bans in force under the rule at `path`, ending last first.
    pub fn bans(&self, path: &str) -> Vec<BannedValue> {
        let now = self.clock.now();
        let bans = self.bans.lock();
        let mut listed: Vec<BannedValue> = bans.get(path).cloned().unwrap_or_default();
        listed.retain(|ban| ban.until > now);
        listed
    }

    /// Each rule's summaries of the last ten minutes, this instance's only, those for which
    /// `wanted(rule path, minute, hits)` holds: what it publishes.
    pub fn summaries_where(
        &self,
        mut wanted: impl FnMut(&str, i64, u64) -> bool,
    ) -> Vec<(String, Vec<BucketSummary>)> {
        let now = self.clock.now();
        self.counted
            .read()
            .rules
            .iter()
            .map(|(path, hitters)| {
                let summaries = hitters
                    .lock()
                    .summaries_where(now, |minute, hits| wanted(path, minute, hits));
                (path.clone(), summaries)
            })
            .filter(|(_, summaries)| !summaries.is_empty())
            .collect()
    }

    /// Hashes values under `keys` from now on: whether they changed, and then what was counted
    /// under the former keys is forgotten (its ids would never match the new ones).
    pub fn adopt_hash_keys(&self, keys: (u64, u64)) -> bool {
        let mut counted = self.counted.write();
        if counted.hash_keys == keys {
            return false;
        }
        counted.hash_keys = keys;
        counted.rules.clear();
        self.bans.lock().clear();
        true
    }

    /// Forgets the rules that are not in `rules`, their hits and bans: a reload keeps a rule's
    /// hits by its path, so without this every path a reload removed would hold its top lists
    /// (`HeavyHitters::BYTES`) and be published to the other instances for as long as the
    /// process runs. A rule removed and added again starts afresh.
    pub fn follow_rules(&self, rules: &RuleSet) {
        if self.counted.read().rules.is_empty() && self.bans.lock().is_empty() {
            return;
        }
        let in_force: HashSet<&str> = rules.all_rules().map(|rule| rule.path.as_str()).collect();
        self.counted
            .write()
            .rules
            .retain(|path, _| in_force.contains(path.as_str()));
        self.bans
            .lock()
            .retain(|path, _| in_force.contains(path.as_str()));
    }

    /// What the other instances published, as last read (or why it could not be).
    pub fn set_peers(&self, view: PeerView) {
        *self.peers.write() = view;
    }

    /// Whose hits are shown, and how many other instances' are merged in.
    pub fn sharing(&self) -> (Sharing, usize) {
        let peers = self.peers.read();
        (peers.sharing.clone(), peers.instances)
    }

    /// The clock the hits are counted on.
    pub fn now(&self) -> Micros {
        self.clock.now()
    }

    /// Bytes the top lists hold now.
    pub fn bytes(&self) -> usize {
        self.counted.read().rules.len() * HeavyHitters::BYTES
    }
}

fn id_of(keys: (u64, u64), descriptor: &Descriptor) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(keys.0, keys.1);
    for entry in &descriptor.entries {
        hasher.write(entry.value.as_bytes());
        hasher.write_u8(0xFF);
    }
    hasher.finish()
}

/// What a value is shown by besides its hash: the values themselves when its rule keeps them
/// raw, else nothing.
fn label_of(values: HitterValues, descriptor: &Descriptor) -> String {
    match values {
        HitterValues::Raw => value_text(descriptor),
        HitterValues::Hashed => String::new(),
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
    shown_value(&hitter.label, hitter.id)
}

fn shown_value(label: &str, id: u64) -> String {
    if label.is_empty() {
        format!("#{id:016x}")
    } else {
        label.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::config::load_valid;
    use crate::core::policy::request::Entry;
    use crate::engine::test_rules::{memory_store, rule, SHOP, SHOP_WITHOUT_USER};

    const FIVE_MINUTE_BAN: BanOutcome = BanOutcome {
        banned_for: 300_000_000,
        strikes: 2,
        level: 1,
    };

    #[test]
    fn a_reload_forgets_the_hits_and_bans_of_the_rules_it_removed_and_keeps_the_others() {
        let before = load_valid("shop.yaml", SHOP);
        let (user, api_key) = (rule(&before, "user"), rule(&before, "api_key"));
        let board = HitterBoard::default();
        let alice = Descriptor::new(vec![Entry::new("user", "alice")]);
        let key = Descriptor::new(vec![Entry::new("api_key", "k1")]);
        board.count(&user.path, user.hitter_values, &alice, board.now(), false);
        board.count(
            &api_key.path,
            api_key.hitter_values,
            &key,
            board.now(),
            true,
        );
        board.banned(user, &alice, &FIVE_MINUTE_BAN);
        assert_eq!(board.bytes(), 2 * HeavyHitters::BYTES);

        board.follow_rules(&load_valid("shop.yaml", SHOP_WITHOUT_USER));

        assert!(board.rule(&user.path, HitterWindow::LastMinute).is_none());
        assert!(board.bans(&user.path).is_empty());
        let kept = board.rule(&api_key.path, HitterWindow::LastMinute);
        assert_eq!(kept.map(|hitters| hitters.admitted), Some(1));
        assert_eq!(board.bytes(), HeavyHitters::BYTES);
    }

    #[test]
    fn the_limiter_forgets_a_removed_rules_hits_when_its_rules_are_replaced() {
        use crate::engine::limiter::{Limiter, LimiterSettings};
        use crate::telemetry::DecisionTelemetry;

        let rules = load_valid("shop.yaml", SHOP);
        let user = rule(&rules, "user").clone();
        let limiter = Limiter::new(rules, memory_store(), LimiterSettings::default())
            .with_telemetry(DecisionTelemetry {
                heavy_hitters: true,
                ..DecisionTelemetry::default()
            });
        let board = limiter
            .heavy_hitters()
            .cloned()
            .unwrap_or_else(|| panic!("--heavy-hitters makes a board"));
        let alice = Descriptor::new(vec![Entry::new("user", "alice")]);
        board.count(&user.path, user.hitter_values, &alice, board.now(), false);

        drop(limiter.replace_rules(load_valid("shop.yaml", SHOP_WITHOUT_USER)));

        assert!(board.rule(&user.path, HitterWindow::LastMinute).is_none());
        assert_eq!(board.bytes(), 0);
    }

    #[test]
    fn a_reload_of_the_same_rules_keeps_every_hit_and_ban() {
        let rules = load_valid("shop.yaml", SHOP);
        let user = rule(&rules, "user");
        let board = HitterBoard::default();
        let alice = Descriptor::new(vec![Entry::new("user", "alice")]);
        board.count(&user.path, user.hitter_values, &alice, board.now(), false);
        board.banned(user, &alice, &FIVE_MINUTE_BAN);

        board.follow_rules(&load_valid("shop.yaml", SHOP));

        let kept = board.rule(&user.path, HitterWindow::LastMinute);
        assert_eq!(kept.map(|hitters| hitters.refused), Some(1));
        assert_eq!(board.bans(&user.path).len(), 1);
    }
}
