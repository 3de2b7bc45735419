//! Why a statsd mapping file cannot be used: the file, the mapping, and what to change.

use std::fmt;

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
