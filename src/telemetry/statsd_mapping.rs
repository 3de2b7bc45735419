//! statsd_exporter mapping files: how a statsd name becomes a Prometheus metric name and
//! labels.
//!
//! envoyproxy/ratelimit's Prometheus listener does not name its series itself: it feeds its
//! statsd names (`ratelimit.service.rate_limit.shop.tenant_a.over_limit`) through
//! prometheus/statsd_exporter's mapper, with the file `PROMETHEUS_MAPPER_YAML` names (the
//! format of statsd_exporter's `--statsd.mapping-config`; Envoy Gateway passes one) or, without
//! it, the default embedded here as `reference_default_mapping.yaml` (the reference's
//! `src/stats/prom/default_mapper.yaml`, byte for byte). This module reads such a file and maps
//! one name; it holds no state and does no I/O but [`MetricMapper::from_file`].
//!
//! It follows statsd_exporter v0.26.1, the version the reference is built with, including its
//! legacy keys (`timer_type`, top-level `buckets` and `quantiles`, `match_metric_type: timer`),
//! which later versions dropped but the reference's default still uses:
//!
//! - Glob mappings are tried before regex mappings, each in file order; the first whose pattern
//!   and `match_metric_type` fit wins (statsd_exporter's glob FSM, with ordering on, then its
//!   regex list). In a glob, `*` matches any run of characters other than `.`, and each is a
//!   capture; the whole name must match. A regex is searched for as statsd_exporter searches
//!   (Go's `FindStringSubmatchIndex`): it is not anchored, so anchor it with `^…$` to match
//!   whole names only.
//! - `name` and label values expand `$1`, `${1}` and, for regexes, named groups; what does not
//!   name a capture expands to nothing (`$1_total` names a group `1_total`: write
//!   `${1}_total`), as in Go.
//! - Metric names, mapped or not, are escaped as statsd_exporter escapes them: every character
//!   but `[a-zA-Z0-9_]` becomes `_` (`:` too), a run of dashes one `_`, and a leading digit
//!   gets a `_` in front. A name that expands to nothing is dropped, as statsd_exporter drops it.
//!
//! Where statsd_exporter would accept what cannot work, loading refuses it with a message that
//! names the file, the mapping and the fix: non-ascending or empty buckets, quantiles outside
//! (0, 1). Where it refuses what is harmless, this accepts: a `name` with characters to escape
//! or named groups, partial globs (`foo_*`), one-letter label names, `action: drop` without a
//! `name`. Unknown keys are ignored (v0.26.1 reads files leniently) with a warning; so are
//! `ttl`, `honor_labels` (the reference's events carry no labels to honour),
//! `glob_disable_ordering`, the native histogram options and the summaries' `max_age`,
//! `age_buckets`, `buf_cap` and quantile errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use regex::{Captures, Regex};
use serde_yaml::{Mapping, Value};

/// envoyproxy/ratelimit's `src/stats/prom/default_mapper.yaml`.
const REFERENCE_DEFAULT: &str = include_str!("reference_default_mapping.yaml");

/// What the reference removes (the first occurrence only) when
/// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=true`; Envoy Gateway's mapping lacks it too.
const RESPONSE_TIME_SCALE_LINE: &str = "    scale: 0.001\n";

const REFERENCE_DEFAULT_ORIGIN: &str =
    "the embedded default (envoyproxy/ratelimit's src/stats/prom/default_mapper.yaml)";

/// statsd_exporter's histogram buckets when none are given (client_golang's `DefBuckets`).
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// statsd_exporter's summary quantiles when none are given.
pub const DEFAULT_QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// What kind of statsd metric is being mapped (statsd_exporter's `match_metric_type`: counter,
/// gauge, observer; a statsd timer is an observer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatKind {
    Counter,
    Gauge,
    Observer,
}

/// How an observer (timer) is exported.
#[derive(Debug, Clone, PartialEq)]
pub enum Observer {
    /// Upper bounds, strictly ascending ([`DEFAULT_BUCKETS`] when the file gives none).
    Histogram { buckets: Vec<f64> },
    /// Quantiles in (0, 1) ([`DEFAULT_QUANTILES`] when the file gives none).
    Summary { quantiles: Vec<f64> },
}

impl Observer {
    fn default_summary() -> Self {
        Observer::Summary {
            quantiles: DEFAULT_QUANTILES.to_vec(),
        }
    }
}

/// The Prometheus series one statsd name becomes.
#[derive(Debug, Clone, PartialEq)]
pub struct MappedMetric {
    /// A valid Prometheus metric name.
    pub name: String,
    /// Sorted by label name; valid label names; values after `$n` expansion.
    pub labels: Vec<(String, String)>,
    /// Meaningful only for [`StatKind::Observer`].
    pub observer: Observer,
    /// 1.0 unless the mapping says `scale:`; observed values are multiplied by it.
    pub scale: f64,
    pub help: Option<String>,
}

/// What becomes of one statsd name.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    /// Not exported: `action: drop`, or a mapping whose `name` expanded to nothing.
    Drop,
    Metric(MappedMetric),
}

/// A parsed mapping file, every pattern compiled.
#[derive(Debug, Clone)]
pub struct MetricMapper {
    globs: Vec<Rule>,
    regexes: Vec<Rule>,
    /// How observers no mapping fits are exported (the file's `defaults`).
    unmapped_observer: Observer,
}

impl Default for MetricMapper {
    /// No mappings: every name exported escaped, observers as summaries.
    fn default() -> Self {
        Self {
            globs: Vec::new(),
            regexes: Vec::new(),
            unmapped_observer: Observer::default_summary(),
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    pattern: Regex,
    kind: Option<StatKind>,
    action: RuleAction,
}

#[derive(Debug, Clone)]
enum RuleAction {
    Drop,
    Map(Template),
}

/// A mapping's output before its captures are filled in.
#[derive(Debug, Clone)]
struct Template {
    name: String,
    labels: Vec<(String, String)>,
    observer: Observer,
    scale: f64,
    help: Option<String>,
}

impl MetricMapper {
    /// Parses a mapping file's text; `origin` (a path) names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Self, MappingError> {
        let mut unknown = BTreeSet::new();
        let mapper = parse_document(text, origin, &mut unknown)?;
        for key in unknown {
            tracing::warn!(
                file = origin,
                key = %key,
                "statsd mapping: unknown key ignored (statsd_exporter ignores it too)"
            );
        }
        Ok(mapper)
    }

    /// Reads and parses a mapping file.
    pub fn from_file(path: &Path) -> Result<Self, MappingError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| MappingError::Read {
            path: origin.clone(),
            source,
        })?;
        Self::from_yaml(&text, &origin)
    }

    /// The reference's default mapping (embedded), with `scale: 0.001` on the response time
    /// (milliseconds exported as seconds) or, for `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`,
    /// without it (which is also Envoy Gateway's mapping).
    pub fn reference_default(response_time_as_milliseconds: bool) -> Self {
        let text = reference_default_text(response_time_as_milliseconds);
        match Self::from_yaml(&text, REFERENCE_DEFAULT_ORIGIN) {
            Ok(mapper) => mapper,
            Err(error) => {
                // Unreachable while the unit tests pass; a build that breaks the embedded file
                // must still serve, as the reference does when its mapping fails to load.
                tracing::error!(
                    %error,
                    "the embedded statsd mapping does not load; names are exported unmapped"
                );
                Self::default()
            }
        }
    }

    /// How many mappings the file holds (statsd_exporter's `statsd_exporter_loaded_mappings`).
    pub fn mapping_count(&self) -> usize {
        self.globs.len() + self.regexes.len()
    }

    /// Maps one statsd name (e.g.
    /// `ratelimit.service.rate_limit.shop.service_checkout.customer.over_limit`).
    pub fn map(&self, statsd_name: &str, kind: StatKind) -> Mapped {
        for rule in self.globs.iter().chain(&self.regexes) {
            if rule.kind.is_some_and(|wanted| wanted != kind) {
                continue;
            }
            let Some(captures) = rule.pattern.captures(statsd_name) else {
                continue;
            };
            return match &rule.action {
                RuleAction::Drop => Mapped::Drop,
                RuleAction::Map(template) => template.fill(&captures, statsd_name),
            };
        }
        let name = escape_metric_name(statsd_name);
        if name.is_empty() {
            return Mapped::Drop;
        }
        Mapped::Metric(MappedMetric {
            name,
            labels: Vec::new(),
            observer: self.unmapped_observer.clone(),
            scale: 1.0,
            help: None,
        })
    }
}

