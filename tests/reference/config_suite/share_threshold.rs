//! `TestShareThreshold` on `share_threshold.yaml`: every value a `share_threshold` wildcard
//! matches counts in one counter (`rl.ShareThresholdKeyPattern` names the pattern per entry),
//! an exact value wins over the wildcard, and the stats key shows the pattern, also over
//! `value_to_metric` and `detailed_metric`.

use super::{found, limit, loaded, one_counter, own_counters, rule, shared_patterns, stats_key};
use floodgate_core::ground::unit::Unit;
use floodgate_core::policy::rules::RuleSet;

fn share_threshold() -> RuleSet {
    loaded(&["share_threshold.yaml"], false)
}

/// Each of `all` finds a rule of `requests`/min whose stats key is `key`, with the shared
/// `patterns`, and all count in one counter.
#[track_caller]
fn assert_shared(
    rules: &RuleSet,
    all: &[&[(&str, &str)]],
    patterns: &[Option<&str>],
    requests: u32,
    key: &str,
) {
    for pairs in all {
        assert_eq!(
            shared_patterns(rules, "test-domain", pairs),
            patterns,
            "{pairs:?}"
        );
        assert_eq!(
            limit(rules, "test-domain", pairs),
            (requests, Unit::Minute),
            "{pairs:?}"
        );
        assert_eq!(stats_key(rules, "test-domain", pairs), key, "{pairs:?}");
    }
    one_counter(rules, "test-domain", all);
}

/// Every value of `values` for `key` shares the one counter of `pattern` (`requests`/min,
/// stats key `test-domain.<key>_<pattern>`); `miss` matches nothing.
#[track_caller]
fn assert_values_shared(
    key: &str,
    values: &[&str],
    pattern: &str,
    requests: u32,
    miss: Option<&str>,
) {
    let rules = share_threshold();
    let descriptors: Vec<[(&str, &str); 1]> = values.iter().map(|value| [(key, *value)]).collect();
    let all: Vec<&[(&str, &str)]> = descriptors.iter().map(|pairs| &pairs[..]).collect();
    let stats = format!("test-domain.{key}_{pattern}");
    assert_shared(&rules, &all, &[Some(pattern)], requests, &stats);
    if let Some(miss) = miss {
        assert!(
            found(&rules, "test-domain", &[(key, miss)]).is_none(),
            "{miss}"
        );
    }
}

#[test]
fn config_test_share_threshold_basic() {
    assert_values_shared(
        "files",
        &["files/a.pdf", "files/b.csv", "files/c.txt"],
        "files/*",
        100,
        None,
    );
}

/// share_threshold wins over value_to_metric and detailed_metric in the stats key.
#[test]
fn config_test_share_threshold_with_metrics() {
    let rules = share_threshold();
    assert_shared(
        &rules,
        &[
            &[("route", "api/v1"), ("method", "GET")],
            &[("route", "api/v2"), ("method", "GET")],
        ],
        &[Some("api/*"), None],
        60,
        "test-domain.route_api/*.method",
    );
    let service = [("service", "svc/user"), ("endpoint", "get")];
    assert!(rule(&rules, "test-domain", &service).detailed_metric);
    assert_shared(
        &rules,
        &[&service, &[("service", "svc/order"), ("endpoint", "get")]],
        &[Some("svc/*"), None],
        80,
        "test-domain.service_svc/*.endpoint_get",
    );
}

#[test]
fn config_test_share_threshold_nested_wildcards() {
    let rules = share_threshold();
    assert_shared(
        &rules,
        &[
            &[("nested", "parent"), ("files", "nested/file1.txt")],
            &[("nested", "parent"), ("files", "nested/file2.txt")],
        ],
        &[None, Some("nested/*")],
        200,
        "test-domain.nested_parent.files_nested/*",
    );
    assert_shared(
        &rules,
        &[
            &[("files", "top/file1.txt"), ("files", "nested/file1.txt")],
            &[("files", "top/x"), ("files", "nested/y")],
        ],
        &[Some("top/*"), Some("nested/*")],
        300,
        "test-domain.files_top/*.files_nested/*",
    );
    // The parent shares, the child's wildcard (share_threshold: false) keeps each value apart.
    let doc1 = [("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")];
    assert_shared(
        &rules,
        &[
            &doc1,
            &[("path", "path/bar"), ("file", "file/doc1"), ("type", "pdf")],
        ],
        &[Some("path/*"), None, None],
        120,
        "test-domain.path_path/*.file_file/*.type",
    );
    own_counters(
        &rules,
        "test-domain",
        &doc1,
        &[("path", "path/foo"), ("file", "file/doc2"), ("type", "pdf")],
    );
    assert_shared(
        &rules,
        &[
            &[
                ("user", "user/alice"),
                ("resource", "res/file1"),
                ("action", "read"),
            ],
            &[
                ("user", "user/bob"),
                ("resource", "res/file2"),
                ("action", "read"),
            ],
        ],
        &[Some("user/*"), Some("res/*"), None],
        150,
        "test-domain.user_user/*.resource_res/*.action",
    );
}

#[test]
fn config_test_share_threshold_explicit_value_precedence_over_wildcard() {
    let rules = share_threshold();
    let test1 = [("file", "test1")];
    assert_eq!(limit(&rules, "test-domain", &test1), (50, Unit::Minute));
    assert_eq!(shared_patterns(&rules, "test-domain", &test1), [None]);
    assert_eq!(
        stats_key(&rules, "test-domain", &test1),
        "test-domain.file_test1"
    );
    assert_values_shared("file", &["test2", "test23", "test123"], "test*", 100, None);
    own_counters(&rules, "test-domain", &test1, &[("file", "test2")]);
}

#[test]
fn config_test_share_threshold_with_middle_wildcard() {
    assert_values_shared(
        "midpath",
        &["/api/v1", "/api-beta-v1", "/apiXYZv1"],
        "/api*v1",
        100,
        Some("/api/v2"),
    );
}

#[test]
fn config_test_share_threshold_with_multi_wildcard() {
    assert_values_shared(
        "multiroute",
        &["svcAepBrpc", "svcXXXepYYYrpc", "svceprpc"],
        "svc*ep*rpc",
        50,
        Some("svcABCrpc"),
    );
}

#[test]
fn config_test_share_threshold_priority_over_value_to_metric_with_middle_wildcard() {
    assert_values_shared(
        "midroute",
        &["/api/v2", "/api-beta-v2"],
        "/api*v2",
        80,
        None,
    );
}

#[test]
fn config_test_share_threshold_with_nested_middle_wildcards() {
    assert_shared(
        &share_threshold(),
        &[
            &[("tenant", "t1prod"), ("resource", "resAv2")],
            &[("tenant", "t99prod"), ("resource", "resBBBv2")],
        ],
        &[Some("t*prod"), Some("res*v2")],
        60,
        "test-domain.tenant_t*prod.resource_res*v2",
    );
}
