//! Envoy Gateway's "Global Ratelimit" Grafana dashboard against floodgate: floodgate runs as
//! Envoy Gateway runs the reference (`USE_PROMETHEUS=true`, `PROMETHEUS_ADDR`,
//! `PROMETHEUS_MAPPER_YAML` naming Envoy Gateway's statsd_exporter mapping) on rules in the
//! shape Envoy Gateway renders, a real Prometheus scrapes it as pod discovery would (with the
//! pod's `app_kubernetes_io_component=ratelimit` label), and every query of the dashboard,
//! unchanged (`fixtures/envoy-gateway/`, see its `ORIGIN.md`), is evaluated through
//! Prometheus's HTTP API: each returns data, with the reference's counts.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::prometheus::{self, ScrapeJob};
use floodgate_testkit::{free_port, http, repo_file, rls, tempdir, wait_for_port, Floodgate};
use serde_json::Value;

const FIXTURES: &str = "tests/operations/fixtures/envoy-gateway";

/// The route's descriptor entry as Envoy Gateway renders it: key and value alike.
const ROUTE: &str = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
const MATCH: &str = "rule-0-match-0";

/// The rules' limit is 3 per hour; its near-limit threshold is floor(3 × 0.8) = 2
/// (`NEAR_LIMIT_RATIO`'s default). One hit a call: hits 1 and 2 are within, hit 3 is within
/// and past the threshold (near), hits 4 and 5 are over — as the reference counts them.
const ANSWERS: [Code; 5] = [
    Code::Ok,
    Code::Ok,
    Code::Ok,
    Code::OverLimit,
    Code::OverLimit,
];
const NEAR_LIMIT: f64 = 1.0;
const OVER_LIMIT: f64 = 2.0;

/// How long each wait may take: Prometheus's first scrape, then every query's data.
const WAIT: Duration = Duration::from_secs(20);

fn fixture(name: &str) -> std::path::PathBuf {
    repo_file(&format!("{FIXTURES}/{name}"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

/// Every `expr` of the dashboard's panels (and of panels nested in rows), with its panel's
/// title.
fn exprs(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, found: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("").to_owned();
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    found.push((title.clone(), expr.to_owned()));
                }
            }
            walk(&panel["panels"], found);
        }
    }
    let mut found = Vec::new();
    walk(&dashboard["panels"], &mut found);
    found
}

/// The dashboard's variables that have one current value (`DefaultDomain` among them), by
/// name, as Grafana substitutes them.
fn variables(dashboard: &Value) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|variable| {
            let name = variable["name"].as_str()?;
            let value = variable["current"]["value"].as_str()?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect();
    // Longest first, so that `$ab` is not read as `$a` followed by `b`.
    found.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    found
}

/// `expr` with the dashboard's variables (`$name` and `${name}`) replaced by their values.
fn substitute(expr: &str, variables: &[(String, String)]) -> String {
    variables
        .iter()
        .fold(expr.to_owned(), |expr, (name, value)| {
            expr.replace(&format!("${{{name}}}"), value)
                .replace(&format!("${name}"), value)
        })
}

/// The result vector of an instant query, or why there is none: the HTTP status and body when
/// Prometheus did not answer a vector.
fn evaluate(port: u16, expr: &str) -> (Result<Vec<f64>, String>, String) {
    let (status, body) = match prometheus::query(port, expr) {
        Ok(answer) => answer,
        Err(error) => return (Err(format!("no answer: {error}")), String::new()),
    };
    let parsed: Value = match serde_json::from_str(&body) {
        Ok(parsed) => parsed,
        Err(error) => return (Err(format!("HTTP {status}, not JSON: {error}")), body),
    };
    if status != 200 || parsed["status"] != "success" || parsed["data"]["resultType"] != "vector" {
        return (Err(format!("HTTP {status}, not a vector")), body);
    }
    let values = parsed["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|sample| {
            sample["value"][1]
                .as_str()
                .and_then(|value| value.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        })
        .collect();
    (Ok(values), body)
}

