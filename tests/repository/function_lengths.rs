//! Functions stay short enough to read as named steps: at most [`ALLOWED_LONG_FUNCTIONS`]
//! functions of `src/` and `core/src/` run past [`MAX_LINES`] lines. Tests are left out (a
//! `#[cfg(test)]` item, `tests.rs` files, `tests/` folders): a table of cases may run long.
//!
//! A function is counted from its `fn` line to the closing brace at the same indentation,
//! both included; a function nested in another is counted on its own as well.

use std::path::{Path, PathBuf};

use floodgate_testkit::repo_file;

use crate::layers::rust_files;

/// The longest a function may be, in lines.
const MAX_LINES: usize = 80;

/// How many functions may still be longer: the ones not yet split into steps.
const ALLOWED_LONG_FUNCTIONS: usize = 10;

/// One function over [`MAX_LINES`].
#[derive(Debug, PartialEq, Eq)]
struct LongFunction {
    file: String,
    line: usize,
    name: String,
    lines: usize,
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The name of the function a line opens (`pub(crate) async fn name(`…), if it opens one.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scoped) => scoped.split_once(')')?.1,
            None => after,
        }
        .trim_start();
    }
    for qualifier in ["const ", "async ", "unsafe ", "extern \"C\" "] {
        if let Some(after) = rest.strip_prefix(qualifier) {
            rest = after.trim_start();
        }
    }
    let name = rest.strip_prefix("fn ")?.trim_start();
    let end = name
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    (end > 0).then(|| &name[..end])
}

/// Where the `#[cfg(test)]` item at `start` ends: the index of its last line.
fn end_of_test_item(lines: &[&str], start: usize) -> usize {
    let indentation = indent(lines[start]);
    let mut item = start + 1;
    while item < lines.len() {
        let trimmed = lines[item].trim_start();
        if !(trimmed.starts_with("#[") || trimmed.starts_with("//")) {
            break;
        }
        item += 1;
    }
    if item >= lines.len() || lines[item].trim_end().ends_with(';') {
        return item;
    }
    closing_brace(lines, item + 1, indentation)
}

/// The first line from `from` that closes a block opened at `indentation`.
fn closing_brace(lines: &[&str], from: usize, indentation: usize) -> usize {
    (from..lines.len())
        .find(|&index| {
            indent(lines[index]) == indentation && lines[index].trim_start().starts_with('}')
        })
        .unwrap_or(lines.len())
}

/// The number of lines of the function whose `fn` is at `start`, or `None` for a declaration
/// without a body (a trait's).
fn function_length(lines: &[&str], start: usize) -> Option<usize> {
    let opening = (start..lines.len())
        .find(|&index| lines[index].contains('{') || lines[index].trim_end().ends_with(';'))?;
    let line = lines[opening];
    if !line.contains('{') {
        return None;
    }
    let one_line =
        line.trim_end().ends_with('}') && line.matches('{').count() == line.matches('}').count();
    let end = if one_line {
        opening
    } else {
        closing_brace(lines, opening + 1, indent(lines[start]))
    };
    Some(end - start + 1)
}

/// The functions of one file's text longer than [`MAX_LINES`], outside its tests.
fn long_functions_in(file: &str, text: &str) -> Vec<LongFunction> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut found = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if line.trim_start().starts_with("#[cfg(test)]") {
            index = end_of_test_item(&lines, index) + 1;
            continue;
        }
        if let Some(name) = fn_name(line) {
            if let Some(length) = function_length(&lines, index).filter(|&n| n > MAX_LINES) {
                found.push(LongFunction {
                    file: file.to_owned(),
                    line: index + 1,
                    name: name.to_owned(),
                    lines: length,
                });
            }
        }
        index += 1;
    }
    found
}

fn is_test_file(relative: &Path) -> bool {
    relative.file_name().is_some_and(|name| name == "tests.rs")
        || relative
            .components()
            .any(|part| part.as_os_str() == "tests")
}

fn long_functions() -> Vec<LongFunction> {
    let mut found = Vec::new();
    for tree in ["src", "core/src"] {
        let root = repo_file(tree);
        let mut files: Vec<PathBuf> = Vec::new();
        rust_files(&root, &mut files);
        files.sort();
        for file in files {
            let relative = file.strip_prefix(&root).unwrap_or(&file);
            if is_test_file(relative) {
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
            let name = format!("{tree}/{}", relative.display());
            found.extend(long_functions_in(&name, &text));
        }
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.lines));
    found
}

#[test]
fn few_functions_run_past_eighty_lines() {
    let long = long_functions();
    let listed: Vec<String> = long
        .iter()
        .map(|f| format!("  {} lines: {} ({}:{})", f.lines, f.name, f.file, f.line))
        .collect();
    assert!(
        long.len() <= ALLOWED_LONG_FUNCTIONS,
        "{} functions run past {MAX_LINES} lines, at most {ALLOWED_LONG_FUNCTIONS} may; split \
         them into named steps (each a function of its own):\n{}",
        long.len(),
        listed.join("\n")
    );
}

#[test]
fn the_count_sees_long_functions_and_leaves_tests_out() {
    // A counter that finds nothing would pass any tree.
    let body = "    step();\n".repeat(MAX_LINES);
    let text = format!(
        "pub(crate) async fn long_one(x: u8) -> u8 {{\n{body}}}\n\
         fn short_one() {{}}\n\
         trait Shape {{\n    fn declared(&self);\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}    }}\n}}\n\
         #[cfg(test)]\nfn long_helper() {{\n{body}}}\n\
         impl Shape for () {{\n    fn declared(&self) {{\n{body}    }}\n}}\n"
    );
    let found = long_functions_in("x.rs", &text);
    let names: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(
        names,
        [("long_one", MAX_LINES + 2), ("declared", MAX_LINES + 2)]
    );
    assert_eq!(fn_name("pub(super) const unsafe fn f<T>()"), Some("f"));
    assert_eq!(fn_name("let function = 1;"), None);
    assert!(is_test_file(Path::new("engine/tests/fixtures.rs")));
    assert!(!is_test_file(Path::new("engine/limiter.rs")));
}
