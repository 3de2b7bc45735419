//! The Grafana dashboard (deploy/kubernetes/components/observability/dashboards/floodgate.json)
//! against a live scrape of the real binary: every metric its PromQL names must be exported by
//! floodgate under that name (histogram series as `_bucket`/`_sum`/`_count` of a histogram), and
//! every label it groups, filters or titles by must be on those series. A renamed metric or label
//! fails here instead of leaving an empty panel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit as common;
use floodgate_testkit::{floodgate_bin, repo_file, Floodgate};

const DASHBOARD: &str = "deploy/kubernetes/components/observability/dashboards/floodgate.json";

/// Labels Prometheus adds when scraping (never in floodgate's own output), and `le`, which
/// belongs to every histogram bucket.
const TARGET_LABELS: &[&str] = &["instance", "job", "le"];

/// A sliding log, not the default fixed window: five OK then OVER_LIMIT whenever the test runs
/// (a fixed window would start afresh if the hour turned between two checks).
const RULES: &str = "\
domain: dashboard
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5, name: per_user, algorithm: sliding_log}
";

/// One PromQL expression of a panel, with the legend that titles its series.
#[derive(Debug)]
struct Query {
    panel: String,
    expr: String,
    legend: String,
}

fn queries(panels: &serde_json::Value, out: &mut Vec<Query>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push(Query {
                    panel: title.clone(),
                    expr: expr.to_owned(),
                    legend: target["legendFormat"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
        }
        queries(&panel["panels"], out); // rows may hold panels
    }
}

/// What one expression uses.
#[derive(Debug, Default)]
struct Parsed {
    /// Metric names (`floodgate_…`).
    metrics: BTreeSet<String>,
    /// Label names: grouping (`by (…)`, `without (…)`), matchers, the legend's `{{label}}`.
    labels: BTreeSet<String>,
    /// Exact matchers (`{label="value"}`): the value must exist, or the panel stays empty.
    equals: BTreeSet<(String, String)>,
}

fn parse(query: &Query) -> Parsed {
    let is_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == ':';
    let is_part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = query.expr.chars().collect();
    let mut metrics = BTreeSet::new();
    let mut labels = BTreeSet::new();
    let mut equals = BTreeSet::new();
    let mut index = 0;
    let read_list = |from: usize, close: char| -> (Vec<String>, usize) {
        let end = chars[from..]
            .iter()
            .position(|&c| c == close)
            .map_or(chars.len(), |offset| from + offset);
        let text: String = chars[from..end].iter().collect();
        (text.split(',').map(|s| s.trim().to_owned()).collect(), end)
    };
    while index < chars.len() {
        let c = chars[index];
        if c == '"' {
            // A string (label value): skip it.
            index += 1;
            while index < chars.len() && chars[index] != '"' {
                index += if chars[index] == '\\' { 2 } else { 1 };
            }
            index += 1;
            continue;
        }
        if c == '$' {
            // A Grafana variable ($__rate_interval).
            index += 1;
            while index < chars.len() && is_part(chars[index]) {
                index += 1;
            }
            continue;
        }
        if is_start(c) && (index == 0 || !is_part(chars[index - 1])) {
            let start = index;
            while index < chars.len() && is_part(chars[index]) {
                index += 1;
            }
            let word: String = chars[start..index].iter().collect();
            let mut next = index;
            while next < chars.len() && chars[next] == ' ' {
                next += 1;
            }
            if (word == "by" || word == "without") && chars.get(next) == Some(&'(') {
                let (list, end) = read_list(next + 1, ')');
                labels.extend(list.into_iter().filter(|l| !l.is_empty()));
                index = end + 1;
            } else if word.starts_with("floodgate_") {
                metrics.insert(word);
                if chars.get(index) == Some(&'{') {
                    // label OP "value", … where a value may hold commas, braces and \".
                    index += 1;
                    let mut name = String::new();
                    let mut op = String::new();
                    while index < chars.len() && chars[index] != '}' {
                        match chars[index] {
                            '"' => {
                                let start = index + 1;
                                index += 1;
                                while index < chars.len() && chars[index] != '"' {
                                    index += if chars[index] == '\\' { 2 } else { 1 };
                                }
                                let value: String =
                                    chars[start..index.min(chars.len())].iter().collect();
                                if op == "=" && !name.trim().is_empty() {
                                    equals.insert((name.trim().to_owned(), value));
                                }
                                name.clear();
                                op.clear();
                            }
                            c @ ('=' | '!' | '~') => {
                                if op.is_empty() && !name.trim().is_empty() {
                                    labels.insert(name.trim().to_owned());
                                }
                                op.push(c);
                            }
                            ',' => {
                                name.clear();
                                op.clear();
                            }
                            c if op.is_empty() => name.push(c),
                            _ => {}
                        }
                        index += 1;
                    }
                    index += 1;
                }
            }
            continue;
        }
        index += 1;
    }
    let mut rest = query.legend.as_str();
    while let Some(at) = rest.find("{{") {
        let after = &rest[at + 2..];
        let end = after.find("}}").unwrap_or(after.len());
        labels.insert(after[..end].trim().to_owned());
        rest = &after[end.min(after.len())..];
    }
    Parsed {
        metrics,
        labels,
        equals,
    }
}

/// A scrape: the declared type of every family, and for every sample name the values seen of
/// each of its labels.
#[derive(Debug, Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    samples: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

fn parse_scrape(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                scrape.types.insert(name.to_owned(), kind.to_owned());
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = scrape
            .samples
            .entry(line[..name_end].to_owned())
            .or_default();
        if !line[name_end..].starts_with('{') {
            continue;
        }
        // label="value",… with values that may hold commas, braces or escaped quotes.
        let (mut key, mut value) = (String::new(), String::new());
        let (mut in_value, mut escaped) = (false, false);
        for c in line[name_end + 1..].chars() {
            if in_value {
                if escaped {
                    value.push(c);
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_value = false;
                    labels
                        .entry(key.trim().to_owned())
                        .or_default()
                        .insert(std::mem::take(&mut value));
                    key.clear();
                } else {
                    value.push(c);
                }
                continue;
            }
            match c {
                '"' => in_value = true,
                '=' => {}
                '}' => break,
                ',' => key.clear(),
                _ => key.push(c),
            }
        }
    }
    scrape
}

