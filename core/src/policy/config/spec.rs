//! What one file says, after its fields were read and checked one by one, before the files
//! are combined into domains. Fields that had errors hold a harmless stand-in so that the
//! later phases can still look for their own problems; the load fails anyway.

use crate::arithmetic::algorithm::{Algorithm, Quota};

pub(super) struct FileSpec {
    /// Index into the loaded files.
    pub(super) file: usize,
    /// Empty when missing (already reported): such a file joins no domain.
    pub(super) domain: String,
    /// The file's `default_algorithm:`, if written.
    pub(super) default_algorithm: Option<Algorithm>,
    /// The file's `failure_policy:`, if written.
    pub(super) failure_policy: Option<crate::arithmetic::failure::FailurePolicy>,
    /// The file's `overflow:` (for its limits that do not say, and Envoy's `limit` override),
    /// if written.
    pub(super) overflow: Option<crate::arithmetic::algorithm::Overflow>,
    pub(super) descriptors: Vec<DescriptorSpec>,
}

pub(super) struct DescriptorSpec {
    /// Empty when missing (already reported): such a descriptor is left out of the tree.
    pub(super) key: String,
    /// `None` for a key-only descriptor (an empty `value` is the same, as in the reference).
    pub(super) value: Option<String>,
    /// Rule path: parent path, then `key` or `key_value`.
    pub(super) path: String,
    pub(super) rule: Option<RuleSpec>,
    pub(super) flags: DescriptorFlags,
    pub(super) metadata: Option<serde_yaml::Value>,
    /// `adaptive:`, when written and valid.
    pub(super) adaptive: Option<crate::arithmetic::aimd::AdaptiveSettings>,
    /// `priority:`, when written and valid.
    pub(super) priority: Option<crate::arithmetic::priority::Priority>,
    /// `ban:`, when written and valid.
    pub(super) ban: Option<crate::arithmetic::ban::BanPolicy>,
    /// `heavy_hitters:` (hashed unless written `raw`).
    pub(super) hitter_values: crate::arithmetic::heavy_hitters::HitterValues,
    pub(super) children: Vec<DescriptorSpec>,
}

impl DescriptorSpec {
    /// The reference's name of this descriptor among its siblings: `key` or `key_value`.
    pub(super) fn composite_key(&self) -> String {
        match &self.value {
            Some(value) => format!("{}_{}", self.key, value),
            None => self.key.clone(),
        }
    }
}

/// The descriptor-level booleans (siblings of `rate_limit`, as in the reference).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DescriptorFlags {
    pub(super) shadow_mode: bool,
    pub(super) quota_mode: bool,
    pub(super) detailed_metric: bool,
    pub(super) value_to_metric: bool,
    pub(super) share_threshold: bool,
}

/// What `rate_limit` or `rate_limits` of one descriptor amount to.
pub(super) struct RuleSpec {
    pub(super) name: Option<String>,
    pub(super) replaces: Vec<String>,
    pub(super) unlimited: bool,
    /// Empty when unlimited, and for a concurrency rule.
    pub(super) limits: Vec<Quota>,
    /// `concurrency:`: the rule counts requests in flight instead (`core::arithmetic::lease`).
    pub(super) concurrency: Option<crate::arithmetic::lease::Concurrency>,
}
