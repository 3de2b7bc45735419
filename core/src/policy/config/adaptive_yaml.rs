//! `adaptive:` on a descriptor (floodgate): the rule's limit moves between `min` and `max`,
//! driven by a latency signal (see `core::arithmetic::aimd`).
//!
//! ```yaml
//! adaptive:
//!   min: 50
//!   max: 400
//!   interval: 15s
//!   slo: 250ms
//!   signal_unit: ms
//!   signal: {prometheus: {url: "http://prometheus:9090", query: '…p95…'}}   # or {pushed: name}
//!   errors: {prometheus: {url: …, query: '…ratio…'}, max_ratio: 0.01}      # optional
//! ```
//!
//! `signal_unit` has no default: a p95 of 120 means 2 minutes in seconds and a healthy service
//! in milliseconds, and guessing wrong would drive the limit to one of its bounds.

use std::time::Duration;

use serde_yaml::{Mapping, Value};

use super::keys::floodgate_map;
use super::spec::RuleSpec;
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, wrong_type};
use crate::arithmetic::aimd::{
    AdaptiveSettings, Control, ErrorCondition, SignalSource, SignalUnit, DEFAULT_INTERVAL,
    MAX_INTERVAL, MIN_INTERVAL,
};

const ADAPTIVE_KEYS: [&str; 7] = [
    "min",
    "max",
    "interval",
    "slo",
    "signal_unit",
    "signal",
    "errors",
];
const SIGNAL_KEYS: [&str; 2] = ["prometheus", "pushed"];
const ERRORS_KEYS: [&str; 3] = ["prometheus", "pushed", "max_ratio"];
const PROMETHEUS_KEYS: [&str; 2] = ["url", "query"];
/// A pushed signal's name is a URL path segment: keep it plain.
const MAX_SIGNAL_NAME_LEN: usize = 128;

const EXAMPLE: &str = "adaptive: {min: 50, max: 400, slo: 250ms, signal_unit: ms, signal: \
                       {pushed: checkout_p95}}";

/// Reads `adaptive:` of one descriptor whose limits are `rule` (`None`: no `rate_limit`).
pub(super) fn read_adaptive(
    descriptor: &Mapping,
    rule: Option<&RuleSpec>,
    path: &str,
    walk: &mut FileWalk,
) -> Option<AdaptiveSettings> {
    let value = field(descriptor, "adaptive")?;
    let map = floodgate_map(
        value,
        "adaptive",
        &ADAPTIVE_KEYS,
        EXAMPLE,
        path,
        &mut walk.report,
    )?;
    let configured = configured_limit(descriptor, rule, path, walk);
    let Common {
        min,
        max,
        interval,
        slo_ms,
    } = common(map, DEFAULT_INTERVAL, path, walk);
    let signal_unit = signal_unit(map, path, walk);
    let signal = match field(map, "signal") {
        Some(value) => source(value, "signal", &SIGNAL_KEYS, path, walk),
        None => {
            walk.report.error(
                path,
                "`adaptive.signal` is missing: say where the p95 comes from, \
                 `signal: {prometheus: {url: \"http://prometheus:9090\", query: '…'}}` or \
                 `signal: {pushed: checkout_p95}` (POST /v1/signals/checkout_p95)",
            );
            None
        }
    };
    let errors = match field(map, "errors") {
        Some(value) => error_condition(value, path, walk),
        None => Some(None),
    };
    let (min, max) = bounds(min?, max?, (configured, "requests_per_unit"), path, walk)?;
    Some(AdaptiveSettings {
        min,
        max,
        interval: interval?,
        slo_ms: slo_ms?,
        signal_unit: signal_unit?,
        signal: signal?,
        errors: errors?,
        control: Control::Aimd,
    })
}