impl Template {
    fn fill(&self, captures: &Captures<'_>, statsd_name: &str) -> Mapped {
        let mut expanded = String::new();
        captures.expand(&self.name, &mut expanded);
        let name = escape_metric_name(&expanded);
        if name.is_empty() {
            tracing::debug!(
                statsd_name,
                template = %self.name,
                "statsd mapping: the metric name expands to nothing; dropped"
            );
            return Mapped::Drop;
        }
        let labels = self
            .labels
            .iter()
            .map(|(label, template)| {
                let mut value = String::new();
                captures.expand(template, &mut value);
                (label.clone(), value)
            })
            .collect();
        Mapped::Metric(MappedMetric {
            name,
            labels,
            observer: self.observer.clone(),
            scale: self.scale,
            help: self.help.clone(),
        })
    }
}

fn reference_default_text(response_time_as_milliseconds: bool) -> String {
    if response_time_as_milliseconds {
        REFERENCE_DEFAULT.replacen(RESPONSE_TIME_SCALE_LINE, "", 1)
    } else {
        REFERENCE_DEFAULT.to_owned()
    }
}

/// statsd_exporter's `EscapeMetricName`, character for character.
pub fn escape_metric_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    let mut previous = None;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if c == '-' && previous == Some('-') {
            // statsd_exporter keeps double dashes for mappings that use them: a run is one `_`.
            continue;
        } else {
            out.push('_');
        }
        previous = Some(c);
    }
    out
}

/// A mapping file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    #[error("cannot read the statsd mapping file {path}: {source}; check that PROMETHEUS_MAPPER_YAML names a readable file")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the statsd mapping file {origin} is not valid YAML: {message}; fix the syntax there")]
    Yaml {
        origin: String,
        /// 1-based, when the parser knows.
        line: Option<usize>,
        column: Option<usize>,
        message: String,
    },
    #[error("the statsd mapping file {origin}, {place}: {problem}")]
    Invalid {
        origin: String,
        place: Place,
        problem: Problem,
    },
}

/// Where in a mapping file a [`Problem`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    TopLevel,
    Defaults,
    /// `number` counts from 1 in file order; `pattern` is its `match`, when it has one.
    Mapping {
        number: usize,
        pattern: Option<String>,
    },
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::TopLevel => f.write_str("at the top level"),
            Place::Defaults => f.write_str("under `defaults`"),
            Place::Mapping {
                number,
                pattern: Some(pattern),
            } => write!(f, "mapping {number} (match {pattern:?})"),
            Place::Mapping {
                number,
                pattern: None,
            } => write!(f, "mapping {number}"),
        }
    }
}

