//! The layers of `docs/architecture.md`, held by the code: `cmd → server → engine → {store,
//! telemetry} → core`, and inside the core its floors, `decision → policy → arithmetic →
//! ground`. Every `crate::…` path in the non-test code of `src/` and `core/src/` (and every
//! `super::…` path, resolved to the module it names) is an arrow from the module it is written
//! in to the module it names; an arrow may only point down a layer or floor (or stay inside
//! it), and the arrows between modules must not close a cycle. The core is its own crate, with
//! only the dependencies that do no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use floodgate_testkit::repo_file;

/// Each layer's rank: an arrow goes from a higher rank to a lower one, or within a layer.
/// `store` and `telemetry` share a rank and may not import each other.
const LAYERS: [(&str, u8); 6] = [
    ("cmd", 5),
    ("server", 4),
    ("engine", 3),
    ("store", 2),
    ("telemetry", 2),
    ("core", 1),
];

/// The core's floors (`core/src/lib.rs`, `# Layout`), ranked as the layers are: a module may
/// use its own floor's modules and those of the floors below.
const CORE_FLOORS: [(&str, u8); 4] = [
    ("decision", 4),
    ("policy", 3),
    ("arithmetic", 2),
    ("ground", 1),
];

/// What `floodgate-core` may depend on: nothing that does I/O (smallvec: a vector whose
/// first few items live inline, so a decision's short lists allocate nothing).
const CORE_DEPENDENCIES: [&str; 5] = ["serde", "serde_yaml", "smallvec", "thiserror", "url"];

fn rank(layer: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == layer)
        .map(|(_, rank)| *rank)
}

fn floor_rank(floor: &str) -> Option<u8> {
    CORE_FLOORS
        .iter()
        .find(|(name, _)| *name == floor)
        .map(|(_, rank)| *rank)
}

/// Every `.rs` file under `dir`, recursively.
pub(crate) fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// The module a file of `src/` belongs to, as a room of the graph: the layer and the module
/// under it (`engine::limiter` for `src/engine/limiter.rs` and for `src/engine/reload/watch.rs`
/// it is `engine::reload`); a layer's own `mod.rs` is the layer. In `core/src` the floor takes
/// the layer's place (`decision::plan` for `core/src/decision/plan.rs`).
fn room_of_file(relative: &Path) -> Option<String> {
    let parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [single] if single == "lib" || single == "main" => None,
        [layer, module] if module == "mod" => Some(layer.clone()),
        [layer, module, ..] => Some(format!("{layer}::{module}")),
        _ => None,
    }
}

/// The room a `crate::a::b` path names (`core::…` is the core, whatever follows).
fn room_of_path(path: &str) -> String {
    let mut parts = path.split("::");
    let layer = parts.next().unwrap_or_default();
    match (layer, parts.next()) {
        ("core", _) | (_, None) => layer.to_owned(),
        (_, Some(module)) if module.chars().next().is_some_and(char::is_uppercase) => {
            layer.to_owned()
        }
        (_, Some(module)) => format!("{layer}::{module}"),
    }
}

fn layer_of(room: &str) -> &str {
    room.split("::").next().unwrap_or(room)
}