/// The one configured `requests_per_unit` the controller starts from.
fn configured_limit(
    descriptor: &Mapping,
    rule: Option<&RuleSpec>,
    path: &str,
    walk: &mut FileWalk,
) -> Option<u32> {
    if descriptor.get("rate_limits").is_some() {
        walk.report.error(
            path,
            "`adaptive` moves one limit, but this descriptor has `rate_limits`: write the \
             limit that should adapt as `rate_limit`, or remove `adaptive`",
        );
        return None;
    }
    match rule {
        // No `rate_limit`, or one with errors (reported already).
        None if field(descriptor, "rate_limit").is_none() => {
            walk.report.error(
                path,
                "`adaptive` needs a `rate_limit` on the same descriptor (its \
                 `requests_per_unit` is where the limit starts): add one, e.g. \
                 `rate_limit: {unit: second, requests_per_unit: 200}`",
            );
            None
        }
        None => None,
        Some(rule) if rule.unlimited => {
            walk.report.error(
                path,
                "`adaptive` cannot move an unlimited rule: give it `unit` and \
                 `requests_per_unit`, or remove `adaptive`",
            );
            None
        }
        Some(rule) => rule.limits.first().map(|quota| quota.requests_per_unit),
    }
}

/// What every `adaptive:` has, each `None` when missing or wrong (reported).
pub(super) struct Common {
    pub(super) min: Option<u32>,
    pub(super) max: Option<u32>,
    pub(super) interval: Option<Duration>,
    pub(super) slo_ms: Option<f64>,
}

/// Reads `min`, `max`, `interval` (`default_interval` when not written) and `slo`.
pub(super) fn common(
    map: &Mapping,
    default_interval: Duration,
    path: &str,
    walk: &mut FileWalk,
) -> Common {
    Common {
        min: required_number(map, "min", path, walk),
        max: required_number(map, "max", path, walk),
        interval: match field(map, "interval") {
            Some(value) => interval(value, path, walk),
            None => Some(default_interval),
        },
        slo_ms: slo(map, path, walk),
    }
}

/// `1 ≤ min ≤ configured ≤ max`; `configured` is the limit the controller starts from, named
/// as written (`requests_per_unit`, `concurrency.max_in_flight`); `None` (no limit: reported
/// already) passes nothing.
pub(super) fn bounds(
    min: u32,
    max: u32,
    (configured, named): (Option<u32>, &str),
    path: &str,
    walk: &mut FileWalk,
) -> Option<(u32, u32)> {
    let mut valid = true;
    if min == 0 {
        walk.report.error(
            path,
            "`adaptive.min` must be at least 1: a limit of 0 refuses every request, which no \
             latency signal should be able to do on its own",
        );
        valid = false;
    }
    if min > max {
        walk.report.error(
            path,
            format!("`adaptive.min` ({min}) is above `adaptive.max` ({max}): swap them"),
        );
        valid = false;
    }
    if let Some(configured) = configured {
        if configured < min || configured > max {
            walk.report.error(
                path,
                format!(
                    "`{named}` ({configured}) must lie between `adaptive.min` ({min}) and \
                     `adaptive.max` ({max}): it is where the adaptive limit starts"
                ),
            );
            valid = false;
        }
    }
    (valid && configured.is_some()).then_some((min, max))
}

fn required_number(map: &Mapping, name: &str, path: &str, walk: &mut FileWalk) -> Option<u32> {
    let shown = format!("adaptive.{name}");
    if field(map, name).is_none() {
        walk.report.error(
            path,
            format!("`{shown}` is missing: the adaptive limit moves between `min` and `max`"),
        );
        return None;
    }
    walk.number(map, name, &shown, path)
}

fn interval(value: &Value, path: &str, walk: &mut FileWalk) -> Option<Duration> {
    let interval = duration(value, "adaptive.interval", "interval: 15s", path, walk)?;
    if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
        walk.report.error(
            path,
            format!(
                "`adaptive.interval` is {interval:?}: it must be from {MIN_INTERVAL:?} to \
                 {MAX_INTERVAL:?} (10s to 30s suits most services)"
            ),
        );
        return None;
    }
    Some(interval)
}