/// What is wrong in a mapping file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("`{key}` must be {expected}, not {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("`match` is missing: give the statsd name pattern this mapping applies to")]
    MissingMatch,
    #[error("`name` is missing: give the Prometheus metric name, or `action: drop` to drop what matches")]
    MissingName,
    #[error("`match` {pattern:?} is not a valid regular expression: {message}; fix it, or set `match_type: glob` if it is a glob")]
    InvalidRegex { pattern: String, message: String },
    #[error("label name {name:?} is not a valid Prometheus label name: use letters, digits and `_`, not starting with a digit")]
    InvalidLabelName { name: String },
    #[error("`{key}: {value}` is not one of {allowed}")]
    UnknownValue {
        key: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error(
        "`{key}` is empty: list at least one bucket upper bound, or remove it for the defaults"
    )]
    EmptyBuckets { key: &'static str },
    #[error("`{key}` must ascend strictly, but {previous} is followed by {next}; sort the bounds and remove repeats")]
    UnorderedBuckets {
        key: &'static str,
        previous: f64,
        next: f64,
    },
    #[error("`{key}` holds {value}, which is not a bucket bound: give finite numbers")]
    InvalidBucket { key: &'static str, value: f64 },
    #[error(
        "`{key}` holds the quantile {value}, outside (0, 1): give quantiles such as 0.5 or 0.99"
    )]
    QuantileOutOfRange { key: &'static str, value: f64 },
    #[error("`{options}` does not apply to observer_type {observer}: remove it, or change observer_type")]
    OptionsMismatch {
        options: &'static str,
        observer: &'static str,
    },
    #[error("both `{legacy}` and `{current}` are given: keep `{current}` only")]
    LegacyConflict {
        legacy: &'static str,
        current: &'static str,
    },
    #[error("`scale` must be a finite number, not {value}")]
    InvalidScale { value: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MatchType {
    Glob,
    Regex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObserverType {
    Histogram,
    Summary,
}

impl ObserverType {
    fn name(self) -> &'static str {
        match self {
            ObserverType::Histogram => "histogram",
            ObserverType::Summary => "summary",
        }
    }
}

/// The file's `defaults`, resolved.
struct Defaults {
    /// `None`: not set, which is a summary, but one that takes `histogram_options` silently.
    observer: Option<ObserverType>,
    match_type: MatchType,
    buckets: Vec<f64>,
    quantiles: Vec<f64>,
}

const TOP_KEYS: &[&str] = &["mappings", "defaults"];
const DEFAULTS_KEYS: &[&str] = &[
    "observer_type",
    "timer_type",
    "match_type",
    "glob_disable_ordering",
    "ttl",
    "summary_options",
    "histogram_options",
    "buckets",
    "quantiles",
];
const MAPPING_KEYS: &[&str] = &[
    "match",
    "name",
    "labels",
    "honor_labels",
    "observer_type",
    "timer_type",
    "buckets",
    "quantiles",
    "match_type",
    "help",
    "action",
    "match_metric_type",
    "ttl",
    "summary_options",
    "histogram_options",
    "scale",
];
const HISTOGRAM_OPTION_KEYS: &[&str] = &[
    "buckets",
    "native_histogram_bucket_factor",
    "native_histogram_max_buckets",
];
const SUMMARY_OPTION_KEYS: &[&str] = &["quantiles", "max_age", "age_buckets", "buf_cap"];
const OBJECTIVE_KEYS: &[&str] = &["quantile", "error"];

fn parse_document(
    text: &str,
    origin: &str,
    unknown: &mut BTreeSet<String>,
) -> Result<MetricMapper, MappingError> {
    let yaml_error = |error: serde_yaml::Error| {
        let location = error.location();
        MappingError::Yaml {
            origin: origin.to_owned(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            message: error.to_string(),
        }
    };
    let invalid = |place: Place, problem: Problem| MappingError::Invalid {
        origin: origin.to_owned(),
        place,
        problem,
    };

    let mut document: Value = serde_yaml::from_str(text).map_err(yaml_error)?;
    // yaml.v2, statsd_exporter's parser, merges `<<: *anchor` keys: files may share labels so.
    document.apply_merge().map_err(yaml_error)?;
    let top = match untag(&document) {
        Value::Null => return Ok(MetricMapper::default()),
        Value::Mapping(top) => top,
        other => {
            return Err(invalid(
                Place::TopLevel,
                wrong_type(
                    "(document)",
                    "a mapping with `mappings` and `defaults`",
                    other,
                ),
            ))
        }
    };
    note_unknown(top, TOP_KEYS, "", unknown);

    let defaults = match present(top, "defaults") {
        None => parse_defaults(&Mapping::new(), unknown),
        Some(Value::Mapping(defaults)) => parse_defaults(defaults, unknown),
        Some(other) => Err(wrong_type("defaults", "a mapping", other)),
    }
    .map_err(|problem| invalid(Place::Defaults, problem))?;

    let entries: &[Value] = match present(top, "mappings") {
        None => &[],
        Some(Value::Sequence(entries)) => entries,
        Some(other) => {
            return Err(invalid(
                Place::TopLevel,
                wrong_type("mappings", "a list of mappings", other),
            ))
        }
    };

    let mut mapper = MetricMapper {
        globs: Vec::new(),
        regexes: Vec::new(),
        unmapped_observer: match defaults.observer.unwrap_or(ObserverType::Summary) {
            ObserverType::Histogram => Observer::Histogram {
                buckets: defaults.buckets.clone(),
            },
            ObserverType::Summary => Observer::Summary {
                quantiles: defaults.quantiles.clone(),
            },
        },
    };
    for (index, entry) in entries.iter().enumerate() {
        let place = || Place::Mapping {
            number: index + 1,
            pattern: match untag(entry) {
                Value::Mapping(fields) => present(fields, "match").and_then(scalar_text),
                _ => None,
            },
        };
        let Value::Mapping(fields) = untag(entry) else {
            return Err(invalid(
                place(),
                wrong_type("(mapping)", "a mapping with `match` and `name`", entry),
            ));
        };
        let (match_type, rule) = parse_mapping(fields, &defaults, unknown)
            .map_err(|problem| invalid(place(), problem))?;
        match match_type {
            MatchType::Glob => mapper.globs.push(rule),
            MatchType::Regex => mapper.regexes.push(rule),
        }
    }
    Ok(mapper)
}

fn parse_defaults(fields: &Mapping, unknown: &mut BTreeSet<String>) -> Result<Defaults, Problem> {
    note_unknown(fields, DEFAULTS_KEYS, "defaults.", unknown);
    let observer = parse_observer_type(fields)?;
    let match_type = match string_field(fields, "match_type")? {
        Some(value) => parse_match_type(&value)?,
        None => MatchType::Glob,
    };
    let histogram = options(
        fields,
        "histogram_options",
        HISTOGRAM_OPTION_KEYS,
        "defaults.histogram_options.",
        unknown,
    )?;
    let summary = options(
        fields,
        "summary_options",
        SUMMARY_OPTION_KEYS,
        "defaults.summary_options.",
        unknown,
    )?;

    // As statsd_exporter: the nested option wins, the legacy key fills in when it is empty.
    let mut buckets = match histogram {
        Some(options) => buckets_field(options, "histogram_options.buckets")?,
        None => None,
    }
    .unwrap_or_default();
    if buckets.is_empty() {
        buckets = buckets_field(fields, "buckets")?.unwrap_or_default();
    }
    if buckets.is_empty() {
        buckets = DEFAULT_BUCKETS.to_vec();
    }
    let mut quantiles = match summary {
        Some(options) => quantiles_field(options, "summary_options.quantiles", unknown)?,
        None => None,
    }
    .unwrap_or_default();
    if quantiles.is_empty() {
        quantiles = quantiles_field(fields, "quantiles", unknown)?.unwrap_or_default();
    }
    if quantiles.is_empty() {
        quantiles = DEFAULT_QUANTILES.to_vec();
    }
    Ok(Defaults {
        observer,
        match_type,
        buckets,
        quantiles,
    })
}

fn parse_mapping(
    fields: &Mapping,
    defaults: &Defaults,
    unknown: &mut BTreeSet<String>,
) -> Result<(MatchType, Rule), Problem> {
    note_unknown(fields, MAPPING_KEYS, "mappings[].", unknown);
    let pattern = string_field(fields, "match")?
        .filter(|pattern| !pattern.is_empty())
        .ok_or(Problem::MissingMatch)?;
    let match_type = match string_field(fields, "match_type")? {
        Some(value) => parse_match_type(&value)?,
        None => defaults.match_type,
    };
    let kind = match string_field(fields, "match_metric_type")? {
        None => None,
        Some(value) => Some(match value.as_str() {
            "counter" => StatKind::Counter,
            "gauge" => StatKind::Gauge,
            // `timer`: statsd_exporter v0.26.1's legacy spelling.
            "observer" | "timer" => StatKind::Observer,
            _ => {
                return Err(Problem::UnknownValue {
                    key: "match_metric_type",
                    value,
                    allowed: "counter, gauge, observer (or the legacy timer)",
                })
            }
        }),
    };
    let drop = match string_field(fields, "action")?.as_deref() {
        None | Some("" | "map") => false,
        Some("drop") => true,
        Some(other) => {
            return Err(Problem::UnknownValue {
                key: "action",
                value: other.to_owned(),
                allowed: "map, drop",
            })
        }
    };
    let name = string_field(fields, "name")?.filter(|name| !name.is_empty());

    let labels = match present(fields, "labels") {
        None => BTreeMap::new(),
        Some(Value::Mapping(labels)) => {
            let mut out = BTreeMap::new();
            for (label, value) in labels {
                let Some(label) = scalar_text(label) else {
                    return Err(wrong_type(
                        "labels",
                        "a mapping of label names to values",
                        label,
                    ));
                };
                if !valid_label_name(&label) {
                    return Err(Problem::InvalidLabelName { name: label });
                }
                let value = match untag(value) {
                    Value::Null => String::new(),
                    other => scalar_text(other)
                        .ok_or_else(|| wrong_type(&format!("labels.{label}"), "a string", other))?,
                };
                out.insert(label, value);
            }
            out
        }
        Some(other) => {
            return Err(wrong_type(
                "labels",
                "a mapping of label names to values",
                other,
            ))
        }
    };

    let observer = resolve_observer(fields, defaults, unknown)?;
    let scale = match present(fields, "scale") {
        None => 1.0,
        Some(value) => {
            let scale = number(value).ok_or_else(|| wrong_type("scale", "a number", value))?;
            if !scale.is_finite() {
                return Err(Problem::InvalidScale { value: scale });
            }
            scale
        }
    };
    let help = string_field(fields, "help")?.filter(|help| !help.is_empty());

    let compiled = match match_type {
        MatchType::Glob => glob_regex(&pattern),
        MatchType::Regex => Regex::new(&pattern),
    }
    .map_err(|error| Problem::InvalidRegex {
        pattern: pattern.clone(),
        message: error.to_string(),
    })?;

    let action = if drop {
        RuleAction::Drop
    } else {
        RuleAction::Map(Template {
            name: name.ok_or(Problem::MissingName)?,
            labels: labels.into_iter().collect(),
            observer,
            scale,
            help,
        })
    };
    Ok((
        match_type,
        Rule {
            pattern: compiled,
            kind,
            action,
        },
    ))
}

/// A mapping's observer: its own type, else the defaults', else a summary; its own buckets or
/// quantiles, else the defaults'.
fn resolve_observer(
    fields: &Mapping,
    defaults: &Defaults,
    unknown: &mut BTreeSet<String>,
) -> Result<Observer, Problem> {
    let histogram = options(
        fields,
        "histogram_options",
        HISTOGRAM_OPTION_KEYS,
        "mappings[].histogram_options.",
        unknown,
    )?;
    let summary = options(
        fields,
        "summary_options",
        SUMMARY_OPTION_KEYS,
        "mappings[].summary_options.",
        unknown,
    )?;
    let explicit = parse_observer_type(fields)?.or(defaults.observer);
    // statsd_exporter refuses options of the other kind only once a type is set somewhere.
    match explicit {
        Some(ObserverType::Histogram) if summary.is_some() => {
            return Err(Problem::OptionsMismatch {
                options: "summary_options",
                observer: ObserverType::Histogram.name(),
            })
        }
        Some(ObserverType::Summary) if histogram.is_some() => {
            return Err(Problem::OptionsMismatch {
                options: "histogram_options",
                observer: ObserverType::Summary.name(),
            })
        }
        _ => {}
    }

    let nested_buckets = match histogram {
        Some(options) => buckets_field(options, "histogram_options.buckets")?,
        None => None,
    };
    let legacy_buckets = buckets_field(fields, "buckets")?;
    if nested_buckets.is_some() && legacy_buckets.is_some() {
        return Err(Problem::LegacyConflict {
            legacy: "buckets",
            current: "histogram_options.buckets",
        });
    }
    let nested_quantiles = match summary {
        Some(options) => quantiles_field(options, "summary_options.quantiles", unknown)?,
        None => None,
    };
    let legacy_quantiles = quantiles_field(fields, "quantiles", unknown)?;
    if nested_quantiles.is_some() && legacy_quantiles.is_some() {
        return Err(Problem::LegacyConflict {
            legacy: "quantiles",
            current: "summary_options.quantiles",
        });
    }

    Ok(match explicit.unwrap_or(ObserverType::Summary) {
        ObserverType::Histogram => Observer::Histogram {
            buckets: nested_buckets
                .or(legacy_buckets)
                .unwrap_or_else(|| defaults.buckets.clone()),
        },
        ObserverType::Summary => Observer::Summary {
            quantiles: nested_quantiles
                .or(legacy_quantiles)
                .unwrap_or_else(|| defaults.quantiles.clone()),
        },
    })
}

/// `observer_type`, else the legacy `timer_type`; `None` when neither is there.
fn parse_observer_type(fields: &Mapping) -> Result<Option<ObserverType>, Problem> {
    for key in ["observer_type", "timer_type"] {
        if let Some(value) = string_field(fields, key)? {
            return match value.as_str() {
                "histogram" => Ok(Some(ObserverType::Histogram)),
                // yaml.v2 hands statsd_exporter "" for an empty value, which it reads as summary.
                "summary" | "" => Ok(Some(ObserverType::Summary)),
                _ => Err(Problem::UnknownValue {
                    key,
                    value,
                    allowed: "histogram, summary",
                }),
            };
        }
    }
    Ok(None)
}

fn parse_match_type(value: &str) -> Result<MatchType, Problem> {
    match value {
        "glob" | "" => Ok(MatchType::Glob),
        "regex" => Ok(MatchType::Regex),
        _ => Err(Problem::UnknownValue {
            key: "match_type",
            value: value.to_owned(),
            allowed: "glob, regex",
        }),
    }
}

/// `histogram_options` or `summary_options`: `None` when absent or empty (`key:` alone).
fn options<'a>(
    fields: &'a Mapping,
    key: &'static str,
    known: &[&str],
    prefix: &str,
    unknown: &mut BTreeSet<String>,
) -> Result<Option<&'a Mapping>, Problem> {
    match present(fields, key) {
        None => Ok(None),
        Some(Value::Mapping(options)) => {
            note_unknown(options, known, prefix, unknown);
            Ok(Some(options))
        }
        Some(other) => Err(wrong_type(key, "a mapping", other)),
    }
}

/// A bucket list, checked: `None` when absent.
fn buckets_field(fields: &Mapping, key: &'static str) -> Result<Option<Vec<f64>>, Problem> {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let Some(value) = present(fields, leaf) else {
        return Ok(None);
    };
    let Value::Sequence(items) = value else {
        return Err(wrong_type(key, "a list of numbers", value));
    };
    let mut buckets = Vec::with_capacity(items.len());
    for item in items {
        let bound = number(item).ok_or_else(|| wrong_type(key, "a list of numbers", item))?;
        // +Inf is every histogram's last bucket already; client_golang accepts it as the last.
        if bound.is_nan() || bound == f64::NEG_INFINITY {
            return Err(Problem::InvalidBucket { key, value: bound });
        }
        if let Some(&previous) = buckets.last() {
            if bound <= previous {
                return Err(Problem::UnorderedBuckets {
                    key,
                    previous,
                    next: bound,
                });
            }
        }
        buckets.push(bound);
    }
    if buckets.is_empty() {
        return Err(Problem::EmptyBuckets { key });
    }
    Ok(Some(buckets))
}

