//! One file: parse it, then read its top level (`domain`, `default_algorithm`, `overflow`,
//! `descriptors`)
//! into a [`FileSpec`], reporting every problem on the way.

use serde_yaml::{Mapping, Value};

use super::descriptor::read_owned_descriptors;
use super::keys::{check_keys, did_you_mean, Place};
use super::parse::{parse, Parsed};
use super::report::{FileReport, Report};
use super::spec::FileSpec;
use super::yaml_tree::{boolean, describe, field, text, whole_number, wrong_type};
use super::{LoadOptions, SourceFile};
use crate::algorithm::{Algorithm, Counting, Overflow};

/// Shown instead of the domain in paths when the file has none.
const NO_DOMAIN: &str = "<no domain>";

/// Reads file `index` into a [`FileSpec`], with what is left of its parsed top level (all but
/// `descriptors:`, for the check profiles). `None` when it does not parse or is not a map.
pub(super) fn read_file(
    index: usize,
    source: &SourceFile,
    options: &LoadOptions,
    report: &mut Report,
) -> Option<(FileSpec, Value)> {
    let mut report = FileReport::new(report, index);
    let mut parsed = match parse(&source.text, options.yaml_strings) {
        Ok(parsed) => parsed,
        Err(error) => {
            let path = match error.line_column {
                Some((line, column)) => format!("line {line} column {column}"),
                None => NO_DOMAIN.to_owned(),
            };
            report.error(
                &path,
                format!(
                    "error loading config file: {}: fix the YAML there (indentation, a missing \
                     `:` or closing bracket, or a value that needs quotes)",
                    error.message
                ),
            );
            return None;
        }
    };
    warn_about_parse_leniencies(&parsed, &mut report);
    let mut empty = Mapping::new();
    let root = match &mut parsed.root {
        Value::Mapping(map) => map,
        // An empty file: the reference reads a zero struct, then refuses its empty domain.
        Value::Null => &mut empty,
        other => {
            report.error(
                NO_DOMAIN,
                format!(
                    "the file must be a map with `domain:` and `descriptors:`, found {}",
                    describe(other)
                ),
            );
            return None;
        }
    };
    let mut walk = FileWalk {
        report,
        default_algorithm: options.default_algorithm,
        default_algorithm_source: "--default-algorithm",
        calendar_months: options.calendar_months,
        default_overflow: options.default_overflow,
    };
    let spec = read_root(index, root, &mut walk);
    Some((spec, parsed.root))
}

fn warn_about_parse_leniencies(parsed: &Parsed, report: &mut FileReport) {
    for duplicate in &parsed.duplicate_keys {
        let path = if duplicate.map_path.is_empty() {
            "(top level)"
        } else {
            duplicate.map_path.as_str()
        };
        report.warning(
            path,
            format!(
                "'{}' is written twice in the same map: the last one is used (as \
                 envoyproxy/ratelimit does); remove the other",
                duplicate.key
            ),
        );
    }
    if parsed.more_documents {
        report.warning(
            "(file)",
            "the file holds more than one YAML document (`---`): only the first is used, as \
             envoyproxy/ratelimit does; put each domain in a file of its own",
        );
    }
}

fn read_root(index: usize, root: &mut Mapping, walk: &mut FileWalk) -> FileSpec {
    let written = walk.text(root, "domain", "domain", NO_DOMAIN, "domain: edge");
    // Missing or "" (a domain of the wrong type was reported by `text`).
    let missing = field(root, "domain").is_none() || written.as_deref() == Some("");
    let domain = written.unwrap_or_default();
    let path = if domain.is_empty() {
        NO_DOMAIN.to_owned()
    } else {
        domain.clone()
    };
    check_keys(root, Place::Top, &path, &mut walk.report);
    if missing {
        walk.report.error(
            &path,
            "config file cannot have empty domain: add `domain: <name>` at the top of the file, \
             the same name as the `domain` of Envoy's ratelimit filter",
        );
    }
    let default_algorithm = walk.algorithm(root, "default_algorithm", "default_algorithm", &path);
    if let Some(algorithm) = default_algorithm {
        walk.default_algorithm = algorithm;
        walk.default_algorithm_source = "this file's `default_algorithm`";
    }
    let failure_policy = walk.failure_policy(root, &path);
    let overflow = walk.overflow(root, "overflow", "overflow", &path);
    if let Some(overflow) = overflow {
        walk.default_overflow = overflow;
    }
    // Taken out of the tree, so that each descriptor's YAML is dropped once it is read.
    let listed = root.remove("descriptors").filter(|value| !value.is_null());
    let descriptors = read_owned_descriptors(listed, &path, walk);
    FileSpec {
        file: index,
        domain,
        default_algorithm,
        failure_policy,
        overflow,
        descriptors,
    }
}

