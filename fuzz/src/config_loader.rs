//! `config_loader`: configuration files → rules, or every problem as a typed error.
//!
//! The input is up to [`MAX_FILES`] files separated by NUL bytes (a NUL cannot be in YAML
//! text), read as the shell reads them (UTF-8, invalid bytes replaced). A first byte below
//! 0x08 sets the loader's options instead: bit 0 `MERGE_DOMAIN_CONFIG`, bit 1
//! `--calendar-months`, bit 2 a `--max-rules` of 8; a plain YAML seed loads with the defaults.
//! Each input is loaded twice: string fields as YAML 1.2 resolves them, and as written.
//!
//! Must hold: no panic; a failed load reports at least one error, each naming one of the
//! files given and saying something; a successful one has at most `max_rules` rules and its
//! warnings name given files too.

use floodgate::core::arithmetic::algorithm::{Algorithm, Overflow};
use floodgate::core::policy::config::{load, LoadOptions, SourceFile, YamlStrings};

/// More files than this are one file with NULs in it.
const MAX_FILES: usize = 4;

pub fn run(data: &[u8]) {
    let (options, rest) = match data.split_first() {
        Some((&flags, rest)) if flags < 0x08 => (options(flags), rest),
        _ => (LoadOptions::default(), data),
    };
    let files: Vec<SourceFile> = rest
        .splitn(MAX_FILES, |&byte| byte == 0)
        .enumerate()
        .map(|(index, text)| SourceFile {
            name: format!("fuzz{index}.yaml"),
            text: String::from_utf8_lossy(text).into_owned(),
        })
        .collect();
    // Every input is loaded both ways the string fields can be read (the `ratelimit` door reads
    // them as written, which parses some files twice).
    for yaml_strings in [YamlStrings::Resolved, YamlStrings::AsWritten] {
        let options = LoadOptions {
            yaml_strings,
            ..options.clone()
        };
        check_load(&files, &options);
    }
}

/// Loads `files` and holds the outcome to the properties above.
fn check_load(files: &[SourceFile], options: &LoadOptions) {
    let named = |file: &str| files.iter().any(|source| source.name == file);
    match load(files, options) {
        Ok(rules) => {
            assert!(
                rules.rule_count() <= options.max_rules,
                "{} rules loaded, over the bound of {}",
                rules.rule_count(),
                options.max_rules
            );
            for warning in rules.warnings() {
                assert!(
                    named(&warning.file),
                    "a warning names no given file: {warning}"
                );
            }
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "a failed load without an error");
            for error in &errors.0 {
                assert!(named(&error.file), "an error names no given file: {error}");
                assert!(
                    !error.message.is_empty(),
                    "an error without a message: {error}"
                );
            }
        }
    }
}

fn options(flags: u8) -> LoadOptions {
    LoadOptions {
        default_algorithm: Algorithm::FixedWindow,
        merge_domains: flags & 1 != 0,
        calendar_months: flags & 2 != 0,
        max_rules: if flags & 4 != 0 {
            8
        } else {
            LoadOptions::default().max_rules
        },
        default_overflow: if flags & 8 != 0 {
            Overflow::Owe
        } else {
            Overflow::Refuse
        },
        yaml_strings: YamlStrings::Resolved,
    }
}
