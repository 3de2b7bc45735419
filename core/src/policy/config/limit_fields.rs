//! The fields of one limit map (`rate_limit:` or an entry of `rate_limits:`) as written: what
//! `limit` reads and `validate` checks.

use crate::arithmetic::algorithm::{Algorithm, Counting, Overflow};

/// The fields of one limit map as written. `shown` prefixes field names in messages.
pub(super) struct LimitFields {
    /// `rate_limit` or `rate_limits[1]`.
    pub(super) shown: String,
    /// `unit` as written; `None` when absent.
    pub(super) unit: Option<String>,
    pub(super) requests_per_unit: Option<u32>,
    pub(super) unlimited: bool,
    pub(super) name: Option<String>,
    /// `None` when absent.
    pub(super) replaces: Option<Vec<String>>,
    pub(super) algorithm: Option<Algorithm>,
    pub(super) burst: Option<u32>,
    pub(super) unit_multiplier: Option<u32>,
    pub(super) nodelay: Option<bool>,
    pub(super) overflow: Option<Overflow>,
    pub(super) counting: Option<Counting>,
}

impl LimitFields {
    /// How messages name one of its fields: `burst` in `rate_limit`, `rate_limits[1].burst`.
    pub(super) fn field_name(&self, name: &str) -> String {
        field_label(&self.shown, name)
    }
}

pub(super) fn field_label(shown: &str, name: &str) -> String {
    if shown == "rate_limit" {
        name.to_owned()
    } else {
        format!("{shown}.{name}")
    }
}
