//! Configuration files: envoyproxy/ratelimit's YAML descriptor format plus floodgate's
//! extensions, parsed and validated into a [`RuleSet`]. Pure: the text comes in, reading files is
//! the shell's job (`floodgate::engine::config_source`).
//!
//! The pipeline, one concern per file:
//! * `parse`: text → one `serde_yaml::Value` per file (YAML 1.1 leniencies of the reference kept);
//! * `keys`: which keys belong where, and the closest valid key for a typo;
//! * `yaml_tree`: reading typed fields out of a `Value`, with messages for wrong types;
//! * `file`, `descriptor`, `limit`: walking one file into plain specs, every problem reported;
//! * `validate`: the checks between fields of one limit (unit vs unlimited, algorithm options);
//! * `build`: specs of all files → domains and rule trees (duplicates, merging, `replaces`).
//!
//! Every problem of every file is reported in one go; each names the file, the rule path and
//! what to change.

mod adaptive_concurrency_yaml;
mod adaptive_yaml;
mod as_written;
mod ban;
mod build;
mod check_profile_scope;
mod check_profiles;
mod concurrency;
mod descriptor;
mod file;
mod keys;
mod limit;
mod limit_fields;
mod parse;
mod priority;
mod queue;
mod report;
mod spec;
mod validate;
mod walk;
mod yaml_tree;
mod yaml_v2;

#[cfg(test)]
mod tests;

use crate::arithmetic::algorithm::{Algorithm, Overflow};
use crate::policy::rules::RuleSet;

/// One configuration file's name (as shown in errors) and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
}

/// The default of `--max-rules`: about as many rules as the default `--max-config-bytes`
/// (3 MiB) holds when written tersely, so that the byte cap, which bounds a reload's memory,
/// is the one that counts (see `floodgate::engine::config_source::DEFAULT_MAX_CONFIG_BYTES` for how it
/// fits the 128 MiB of the deployment in `deploy/`). Measured with
/// `scripts/bench-rules-memory.sh` (docs/benchmarks.md, "Memory per rule"): a rule takes
/// about 800 bytes of RSS at rest, and a reload holds the rules in force beside the new ones.
pub const DEFAULT_MAX_RULES: usize = 25_000;

/// Loader settings that come from the command line or the environment.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// `--default-algorithm`: what a rule without `algorithm:` uses when its file has no
    /// `default_algorithm:` either.
    pub default_algorithm: Algorithm,
    /// `MERGE_DOMAIN_CONFIG`: several files may share a domain.
    pub merge_domains: bool,
    /// `--max-rules`: a configuration with more rules is refused.
    pub max_rules: usize,
    /// `--calendar-months` (`USE_CALENDAR_MONTH_RATE_LIMIT`): MONTH windows are UTC calendar
    /// months instead of 30 days (`Quota::with_calendar_months`).
    pub calendar_months: bool,
    /// `--overflow`: what a charge that does not fit does, for a limit that does not say and
    /// whose file has no `overflow:` either (rules pushed over xDS among them), and for Envoy's
    /// `limit` override in a domain without `overflow:`. Applied to the algorithms that count
    /// hits in windows only, the ones that can hold a count past the limit.
    pub default_overflow: Overflow,
    /// How the reference's string fields read an unquoted number or boolean (`core::decision::semantics`).
    pub yaml_strings: YamlStrings,
}

/// How the reference's string fields (`domain`, a descriptor's `key` and `value`, a limit's
/// `unit` and `name`, and the `name`s it `replaces`) read an unquoted scalar that YAML resolves
/// to a number or a boolean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum YamlStrings {
    /// As YAML 1.2 resolves it (floodgate's): the text of the value, so `0x10` is `16` and
    /// `True` is `true`; `09` is the text `09`.
    #[default]
    Resolved,
    /// As envoyproxy/ratelimit's yaml.v2 reads it: the text as written (`0x10`, `True`, `on`);
    /// a file is refused where yaml.v2 reads a decimal number (`1.5`, `09`) or an integer past
    /// 2^63 − 1, as the reference refuses it ("error checking config").
    AsWritten,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            default_algorithm: Algorithm::default(),
            merge_domains: false,
            max_rules: DEFAULT_MAX_RULES,
            calendar_months: false,
            default_overflow: Overflow::Refuse,
            yaml_strings: YamlStrings::Resolved,
        }
    }
}

/// One problem in the configuration: where it is and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {path}: {message}")]
pub struct ConfigError {
    pub file: String,
    /// Rule path (`domain.key_value.key`) or the YAML location when no rule path exists yet.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Every problem found in one load; never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Parses and validates every file into one rule set, or reports every problem found.
///
/// Files are taken in the order given (the shell sorts them), which decides which file a
/// duplicate is blamed on and, with `merge_domains`, the order of the merged descriptors.
/// Warnings of a successful load are in [`RuleSet::warnings`].
///
/// One file at a time: parsed, read into specs, built into its domain, and its parsed form
/// dropped before the next file is parsed (a parsed file takes 10 to 25 times its text).
pub fn load(files: &[SourceFile], options: &LoadOptions) -> Result<RuleSet, ConfigErrors> {
    let mut report = report::Report::new(files);
    let mut domains = build::DomainsBuild::default();
    let mut profiles = check_profiles::ProfilesBuild::default();
    for (index, source) in files.iter().enumerate() {
        let Some((spec, rest)) = file::read_file(index, source, options, &mut report) else {
            continue;
        };
        domains.add(spec, options, &mut report);
        profiles.read(index, &rest, &mut report);
        if domains.rule_count() > options.max_rules {
            // The files after this one are not read: they could only add rules.
            report.error(
                index,
                "(file)",
                too_many_rules(domains.rule_count(), options),
            );
            break;
        }
    }
    let domains = domains.finish(&mut report);
    let check_profiles = profiles.finish();
    let (errors, warnings) = report.finish();
    if errors.is_empty() {
        Ok(RuleSet {
            domains,
            warnings,
            check_profiles,
        })
    } else {
        Err(ConfigErrors(errors))
    }
}

fn too_many_rules(counted: usize, options: &LoadOptions) -> String {
    format!(
        "the configuration has {counted} rules up to this file, over the cap of {} rules: raise \
         it with --max-rules (FLOODGATE_MAX_RULES) and the memory limit with it (a rule takes \
         about 1 KiB, twice during a reload), or split the rules among more instances",
        options.max_rules
    )
}

/// Loads `text` as the one file `name` with the default options: how unit tests across the
/// crates turn a YAML string into rules (feature `test-support` outside this crate).
#[cfg(any(test, feature = "test-support"))]
pub fn load_text(name: &str, text: &str) -> Result<RuleSet, ConfigErrors> {
    let file = SourceFile {
        name: name.to_owned(),
        text: text.to_owned(),
    };
    load(&[file], &LoadOptions::default())
}

/// [`load_text`] of test rules that must load; panics with every error otherwise.
#[cfg(any(test, feature = "test-support"))]
pub fn load_valid(name: &str, text: &str) -> RuleSet {
    load_text(name, text).unwrap_or_else(|errors| panic!("the test rules do not load:\n{errors}"))
}
