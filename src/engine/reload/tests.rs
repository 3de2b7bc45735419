//! One reload attempt at a time, on real files.

use std::path::Path;

use super::*;

const GOOD_A: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
const GOOD_B: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 2}\n  - key: j\n    rate_limit: {unit: second, requests_per_unit: 3}\n";
const BAD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";

fn write(path: &Path, text: &str) {
    if let Err(error) = std::fs::write(path, text) {
        panic!("write {}: {error}", path.display());
    }
}

fn reloader(path: &Path) -> ConfigReloader {
    let location = ConfigLocation::Path(path.to_path_buf());
    let sources = match read_sources(&location, DEFAULT_MAX_CONFIG_BYTES) {
        Ok(sources) => sources,
        Err(error) => panic!("read: {error}"),
    };
    let rules = match load(&sources, &LoadOptions::default()) {
        Ok(rules) => rules,
        Err(error) => panic!("load: {error}"),
    };
    let status = Arc::new(ReloadStatus::new(&rules));
    ConfigReloader::new(location, LoadOptions::default(), &sources, status)
}

/// A reload that must load, swapped in.
fn go_live(reloader: &mut ConfigReloader, trigger: Trigger) {
    let Some(reloaded) = reloader.reload(trigger) else {
        panic!("the reload should load");
    };
    reloaded.go_live(reloader.status(), drop);
}

#[test]
fn unchanged_files_are_not_reloaded_unless_asked_by_signal() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = dir.path().join("d.yaml");
    write(&file, GOOD_A);
    let mut reloader = reloader(&file);
    assert!(reloader.reload(Trigger::FileChange).is_none());
    assert_eq!(reloader.status().version(), 1);
    go_live(&mut reloader, Trigger::Signal);
    assert_eq!(reloader.status().version(), 2);
}

#[test]
fn the_files_are_compared_once_when_the_watch_starts() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = dir.path().join("d.yaml");
    write(&file, GOOD_A);
    let mut reloader = reloader(&file);
    assert!(
        reloader.reload(Trigger::WatchStarted).is_none(),
        "the files the first load read: nothing to reload"
    );
    // Changed after the first read, before the watch: no event ever comes for it.
    write(&file, GOOD_B);
    go_live(&mut reloader, Trigger::WatchStarted);
    assert_eq!(reloader.status().version(), 2);
    // A read that fails was reported by the first load: not counted again.
    std::fs::remove_file(&file).unwrap_or_else(|error| panic!("remove: {error}"));
    assert!(reloader.reload(Trigger::WatchStarted).is_none());
    assert_eq!(reloader.status().snapshot().failures, 0);
}

#[test]
fn a_good_change_is_a_new_version_and_a_bad_one_keeps_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = dir.path().join("d.yaml");
    write(&file, GOOD_A);
    let mut reloader = reloader(&file);

    write(&file, GOOD_B);
    let Some(reloaded) = reloader.reload(Trigger::FileChange) else {
        panic!("a good change should load");
    };
    assert_eq!(reloaded.rules().rule_count(), 2);
    assert_eq!(
        reloader.status().version(),
        1,
        "no version is shown before its rules are swapped in"
    );
    let rule_count = reloaded.go_live(reloader.status(), |rules| {
        assert_eq!(
            reloader.status().version(),
            1,
            "the version waits for the install"
        );
        rules.rule_count()
    });
    assert_eq!(rule_count, 2);
    assert_eq!(reloader.status().version(), 2);

    write(&file, BAD);
    assert!(reloader.reload(Trigger::FileChange).is_none());
    let snapshot = reloader.status().snapshot();
    assert_eq!((snapshot.version, snapshot.failures), (2, 1));
    let message = snapshot.last_error.map(|e| e.message).unwrap_or_default();
    assert!(message.contains("d.yaml"), "{message}");
    assert!(message.contains("d.k"), "the rule path is named: {message}");
    // The same bad files again: no second error.
    assert!(reloader.reload(Trigger::FileChange).is_none());
    assert_eq!(reloader.status().snapshot().failures, 1);

    write(&file, GOOD_A);
    go_live(&mut reloader, Trigger::FileChange);
    assert_eq!(reloader.status().version(), 3);
}

#[test]
fn a_missing_file_is_a_failure_and_its_return_reloads() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = dir.path().join("d.yaml");
    write(&file, GOOD_A);
    let mut reloader = reloader(&file);
    if let Err(error) = std::fs::remove_file(&file) {
        panic!("remove: {error}");
    }
    assert!(reloader.reload(Trigger::FileChange).is_none());
    assert_eq!(reloader.status().snapshot().failures, 1);
    write(&file, GOOD_A);
    go_live(&mut reloader, Trigger::FileChange);
    assert_eq!(reloader.status().version(), 2);
}

#[test]
fn a_reload_over_a_cap_is_refused_and_keeps_the_rules() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = dir.path().join("d.yaml");
    write(&file, GOOD_A);
    let size = u64::try_from(GOOD_A.len()).unwrap_or(u64::MAX);
    let mut reloader = reloader(&file).with_max_config_bytes(size);

    write(&file, GOOD_B);
    assert!(reloader.reload(Trigger::FileChange).is_none());
    let snapshot = reloader.status().snapshot();
    assert_eq!((snapshot.version, snapshot.failures), (1, 1));
    let message = snapshot.last_error.map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains(&format!("over the cap of {size} bytes"))
            && message.contains("--max-config-bytes"),
        "{message}"
    );

    // Within the byte cap, over the rule cap.
    reloader.max_config_bytes = DEFAULT_MAX_CONFIG_BYTES;
    reloader.options.max_rules = 1;
    assert!(reloader.reload(Trigger::FileChange).is_none());
    let snapshot = reloader.status().snapshot();
    assert_eq!((snapshot.version, snapshot.failures), (1, 2));
    let message = snapshot.last_error.map(|e| e.message).unwrap_or_default();
    assert!(
        message.contains("2 rules up to this file, over the cap of 1 rules")
            && message.contains("--max-rules"),
        "{message}"
    );
}

#[test]
fn watch_targets_follow_the_location() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = dir.path().join("d.yaml");
    write(&file, GOOD_A);
    let reloader = reloader(&file);
    assert_eq!(
        reloader.watch_targets(),
        vec![WatchTarget {
            directory: dir.path().to_path_buf(),
            recursive: false
        }]
    );
    let root = dir.path().join("current");
    let runtime = |watch_root| ConfigReloader {
        location: ConfigLocation::Runtime {
            root: root.clone(),
            subdirectory: "ratelimit".into(),
            app_directory: "config".into(),
            watch_root,
            ignore_dotfiles: true,
        },
        ..reloader_with_empty_status()
    };
    let app = root.join("ratelimit/config");
    assert_eq!(
        runtime(true).watch_targets(),
        vec![
            WatchTarget {
                directory: dir.path().to_path_buf(),
                recursive: false
            },
            WatchTarget {
                directory: app.clone(),
                recursive: true
            }
        ]
    );
    assert_eq!(
        runtime(false).watch_targets(),
        vec![WatchTarget {
            directory: app,
            recursive: true
        }]
    );
}

fn reloader_with_empty_status() -> ConfigReloader {
    ConfigReloader::new(
        ConfigLocation::Path(".".into()),
        LoadOptions::default(),
        &[],
        Arc::new(ReloadStatus::new(&RuleSet::default())),
    )
}
