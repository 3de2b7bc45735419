//! One file: parse it, then read its top level (`domain`, `default_algorithm`, `overflow`,
//! `descriptors`)
//! into a [`FileSpec`], reporting every problem on the way.

use serde_yaml::{Mapping, Value};

use super::descriptor::read_owned_descriptors;
use super::keys::{check_keys, Place};
use super::parse::{parse, Parsed};
use super::report::{FileReport, Report};
use super::spec::FileSpec;
use super::walk::FileWalk;
use super::yaml_tree::{describe, field};
use super::{LoadOptions, SourceFile};

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
