//! Reading a Prometheus text scrape in tests, and checking it with `promtool`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of a scrape.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .map(|line| parse_sample(line).unwrap_or_else(|| panic!("bad sample line {line:?}")))
            .collect();
        Scrape {
            text: text.to_owned(),
            samples,
        }
    }

    /// The value of the sample with exactly these labels, if present.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|sample| sample.name == name && sample.labels == wanted)
            .map(|sample| sample.value)
    }

    /// Like [`Scrape::get`], failing the test with the whole scrape when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?} in the scrape:\n{}", self.text))
    }

    /// Every sample called `name`.
    pub fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

/// `GET /metrics` of a floodgate debug port, parsed.
pub fn scrape(debug_port: u16) -> Scrape {
    let response = crate::http::get(debug_port, "/metrics", &[])
        .unwrap_or_else(|error| panic!("GET /metrics: {error}"));
    assert_eq!(response.status, 200, "GET /metrics: {}", response.body);
    Scrape::parse(&response.body)
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    let Some((name, rest)) = series.split_once('{') else {
        return Some(Sample {
            name: series.to_owned(),
            labels: BTreeMap::new(),
            value,
        });
    };
    let body = rest.strip_suffix('}')?;
    Some(Sample {
        name: name.to_owned(),
        labels: parse_labels(body)?,
        value,
    })
}

/// `a="x",b="y\"z"`: values are quoted with `\\`, `\"` and `\n` escapes.
fn parse_labels(body: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut chars = body.chars().peekable();
    loop {
        let mut key = String::new();
        for c in chars.by_ref() {
            if c == '=' {
                break;
            }
            key.push(c);
        }
        if key.is_empty() {
            return Some(labels);
        }
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        }
        labels.insert(key.trim().to_owned(), value);
        match chars.next() {
            Some(',') => continue,
            None => return Some(labels),
            Some(_) => return None,
        }
    }
}

/// Runs `promtool check metrics` on `text` and fails the test on any problem it reports. A
/// missing promtool fails too: CI installs it (Debian package `prometheus`).
pub fn promtool_check(text: &str) {
    let (status, said) = promtool_output(text);
    assert!(
        status.success(),
        "promtool check metrics failed ({status}):\n{said}\n--- scrape ---\n{text}"
    );
}

/// `promtool check metrics` on `text`: its exit status and what it said (stdout, then stderr).
/// A missing promtool fails the test.
pub fn promtool_output(text: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("cannot run promtool ({error}): install it with `apt-get install prometheus`")
        });
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .unwrap_or_else(|error| panic!("cannot write to promtool: {error}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("promtool did not finish: {error}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status, said)
}
