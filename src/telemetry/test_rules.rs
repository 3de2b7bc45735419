//! Rules the telemetry's unit tests share.

use crate::core::policy::rules::RuleSet;

/// Domain `d` with one rule per key, each labelled `d.<key>`.
pub fn rules_with_keys(keys: &[&str]) -> RuleSet {
    let mut text = "domain: d\ndescriptors:\n".to_owned();
    for key in keys {
        text.push_str(&format!(
            "  - key: {key}\n    rate_limit: {{unit: hour, requests_per_unit: 5}}\n"
        ));
    }
    crate::core::policy::config::load_valid("d.yaml", &text)
}