fn slo(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<f64> {
    let Some(value) = field(map, "slo") else {
        walk.report.error(
            path,
            "`adaptive.slo` is missing: the target p95 latency, e.g. `slo: 250ms`",
        );
        return None;
    };
    let slo = duration(value, "adaptive.slo", "slo: 250ms", path, walk)?;
    if slo.is_zero() {
        walk.report.error(
            path,
            "`adaptive.slo` must be above 0: it is the p95 latency the limit aims for",
        );
        return None;
    }
    Some(slo.as_secs_f64() * 1000.0)
}

/// `250ms`, `15s`, `1.5s`, `2m`: a number and a unit (a bare number is refused: which unit?).
pub(super) fn duration(
    value: &Value,
    shown: &str,
    example: &str,
    path: &str,
    walk: &mut FileWalk,
) -> Option<Duration> {
    let parsed = match value {
        Value::String(text) => parse_duration(text),
        _ => None,
    };
    if parsed.is_none() {
        let message = wrong_type(
            shown,
            "a duration with its unit (ms, s or m)",
            &describe(value),
            example,
        );
        walk.report.error(path, message);
    }
    parsed
}

fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, millis_per_unit) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1000.0)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60_000.0)
    } else {
        return None;
    };
    let number = number.trim();
    let plain = !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || c == '.');
    let value: f64 = number.parse().ok().filter(|_| plain)?;
    let millis = value * millis_per_unit;
    // An hour is far beyond any interval or SLO; the bound keeps the conversion exact.
    (millis.is_finite() && millis <= 3_600_000.0).then(|| Duration::from_secs_f64(millis / 1000.0))
}