/// The file's code without its tests and comments: what the program itself imports. A
/// `#[cfg(test)]` item is left out: a `mod …;` line, or a block up to its closing brace at the
/// same indentation (test modules, test-only helpers).
fn code_without_tests(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            let indent = line.len() - trimmed.len();
            for item in lines.by_ref() {
                let item_trimmed = item.trim_start();
                if item_trimmed.starts_with("#[") || item_trimmed.starts_with("//") {
                    continue;
                }
                if item_trimmed.ends_with(';') {
                    break;
                }
                for body in lines.by_ref() {
                    let closing = body.len() - body.trim_start().len() == indent
                        && body.trim_start().starts_with('}');
                    if closing {
                        break;
                    }
                }
                break;
            }
            continue;
        }
        let line = match line.find("//") {
            Some(comment) => &line[..comment],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The module a file is (`engine::reload::watch` for `engine/reload/watch.rs`, `engine` for
/// `engine/mod.rs`), as segments.
fn module_of_file(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

/// Every path of `code` that names a module of the crate, from the crate's root: `crate::a::b`
/// as `a::b`, and `super::…` written in `module` resolved (`super::x` in `engine::reload` is
/// `engine::x`; `super::super::x` goes one more up). A group (`crate::a::{b, c::D}`) gives one
/// path per item (`a::b`, `a::c::D`).
fn crate_paths(code: &str, module: &[String]) -> Vec<String> {
    let is_path_char = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut paths = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let Some(start) = rest.find(is_path_char) else {
            break;
        };
        let token = &rest[start..];
        let end = token.find(|c| !is_path_char(c)).unwrap_or(token.len());
        at += start + end;
        let path = token[..end].trim_end_matches(':');
        let Some(base) = from_root(path, module) else {
            continue;
        };
        if token[..end].ends_with("::") && token[end..].starts_with('{') {
            for item in group_items(&token[end..]) {
                paths.push(format!("{base}::{item}"));
            }
        } else {
            paths.push(base);
        }
    }
    paths
}

/// `path` from the crate's root, if it starts there (`crate::…`) or climbs to it (`super::…`).
fn from_root(path: &str, module: &[String]) -> Option<String> {
    let mut segments = path.split("::");
    let mut base: Vec<&str> = match segments.next()? {
        "crate" => Vec::new(),
        "super" => {
            let mut base: Vec<&str> = module.iter().map(String::as_str).collect();
            base.pop();
            base
        }
        _ => return None,
    };
    for segment in segments {
        if segment == "super" {
            base.pop();
        } else {
            base.push(segment);
        }
    }
    Some(base.join("::"))
}

/// The leading path of each item of the group `text` starts with (`{a, b::C, d::{e}}` gives
/// `a`, `b::C`, `d`).
fn group_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut item_start = None;
    for (index, c) in text.char_indices() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    item_start = Some(index + 1);
                }
            }
            '}' | ',' if depth == 1 => {
                if let Some(start) = item_start.take() {
                    let item = text[start..index].trim();
                    let end = item
                        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        .unwrap_or(item.len());
                    let item = item[..end].trim_end_matches(':');
                    if !item.is_empty() && item != "self" {
                        items.push(item);
                    }
                }
                if c == '}' {
                    break;
                }
                item_start = Some(index + 1);
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    items
}

/// Every arrow between rooms of the crate in `dir` (`src` or `core/src`), with the file that
/// draws it.
fn arrows_in(dir: &str) -> BTreeMap<(String, String), PathBuf> {
    let src = repo_file(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut arrows = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file).to_path_buf();
        if relative
            .components()
            .any(|part| part.as_os_str() == "tests")
            || relative.file_name().is_some_and(|name| name == "tests.rs")
        {
            continue;
        }
        let Some(from) = room_of_file(&relative) else {
            continue;
        };
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
        let module = module_of_file(&relative);
        for path in crate_paths(&code_without_tests(&text), &module) {
            let to = room_of_path(&path);
            if to != from && !to.is_empty() {
                arrows
                    .entry((from.clone(), to))
                    .or_insert_with(|| relative.clone());
            }
        }
    }
    arrows
}

fn arrows() -> BTreeMap<(String, String), PathBuf> {
    arrows_in("src")
}

/// The arrows between the core's rooms (`floor::module`).
fn core_arrows() -> BTreeMap<(String, String), PathBuf> {
    arrows_in("core/src")
}

/// Every cycle the arrows close, each as its rooms sorted and joined.
fn cycles(arrows: &BTreeMap<(String, String), PathBuf>) -> BTreeSet<String> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in arrows.keys() {
        next.entry(from).or_default().insert(to);
    }
    let mut cycles = BTreeSet::new();
    for &start in next.keys() {
        // Depth-first over simple paths from `start`; each graph has a few dozen rooms.
        let mut stack = vec![vec![start]];
        while let Some(path) = stack.pop() {
            let last = path[path.len() - 1];
            for &to in next.get(last).into_iter().flatten() {
                if to == start {
                    let mut cycle: Vec<&str> = path.clone();
                    cycle.sort_unstable();
                    cycles.insert(cycle.join(" ↔ "));
                } else if !path.contains(&to) {
                    let mut longer = path.clone();
                    longer.push(to);
                    stack.push(longer);
                }
            }
        }
    }
    cycles
}

