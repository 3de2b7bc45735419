//! The table of envoyproxy/ratelimit's environment variables (`floodgate::cmd::reference_env`)
//! says the truth: the migration guide lists the same variables with the same treatment, and a
//! variable called honoured is read somewhere in floodgate's source.

use floodgate::cmd::reference_env::{Treatment, REFERENCE_VARIABLES};
use floodgate_testkit::repo_file;

use crate::layers::rust_files;

#[test]
fn the_migration_guide_lists_every_variable_as_the_code_treats_it() {
    let guide = repo_file("docs/migrating-from-envoy-ratelimit.md");
    let text = std::fs::read_to_string(&guide)
        .unwrap_or_else(|error| panic!("{}: {error}", guide.display()));
    let mut problems = Vec::new();
    for (name, treatment) in REFERENCE_VARIABLES {
        let row = text
            .lines()
            .find(|line| line.starts_with(&format!("| `{name}` |")));
        let expected = match treatment {
            Treatment::Honoured => "| honoured |",
            Treatment::NotSupported(_) => "| not supported (logged at start) |",
            Treatment::NotSupportedWhenOn(_) => "| not supported (logged at start when on) |",
        };
        match row {
            Some(row) if row.contains(expected) => {}
            Some(row) => problems.push(format!(
                "{name}: the guide says {row:?}, the code {expected}"
            )),
            None => problems.push(format!("{name}: missing from the guide's table")),
        }
    }
    assert!(
        problems.is_empty(),
        "docs/migrating-from-envoy-ratelimit.md (\"Every variable of the reference\") and \
         src/cmd/reference_env.rs disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_variable_called_honoured_is_read_by_the_source() {
    let mut files = Vec::new();
    rust_files(&repo_file("src"), &mut files);
    let texts: Vec<_> = files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            (path, text)
        })
        .collect();
    let unread: Vec<&str> = REFERENCE_VARIABLES
        .iter()
        .filter(|(_, treatment)| *treatment == Treatment::Honoured)
        .map(|(name, _)| *name)
        .filter(|name| {
            let quoted = format!("\"{name}\"");
            !texts.iter().any(|(path, text)| {
                // The program's code, not its tests; the table itself names every variable once.
                let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
                let in_table = usize::from(path.ends_with("cmd/reference_env.rs"));
                code.matches(&quoted).count() > in_table
            })
        })
        .collect();
    assert!(
        unread.is_empty(),
        "called honoured in src/cmd/reference_env.rs, but nothing in src/ reads {unread:?}"
    );
}
