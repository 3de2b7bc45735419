//! Collects the errors and warnings of one load, each tagged with the file it belongs to, so
//! they can be listed file by file whatever phase found them.

use super::{ConfigError, SourceFile};
use crate::policy::rules::ConfigWarning;

pub(super) struct Report {
    file_names: Vec<String>,
    errors: Vec<(usize, ConfigError)>,
    warnings: Vec<(usize, ConfigWarning)>,
}

impl Report {
    pub(super) fn new(files: &[SourceFile]) -> Self {
        Self {
            file_names: files.iter().map(|file| file.name.clone()).collect(),
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub(super) fn file_name(&self, file: usize) -> &str {
        self.file_names.get(file).map_or("", String::as_str)
    }

    pub(super) fn error(&mut self, file: usize, path: &str, message: impl Into<String>) {
        let error = ConfigError {
            file: self.file_name(file).to_owned(),
            path: path.to_owned(),
            message: message.into(),
        };
        self.errors.push((file, error));
    }

    pub(super) fn warning(&mut self, file: usize, path: &str, message: impl Into<String>) {
        let warning = ConfigWarning {
            file: self.file_name(file).to_owned(),
            path: path.to_owned(),
            message: message.into(),
        };
        self.warnings.push((file, warning));
    }

    /// Errors and warnings grouped by file (in the order the files were given), each file's in
    /// the order they were found.
    pub(super) fn finish(mut self) -> (Vec<ConfigError>, Vec<ConfigWarning>) {
        self.errors.sort_by_key(|(file, _)| *file);
        self.warnings.sort_by_key(|(file, _)| *file);
        (
            self.errors.into_iter().map(|(_, error)| error).collect(),
            self.warnings
                .into_iter()
                .map(|(_, warning)| warning)
                .collect(),
        )
    }
}

/// The report seen from inside one file.
pub(super) struct FileReport<'r> {
    report: &'r mut Report,
    file: usize,
}

impl<'r> FileReport<'r> {
    pub(super) fn new(report: &'r mut Report, file: usize) -> Self {
        Self { report, file }
    }

    pub(super) fn error(&mut self, path: &str, message: impl Into<String>) {
        self.report.error(self.file, path, message);
    }

    pub(super) fn warning(&mut self, path: &str, message: impl Into<String>) {
        self.report.warning(self.file, path, message);
    }

    /// The name of file `file` of the load (another file than this one, for messages).
    pub(super) fn file_name(&self, file: usize) -> &str {
        self.report.file_name(file)
    }
}
