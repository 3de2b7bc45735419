//! Reading one file's YAML: where its problems go, the defaults that depend on the file, and
//! the typed fields every part of the file is read with.

use serde_yaml::{Mapping, Value};

use super::keys::did_you_mean;
use super::report::FileReport;
use super::yaml_tree::{boolean, field, text, whole_number, wrong_type};
use crate::arithmetic::algorithm::{Algorithm, Counting, Overflow};

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
    pub(super) fn failure_policy(
        &mut self,
        map: &Mapping,
        path: &str,
    ) -> Option<crate::arithmetic::failure::FailurePolicy> {
        use crate::arithmetic::failure::FailurePolicy;
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
