//! One module-file style: a module with submodules is `name/mod.rs`, never `name.rs` beside a
//! `name/` folder, so a reader finds every module of a folder inside it.

use std::path::Path;

use floodgate_testkit::repo_file;

use crate::layers::rust_files;

/// The `name.rs` files of `dir` (recursively) that have a `name/` folder beside them.
fn beside_a_folder(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    files
        .into_iter()
        .filter(|file| file.with_extension("").is_dir())
        .map(|file| file.display().to_string())
        .collect()
}

#[test]
fn a_module_with_submodules_is_its_folders_mod_rs() {
    let mut found = Vec::new();
    for dir in ["src", "core/src", "testkit/src"] {
        found.extend(beside_a_folder(&repo_file(dir)));
    }
    assert!(
        found.is_empty(),
        "modules written as name.rs beside a name/ folder (git mv name.rs name/mod.rs):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_file_beside_its_folder_is_found() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let module = dir.path().join("module");
    std::fs::create_dir(&module).unwrap_or_else(|error| panic!("{error}"));
    for file in [dir.path().join("module.rs"), module.join("part.rs")] {
        std::fs::write(&file, "").unwrap_or_else(|error| panic!("{error}"));
    }
    assert_eq!(
        beside_a_folder(dir.path()),
        [dir.path().join("module.rs").display().to_string()]
    );
}
