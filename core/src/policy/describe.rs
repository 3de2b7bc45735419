//! Human-readable one-line descriptions of rules, shared by `validate` and `/rlconfig`.

use std::fmt::Write as _;

use crate::arithmetic::aimd::{Control, SignalSource};
use crate::arithmetic::algorithm::{Counting, Overflow, Quota, Tiling};
use crate::policy::rules::Rule;

/// `edge.client_id: token_bucket 10/1s burst 20 [shadow]`, then the classes sharing it and the
/// adaptive bounds when the rule has them (`classes by priority: critical 100%, low 50% (default)`,
/// `adaptive 50..400 every 15s, slo 250ms, pushed checkout_p95`).
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
            " {} {}/{}",
            quota.algorithm,
            quota.requests_per_unit,
            window_text(quota)
        );
        if let Some(burst) = quota.burst {
            let _ = write!(line, " burst {burst}");
        }
        if let Some(queue) = quota.queue {
            let _ = write!(
                line,
                " queue delay {} max_wait {}ms",
                queue.delay,
                queue.max_wait / 1_000
            );
        }
        if quota.overflow == Overflow::Owe {
            line.push_str(" overflow owe");
        }
        if let Some(counting) = quota.counting {
            let _ = write!(line, " counting {counting}");
            if counting == Counting::Hybrid && !crate::arithmetic::hybrid::supports(quota.algorithm)
            {
                line.push_str(" (decided exactly: only windows are counted locally)");
            }
        }
    }
    if let Some(concurrency) = &rule.concurrency {
        let _ = write!(
            line,
            " concurrency {} in flight, lease {} ttl {}ms, released by {}={}",
            concurrency.max_in_flight,
            concurrency.lease_key,
            concurrency.lease_ttl / 1000,
            concurrency.release.key,
            concurrency.release.value
        );
    }
    if let Some(priority) = &rule.priority {
        let _ = write!(line, " classes by {}:", priority.key);
        for (index, class) in priority.classes.iter().enumerate() {
            let separator = if index > 0 { "," } else { "" };
            let _ = write!(line, "{separator} {} {}", class.name, class.share);
            if index == priority.default {
                line.push_str(" (default)");
            }
        }
        line.push(';');
    }
    if let Some(adaptive) = &rule.adaptive {
        let _ = write!(
            line,
            " adaptive {}..{} every {}s, slo {}ms, {}",
            adaptive.min,
            adaptive.max,
            adaptive.interval.as_secs(),
            adaptive.slo_ms,
            adaptive.signal
        );
        match adaptive.control {
            Control::Gradient { probe_every } => {
                let _ = write!(line, ", gradient probing every {probe_every} intervals");
            }
            Control::Aimd if adaptive.signal == SignalSource::Leases => line.push_str(", aimd"),
            Control::Aimd => {}
        }
        line.push(';');
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

/// `60s`, or `calendar month` / `3 calendar months` under `--calendar-months`.
pub fn window_text(quota: &Quota) -> String {
    match quota.tiling() {
        Tiling::CalendarMonths { months: 1 } => "calendar month".to_owned(),
        Tiling::CalendarMonths { months } => format!("{months} calendar months"),
        Tiling::Epoch { .. } => format!("{}s", quota.window_seconds()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::load_valid;

    fn summaries(yaml: &str) -> Vec<String> {
        load_valid("shop.yaml", yaml)
            .all_rules()
            .map(rule_summary)
            .collect()
    }

    #[test]
    fn calendar_months_are_named() {
        let options = crate::policy::config::LoadOptions {
            calendar_months: true,
            ..crate::policy::config::LoadOptions::default()
        };
        let sources = [crate::policy::config::SourceFile {
            name: "shop.yaml".to_owned(),
            text: "domain: shop\n\
                   descriptors:\n\
                   \x20 - key: plan\n\
                   \x20   rate_limits:\n\
                   \x20     - {unit: month, requests_per_unit: 1000}\n\
                   \x20     - {unit: month, unit_multiplier: 3, requests_per_unit: 2500}\n"
                .to_owned(),
        }];
        let rules = crate::policy::config::load(&sources, &options)
            .unwrap_or_else(|errors| panic!("{errors:?}"));
        let lines: Vec<String> = rules.all_rules().map(rule_summary).collect();
        assert_eq!(
            lines,
            ["shop.plan: fixed_window 1000/calendar month + fixed_window 2500/3 calendar months"]
        );
        let plain = summaries(
            "domain: shop\ndescriptors:\n  - key: plan\n    rate_limit: {unit: month, requests_per_unit: 1000}\n",
        );
        assert_eq!(plain, ["shop.plan: fixed_window 1000/2592000s"]);
    }

    #[test]
    fn classes_and_adaptive_bounds_are_shown() {
        let lines = summaries(
            "domain: shop\n\
             descriptors:\n\
             \x20 - key: pool\n\
             \x20   value: checkout\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 100}\n\
             \x20   priority: {key: priority, classes: {critical: 100%, low: 12.5%}, default: low}\n\
             \x20 - key: pool\n\
             \x20   value: reports\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 200}\n\
             \x20   adaptive: {min: 50, max: 400, interval: 15s, slo: 250ms, signal_unit: ms, signal: {pushed: reports_p95}}\n",
        );
        assert_eq!(
            lines,
            [
                "shop.pool_checkout: fixed_window 100/1s classes by priority: critical 100%, \
                 low 12.5% (default);",
                "shop.pool_reports: fixed_window 200/1s adaptive 50..400 every 15s, slo 250ms, \
                 pushed reports_p95;",
            ]
        );
    }

    #[test]
    fn a_concurrency_rule_is_shown() {
        let lines = summaries(
            "domain: shop\n\
             descriptors:\n\
             \x20 - key: backend\n\
             \x20   concurrency: {max_in_flight: 10, lease: request_id, ttl: 30s,\n\
             \x20                 release: {key: phase, value: done}}\n",
        );
        assert_eq!(
            lines,
            [
                "shop.backend: concurrency 10 in flight, lease request_id ttl 30000ms, released \
              by phase=done"
            ]
        );
    }

    #[test]
    fn an_owed_overflow_is_shown() {
        let lines = summaries(
            "domain: llm\n\
             descriptors:\n\
             \x20 - key: user\n\
             \x20   rate_limit: {unit: day, requests_per_unit: 100, overflow: owe}\n",
        );
        assert_eq!(lines, ["llm.user: fixed_window 100/86400s overflow owe"]);
    }

    #[test]
    fn counting_is_shown_and_a_bucket_counted_hybrid_says_it_is_exact() {
        let lines = summaries(
            "domain: app\n\
             descriptors:\n\
             \x20 - key: api\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 1000, counting: hybrid}\n\
             \x20 - key: login\n\
             \x20   rate_limit: {unit: minute, requests_per_unit: 5, counting: exact}\n\
             \x20 - key: upload\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, \
             counting: hybrid}\n",
        );
        assert_eq!(
            lines,
            [
                "app.api: fixed_window 1000/1s counting hybrid",
                "app.login: fixed_window 5/60s counting exact",
                "app.upload: token_bucket 5/1s counting hybrid (decided exactly: only windows \
                 are counted locally)",
            ]
        );
    }
}