/// A quantile list (`- quantile: 0.5` / `error: 0.05` entries), checked: `None` when absent.
fn quantiles_field(
    fields: &Mapping,
    key: &'static str,
    unknown: &mut BTreeSet<String>,
) -> Result<Option<Vec<f64>>, Problem> {
    let leaf = key.rsplit('.').next().unwrap_or(key);
    let Some(value) = present(fields, leaf) else {
        return Ok(None);
    };
    let expected = "a list of `quantile:`/`error:` entries";
    let Value::Sequence(items) = value else {
        return Err(wrong_type(key, expected, value));
    };
    let mut quantiles = Vec::with_capacity(items.len());
    for item in items {
        let Value::Mapping(objective) = untag(item) else {
            return Err(wrong_type(key, expected, item));
        };
        note_unknown(objective, OBJECTIVE_KEYS, "quantiles[].", unknown);
        let quantile = present(objective, "quantile")
            .and_then(number)
            .ok_or_else(|| {
                wrong_type(
                    &format!("{key}[].quantile"),
                    "a number",
                    present(objective, "quantile").unwrap_or(&Value::Null),
                )
            })?;
        if !(quantile > 0.0 && quantile < 1.0) {
            return Err(Problem::QuantileOutOfRange {
                key,
                value: quantile,
            });
        }
        quantiles.push(quantile);
    }
    // Empty is how statsd_exporter says "the defaults": the caller fills them in.
    Ok(Some(quantiles).filter(|q| !q.is_empty()))
}