/// Reading one file: where problems go, and the defaults that depend on the file.
pub(super) struct FileWalk<'r> {
    pub(super) report: FileReport<'r>,
    /// What a limit without `algorithm:` uses.
    pub(super) default_algorithm: Algorithm,
    /// Where that default comes from, for messages.
    pub(super) default_algorithm_source: &'static str,
    /// Whether MONTH limits count in calendar months (`LoadOptions::calendar_months`).
    pub(super) calendar_months: bool,
    /// What a limit without `overflow:` does with a charge that does not fit, if its algorithm
    /// counts hits in windows: the file's `overflow:`, else `LoadOptions::default_overflow`.
    pub(super) default_overflow: Overflow,
}

impl FileWalk<'_> {
    /// A string field; `shown` is how messages name it (`rate_limits[1].name`).
    pub(super) fn text(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
        example: &str,
    ) -> Option<String> {
        let value = field(map, name)?;
        match text(value) {
            Ok(text) => Some(text),
            Err(found) => {
                let message = wrong_type(shown, "a string", &found, example);
                self.report.error(path, message);
                None
            }
        }
    }

    /// A boolean field, false when absent.
    pub(super) fn flag(&mut self, map: &Mapping, name: &str, shown: &str, path: &str) -> bool {
        self.optional_flag(map, name, shown, path).unwrap_or(false)
    }

    pub(super) fn optional_flag(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
    ) -> Option<bool> {
        let expected = "true or false (yes/no and on/off work too)";
        let example = format!("{name}: true");
        self.typed(map, name, shown, path, boolean, (expected, &example))
    }

    /// An unsigned 32-bit integer field.
    pub(super) fn number(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
    ) -> Option<u32> {
        let expected = "a whole number from 0 to 4294967295";
        let example = format!("{name}: 10");
        self.typed(map, name, shown, path, whole_number, (expected, &example))
    }

    /// A field read by `parse`; a value of the wrong type is reported with what was expected
    /// and an example, and reads as absent.
    fn typed<T>(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
        parse: fn(&Value) -> Result<T, String>,
        (expected, example): (&str, &str),
    ) -> Option<T> {
        match parse(field(map, name)?) {
            Ok(value) => Some(value),
            Err(found) => {
                let message = wrong_type(shown, expected, &found, example);
                self.report.error(path, message);
                None
            }
        }
    }

    /// `failure_policy:` at the top of a file.
    fn failure_policy(
        &mut self,
        map: &Mapping,
        path: &str,
    ) -> Option<crate::failure::FailurePolicy> {
        use crate::failure::FailurePolicy;
        let names: Vec<&'static str> = FailurePolicy::ALL.iter().map(|p| p.name()).collect();
        let field = ("failure_policy", "failure_policy", path);
        let example = "failure_policy: fail_open";
        self.named(
            map,
            field,
            example,
            ("failure policy", &names),
            FailurePolicy::parse,
        )
    }

    /// An algorithm name.
    pub(super) fn algorithm(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
    ) -> Option<Algorithm> {
        let names: Vec<&'static str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        let example = format!("{name}: sliding_window");
        self.named(
            map,
            (name, shown, path),
            &example,
            ("algorithm", &names),
            Algorithm::parse,
        )
    }

    /// `overflow: refuse | owe`.
    pub(super) fn overflow(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
    ) -> Option<Overflow> {
        let names: Vec<&'static str> = Overflow::ALL.iter().map(|o| o.name()).collect();
        let example = format!("{name}: owe");
        self.named(
            map,
            (name, shown, path),
            &example,
            ("overflow", &names),
            Overflow::parse,
        )
    }

    /// `counting: exact | hybrid`.
    pub(super) fn counting(
        &mut self,
        map: &Mapping,
        name: &str,
        shown: &str,
        path: &str,
    ) -> Option<Counting> {
        let names: Vec<&'static str> = Counting::ALL.iter().map(|c| c.name()).collect();
        let example = format!("{name}: hybrid");
        self.named(
            map,
            (name, shown, path),
            &example,
            ("counting", &names),
            Counting::parse,
        )
    }

    /// A field naming one of `names`; an unknown name is reported with the closest one and the
    /// whole list, and reads as absent.
    fn named<T>(
        &mut self,
        map: &Mapping,
        (name, shown, path): (&str, &str, &str),
        example: &str,
        (kind, names): (&str, &[&'static str]),
        parse: fn(&str) -> Option<T>,
    ) -> Option<T> {
        let written = self.text(map, name, shown, path, example)?;
        if let Some(value) = parse(&written) {
            return Some(value);
        }
        let hint = did_you_mean(&written, names);
        self.report.error(
            path,
            format!(
                "unknown {kind} '{written}' in `{shown}`: {hint}use one of {}",
                names.join(", ")
            ),
        );
        None
    }
}
