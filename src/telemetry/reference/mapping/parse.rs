//! Reading a statsd_exporter mapping file into the mapper's rules, refusing what cannot work.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_yaml::{Mapping, Value};

use super::*;

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

pub(super) fn parse_document(
    text: &str,
    origin: &str,
    unknown: &mut BTreeSet<String>,
) -> Result<MetricMapper, MappingError> {
    let invalid = |place: Place, problem: Problem| MappingError::Invalid {
        origin: origin.to_owned(),
        place,
        problem,
    };
    let document = read_yaml(text, origin)?;
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
        unmapped_observer: unmapped_observer(&defaults),
    };
    for (index, entry) in entries.iter().enumerate() {
        let (match_type, rule) = parse_entry(entry, &defaults, unknown)
            .map_err(|problem| invalid(entry_place(index, entry), problem))?;
        match match_type {
            MatchType::Glob => mapper.globs.push(rule),
            MatchType::Regex => mapper.regexes.push(rule),
        }
    }
    Ok(mapper)
}

/// The file as YAML, with `<<: *anchor` keys merged as yaml.v2, statsd_exporter's parser, merges
/// them (files may share labels so).
fn read_yaml(text: &str, origin: &str) -> Result<Value, MappingError> {
    let yaml_error = |error: serde_yaml::Error| {
        let location = error.location();
        MappingError::Yaml {
            origin: origin.to_owned(),
            line: location.as_ref().map(|l| l.line()),
            column: location.as_ref().map(|l| l.column()),
            message: error.to_string(),
        }
    };
    let mut document: Value = serde_yaml::from_str(text).map_err(yaml_error)?;
    document.apply_merge().map_err(yaml_error)?;
    Ok(document)
}

/// How names no mapping matches are observed: the defaults' type, else a summary.
fn unmapped_observer(defaults: &Defaults) -> Observer {
    match defaults.observer.unwrap_or(ObserverType::Summary) {
        ObserverType::Histogram => Observer::Histogram {
            buckets: defaults.buckets.clone(),
        },
        ObserverType::Summary => Observer::Summary {
            quantiles: defaults.quantiles.clone(),
        },
    }
}

/// Where the mapping at `index` is, for errors: its number and, when it has one, its pattern.
fn entry_place(index: usize, entry: &Value) -> Place {
    Place::Mapping {
        number: index + 1,
        pattern: match untag(entry) {
            Value::Mapping(fields) => present(fields, "match").and_then(scalar_text),
            _ => None,
        },
    }
}

/// One element of `mappings`, which must be a mapping.
fn parse_entry(
    entry: &Value,
    defaults: &Defaults,
    unknown: &mut BTreeSet<String>,
) -> Result<(MatchType, Rule), Problem> {
    let Value::Mapping(fields) = untag(entry) else {
        return Err(wrong_type(
            "(mapping)",
            "a mapping with `match` and `name`",
            entry,
        ));
    };
    parse_mapping(fields, defaults, unknown)
}

fn parse_defaults(fields: &Mapping, unknown: &mut BTreeSet<String>) -> Result<Defaults, Problem> {
    note_unknown(fields, DEFAULTS_KEYS, "defaults.", unknown);
    let observer = parse_observer_type(fields)?;
    let match_type = match string_field(fields, "match_type")? {
        Some(value) => parse_match_type(&value)?,
        None => MatchType::Glob,
    };
    let (histogram, summary) = observer_options(fields, "defaults", unknown)?;

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
    let kind = match_metric_type(fields)?;
    let drop = drops(fields)?;
    let name = string_field(fields, "name")?.filter(|name| !name.is_empty());
    let labels = labels_field(fields)?;
    let observer = resolve_observer(fields, defaults, unknown)?;
    let scale = scale_field(fields)?;
    let help = string_field(fields, "help")?.filter(|help| !help.is_empty());
    let compiled = compile_pattern(&pattern, match_type)?;
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

/// `match_metric_type`: the kind of stat the mapping applies to, or any.
fn match_metric_type(fields: &Mapping) -> Result<Option<StatKind>, Problem> {
    let Some(value) = string_field(fields, "match_metric_type")? else {
        return Ok(None);
    };
    Ok(Some(match value.as_str() {
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
    }))
}

/// Whether `action` drops what the mapping matches (else it maps it).
fn drops(fields: &Mapping) -> Result<bool, Problem> {
    match string_field(fields, "action")?.as_deref() {
        None | Some("" | "map") => Ok(false),
        Some("drop") => Ok(true),
        Some(other) => Err(Problem::UnknownValue {
            key: "action",
            value: other.to_owned(),
            allowed: "map, drop",
        }),
    }
}

/// `labels`: label names, checked, to their value templates (a null value is empty).
fn labels_field(fields: &Mapping) -> Result<BTreeMap<String, String>, Problem> {
    let labels = match present(fields, "labels") {
        None => return Ok(BTreeMap::new()),
        Some(Value::Mapping(labels)) => labels,
        Some(other) => {
            return Err(wrong_type(
                "labels",
                "a mapping of label names to values",
                other,
            ))
        }
    };
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
    Ok(out)
}

/// `scale`: a finite factor for observed values, 1 when absent.
fn scale_field(fields: &Mapping) -> Result<f64, Problem> {
    let Some(value) = present(fields, "scale") else {
        return Ok(1.0);
    };
    let scale = number(value).ok_or_else(|| wrong_type("scale", "a number", value))?;
    if !scale.is_finite() {
        return Err(Problem::InvalidScale { value: scale });
    }
    Ok(scale)
}

/// The mapping's `match` as a regex: a glob translated, or the regex as written.
fn compile_pattern(pattern: &str, match_type: MatchType) -> Result<Regex, Problem> {
    match match_type {
        MatchType::Glob => glob_regex(pattern),
        MatchType::Regex => Regex::new(pattern),
    }
    .map_err(|error| Problem::InvalidRegex {
        pattern: pattern.to_owned(),
        message: error.to_string(),
    })
}

/// A mapping's observer: its own type, else the defaults', else a summary; its own buckets or
/// quantiles, else the defaults'.
fn resolve_observer(
    fields: &Mapping,
    defaults: &Defaults,
    unknown: &mut BTreeSet<String>,
) -> Result<Observer, Problem> {
    let (histogram, summary) = observer_options(fields, "mappings[]", unknown)?;
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
/// The `histogram_options` and `summary_options` of `fields` (a mapping or the defaults,
/// named `scope` in warnings).
fn observer_options<'a>(
    fields: &'a Mapping,
    scope: &str,
    unknown: &mut BTreeSet<String>,
) -> Result<(Option<&'a Mapping>, Option<&'a Mapping>), Problem> {
    let histogram = options(
        fields,
        "histogram_options",
        HISTOGRAM_OPTION_KEYS,
        &format!("{scope}.histogram_options."),
        unknown,
    )?;
    let summary = options(
        fields,
        "summary_options",
        SUMMARY_OPTION_KEYS,
        &format!("{scope}.summary_options."),
        unknown,
    )?;
    Ok((histogram, summary))
}

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
