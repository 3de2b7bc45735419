//! Which limits envoyproxy/ratelimit answers without their rule's `metadata:`.
//!
//! Its `GetLimit` (src/config/config_impl.go) copies the matched limit with the descriptor's
//! `metadata` and then, in two cases, replaces the copy with one `NewRateLimit` builds for its
//! stats — and `NewRateLimit` takes no metadata, so `ratelimitToMetadata` finds none:
//! - a `detailed_metric` limit whose descriptor has no `descriptors:` below it (the loop's
//!   last step, "if rateLimit != nil && rateLimit.DetailedMetric", before its `break`); one with
//!   descriptors below keeps the copy and only has its stats key changed after the loop;
//! - any other limit whose `value_to_metric` stats key differs from the rule's own key
//!   ("if enhancedKey != rateLimit.FullKey"): a `value_to_metric` level matched by its key alone
//!   with a non-empty value, or by a wildcard that does not `share_threshold`.

use crate::decision::outcome::stats_key::{stats_key, StatsKey};
use crate::policy::request::Descriptor;
use crate::policy::rules::{DomainRules, Rule};

/// Whether the reference answers `descriptor`, limited by `rule` in `domain`, with a limit it
/// rebuilt for its stats key, without `rule`'s metadata.
pub(super) fn rebuilt_without_metadata(
    domain: &DomainRules,
    rule: &Rule,
    descriptor: &Descriptor,
) -> bool {
    if rule.detailed_metric {
        return !rule.has_descriptors;
    }
    if !rule.config_path.iter().any(|level| level.value_to_metric) {
        return false;
    }
    domain.lookup(&descriptor.entries).is_some_and(|matched| {
        matches!(
            stats_key(&domain.name, &matched, &descriptor.entries),
            StatsKey::Values(_)
        )
    })
}