/// What is wrong with the dashboard against this scrape (empty: nothing).
fn problems(queries: &[Query], scrape: &Scrape) -> Vec<String> {
    let mut problems = Vec::new();
    for query in queries {
        let Parsed {
            metrics,
            labels,
            equals,
        } = parse(query);
        let mut available: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for metric in &metrics {
            let suffix = ["_bucket", "_sum", "_count"]
                .into_iter()
                .find(|suffix| metric.ends_with(suffix));
            let family = suffix.map(|suffix| &metric[..metric.len() - suffix.len()]);
            let family_type = family.and_then(|family| scrape.types.get(family));
            match (suffix, family_type.map(String::as_str)) {
                (Some("_bucket"), Some("histogram"))
                | (Some("_sum" | "_count"), Some("histogram" | "summary"))
                | (None, _) => {}
                (Some(_), _) if scrape.samples.contains_key(metric) => {} // a counter named …_count
                (Some(suffix), kind) => problems.push(format!(
                    "panel {:?}: {metric}: {suffix} of {:?}, which is {}",
                    query.panel,
                    family.unwrap_or_default(),
                    kind.map_or("not in the scrape".to_owned(), |k| format!("a {k}"))
                )),
            }
            if suffix.is_none()
                && matches!(
                    scrape.types.get(metric).map(String::as_str),
                    Some("histogram" | "summary")
                )
            {
                problems.push(format!(
                    "panel {:?}: {metric} is a histogram: use {metric}_bucket/_sum/_count",
                    query.panel
                ));
            }
            match scrape.samples.get(metric) {
                Some(found) => {
                    for (label, values) in found {
                        available
                            .entry(label.clone())
                            .or_default()
                            .extend(values.iter().cloned());
                    }
                }
                None => problems.push(format!(
                    "panel {:?}: metric {metric} is not in floodgate's /metrics",
                    query.panel
                )),
            }
        }
        if metrics.is_empty() {
            problems.push(format!(
                "panel {:?}: {:?} names no floodgate metric",
                query.panel, query.expr
            ));
        }
        for label in labels {
            if TARGET_LABELS.contains(&label.as_str()) || available.contains_key(&label) {
                continue;
            }
            problems.push(format!(
                "panel {:?}: label {label:?} is on none of {metrics:?} (labels there: {:?})",
                query.panel,
                available.keys().collect::<Vec<_>>()
            ));
        }
        for (label, value) in equals {
            if let Some(values) = available.get(&label) {
                if !values.contains(&value) {
                    problems.push(format!(
                        "panel {:?}: {label}={value:?} matches nothing: {label} is one of {values:?}",
                        query.panel
                    ));
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

/// `floodgate check` against the server; its exit code (0 OK, 2 OVER_LIMIT).
fn check(floodgate: &Floodgate, descriptor: &str) -> i32 {
    let output = Command::new(floodgate_bin())
        .args([
            "check",
            "--addr",
            &floodgate.grpc_url(),
            "--domain",
            "dashboard",
            descriptor,
        ])
        .output()
        .unwrap_or_else(|error| panic!("floodgate check: {error}"));
    let code = output.status.code().unwrap_or(-1);
    if code != 0 && code != 2 {
        // Shown with the test's failure: why the call was not answered.
        eprintln!(
            "floodgate check {descriptor} exited {code}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    code
}

fn write_rules(path: &Path, text: &str) {
    let staging = path.with_extension("yaml.tmp");
    std::fs::write(&staging, text).unwrap_or_else(|error| panic!("write rules: {error}"));
    std::fs::rename(&staging, path).unwrap_or_else(|error| panic!("rename rules: {error}"));
}

#[test]
fn every_dashboard_metric_and_label_is_in_a_live_scrape() {
    let text = std::fs::read_to_string(repo_file(DASHBOARD))
        .unwrap_or_else(|error| panic!("cannot read {DASHBOARD}: {error}"));
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|error| panic!("{DASHBOARD}: {error}"));
    let mut all = Vec::new();
    queries(&dashboard["panels"], &mut all);
    let names: BTreeSet<String> = all.iter().flat_map(|q| parse(q).metrics).collect();
    assert!(
        names.len() >= 10,
        "the dashboard should chart floodgate's metrics; it names only {names:?}"
    );

    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let rules = config.join("dashboard.yaml");
    write_rules(&rules, RULES);
    let floodgate = Floodgate::start(&config, &[], dir.path());

    // Allowed, near the limit, then rejected: every per-decision series gets a sample.
    let codes: Vec<i32> = (0..7).map(|_| check(&floodgate, "user=alice")).collect();
    assert_eq!(
        codes,
        [0, 0, 0, 0, 0, 2, 2],
        "5 per hour: five OK, then OVER_LIMIT; log:\n{}",
        floodgate.process.log_text()
    );
    // A reload (the rules changed on disk) for the config-load series.
    write_rules(
        &rules,
        &RULES.replace("requests_per_unit: 5", "requests_per_unit: 6"),
    );

    let deadline = Instant::now() + Duration::from_secs(15);
    let (scrape_text, remaining) = loop {
        let response = common::http::get(floodgate.debug_port, "/metrics", &[])
            .unwrap_or_else(|error| panic!("GET /metrics on the debug port: {error}"));
        assert_eq!(
            response.status, 200,
            "GET /metrics answered {}: {}",
            response.status, response.body
        );
        let remaining = problems(&all, &parse_scrape(&response.body));
        if remaining.is_empty() || Instant::now() > deadline {
            break (response.body, remaining);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        remaining.is_empty(),
        "{DASHBOARD} does not match floodgate's /metrics:\n  {}\n\nthe scrape:\n{scrape_text}",
        remaining.join("\n  ")
    );
}

#[test]
fn the_query_parser_finds_metrics_and_labels() {
    let query = Query {
        panel: "p".into(),
        expr: r#"histogram_quantile(0.99, sum by (le, backend) (rate(floodgate_store_duration_seconds_bucket{backend!="x,y",le="0.1"}[$__rate_interval]))) / sum without (rule) (floodgate_calls_total{decision="over"})"#.into(),
        legend: "{{backend}} p99".into(),
    };
    let parsed = parse(&query);
    assert_eq!(
        parsed.metrics,
        [
            "floodgate_calls_total",
            "floodgate_store_duration_seconds_bucket"
        ]
        .map(str::to_owned)
        .into()
    );
    assert_eq!(
        parsed.labels,
        ["backend", "decision", "le", "rule"]
            .map(str::to_owned)
            .into()
    );
    assert_eq!(
        parsed.equals,
        [("decision", "over"), ("le", "0.1")]
            .map(|(l, v)| (l.to_owned(), v.to_owned()))
            .into()
    );

    let scrape = parse_scrape(
        "# TYPE floodgate_store_duration_seconds histogram\n\
         floodgate_store_duration_seconds_bucket{backend=\"a,\\\"b}\",le=\"0.1\"} 1\n\
         # TYPE floodgate_calls_total counter\n\
         floodgate_calls_total{decision=\"ok\"} 3\n",
    );
    let bucket = &scrape.samples["floodgate_store_duration_seconds_bucket"];
    assert_eq!(bucket["backend"], ["a,\"b}"].map(str::to_owned).into());
    assert_eq!(bucket["le"], ["0.1"].map(str::to_owned).into());
    // `rule` is on neither metric, and no call was decided "over".
    let found = problems(&[query], &scrape);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().any(|p| p.contains("label \"rule\"")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.contains("decision=\"over\"")),
        "{found:?}"
    );
}