/// What one of the dashboard's queries must return with the calls this test makes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expected {
    /// Nothing: the metric is one only a Go program has.
    Empty,
    /// One series of this value.
    Exactly(f64),
    /// One series above zero.
    Positive,
    /// Data, of any value (a query this test does not know the meaning of).
    Data,
}

fn expected(expr: &str) -> Expected {
    // `go_memstats_*` is the Go runtime's (the reference is a Go program; client_golang
    // serves it). floodgate is not written in Go, so it has no such series: the CPU Fraction
    // panel (`go_memstats_gc_cpu_fraction`) stays empty, whatever the mapping.
    if expr.contains("go_memstats_") {
        Expected::Empty
    } else if expr.contains("ratelimit_service_rate_limit_total_hits") {
        Expected::Exactly(ANSWERS.len() as f64)
    } else if expr.contains("ratelimit_service_rate_limit_near_limit") {
        Expected::Exactly(NEAR_LIMIT)
    } else if expr.contains("ratelimit_service_rate_limit_over_limit") {
        Expected::Exactly(OVER_LIMIT)
    } else if expr.contains("process_resident_memory_bytes")
        || expr.contains("process_virtual_memory_bytes")
    {
        Expected::Positive
    } else {
        Expected::Data
    }
}

/// Whether `values` are what `expected` asks for; `None` while it may still come (no data yet).
fn judge(expected: Expected, values: &[f64]) -> Option<Result<(), String>> {
    let one = |check: &dyn Fn(f64) -> bool, want: &str| match values {
        [] => None,
        [value] if check(*value) => Some(Ok(())),
        other => Some(Err(format!("want one series {want}, got {other:?}"))),
    };
    match expected {
        Expected::Empty if values.is_empty() => Some(Ok(())),
        Expected::Empty => Some(Err(format!("want no series, got {values:?}"))),
        Expected::Exactly(want) => one(&|value| value == want, &format!("of {want}")),
        Expected::Positive => one(&|value| value > 0.0, "above 0"),
        Expected::Data if values.is_empty() => None,
        Expected::Data => Some(Ok(())),
    }
}

/// One query of the dashboard, evaluated.
struct Checked {
    title: String,
    expr: String,
    expected: Expected,
    verdict: Option<Result<(), String>>,
    response: String,
}

