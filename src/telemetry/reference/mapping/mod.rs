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

mod errors;
mod parse;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::Path;

use regex::{Captures, Regex};

pub use errors::{MappingError, Place, Problem};
use parse::parse_document;

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
