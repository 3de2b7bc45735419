//! Rules and a store the engine's unit tests share: a shop whose `user` rule bans after one
//! refusal, beside an `api_key` rule, and the same shop after a reload removed `user`.

use std::sync::Arc;

use crate::core::ground::time::SystemClock;
use crate::core::policy::rules::{Rule, RuleSet};
use crate::store::memory::MemoryStore;

pub const SHOP: &str = "domain: shop\n\
                        descriptors:\n\
                        \x20 - key: user\n\
                        \x20   rate_limit: {unit: hour, requests_per_unit: 2}\n\
                        \x20   ban: {after: 1, within: 1m, for: 5m, max: 1h}\n\
                        \x20 - key: api_key\n\
                        \x20   rate_limit: {unit: minute, requests_per_unit: 100}\n";

pub const SHOP_WITHOUT_USER: &str = "domain: shop\n\
                                     descriptors:\n\
                                     \x20 - key: api_key\n\
                                     \x20   rate_limit: {unit: minute, requests_per_unit: 100}\n";

/// The rule of `rules` whose path ends with `key`.
pub fn rule<'a>(rules: &'a RuleSet, key: &str) -> &'a Rule {
    rules
        .all_rules()
        .find(|rule| rule.path.ends_with(key))
        .unwrap_or_else(|| panic!("no rule for {key}"))
}

/// A memory store of 1,000 keys on the system clock.
pub fn memory_store() -> MemoryStore {
    MemoryStore::new(1_000, Arc::new(SystemClock))
}