#[tokio::test]
async fn every_query_of_envoy_gateways_dashboard_returns_data() {
    let dashboard: Value = serde_json::from_str(&read(&fixture("global-ratelimit.json")))
        .unwrap_or_else(|error| panic!("global-ratelimit.json: {error}"));
    let variables = variables(&dashboard);
    let domain = variables
        .iter()
        .find(|(name, _)| name == "DefaultDomain")
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| panic!("no DefaultDomain variable: {variables:?}"));
    let rules = read(&fixture("ratelimit.yaml"));
    assert!(
        rules
            .lines()
            .any(|line| line == format!("domain: {domain}")),
        "the rules are for the dashboard's DefaultDomain ({domain}):\n{rules}"
    );
    let queries: Vec<(String, String)> = exprs(&dashboard)
        .into_iter()
        .map(|(title, expr)| (title, substitute(&expr, &variables)))
        .collect();
    assert!(!queries.is_empty(), "the dashboard has queries");
    for (title, expr) in &queries {
        assert!(
            !expr.contains('$'),
            "{title}: a variable this test does not substitute: {expr}"
        );
    }

    // floodgate as Envoy Gateway runs the reference, on its rules.
    let dir = tempdir();
    let config = dir.path().join("ratelimit.yaml");
    std::fs::write(&config, &rules).unwrap_or_else(|error| panic!("write rules: {error}"));
    let stats_port = free_port();
    let stats_addr = format!("127.0.0.1:{stats_port}");
    let mapping = fixture("statsd_conf.yaml");
    let mapping = mapping.to_string_lossy();
    let floodgate = Floodgate::start_with_env(
        &config,
        &[],
        &[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", stats_addr.as_str()),
            ("PROMETHEUS_MAPPER_YAML", mapping.as_ref()),
        ],
        dir.path(),
    );
    wait_for_port(
        stats_port,
        Duration::from_secs(10),
        "the reference-stats listener",
    );

    // Envoy's descriptor for the route's rule: within, near and over the limit.
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let entries: &[(&str, &str)] = &[(ROUTE, ROUTE), (MATCH, MATCH)];
    for (call, answer) in ANSWERS.iter().enumerate() {
        let response = rls::call(&mut client, rls::request(&domain, &[entries]))
            .await
            .unwrap_or_else(|status| panic!("call {call}: {status:?}"));
        assert_eq!(
            response.overall_code, *answer as i32,
            "call {call}: {response:?}"
        );
    }

    // Prometheus scrapes floodgate's listener as pod discovery would, the pod's labels
    // attached; the calls are all made, so the first scrape holds the final counts.
    let prometheus_dir = floodgate_testkit::subdir(dir.path(), "prometheus");
    let (_prometheus, prometheus_port) = prometheus::start(
        &prometheus_dir,
        &[ScrapeJob {
            name: "floodgate",
            port: stats_port,
            labels: &[("app_kubernetes_io_component", "ratelimit")],
        }],
    );
    let scraped = Instant::now() + WAIT;
    loop {
        let (up, body) = evaluate(prometheus_port, "up{job=\"floodgate\"} == 1");
        if up.is_ok_and(|values| !values.is_empty()) {
            break;
        }
        assert!(
            Instant::now() < scraped,
            "Prometheus did not scrape floodgate within {WAIT:?}: {body}\n--- prometheus.log ---\n{}",
            std::fs::read_to_string(prometheus_dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // Every query, until it has data or the wait is over. Those that must stay empty are
    // judged last, once Prometheus has scraped several times.
    let mut checked: Vec<Checked> = queries
        .into_iter()
        .map(|(title, expr)| Checked {
            expected: expected(&expr),
            title,
            expr,
            verdict: None,
            response: String::new(),
        })
        .collect();
    let deadline = Instant::now() + WAIT;
    loop {
        for query in checked
            .iter_mut()
            .filter(|query| query.verdict.is_none() && query.expected != Expected::Empty)
        {
            let (values, body) = evaluate(prometheus_port, &query.expr);
            query.response = body;
            query.verdict = match values {
                Ok(values) => judge(query.expected, &values),
                Err(error) => Some(Err(error)),
            };
        }
        let waiting = checked
            .iter()
            .any(|query| query.verdict.is_none() && query.expected != Expected::Empty);
        if !waiting || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for query in checked
        .iter_mut()
        .filter(|query| query.expected == Expected::Empty)
    {
        let (values, body) = evaluate(prometheus_port, &query.expr);
        query.response = body;
        query.verdict =
            Some(values.and_then(|values| judge(Expected::Empty, &values).unwrap_or(Ok(()))));
    }

    let mut report = String::new();
    let mut failed = 0;
    for query in &checked {
        let verdict = match &query.verdict {
            Some(Ok(())) => "passes".to_owned(),
            Some(Err(why)) => {
                failed += 1;
                format!("FAILS: {why}")
            }
            None => {
                failed += 1;
                format!("FAILS: no data within {WAIT:?}")
            }
        };
        report.push_str(&format!(
            "{}: {verdict}\n  expected: {:?}\n  query: {}\n  response: {}\n",
            query.title, query.expected, query.expr, query.response
        ));
    }
    if failed == 0 {
        eprintln!("{report}");
        return;
    }
    let scrape = http::get(stats_port, "/metrics", &[])
        .map(|response| response.body)
        .unwrap_or_else(|error| format!("cannot scrape: {error}"));
    let said: Vec<String> = floodgate
        .process
        .log_text()
        .lines()
        .filter(|line| line.contains("PROMETHEUS"))
        .map(str::to_owned)
        .collect();
    panic!(
        "{failed} of the dashboard's {} queries fail against floodgate:\n{report}\
         --- floodgate's scrape of {stats_addr}/metrics ---\n{scrape}\n\
         --- floodgate's log on PROMETHEUS_* ---\n{}",
        checked.len(),
        said.join("\n")
    );
}