#[test]
fn every_import_points_down_a_layer() {
    let mut wrong = Vec::new();
    for ((from, to), file) in arrows() {
        let (from_layer, to_layer) = (layer_of(&from), layer_of(&to));
        let (Some(from_rank), Some(to_rank)) = (rank(from_layer), rank(to_layer)) else {
            wrong.push(format!(
                "src/{}: {from} -> {to}: a module outside the layers (cmd, server, engine, \
                 store, telemetry, core); put it in one of them",
                file.display()
            ));
            continue;
        };
        let sideways = from_rank == to_rank && from_layer != to_layer;
        if to_rank > from_rank || sideways {
            wrong.push(format!(
                "src/{}: {from} -> {to} points {} (cmd → server → engine → {{store, \
                 telemetry}} → core); move the shared piece down, or let a higher layer join \
                 the two",
                file.display(),
                if sideways { "sideways" } else { "up" },
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_two_modules_import_each_other_even_through_others() {
    let cycles = cycles(&arrows());
    assert!(
        cycles.is_empty(),
        "modules that import each other (move what both need into a lower module):\n{}",
        cycles
            .iter()
            .map(|cycle| cycle.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_import_in_the_core_points_down_a_floor() {
    let mut wrong = Vec::new();
    for ((from, to), file) in core_arrows() {
        let (from_floor, to_floor) = (layer_of(&from), layer_of(&to));
        let (Some(from_rank), Some(to_rank)) = (floor_rank(from_floor), floor_rank(to_floor))
        else {
            wrong.push(format!(
                "core/src/{}: {from} -> {to}: a module outside the floors (ground, arithmetic, \
                 policy, decision); put it in the floor of what it does",
                file.display()
            ));
            continue;
        };
        if to_rank > from_rank {
            wrong.push(format!(
                "core/src/{}: {from} -> {to} points up (decision → policy → arithmetic → \
                 ground); move the piece both need down to the lower floor",
                file.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_two_modules_of_the_core_import_each_other_even_through_others() {
    let cycles = cycles(&core_arrows());
    assert!(
        cycles.is_empty(),
        "modules of the core that import each other (move what both need into a lower \
         module, or a lower floor):\n{}",
        cycles.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_core_crate_depends_on_nothing_that_does_io() {
    let manifest = repo_file("core/Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", manifest.display()));
    let mut section = String::new();
    let mut unexpected = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if section != "[dependencies]" || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line.split(['=', ' ']).next().unwrap_or_default();
        if !CORE_DEPENDENCIES.contains(&name) {
            unexpected.push(name.to_owned());
        }
    }
    assert!(
        unexpected.is_empty(),
        "core/Cargo.toml depends on {unexpected:?}: the core does no I/O and keeps to \
         {CORE_DEPENDENCIES:?}; put what needs more in the floodgate crate"
    );
}

#[test]
fn the_graph_sees_the_arrows_it_checks() {
    // A checker that finds no arrows would pass anything.
    let arrows = arrows();
    for (from, to) in [
        ("cmd::serve", "engine::limiter"),
        ("engine::limiter", "store"),
        ("server::grpc", "engine::limiter"),
        ("telemetry::record", "core"),
    ] {
        assert!(
            arrows.contains_key(&(from.to_owned(), to.to_owned())),
            "no arrow {from} -> {to} among {} arrows",
            arrows.len()
        );
    }
    let code = code_without_tests(
        "#[cfg(test)]\nmod a;\nuse crate::cmd::cli::Cli; // crate::engine::x\n\
         #[cfg(test)]\nfn f() {\n    crate::store::x();\n}\nuse crate::core::y;\n\
         #[cfg(test)]\nmod tests {\n    use crate::server::z;\n}\n",
    );
    assert_eq!(crate_paths(&code, &[]), ["cmd::cli::Cli", "core::y"]);
    let engine_reload = ["engine".to_owned(), "reload".to_owned()];
    assert_eq!(
        crate_paths(
            "use super::limiter::Limiter;\nuse super::super::store::{self, x::Y};\n\
             use crate::core::{a::B, c};\nfn f() { super::super::cmd::run(); }\n",
            &engine_reload
        ),
        [
            "engine::limiter::Limiter",
            "store::x::Y",
            "core::a::B",
            "core::c",
            "cmd::run"
        ]
    );
    assert_eq!(
        module_of_file(Path::new("engine/reload/mod.rs")),
        engine_reload
    );
    let core = core_arrows();
    for (from, to) in [
        ("decision::plan", "policy::rules"),
        ("policy::rules", "arithmetic::algorithm"),
        ("arithmetic::algorithm", "ground::time"),
        // `super::` in policy/config/limit.rs, resolved.
        ("policy::config", "policy::rules"),
    ] {
        assert!(
            core.contains_key(&(from.to_owned(), to.to_owned())),
            "no arrow {from} -> {to} among the core's {} arrows",
            core.len()
        );
    }
    assert_eq!(room_of_path("store::Decided"), "store");
    assert_eq!(room_of_path("engine::reload::watch"), "engine::reload");
    assert_eq!(
        room_of_file(Path::new("engine/reload/watch.rs")).as_deref(),
        Some("engine::reload")
    );
}
