use std::time::Duration;

use crate::arithmetic::aimd::{AdaptiveSettings, Control, SignalSource, SignalUnit};
use crate::policy::config::{self, ConfigError};
use crate::policy::rules::RuleSet;

fn load_text(text: &str) -> Result<RuleSet, Vec<ConfigError>> {
    config::load_text("backend.yaml", text).map_err(|errors| errors.0)
}

/// A concurrency rule of 8 in flight with `adaptive:` made of `lines`.
fn rule_with(lines: &str) -> String {
    let mut text = "domain: backend\ndescriptors:\n  - key: backend\n    value: slow\n    \
                    concurrency: {max_in_flight: 8, lease: request_id, release: {key: phase, \
                    value: done}, ttl: 30s}\n    adaptive:\n"
        .to_owned();
    for line in lines.lines() {
        text.push_str("      ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

fn adaptive(lines: &str) -> AdaptiveSettings {
    let rules = load_text(&rule_with(lines)).unwrap_or_else(|errors| panic!("{errors:?}"));
    rules
        .domain("backend")
        .and_then(|domain| domain.rule_by_path("backend.backend_slow"))
        .and_then(|rule| rule.adaptive.as_deref().cloned())
        .unwrap_or_else(|| panic!("the rule is adaptive"))
}

fn refused(lines: &str, hint: &str) {
    let errors = match load_text(&rule_with(lines)) {
        Ok(_) => panic!("should be refused:\n{lines}"),
        Err(errors) => errors,
    };
    let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|line| line.contains(hint)),
        "no error says {hint:?}: {text:#?}"
    );
}

#[test]
fn a_concurrency_rule_adapts_from_its_leases_with_the_gradient_by_default() {
    assert_eq!(
        adaptive("min: 2\nmax: 200\nslo: 300ms"),
        AdaptiveSettings {
            min: 2,
            max: 200,
            interval: Duration::from_secs(1),
            slo_ms: 300.0,
            signal_unit: SignalUnit::Milliseconds,
            signal: SignalSource::Leases,
            errors: None,
            control: Control::Gradient { probe_every: 60 },
        }
    );
    let aimd = adaptive("min: 2\nmax: 200\nslo: 300ms\ncontrol: aimd\ninterval: 2s");
    assert_eq!(
        (aimd.control, aimd.interval),
        (Control::Aimd, Duration::from_secs(2))
    );
    let probing = adaptive("min: 2\nmax: 20\nslo: 1s\ninterval: 2s\nprobe_every: 5m");
    assert_eq!(probing.control, Control::Gradient { probe_every: 150 });
}

#[test]
fn what_a_concurrency_rule_cannot_take_is_refused_with_the_reason() {
    refused(
        "min: 2\nmax: 20\nslo: 1s\nsignal: {pushed: p95}",
        "reads how long its own leases are held",
    );
    refused(
        "min: 2\nmax: 20\nslo: 1s\nsignal_unit: ms",
        "remove `signal_unit`",
    );
    refused(
        "min: 10\nmax: 20\nslo: 1s",
        "`concurrency.max_in_flight` (8) must lie between `adaptive.min` (10)",
    );
    refused("min: 0\nmax: 20\nslo: 1s", "must be at least 1");
    refused("min: 2\nmax: 20000\nslo: 1s", "above 10000");
    refused(
        "min: 2\nmax: 20\nslo: 1s\ncontrol: vegas",
        "adaptive.control",
    );
    refused(
        "min: 2\nmax: 20\nslo: 1s\nprobe_every: 5s",
        "at least 10 intervals",
    );
    refused("min: 2\nmax: 20", "`adaptive.slo` is missing");
}

#[test]
fn a_rate_limit_does_not_take_the_concurrency_settings() {
    let text = "domain: shop\ndescriptors:\n  - key: pool\n    value: checkout\n    \
                rate_limit: {unit: second, requests_per_unit: 200}\n    adaptive: {min: 50, \
                max: 400, slo: 250ms, signal_unit: ms, signal: {pushed: p95}, control: gradient}\n";
    let errors = match load_text(text) {
        Ok(_) => panic!("`control` on a rate limit should be refused"),
        Err(errors) => errors,
    };
    assert!(
        errors
            .iter()
            .any(|error| error.to_string().contains("control")),
        "{errors:?}"
    );
}
