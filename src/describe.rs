//! Human-readable one-line descriptions of rules, shared by `validate` and `/rlconfig`.

use std::fmt::Write as _;

use crate::core::rules::Rule;

/// `edge.client_id: token_bucket 10/1s burst 20 [shadow]`.
pub fn rule_summary(rule: &Rule) -> String {
    let mut line = format!("{}:", rule.path);
    if rule.unlimited {
        line.push_str(" unlimited");
    }
    for (index, quota) in rule.limits.iter().enumerate() {
        if index > 0 {
            line.push_str(" +");
        }
        let _ = write!(
            line,
            " {} {}/{}s",
            quota.algorithm,
            quota.requests_per_unit,
            quota.window_seconds()
        );
        if let Some(burst) = quota.burst {
            let _ = write!(line, " burst {burst}");
        }
    }
    if let Some(name) = &rule.name {
        let _ = write!(line, " name={name}");
    }
    for (flag, on) in [
        ("shadow_mode", rule.shadow_mode),
        ("quota_mode", rule.quota_mode),
        ("detailed_metric", rule.detailed_metric),
    ] {
        if on {
            let _ = write!(line, " {flag}");
        }
    }
    line
}
