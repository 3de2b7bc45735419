//! Tests of loading configuration files: the format, every error, the lookup semantics on
//! loaded trees, merging, and shapes of the reference's README examples.

mod bans;
mod concurrency;
mod errors;
mod extensions;
mod format;
mod heavy_hitters;
mod lookup;
mod merge;
mod overflow_defaults;
mod priority;
mod queue;
mod reference_readme;
mod warnings;
mod yaml_strings;

use super::{load, ConfigError, LoadOptions, SourceFile};
use crate::arithmetic::algorithm::Algorithm;
use crate::policy::request::Entry;
use crate::policy::rules::{DomainRules, Matched, Rule, RuleSet};

/// The name every single-file test loads its text under.
const FILE: &str = "test.yaml";

fn source(name: &str, text: &str) -> SourceFile {
    SourceFile {
        name: name.to_owned(),
        text: text.to_owned(),
    }
}

fn load_files(files: &[(&str, &str)], options: &LoadOptions) -> Result<RuleSet, Vec<ConfigError>> {
    let sources: Vec<SourceFile> = files
        .iter()
        .map(|(name, text)| source(name, text))
        .collect();
    load(&sources, options).map_err(|errors| errors.0)
}

/// Loads one file that must be valid.
fn loaded(text: &str) -> RuleSet {
    loaded_with(text, &LoadOptions::default())
}

fn loaded_with(text: &str, options: &LoadOptions) -> RuleSet {
    match load_files(&[(FILE, text)], options) {
        Ok(rules) => rules,
        Err(errors) => panic!("should load, but:\n{}", lines(&errors)),
    }
}

/// Loads one file that must be refused, and returns why.
fn errors_of(text: &str) -> Vec<ConfigError> {
    match load_files(&[(FILE, text)], &LoadOptions::default()) {
        Ok(_) => panic!("should be refused:\n{text}"),
        Err(errors) => errors,
    }
}

/// The only error of a refused file.
fn single_error(text: &str) -> ConfigError {
    let mut errors = errors_of(text);
    if errors.len() != 1 {
        panic!("expected exactly one error, got:\n{}", lines(&errors));
    }
    errors.remove(0)
}

fn lines(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

fn domain<'r>(rules: &'r RuleSet, name: &str) -> &'r DomainRules {
    match rules.domain(name) {
        Some(domain) => domain,
        None => panic!("domain {name} is missing"),
    }
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(key, value)| Entry::new(*key, *value))
        .collect()
}

/// The rule a request descriptor of `pairs` finds in `domain_name`, if any.
fn matched<'r>(
    rules: &'r RuleSet,
    domain_name: &str,
    pairs: &[(&str, &str)],
) -> Option<Matched<'r>> {
    domain(rules, domain_name).lookup(&entries(pairs))
}

fn rule_path(rules: &RuleSet, domain_name: &str, pairs: &[(&str, &str)]) -> Option<String> {
    matched(rules, domain_name, pairs).map(|found| found.rule.path.clone())
}

fn rule_at<'r>(rules: &'r RuleSet, domain_name: &str, path: &str) -> &'r Rule {
    match domain(rules, domain_name).rule_by_path(path) {
        Some(rule) => rule,
        None => panic!("no rule at {path}"),
    }
}

fn options_with_algorithm(algorithm: Algorithm) -> LoadOptions {
    LoadOptions {
        default_algorithm: algorithm,
        merge_domains: false,
        ..LoadOptions::default()
    }
}

/// Asserts that `error` is in `test.yaml` at `path` and its message starts with `start` and
/// mentions each of `hints` (the fix).
#[track_caller]
fn assert_error(error: &ConfigError, path: &str, start: &str, hints: &[&str]) {
    assert_eq!(error.file, FILE, "{error}");
    assert_eq!(error.path, path, "{error}");
    assert!(
        error.message.starts_with(start),
        "{error}\nshould start with: {start}"
    );
    for hint in hints {
        assert!(
            error.message.contains(hint),
            "{error}\nshould mention: {hint}"
        );
    }
}