/// A glob as a regex: `*` is `([^.]*)`, the rest literal, the whole name.
fn glob_regex(pattern: &str) -> Result<Regex, regex::Error> {
    let mut re = String::with_capacity(pattern.len() * 2 + 2);
    re.push('^');
    for (index, literal) in pattern.split('*').enumerate() {
        if index > 0 {
            re.push_str("([^.]*)");
        }
        re.push_str(&regex::escape(literal));
    }
    re.push('$');
    Regex::new(&re)
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The value under `key`, `None` when absent or null (yaml.v2 leaves the field unset then).
fn present<'a>(fields: &'a Mapping, key: &str) -> Option<&'a Value> {
    fields
        .get(key)
        .map(untag)
        .filter(|value| !matches!(value, Value::Null))
}

/// A string field: yaml.v2 takes any scalar's text for a Go string, so `help: 42` is "42".
fn string_field(fields: &Mapping, key: &str) -> Result<Option<String>, Problem> {
    match present(fields, key) {
        None => Ok(None),
        Some(value) => scalar_text(value)
            .map(Some)
            .ok_or_else(|| wrong_type(key, "a string", value)),
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    match untag(value) {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match untag(value) {
        Value::Number(number) => number.as_f64(),
        _ => None,
    }
}

fn untag(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => untag(&tagged.value),
        other => other,
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> Problem {
    let found = match untag(found) {
        Value::Null => "nothing".to_owned(),
        Value::Bool(flag) => format!("the boolean {flag}"),
        Value::Number(number) => format!("the number {number}"),
        Value::String(text) => format!("the string {text:?}"),
        Value::Sequence(_) => "a list".to_owned(),
        Value::Mapping(_) => "a mapping".to_owned(),
        Value::Tagged(_) => "a tagged value".to_owned(),
    };
    Problem::WrongType {
        key: key.to_owned(),
        expected,
        found,
    }
}

fn note_unknown(fields: &Mapping, known: &[&str], prefix: &str, unknown: &mut BTreeSet<String>) {
    for key in fields.keys() {
        let key = scalar_text(key).unwrap_or_else(|| "(a non-scalar key)".to_owned());
        if !known.contains(&key.as_str()) {
            unknown.insert(format!("{prefix}{key}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "/etc/ratelimit/mapper.yaml";

    fn load(text: &str) -> MetricMapper {
        MetricMapper::from_yaml(text, ORIGIN).unwrap_or_else(|e| panic!("{e}"))
    }

    fn load_error(text: &str) -> MappingError {
        match MetricMapper::from_yaml(text, ORIGIN) {
            Ok(_) => panic!("loaded, but should not have:\n{text}"),
            Err(error) => error,
        }
    }

    fn refusal(text: &str) -> (Place, Problem) {
        match load_error(text) {
            MappingError::Invalid {
                origin,
                place,
                problem,
            } => {
                assert_eq!(origin, ORIGIN);
                (place, problem)
            }
            other => panic!("not an Invalid error: {other}"),
        }
    }

    fn metric(mapper: &MetricMapper, name: &str, kind: StatKind) -> MappedMetric {
        match mapper.map(name, kind) {
            Mapped::Metric(metric) => metric,
            Mapped::Drop => panic!("{name} was dropped"),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn strict_reference_default(milliseconds: bool) -> MetricMapper {
        MetricMapper::from_yaml(&reference_default_text(milliseconds), "embedded")
            .unwrap_or_else(|e| panic!("the embedded default does not load: {e}"))
    }

    #[test]
    fn the_embedded_default_loads_both_ways() {
        let seconds = strict_reference_default(false);
        let milliseconds = strict_reference_default(true);
        assert_eq!(seconds.mapping_count(), 15);
        assert_eq!(milliseconds.mapping_count(), 15);
        assert_eq!(
            REFERENCE_DEFAULT.matches(RESPONSE_TIME_SCALE_LINE).count(),
            1
        );
        assert_eq!(
            reference_default_text(true).len() + RESPONSE_TIME_SCALE_LINE.len(),
            REFERENCE_DEFAULT.len()
        );
        assert_eq!(MetricMapper::reference_default(false).mapping_count(), 15);
    }

    #[test]
    fn two_piece_keys_get_domain_and_key1() {
        let mapper = MetricMapper::reference_default(false);
        let m = metric(
            &mapper,
            "ratelimit.service.rate_limit.shop.tenant_a.total_hits",
            StatKind::Counter,
        );
        assert_eq!(m.name, "ratelimit_service_rate_limit_total_hits");
        assert_eq!(
            m.labels,
            labels(&[("domain", "shop"), ("key1", "tenant_a")])
        );
        assert_eq!(m.scale, 1.0);
        assert_eq!(m.help, None);
        for stat in ["near_limit", "over_limit", "within_limit", "shadow_mode"] {
            let m = metric(
                &mapper,
                &format!("ratelimit.service.rate_limit.shop.tenant_a.{stat}"),
                StatKind::Counter,
            );
            assert_eq!(m.name, format!("ratelimit_service_rate_limit_{stat}"));
            assert_eq!(
                m.labels,
                labels(&[("domain", "shop"), ("key1", "tenant_a")])
            );
        }
    }

    #[test]
    fn longer_keys_get_key2_from_the_third_piece() {
        let mapper = MetricMapper::reference_default(false);
        let m = metric(
            &mapper,
            "ratelimit.service.rate_limit.shop.a.b.c.over_limit",
            StatKind::Counter,
        );
        assert_eq!(m.name, "ratelimit_service_rate_limit_over_limit");
        assert_eq!(
            m.labels,
            labels(&[("domain", "shop"), ("key1", "a"), ("key2", "b")])
        );
        let m = metric(
            &mapper,
            "ratelimit.service.rate_limit.shop.service_checkout.customer.within_limit",
            StatKind::Counter,
        );
        assert_eq!(
            m.labels,
            labels(&[
                ("domain", "shop"),
                ("key1", "service_checkout"),
                ("key2", "customer")
            ])
        );
    }

    #[test]
    fn envoy_gateway_keys_with_slashes_and_dashes() {
        let mapper = MetricMapper::reference_default(true);
        let key1 = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example_httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
        let name = format!(
            "ratelimit.service.rate_limit.default/eg/http.{key1}.rule-0-match-0_rule-0-match-0.total_hits"
        );
        let m = metric(&mapper, &name, StatKind::Counter);
        assert_eq!(m.name, "ratelimit_service_rate_limit_total_hits");
        assert_eq!(
            m.labels,
            labels(&[
                ("domain", "default/eg/http"),
                ("key1", key1),
                ("key2", "rule-0-match-0_rule-0-match-0")
            ])
        );
    }

    #[test]
    fn the_response_time_is_a_histogram_in_seconds_or_milliseconds() {
        let name = "ratelimit_server.ShouldRateLimit.response_time";
        for (milliseconds, scale) in [(false, 0.001), (true, 1.0)] {
            let m = metric(
                &MetricMapper::reference_default(milliseconds),
                name,
                StatKind::Observer,
            );
            assert_eq!(m.name, "ratelimit_service_response_time_seconds");
            assert_eq!(m.labels, labels(&[("grpc_method", "ShouldRateLimit")]));
            assert_eq!(
                m.observer,
                Observer::Histogram {
                    buckets: DEFAULT_BUCKETS.to_vec()
                }
            );
            assert_eq!(m.scale, scale);
        }
        let m = metric(
            &MetricMapper::reference_default(false),
            "ratelimit_server.ShouldRateLimit.total_requests",
            StatKind::Counter,
        );
        assert_eq!(m.name, "ratelimit_service_total_requests");
        assert_eq!(m.labels, labels(&[("grpc_method", "ShouldRateLimit")]));
    }

    #[test]
    fn match_metric_type_limits_a_mapping_to_its_kind() {
        let mapper = MetricMapper::reference_default(false);
        let name = "ratelimit.service.call.should_rate_limit.redis_error";
        let m = metric(&mapper, name, StatKind::Counter);
        assert_eq!(m.name, "ratelimit_service_should_rate_limit_error");
        assert_eq!(m.labels, labels(&[("err_type", "redis_error")]));

        let m = metric(&mapper, name, StatKind::Gauge);
        assert_eq!(
            m.name,
            "ratelimit_service_call_should_rate_limit_redis_error"
        );
        assert!(m.labels.is_empty());

        for (stat, expected) in [
            (
                "config_load_success",
                "ratelimit_service_config_load_success",
            ),
            ("config_load_error", "ratelimit_service_config_load_error"),
        ] {
            let name = format!("ratelimit.service.{stat}");
            let m = metric(&mapper, &name, StatKind::Counter);
            assert_eq!(m.name, expected);
            assert!(m.labels.is_empty());
            assert_eq!(
                metric(&mapper, &name, StatKind::Gauge).name,
                format!("ratelimit_service_{stat}")
            );
        }
    }

    #[test]
    fn unmapped_names_are_escaped_as_statsd_exporter_escapes() {
        let mapper = MetricMapper::reference_default(false);
        let m = metric(&mapper, "ratelimit.go.numGoroutines", StatKind::Gauge);
        assert_eq!(m.name, "ratelimit_go_numGoroutines");
        assert!(m.labels.is_empty());
        assert_eq!(m.scale, 1.0);
        assert_eq!(m.observer, Observer::default_summary());

        assert_eq!(escape_metric_name("1st.pass"), "_1st_pass");
        assert_eq!(escape_metric_name("a/b-c d"), "a_b_c_d");
        assert_eq!(escape_metric_name("a--b---c"), "a_b_c");
        assert_eq!(escape_metric_name("a:b"), "a_b");
        assert_eq!(escape_metric_name("é.x"), "__x");
        assert_eq!(escape_metric_name("ok_Name9"), "ok_Name9");
        assert_eq!(mapper.map("", StatKind::Counter), Mapped::Drop);
    }

    #[test]
    fn drop_and_an_empty_name_drop() {
        let mapper = load(
            r#"
mappings:
  - match: "noisy.*"
    action: drop
  - match: "empty.*"
    name: "$2"
  - match: "kept.*"
    name: "kept"
    action: map
"#,
        );
        assert_eq!(mapper.map("noisy.thing", StatKind::Counter), Mapped::Drop);
        assert_eq!(mapper.map("empty.thing", StatKind::Gauge), Mapped::Drop);
        assert_eq!(metric(&mapper, "kept.thing", StatKind::Gauge).name, "kept");
        assert_eq!(metric(&mapper, "noisy", StatKind::Counter).name, "noisy");
    }

    #[test]
    fn globs_come_before_regexes_and_file_order_decides() {
        let mapper = load(
            r#"
mappings:
  - match: 'a\.(.*)'
    match_type: regex
    name: "from_regex"
  - match: "a.*.c"
    name: "first_glob"
    match_metric_type: gauge
  - match: "a.b.*"
    name: "second_glob"
  - match: "a.*.c"
    name: "third_glob"
"#,
        );
        assert_eq!(metric(&mapper, "a.b.c", StatKind::Gauge).name, "first_glob");
        assert_eq!(
            metric(&mapper, "a.b.c", StatKind::Counter).name,
            "second_glob"
        );
        assert_eq!(
            metric(&mapper, "a.x.c", StatKind::Counter).name,
            "third_glob"
        );
        assert_eq!(
            metric(&mapper, "a.x.y", StatKind::Counter).name,
            "from_regex"
        );
        // A glob's `*` stays within one piece; the pieces must all be there.
        assert_eq!(metric(&mapper, "a.b", StatKind::Counter).name, "from_regex");
        assert_eq!(metric(&mapper, "b.b.c", StatKind::Counter).name, "b_b_c");
    }

    #[test]
    fn glob_captures_and_partial_globs() {
        let mapper = load(
            r#"
mappings:
  - match: "app.*.req_*.*"
    name: "${2}_total"
    help: "Requests."
    labels:
      service: "$1"
      status: "${3}xx"
      unknown: "$4"
      literal: "fixed"
      code: 200
  - match: "app.*.*"
    name: "app_$1_total"
"#,
        );
        let m = metric(&mapper, "app.shop.req_get.2", StatKind::Counter);
        assert_eq!(m.name, "get_total");
        assert_eq!(m.help.as_deref(), Some("Requests."));
        assert_eq!(
            m.labels,
            labels(&[
                ("code", "200"),
                ("literal", "fixed"),
                ("service", "shop"),
                ("status", "2xx"),
                ("unknown", "")
            ])
        );
        // Go's expansion: `$1_total` names the group `1_total`, which is not there.
        assert_eq!(metric(&mapper, "app.x.y", StatKind::Counter).name, "app_");
        // Characters a capture brings in are escaped, not refused.
        let m = metric(&mapper, "app.shop.req_get-v2.5", StatKind::Counter);
        assert_eq!(m.name, "get_v2_total");
    }

    #[test]
    fn regexes_expand_numbered_and_named_groups_and_are_not_anchored() {
        let mapper = load(
            r#"
mappings:
  - match: '^svc\.(?P<service>[a-z]+)\.(\d+)$'
    match_type: regex
    name: "svc_${service}"
    labels:
      code: "$2"
      service: "$service"
  - match: 'latency\.(.+)'
    match_type: regex
    name: "latency"
    labels:
      route: "$1"
"#,
        );
        let m = metric(&mapper, "svc.checkout.503", StatKind::Counter);
        assert_eq!(m.name, "svc_checkout");
        assert_eq!(
            m.labels,
            labels(&[("code", "503"), ("service", "checkout")])
        );
        // statsd_exporter searches a regex anywhere in the name.
        let m = metric(&mapper, "edge.latency.a.b", StatKind::Observer);
        assert_eq!(m.name, "latency");
        assert_eq!(m.labels, labels(&[("route", "a.b")]));
    }

    #[test]
    fn defaults_decide_match_type_and_observers() {
        let mapper = load(
            r#"
defaults:
  observer_type: histogram
  match_type: regex
  histogram_options:
    buckets: [0.1, 1, 10]
  glob_disable_ordering: false
  ttl: 1m
mappings:
  - match: 'timer\.(.*)'
    name: "timer"
  - match: 'custom\.(.*)'
    name: "custom"
    histogram_options:
      buckets: [1, 2, 4]
      native_histogram_bucket_factor: 1.1
  - match: 'sum\.(.*)'
    name: "sum"
    observer_type: summary
    summary_options:
      quantiles:
        - quantile: 0.25
          error: 0.01
        - quantile: 0.75
      max_age: 5m
"#,
        );
        assert_eq!(
            metric(&mapper, "timer.x", StatKind::Observer).observer,
            Observer::Histogram {
                buckets: vec![0.1, 1.0, 10.0]
            }
        );
        assert_eq!(
            metric(&mapper, "custom.x", StatKind::Observer).observer,
            Observer::Histogram {
                buckets: vec![1.0, 2.0, 4.0]
            }
        );
        assert_eq!(
            metric(&mapper, "sum.x", StatKind::Observer).observer,
            Observer::Summary {
                quantiles: vec![0.25, 0.75]
            }
        );
        assert_eq!(
            metric(&mapper, "other.x", StatKind::Observer).observer,
            Observer::Histogram {
                buckets: vec![0.1, 1.0, 10.0]
            }
        );
    }

    #[test]
    fn without_defaults_observers_are_summaries_and_histograms_get_default_buckets() {
        let mapper = load(
            r#"
mappings:
  - match: "plain.*"
    name: "plain"
  - match: "hist.*"
    name: "hist"
    observer_type: histogram
"#,
        );
        assert_eq!(
            metric(&mapper, "plain.x", StatKind::Observer).observer,
            Observer::Summary {
                quantiles: DEFAULT_QUANTILES.to_vec()
            }
        );
        assert_eq!(
            metric(&mapper, "hist.x", StatKind::Observer).observer,
            Observer::Histogram {
                buckets: DEFAULT_BUCKETS.to_vec()
            }
        );
        assert_eq!(
            metric(&mapper, "unmapped", StatKind::Observer).observer,
            Observer::Summary {
                quantiles: DEFAULT_QUANTILES.to_vec()
            }
        );
    }

    #[test]
    fn legacy_keys_still_work() {
        let mapper = load(
            r#"
defaults:
  timer_type: summary
  quantiles:
    - quantile: 0.1
      error: 0.01
mappings:
  - match: "a.*"
    name: "a"
    timer_type: histogram
    buckets: [5, 50]
  - match: "b.*"
    name: "b"
    match_metric_type: timer
  - match: "c.*"
    name: "c"
    quantiles:
      - quantile: 0.9
"#,
        );
        assert_eq!(
            metric(&mapper, "a.x", StatKind::Observer).observer,
            Observer::Histogram {
                buckets: vec![5.0, 50.0]
            }
        );
        assert_eq!(metric(&mapper, "b.x", StatKind::Observer).name, "b");
        assert_eq!(metric(&mapper, "b.x", StatKind::Counter).name, "b_x");
        assert_eq!(
            metric(&mapper, "b.x", StatKind::Observer).observer,
            Observer::Summary {
                quantiles: vec![0.1]
            }
        );
        assert_eq!(
            metric(&mapper, "c.x", StatKind::Observer).observer,
            Observer::Summary {
                quantiles: vec![0.9]
            }
        );
    }

    #[test]
    fn unknown_keys_merge_keys_and_empty_files_are_accepted() {
        let mapper = load(
            r#"
some_future_key: 1
base: &base
  match_metric_type: counter
  labels:
    team: "edge"
mappings:
  - <<: *base
    match: "x.*"
    name: "x"
    honor_labels: true
    future_option: yes
"#,
        );
        let m = metric(&mapper, "x.y", StatKind::Counter);
        assert_eq!(m.name, "x");
        assert_eq!(m.labels, labels(&[("team", "edge")]));
        assert_eq!(metric(&mapper, "x.y", StatKind::Gauge).name, "x_y");

        for text in ["", "# nothing\n", "mappings: []\n", "mappings:\n"] {
            let mapper = load(text);
            assert_eq!(mapper.mapping_count(), 0);
            assert_eq!(metric(&mapper, "a.b", StatKind::Counter).name, "a_b");
        }
    }

    #[test]
    fn a_yaml_syntax_error_names_the_file_and_the_place() {
        let error = load_error("mappings:\n  - match: \"a.*\"\n    name: [unclosed\n");
        let MappingError::Yaml {
            origin,
            line,
            column,
            ..
        } = &error
        else {
            panic!("not a YAML error: {error}");
        };
        assert_eq!(origin, ORIGIN);
        assert!(line.is_some() && column.is_some(), "{error}");
        let message = error.to_string();
        assert!(
            message.contains(ORIGIN) && message.contains("line"),
            "{message}"
        );
    }

    #[test]
    fn missing_match_and_name_are_refused() {
        let (place, problem) = refusal("mappings:\n  - name: x\n");
        assert_eq!(
            place,
            Place::Mapping {
                number: 1,
                pattern: None
            }
        );
        assert_eq!(problem, Problem::MissingMatch);

        let text = "mappings:\n  - match: a.*\n    name: a\n  - match: b.*\n";
        let (place, problem) = refusal(text);
        assert_eq!(
            place,
            Place::Mapping {
                number: 2,
                pattern: Some("b.*".to_owned())
            }
        );
        assert_eq!(problem, Problem::MissingName);
        let message = load_error(text).to_string();
        assert!(
            message.contains(ORIGIN)
                && message.contains("mapping 2 (match \"b.*\")")
                && message.contains("action: drop"),
            "{message}"
        );
    }

    #[test]
    fn an_invalid_regex_is_refused_with_its_pattern() {
        let text = "mappings:\n  - match: 'a(b'\n    match_type: regex\n    name: x\n";
        let (place, problem) = refusal(text);
        assert_eq!(
            place,
            Place::Mapping {
                number: 1,
                pattern: Some("a(b".to_owned())
            }
        );
        assert!(
            matches!(&problem, Problem::InvalidRegex { pattern, .. } if pattern == "a(b"),
            "{problem:?}"
        );
        let message = load_error(text).to_string();
        assert!(
            message.contains(ORIGIN) && message.contains("mapping 1"),
            "{message}"
        );
        // The same text is a fine glob: parentheses are literal there.
        let mapper = load("mappings:\n  - match: 'a(b'\n    name: x\n");
        assert_eq!(metric(&mapper, "a(b", StatKind::Counter).name, "x");
    }

    #[test]
    fn invalid_label_names_are_refused() {
        for bad in ["1abc", "with-dash", "dotted.name", "\"\""] {
            let text =
                format!("mappings:\n  - match: a.*\n    name: x\n    labels:\n      {bad}: v\n");
            let (place, problem) = refusal(&text);
            assert!(matches!(place, Place::Mapping { number: 1, .. }));
            assert!(
                matches!(problem, Problem::InvalidLabelName { .. }),
                "{bad}: {problem:?}"
            );
        }
        let mapper =
            load("mappings:\n  - match: a.*\n    name: x\n    labels:\n      a: v\n      _b9: w\n");
        assert_eq!(
            metric(&mapper, "a.z", StatKind::Counter).labels,
            labels(&[("_b9", "w"), ("a", "v")])
        );
    }

    #[test]
    fn unknown_enumerated_values_are_refused() {
        for (key, value) in [
            ("match_type", "wildcard"),
            ("observer_type", "Histogram"),
            ("timer_type", "meter"),
            ("action", "keep"),
            ("match_metric_type", "counters"),
        ] {
            let text = format!("mappings:\n  - match: a.*\n    name: x\n    {key}: {value}\n");
            let (place, problem) = refusal(&text);
            assert!(matches!(place, Place::Mapping { number: 1, .. }));
            match problem {
                Problem::UnknownValue {
                    key: k, value: v, ..
                } => assert_eq!((k, v.as_str()), (key, value)),
                other => panic!("{key}: {other:?}"),
            }
        }
        let (place, problem) = refusal("defaults:\n  match_type: fuzzy\n");
        assert_eq!(place, Place::Defaults);
        assert!(matches!(
            problem,
            Problem::UnknownValue {
                key: "match_type",
                ..
            }
        ));
        assert!(load_error("defaults:\n  match_type: fuzzy\n")
            .to_string()
            .contains("under `defaults`"));
    }

    #[test]
    fn bad_buckets_and_quantiles_are_refused() {
        let mapping = |options: &str| {
            format!(
                "mappings:\n  - match: a.*\n    name: x\n    observer_type: histogram\n{options}"
            )
        };
        assert_eq!(
            refusal(&mapping(
                "    histogram_options:\n      buckets: [1, 3, 2]\n"
            ))
            .1,
            Problem::UnorderedBuckets {
                key: "histogram_options.buckets",
                previous: 3.0,
                next: 2.0
            }
        );
        assert!(matches!(
            refusal(&mapping("    buckets: [1, 1]\n")).1,
            Problem::UnorderedBuckets { key: "buckets", .. }
        ));
        assert_eq!(
            refusal(&mapping("    histogram_options:\n      buckets: []\n")).1,
            Problem::EmptyBuckets {
                key: "histogram_options.buckets"
            }
        );
        assert!(matches!(
            refusal(&mapping("    buckets: [1, .nan]\n")).1,
            Problem::InvalidBucket { .. }
        ));
        assert!(matches!(
            refusal(&mapping("    buckets: [1, two]\n")).1,
            Problem::WrongType { .. }
        ));
        assert_eq!(
            refusal("defaults:\n  histogram_options:\n    buckets: [2, 1]\n").0,
            Place::Defaults
        );

        let summary = |q: &str| {
            format!("mappings:\n  - match: a.*\n    name: x\n    summary_options:\n      quantiles:\n        - quantile: {q}\n")
        };
        for q in ["0", "1", "1.5", "-0.1"] {
            assert!(
                matches!(refusal(&summary(q)).1, Problem::QuantileOutOfRange { .. }),
                "{q}"
            );
        }
        assert!(matches!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    quantiles:\n      - error: 0.1\n")
                .1,
            Problem::WrongType { .. }
        ));
    }

    #[test]
    fn options_of_the_other_observer_and_doubled_legacy_keys_are_refused() {
        assert_eq!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    observer_type: histogram\n    summary_options:\n      quantiles: []\n").1,
            Problem::OptionsMismatch { options: "summary_options", observer: "histogram" }
        );
        assert_eq!(
            refusal("defaults:\n  observer_type: summary\nmappings:\n  - match: a.*\n    name: x\n    histogram_options:\n      buckets: [1]\n").1,
            Problem::OptionsMismatch { options: "histogram_options", observer: "summary" }
        );
        assert_eq!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    observer_type: histogram\n    buckets: [1]\n    histogram_options:\n      buckets: [2]\n").1,
            Problem::LegacyConflict { legacy: "buckets", current: "histogram_options.buckets" }
        );
    }

    #[test]
    fn wrong_shapes_are_refused_not_panicked_on() {
        assert_eq!(refusal("- a\n- b\n").0, Place::TopLevel);
        assert_eq!(refusal("mappings: {}\n").0, Place::TopLevel);
        assert!(matches!(
            refusal("mappings:\n  - just a string\n").0,
            Place::Mapping { number: 1, .. }
        ));
        assert!(matches!(
            refusal("mappings:\n  - match: a.*\n    name: [x]\n").1,
            Problem::WrongType { .. }
        ));
        assert!(matches!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    labels: [a]\n").1,
            Problem::WrongType { .. }
        ));
        assert!(matches!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    scale: fast\n").1,
            Problem::WrongType { .. }
        ));
        assert!(matches!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    scale: .inf\n").1,
            Problem::InvalidScale { .. }
        ));
        let mapper = load("mappings:\n  - match: a.*\n    name: x\n    scale: 2\n");
        assert_eq!(metric(&mapper, "a.b", StatKind::Observer).scale, 2.0);
    }

    #[test]
    fn files_are_read_and_missing_files_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("mapper.yaml");
        std::fs::write(&path, "mappings:\n  - match: a.*\n    name: from_file\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mapper = MetricMapper::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(metric(&mapper, "a.b", StatKind::Counter).name, "from_file");

        let missing = dir.path().join("absent.yaml");
        let error = match MetricMapper::from_file(&missing) {
            Ok(_) => panic!("a missing file loaded"),
            Err(error) => error,
        };
        assert!(matches!(error, MappingError::Read { .. }));
        assert!(error.to_string().contains(&missing.display().to_string()));

        std::fs::write(&path, "mappings:\n  - match: a.*\n").unwrap_or_else(|e| panic!("{e}"));
        let error = match MetricMapper::from_file(&path) {
            Ok(_) => panic!("a mapping without a name loaded"),
            Err(error) => error,
        };
        assert!(error.to_string().contains(&path.display().to_string()));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        #[test]
        fn no_input_panics(text in "[ -~\n]{0,200}", name in "[ -~]{0,40}") {
            if let Ok(mapper) = MetricMapper::from_yaml(&text, ORIGIN) {
                let _ = mapper.map(&name, StatKind::Counter);
            }
            let _ = MetricMapper::reference_default(false).map(&name, StatKind::Observer);
        }

        #[test]
        fn mapped_names_are_valid_prometheus_names(name in "\\PC{0,40}") {
            let mapper = MetricMapper::reference_default(false);
            for kind in [StatKind::Counter, StatKind::Gauge, StatKind::Observer] {
                if let Mapped::Metric(m) = mapper.map(&name, kind) {
                    let mut chars = m.name.chars();
                    proptest::prop_assert!(chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_'));
                    proptest::prop_assert!(chars.all(|c| c.is_ascii_alphanumeric() || c == '_'));
                }
            }
        }
    }
}