fn signal_unit(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<SignalUnit> {
    let names = SignalUnit::NAMES.join(" or ");
    let Some(written) = walk.text(
        map,
        "signal_unit",
        "adaptive.signal_unit",
        path,
        "signal_unit: ms",
    ) else {
        if field(map, "signal_unit").is_none() {
            walk.report.error(
                path,
                format!(
                    "`adaptive.signal_unit` is missing: say which unit the signal's numbers are \
                     in, {names} (Envoy's upstream_rq_time histograms are in ms, \
                     *_duration_seconds histograms in s)"
                ),
            );
        }
        return None;
    };
    let unit = SignalUnit::parse(&written);
    if unit.is_none() {
        walk.report.error(
            path,
            format!("unknown `adaptive.signal_unit` '{written}': use {names}"),
        );
    }
    unit
}

/// `{prometheus: {url, query}}` or `{pushed: name}` (with `max_ratio` beside them in `errors`).
fn source(
    value: &Value,
    shown: &str,
    allowed: &[&'static str],
    path: &str,
    walk: &mut FileWalk,
) -> Option<SignalSource> {
    let map = floodgate_map(
        value,
        &format!("adaptive.{shown}"),
        allowed,
        "{pushed: checkout_p95}",
        path,
        &mut walk.report,
    )?;
    match (field(map, "prometheus"), field(map, "pushed")) {
        (Some(_), Some(_)) => {
            walk.report.error(
                path,
                format!(
                    "`adaptive.{shown}` has both `prometheus` and `pushed`: keep the one the \
                     value should come from"
                ),
            );
            None
        }
        (Some(prometheus), None) => prometheus_source(prometheus, shown, path, walk),
        (None, Some(_)) => pushed_source(map, shown, path, walk),
        (None, None) => {
            walk.report.error(
                path,
                format!(
                    "`adaptive.{shown}` needs `prometheus: {{url: …, query: …}}` or `pushed: \
                     <name>`"
                ),
            );
            None
        }
    }
}

fn prometheus_source(
    value: &Value,
    shown: &str,
    path: &str,
    walk: &mut FileWalk,
) -> Option<SignalSource> {
    let shown = format!("adaptive.{shown}.prometheus");
    let example = "prometheus: {url: \"http://prometheus:9090\", query: 'histogram_quantile(…)'}";
    let map = floodgate_map(
        value,
        &shown,
        &PROMETHEUS_KEYS,
        example,
        path,
        &mut walk.report,
    )?;
    let url = walk.text(map, "url", &format!("{shown}.url"), path, example);
    let query = walk.text(map, "query", &format!("{shown}.query"), path, example);
    let url = match url {
        Some(url) => check_url(&url, &shown, path, walk),
        None => {
            if field(map, "url").is_none() {
                walk.report.error(
                    path,
                    format!("`{shown}.url` is missing: Prometheus' base URL, like `{example}`"),
                );
            }
            None
        }
    };
    let query = match query {
        Some(query) if !query.trim().is_empty() => Some(query),
        _ => {
            walk.report.error(
                path,
                format!(
                    "`{shown}.query` is missing or empty: a PromQL expression that yields one \
                     number"
                ),
            );
            None
        }
    };
    Some(SignalSource::Prometheus {
        url: url?,
        query: query?,
    })
}

/// Prometheus' base URL: plain `http://` (a server beside floodgate, or a sidecar), no query.
fn check_url(url: &str, shown: &str, path: &str, walk: &mut FileWalk) -> Option<String> {
    let problem = match url::Url::parse(url) {
        Err(error) => Some(format!("is not a URL ({error})")),
        Ok(parsed) if parsed.scheme() != "http" => Some(format!(
            "uses {}://: only http:// is supported (reach an https Prometheus through a \
             sidecar or an in-cluster service)",
            parsed.scheme()
        )),
        Ok(parsed) if parsed.query().is_some() || parsed.fragment().is_some() => Some(
            "has a query or fragment: give the base URL only, the query goes in `query`".to_owned(),
        ),
        Ok(parsed) if parsed.host_str().is_none_or(str::is_empty) => Some("has no host".to_owned()),
        Ok(_) => None,
    };
    match problem {
        Some(problem) => {
            walk.report.error(
                path,
                format!("`{shown}.url` '{url}' {problem}: write it like `http://prometheus:9090`"),
            );
            None
        }
        None => Some(url.trim_end_matches('/').to_owned()),
    }
}

fn pushed_source(
    map: &Mapping,
    shown: &str,
    path: &str,
    walk: &mut FileWalk,
) -> Option<SignalSource> {
    let shown = format!("adaptive.{shown}.pushed");
    let name = walk.text(map, "pushed", &shown, path, "pushed: checkout_p95")?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > MAX_SIGNAL_NAME_LEN || !name.chars().all(plain) {
        walk.report.error(
            path,
            format!(
                "`{shown}` '{name}' is not a usable signal name: 1 to {MAX_SIGNAL_NAME_LEN} \
                 letters, digits, `_`, `-` or `.` (it is the last part of \
                 POST /v1/signals/<name>)"
            ),
        );
        return None;
    }
    Some(SignalSource::Pushed { name })
}

fn error_condition(
    value: &Value,
    path: &str,
    walk: &mut FileWalk,
) -> Option<Option<ErrorCondition>> {
    let source = source(value, "errors", &ERRORS_KEYS, path, walk);
    let Value::Mapping(map) = value else {
        return None;
    };
    let max_ratio = match field(map, "max_ratio") {
        Some(Value::Number(number)) => number.as_f64().filter(|ratio| (0.0..=1.0).contains(ratio)),
        _ => None,
    };
    if max_ratio.is_none() {
        let found = field(map, "max_ratio").map_or("nothing".to_owned(), describe);
        let message = wrong_type(
            "adaptive.errors.max_ratio",
            "a ratio from 0 to 1 (the most errors that still let the limit grow)",
            &found,
            "max_ratio: 0.01",
        );
        walk.report.error(path, message);
    }
    Some(Some(ErrorCondition {
        source: source?,
        max_ratio: max_ratio?,
    }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;
    use crate::arithmetic::aimd::{AdaptiveSettings, ErrorCondition, SignalSource, SignalUnit};
    use crate::policy::config::{self, ConfigError};
    use crate::policy::rules::RuleSet;

    fn load_text(text: &str) -> Result<RuleSet, Vec<ConfigError>> {
        config::load_text("shop.yaml", text).map_err(|errors| errors.0)
    }

    /// A rule of 200/s with `adaptive:` made of `lines` (each indented under it).
    fn rule_with(lines: &str) -> String {
        let mut text = "domain: shop\ndescriptors:\n  - key: pool\n    value: checkout\n    \
                        rate_limit: {unit: second, requests_per_unit: 200}\n    adaptive:\n"
            .to_owned();
        for line in lines.lines() {
            text.push_str("      ");
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    const VALID: &str = "min: 50\nmax: 400\nslo: 250ms\nsignal_unit: ms\n\
                         signal: {pushed: checkout_p95}";

    /// `lines` are refused, all errors on the rule, one of them with each of `hints`.
    fn refused(lines: &str, hints: &[&str]) {
        let errors = match load_text(&rule_with(lines)) {
            Ok(_) => panic!("should be refused:\n{lines}"),
            Err(errors) => errors,
        };
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            errors
                .iter()
                .all(|error| error.path == "shop.pool_checkout"),
            "{text:#?}"
        );
        assert!(
            text.iter()
                .any(|line| hints.iter().all(|hint| line.contains(hint))),
            "no error has all of {hints:?}: {text:#?}"
        );
    }

    #[test]
    fn every_setting_lands_in_the_rule() {
        let yaml = rule_with(
            "min: 50\nmax: 400\ninterval: 2s\nslo: 0.25s\nsignal_unit: ms\nsignal:\n  \
             prometheus: {url: 'http://prometheus:9090/', query: 'max(p95)'}\nerrors:\n  \
             pushed: checkout_errors\n  max_ratio: 0.01",
        );
        let rules = load_text(&yaml).unwrap_or_else(|errors| panic!("{errors:?}"));
        let rule = rules
            .domain("shop")
            .and_then(|domain| domain.rule_by_path("shop.pool_checkout"))
            .unwrap_or_else(|| panic!("the rule is there"));
        assert_eq!(
            rule.adaptive.as_deref(),
            Some(&AdaptiveSettings {
                min: 50,
                max: 400,
                interval: Duration::from_secs(2),
                slo_ms: 250.0,
                signal_unit: SignalUnit::Milliseconds,
                signal: SignalSource::Prometheus {
                    url: "http://prometheus:9090".to_owned(),
                    query: "max(p95)".to_owned(),
                },
                errors: Some(ErrorCondition {
                    source: SignalSource::Pushed {
                        name: "checkout_errors".to_owned()
                    },
                    max_ratio: 0.01,
                }),
                control: crate::arithmetic::aimd::Control::Aimd,
            })
        );
    }

    #[test]
    fn the_interval_defaults_to_fifteen_seconds() {
        let rules = load_text(&rule_with(VALID)).unwrap_or_else(|errors| panic!("{errors:?}"));
        let interval = rules
            .domain("shop")
            .and_then(|domain| domain.rule_by_path("shop.pool_checkout"))
            .and_then(|rule| rule.adaptive.as_ref())
            .map(|adaptive| adaptive.interval);
        assert_eq!(interval, Some(Duration::from_secs(15)));
    }

    #[test]
    fn bounds_must_hold_the_configured_limit() {
        let with = |min: &str, max: &str| VALID.replace("min: 50", min).replace("max: 400", max);
        refused(
            &with("min: 250", "max: 400"),
            &["(200)", "between `adaptive.min` (250)"],
        );
        refused(&with("min: 50", "max: 100"), &["`adaptive.max` (100)"]);
        refused(
            &with("min: 500", "max: 400"),
            &["above `adaptive.max`", "swap"],
        );
        refused(&with("min: 0", "max: 400"), &["at least 1"]);
        refused(&with("min: -1", "max: 400"), &["adaptive.min", "negative"]);
        refused(
            &VALID.replace("max: 400\n", ""),
            &["`adaptive.max` is missing"],
        );
    }

    #[test]
    fn durations_and_units_are_explicit() {
        refused(
            &VALID.replace("slo: 250ms", "slo: 250"),
            &["adaptive.slo", "with its unit"],
        );
        refused(&VALID.replace("slo: 250ms", "slo: 0ms"), &["above 0"]);
        refused(&format!("{VALID}\ninterval: 500ms"), &["from 1s to 300s"]);
        refused(&format!("{VALID}\ninterval: 10m"), &["from 1s to 300s"]);
        refused(
            &VALID.replace("signal_unit: ms\n", ""),
            &["signal_unit` is missing", "ms or s"],
        );
        refused(
            &VALID.replace("signal_unit: ms", "signal_unit: msec"),
            &["use ms or s"],
        );
    }

    #[test]
    fn signals_are_one_source_each() {
        refused(
            &VALID.replace("signal: {pushed: checkout_p95}", ""),
            &["signal` is missing"],
        );
        refused(
            &VALID.replace(
                "{pushed: checkout_p95}",
                "{pushed: a, prometheus: {url: 'http://p', query: q}}",
            ),
            &["both `prometheus` and `pushed`"],
        );
        refused(
            &VALID.replace("{pushed: checkout_p95}", "{}"),
            &["needs `prometheus"],
        );
        refused(
            &VALID.replace("checkout_p95", "'a/b'"),
            &["not a usable signal name"],
        );
        refused(
            &VALID.replace("pushed:", "pushd:"),
            &["unknown key 'pushd'", "did you mean 'pushed'"],
        );
        let prometheus = |url: &str| {
            VALID.replace(
                "{pushed: checkout_p95}",
                &format!("{{prometheus: {{url: '{url}', query: 'up'}}}}"),
            )
        };
        refused(&prometheus("https://p:9090"), &["only http://"]);
        refused(&prometheus("http://p:9090/?x=1"), &["query or fragment"]);
        refused(
            &prometheus("prometheus:9090"),
            &["write it like `http://prometheus:9090`"],
        );
        refused(
            &VALID.replace("{pushed: checkout_p95}", "{prometheus: {url: 'http://p'}}"),
            &["query` is missing"],
        );
    }

    #[test]
    fn the_error_condition_needs_a_ratio() {
        refused(
            &format!("{VALID}\nerrors: {{pushed: e}}"),
            &["max_ratio", "from 0 to 1", "nothing"],
        );
        refused(
            &format!("{VALID}\nerrors: {{pushed: e, max_ratio: 2}}"),
            &["max_ratio"],
        );
        refused(
            &format!("{VALID}\nerrors: {{pushed: e, max_ratio: 0.1, maxratio: 1}}"),
            &["did you mean 'max_ratio'"],
        );
    }

    /// The whole file `text` is refused, one error saying `hint`.
    fn file_refused(text: &str, hint: &str) {
        let errors = load_text(text).err().unwrap_or_default();
        assert!(
            errors.iter().any(|e| e.message.contains(hint)),
            "no error says {hint:?}: {errors:?}"
        );
    }

    #[test]
    fn only_a_rule_with_one_limit_adapts() {
        refused(&format!("{VALID}\nspeed: 3"), &["unknown key 'speed'"]);
        let unlimited = rule_with(VALID).replace(
            "{unit: second, requests_per_unit: 200}",
            "{unlimited: true}",
        );
        file_refused(&unlimited, "cannot move an unlimited rule");
        let several = rule_with(VALID).replace(
            "rate_limit: {unit: second, requests_per_unit: 200}",
            "rate_limits: [{unit: second, requests_per_unit: 200}, {unit: hour, requests_per_unit: 9000}]",
        );
        file_refused(&several, "has `rate_limits`");
        let without = rule_with(VALID).replace(
            "    rate_limit: {unit: second, requests_per_unit: 200}\n",
            "",
        );
        file_refused(&without, "needs a `rate_limit`");
        let misplaced =
            "domain: shop\ndescriptors:\n  - key: pool\n    rate_limit: {unit: second, \
                         requests_per_unit: 5, adaptive: {min: 1}}\n";
        file_refused(misplaced, "move it to the descriptor");
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse_duration("0.25s"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration(" 1 s "), Some(Duration::from_secs(1)));
        for bad in [
            "250", "ms", "-1s", "1e3ms", "1h", "fast", "2mm", "1.2.3s", "99999m",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
