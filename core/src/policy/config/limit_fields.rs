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
    /// `queue:` (leaky bucket): hold answers until each request's turn.
    pub(super) queue: Option<bool>,
    /// `delay:` (with `queue`): nginx's `delay=N`, excess hits let through at once.
    pub(super) delay: Option<u32>,
    /// `max_wait_ms:` (with `queue`): refuse at once what would wait longer.
    pub(super) max_wait_ms: Option<u32>,
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
