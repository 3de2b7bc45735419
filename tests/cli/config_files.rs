//! The example configuration files in `config/` load together, without warnings, and answer
//! the descriptors Envoy's example bootstrap sends.

use std::path::Path;

use floodgate::core::arithmetic::algorithm::Algorithm;
use floodgate::core::ground::unit::Unit;
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::rules::{MatchedLevel, RuleSet};

fn example_files() -> Vec<SourceFile> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let listing = match std::fs::read_dir(&directory) {
        Ok(listing) => listing,
        Err(error) => panic!("{}: {error}", directory.display()),
    };
    let mut paths: Vec<_> = listing
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "yaml")
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| match std::fs::read_to_string(&path) {
            Ok(text) => SourceFile {
                name: path.display().to_string(),
                text,
            },
            Err(error) => panic!("{}: {error}", path.display()),
        })
        .collect()
}

fn examples() -> RuleSet {
    match load(&example_files(), &LoadOptions::default()) {
        Ok(rules) => {
            let warnings: Vec<String> = rules.warnings().iter().map(ToString::to_string).collect();
            assert!(warnings.is_empty(), "warnings:\n{}", warnings.join("\n"));
            rules
        }
        Err(errors) => panic!("the examples should load:\n{errors}"),
    }
}

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(key, value)| Entry::new(*key, *value))
        .collect()
}

#[test]
fn every_example_loads_one_domain_each() {
    let rules = examples();
    let names: Vec<&str> = rules.domains().map(|domain| domain.name.as_str()).collect();
    assert_eq!(names, vec!["api", "edge", "login", "reports", "shop"]);
    for domain in rules.domains() {
        assert_eq!(domain.sources.len(), 1, "{}", domain.name);
    }
}

#[test]
fn the_envoy_example_descriptors_find_their_rules_in_edge() {
    let rules = examples();
    let Some(edge) = rules.domain("edge") else {
        panic!("edge is missing");
    };

    let Some(per_client) = edge.lookup(&entries(&[("generic_key", "api"), ("client_id", "alice")]))
    else {
        panic!("[generic_key=api, client_id=alice] should find a rule");
    };
    assert_eq!(per_client.rule.path, "edge.generic_key_api.client_id");
    assert_eq!(
        per_client.levels.as_slice(),
        [MatchedLevel::Exact, MatchedLevel::Default]
    );
    let quota = &per_client.rule.limits[0];
    assert_eq!((quota.requests_per_unit, quota.unit), (10, Unit::Second));
    assert_eq!(
        (quota.algorithm, quota.burst),
        (Algorithm::TokenBucket, Some(20))
    );

    let Some(per_address) = edge.lookup(&entries(&[("remote_address", "127.0.0.1")])) else {
        panic!("[remote_address=127.0.0.1] should find a rule");
    };
    assert_eq!(per_address.rule.path, "edge.remote_address");

    let Some(global) = edge.lookup(&entries(&[("generic_key", "global")])) else {
        panic!("[generic_key=global] should find a rule");
    };
    assert_eq!(global.rule.path, "edge.generic_key_global");

    let Some(exempt) = edge.lookup(&entries(&[
        ("generic_key", "api"),
        ("client_id", "internal-batch"),
    ])) else {
        panic!("the exempt client should find its rule");
    };
    assert!(exempt.rule.unlimited);
}

#[test]
fn the_other_examples_show_their_algorithms() {
    let rules = examples();
    let find = |domain: &str, pairs: &[(&str, &str)]| {
        rules
            .domain(domain)
            .and_then(|rules| rules.lookup(&entries(pairs)))
            .map(|found| found.rule.limits.clone())
    };

    let Some(reports) = find(
        "reports",
        &[("generic_key", "reports"), ("client_id", "c1")],
    ) else {
        panic!("reports rule missing");
    };
    assert_eq!(reports[0].algorithm, Algorithm::LeakyBucket);
    assert_eq!(reports[0].capacity(), 6);

    let Some(login) = find("login", &[("generic_key", "login"), ("user", "bob")]) else {
        panic!("login rule missing");
    };
    assert_eq!(
        (
            login[0].requests_per_unit,
            login[0].unit,
            login[0].algorithm
        ),
        (3, Unit::Minute, Algorithm::SlidingLog)
    );

    let Some(api) = find("api", &[("api_key", "k1")]) else {
        panic!("api rule missing");
    };
    let windows: Vec<(u32, u64, Algorithm)> = api
        .iter()
        .map(|quota| {
            (
                quota.requests_per_unit,
                quota.window_seconds(),
                quota.algorithm,
            )
        })
        .collect();
    assert_eq!(
        windows,
        vec![
            (10, 1, Algorithm::SlidingWindow),
            (1000, 3600, Algorithm::SlidingWindow)
        ]
    );

    let Some(export) = find("api", &[("path", "/export/monthly.csv")]) else {
        panic!("export rule missing");
    };
    assert_eq!(export[0].window_seconds(), 30);
}
