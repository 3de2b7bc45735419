use super::*;

const ORIGIN: &str = "/etc/ratelimit/mapper.yaml";

fn load(text: &str) -> MetricMapper {
    MetricMapper::from_yaml(text, ORIGIN).unwrap_or_else(|e| panic!("{e}"))
}

fn load_error(text: &str) -> MappingError {
    match MetricMapper::from_yaml(text, ORIGIN) {
        Ok(_) => panic!("loaded, but should not have:\n{text}"),
        Err(error) => error,
    }
}

fn refusal(text: &str) -> (Place, Problem) {
    match load_error(text) {
        MappingError::Invalid {
            origin,
            place,
            problem,
        } => {
            assert_eq!(origin, ORIGIN);
            (place, problem)
        }
        other => panic!("not an Invalid error: {other}"),
    }
}

fn metric(mapper: &MetricMapper, name: &str, kind: StatKind) -> MappedMetric {
    match mapper.map(name, kind) {
        Mapped::Metric(metric) => metric,
        Mapped::Drop => panic!("{name} was dropped"),
    }
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn strict_reference_default(milliseconds: bool) -> MetricMapper {
    MetricMapper::from_yaml(&reference_default_text(milliseconds), "embedded")
        .unwrap_or_else(|e| panic!("the embedded default does not load: {e}"))
}

#[test]
fn the_embedded_default_loads_both_ways() {
    let seconds = strict_reference_default(false);
    let milliseconds = strict_reference_default(true);
    assert_eq!(seconds.mapping_count(), 15);
    assert_eq!(milliseconds.mapping_count(), 15);
    assert_eq!(
        REFERENCE_DEFAULT.matches(RESPONSE_TIME_SCALE_LINE).count(),
        1
    );
    assert_eq!(
        reference_default_text(true).len() + RESPONSE_TIME_SCALE_LINE.len(),
        REFERENCE_DEFAULT.len()
    );
    assert_eq!(MetricMapper::reference_default(false).mapping_count(), 15);
}

#[test]
fn two_piece_keys_get_domain_and_key1() {
    let mapper = MetricMapper::reference_default(false);
    let m = metric(
        &mapper,
        "ratelimit.service.rate_limit.shop.tenant_a.total_hits",
        StatKind::Counter,
    );
    assert_eq!(m.name, "ratelimit_service_rate_limit_total_hits");
    assert_eq!(
        m.labels,
        labels(&[("domain", "shop"), ("key1", "tenant_a")])
    );
    assert_eq!(m.scale, 1.0);
    assert_eq!(m.help, None);
    for stat in ["near_limit", "over_limit", "within_limit", "shadow_mode"] {
        let m = metric(
            &mapper,
            &format!("ratelimit.service.rate_limit.shop.tenant_a.{stat}"),
            StatKind::Counter,
        );
        assert_eq!(m.name, format!("ratelimit_service_rate_limit_{stat}"));
        assert_eq!(
            m.labels,
            labels(&[("domain", "shop"), ("key1", "tenant_a")])
        );
    }
}

#[test]
fn longer_keys_get_key2_from_the_third_piece() {
    let mapper = MetricMapper::reference_default(false);
    let m = metric(
        &mapper,
        "ratelimit.service.rate_limit.shop.a.b.c.over_limit",
        StatKind::Counter,
    );
    assert_eq!(m.name, "ratelimit_service_rate_limit_over_limit");
    assert_eq!(
        m.labels,
        labels(&[("domain", "shop"), ("key1", "a"), ("key2", "b")])
    );
    let m = metric(
        &mapper,
        "ratelimit.service.rate_limit.shop.service_checkout.customer.within_limit",
        StatKind::Counter,
    );
    assert_eq!(
        m.labels,
        labels(&[
            ("domain", "shop"),
            ("key1", "service_checkout"),
            ("key2", "customer")
        ])
    );
}

#[test]
fn envoy_gateway_keys_with_slashes_and_dashes() {
    let mapper = MetricMapper::reference_default(true);
    let key1 = "httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example_httproute/default/http-ratelimit/rule/0/match/0/ratelimit_example";
    let name = format!(
            "ratelimit.service.rate_limit.default/eg/http.{key1}.rule-0-match-0_rule-0-match-0.total_hits"
        );
    let m = metric(&mapper, &name, StatKind::Counter);
    assert_eq!(m.name, "ratelimit_service_rate_limit_total_hits");
    assert_eq!(
        m.labels,
        labels(&[
            ("domain", "default/eg/http"),
            ("key1", key1),
            ("key2", "rule-0-match-0_rule-0-match-0")
        ])
    );
}

#[test]
fn the_response_time_is_a_histogram_in_seconds_or_milliseconds() {
    let name = "ratelimit_server.ShouldRateLimit.response_time";
    for (milliseconds, scale) in [(false, 0.001), (true, 1.0)] {
        let m = metric(
            &MetricMapper::reference_default(milliseconds),
            name,
            StatKind::Observer,
        );
        assert_eq!(m.name, "ratelimit_service_response_time_seconds");
        assert_eq!(m.labels, labels(&[("grpc_method", "ShouldRateLimit")]));
        assert_eq!(
            m.observer,
            Observer::Histogram {
                buckets: DEFAULT_BUCKETS.to_vec()
            }
        );
        assert_eq!(m.scale, scale);
    }
    let m = metric(
        &MetricMapper::reference_default(false),
        "ratelimit_server.ShouldRateLimit.total_requests",
        StatKind::Counter,
    );
    assert_eq!(m.name, "ratelimit_service_total_requests");
    assert_eq!(m.labels, labels(&[("grpc_method", "ShouldRateLimit")]));
}

#[test]
fn match_metric_type_limits_a_mapping_to_its_kind() {
    let mapper = MetricMapper::reference_default(false);
    let name = "ratelimit.service.call.should_rate_limit.redis_error";
    let m = metric(&mapper, name, StatKind::Counter);
    assert_eq!(m.name, "ratelimit_service_should_rate_limit_error");
    assert_eq!(m.labels, labels(&[("err_type", "redis_error")]));

    let m = metric(&mapper, name, StatKind::Gauge);
    assert_eq!(
        m.name,
        "ratelimit_service_call_should_rate_limit_redis_error"
    );
    assert!(m.labels.is_empty());

    for (stat, expected) in [
        (
            "config_load_success",
            "ratelimit_service_config_load_success",
        ),
        ("config_load_error", "ratelimit_service_config_load_error"),
    ] {
        let name = format!("ratelimit.service.{stat}");
        let m = metric(&mapper, &name, StatKind::Counter);
        assert_eq!(m.name, expected);
        assert!(m.labels.is_empty());
        assert_eq!(
            metric(&mapper, &name, StatKind::Gauge).name,
            format!("ratelimit_service_{stat}")
        );
    }
}

#[test]
fn unmapped_names_are_escaped_as_statsd_exporter_escapes() {
    let mapper = MetricMapper::reference_default(false);
    let m = metric(&mapper, "ratelimit.go.numGoroutines", StatKind::Gauge);
    assert_eq!(m.name, "ratelimit_go_numGoroutines");
    assert!(m.labels.is_empty());
    assert_eq!(m.scale, 1.0);
    assert_eq!(m.observer, Observer::default_summary());

    assert_eq!(escape_metric_name("1st.pass"), "_1st_pass");
    assert_eq!(escape_metric_name("a/b-c d"), "a_b_c_d");
    assert_eq!(escape_metric_name("a--b---c"), "a_b_c");
    assert_eq!(escape_metric_name("a:b"), "a_b");
    assert_eq!(escape_metric_name("é.x"), "__x");
    assert_eq!(escape_metric_name("ok_Name9"), "ok_Name9");
    assert_eq!(mapper.map("", StatKind::Counter), Mapped::Drop);
}

#[test]
fn drop_and_an_empty_name_drop() {
    let mapper = load(
        r#"
mappings:
  - match: "noisy.*"
    action: drop
  - match: "empty.*"
    name: "$2"
  - match: "kept.*"
    name: "kept"
    action: map
"#,
    );
    assert_eq!(mapper.map("noisy.thing", StatKind::Counter), Mapped::Drop);
    assert_eq!(mapper.map("empty.thing", StatKind::Gauge), Mapped::Drop);
    assert_eq!(metric(&mapper, "kept.thing", StatKind::Gauge).name, "kept");
    assert_eq!(metric(&mapper, "noisy", StatKind::Counter).name, "noisy");
}

#[test]
fn globs_come_before_regexes_and_file_order_decides() {
    let mapper = load(
        r#"
mappings:
  - match: 'a\.(.*)'
    match_type: regex
    name: "from_regex"
  - match: "a.*.c"
    name: "first_glob"
    match_metric_type: gauge
  - match: "a.b.*"
    name: "second_glob"
  - match: "a.*.c"
    name: "third_glob"
"#,
    );
    assert_eq!(metric(&mapper, "a.b.c", StatKind::Gauge).name, "first_glob");
    assert_eq!(
        metric(&mapper, "a.b.c", StatKind::Counter).name,
        "second_glob"
    );
    assert_eq!(
        metric(&mapper, "a.x.c", StatKind::Counter).name,
        "third_glob"
    );
    assert_eq!(
        metric(&mapper, "a.x.y", StatKind::Counter).name,
        "from_regex"
    );
    // A glob's `*` stays within one piece; the pieces must all be there.
    assert_eq!(metric(&mapper, "a.b", StatKind::Counter).name, "from_regex");
    assert_eq!(metric(&mapper, "b.b.c", StatKind::Counter).name, "b_b_c");
}

#[test]
fn glob_captures_and_partial_globs() {
    let mapper = load(
        r#"
mappings:
  - match: "app.*.req_*.*"
    name: "${2}_total"
    help: "Requests."
    labels:
      service: "$1"
      status: "${3}xx"
      unknown: "$4"
      literal: "fixed"
      code: 200
  - match: "app.*.*"
    name: "app_$1_total"
"#,
    );
    let m = metric(&mapper, "app.shop.req_get.2", StatKind::Counter);
    assert_eq!(m.name, "get_total");
    assert_eq!(m.help.as_deref(), Some("Requests."));
    assert_eq!(
        m.labels,
        labels(&[
            ("code", "200"),
            ("literal", "fixed"),
            ("service", "shop"),
            ("status", "2xx"),
            ("unknown", "")
        ])
    );
    // Go's expansion: `$1_total` names the group `1_total`, which is not there.
    assert_eq!(metric(&mapper, "app.x.y", StatKind::Counter).name, "app_");
    // Characters a capture brings in are escaped, not refused.
    let m = metric(&mapper, "app.shop.req_get-v2.5", StatKind::Counter);
    assert_eq!(m.name, "get_v2_total");
}

#[test]
fn regexes_expand_numbered_and_named_groups_and_are_not_anchored() {
    let mapper = load(
        r#"
mappings:
  - match: '^svc\.(?P<service>[a-z]+)\.(\d+)$'
    match_type: regex
    name: "svc_${service}"
    labels:
      code: "$2"
      service: "$service"
  - match: 'latency\.(.+)'
    match_type: regex
    name: "latency"
    labels:
      route: "$1"
"#,
    );
    let m = metric(&mapper, "svc.checkout.503", StatKind::Counter);
    assert_eq!(m.name, "svc_checkout");
    assert_eq!(
        m.labels,
        labels(&[("code", "503"), ("service", "checkout")])
    );
    // statsd_exporter searches a regex anywhere in the name.
    let m = metric(&mapper, "edge.latency.a.b", StatKind::Observer);
    assert_eq!(m.name, "latency");
    assert_eq!(m.labels, labels(&[("route", "a.b")]));
}

#[test]
fn defaults_decide_match_type_and_observers() {
    let mapper = load(
        r#"
defaults:
  observer_type: histogram
  match_type: regex
  histogram_options:
    buckets: [0.1, 1, 10]
  glob_disable_ordering: false
  ttl: 1m
mappings:
  - match: 'timer\.(.*)'
    name: "timer"
  - match: 'custom\.(.*)'
    name: "custom"
    histogram_options:
      buckets: [1, 2, 4]
      native_histogram_bucket_factor: 1.1
  - match: 'sum\.(.*)'
    name: "sum"
    observer_type: summary
    summary_options:
      quantiles:
        - quantile: 0.25
          error: 0.01
        - quantile: 0.75
      max_age: 5m
"#,
    );
    assert_eq!(
        metric(&mapper, "timer.x", StatKind::Observer).observer,
        Observer::Histogram {
            buckets: vec![0.1, 1.0, 10.0]
        }
    );
    assert_eq!(
        metric(&mapper, "custom.x", StatKind::Observer).observer,
        Observer::Histogram {
            buckets: vec![1.0, 2.0, 4.0]
        }
    );
    assert_eq!(
        metric(&mapper, "sum.x", StatKind::Observer).observer,
        Observer::Summary {
            quantiles: vec![0.25, 0.75]
        }
    );
    assert_eq!(
        metric(&mapper, "other.x", StatKind::Observer).observer,
        Observer::Histogram {
            buckets: vec![0.1, 1.0, 10.0]
        }
    );
}

#[test]
fn without_defaults_observers_are_summaries_and_histograms_get_default_buckets() {
    let mapper = load(
        r#"
mappings:
  - match: "plain.*"
    name: "plain"
  - match: "hist.*"
    name: "hist"
    observer_type: histogram
"#,
    );
    assert_eq!(
        metric(&mapper, "plain.x", StatKind::Observer).observer,
        Observer::Summary {
            quantiles: DEFAULT_QUANTILES.to_vec()
        }
    );
    assert_eq!(
        metric(&mapper, "hist.x", StatKind::Observer).observer,
        Observer::Histogram {
            buckets: DEFAULT_BUCKETS.to_vec()
        }
    );
    assert_eq!(
        metric(&mapper, "unmapped", StatKind::Observer).observer,
        Observer::Summary {
            quantiles: DEFAULT_QUANTILES.to_vec()
        }
    );
}

#[test]
fn legacy_keys_still_work() {
    let mapper = load(
        r#"
defaults:
  timer_type: summary
  quantiles:
    - quantile: 0.1
      error: 0.01
mappings:
  - match: "a.*"
    name: "a"
    timer_type: histogram
    buckets: [5, 50]
  - match: "b.*"
    name: "b"
    match_metric_type: timer
  - match: "c.*"
    name: "c"
    quantiles:
      - quantile: 0.9
"#,
    );
    assert_eq!(
        metric(&mapper, "a.x", StatKind::Observer).observer,
        Observer::Histogram {
            buckets: vec![5.0, 50.0]
        }
    );
    assert_eq!(metric(&mapper, "b.x", StatKind::Observer).name, "b");
    assert_eq!(metric(&mapper, "b.x", StatKind::Counter).name, "b_x");
    assert_eq!(
        metric(&mapper, "b.x", StatKind::Observer).observer,
        Observer::Summary {
            quantiles: vec![0.1]
        }
    );
    assert_eq!(
        metric(&mapper, "c.x", StatKind::Observer).observer,
        Observer::Summary {
            quantiles: vec![0.9]
        }
    );
}

#[test]
fn unknown_keys_merge_keys_and_empty_files_are_accepted() {
    let mapper = load(
        r#"
some_future_key: 1
base: &base
  match_metric_type: counter
  labels:
    team: "edge"
mappings:
  - <<: *base
    match: "x.*"
    name: "x"
    honor_labels: true
    future_option: yes
"#,
    );
    let m = metric(&mapper, "x.y", StatKind::Counter);
    assert_eq!(m.name, "x");
    assert_eq!(m.labels, labels(&[("team", "edge")]));
    assert_eq!(metric(&mapper, "x.y", StatKind::Gauge).name, "x_y");

    for text in ["", "# nothing\n", "mappings: []\n", "mappings:\n"] {
        let mapper = load(text);
        assert_eq!(mapper.mapping_count(), 0);
        assert_eq!(metric(&mapper, "a.b", StatKind::Counter).name, "a_b");
    }
}

#[test]
fn a_yaml_syntax_error_names_the_file_and_the_place() {
    let error = load_error("mappings:\n  - match: \"a.*\"\n    name: [unclosed\n");
    let MappingError::Yaml {
        origin,
        line,
        column,
        ..
    } = &error
    else {
        panic!("not a YAML error: {error}");
    };
    assert_eq!(origin, ORIGIN);
    assert!(line.is_some() && column.is_some(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains(ORIGIN) && message.contains("line"),
        "{message}"
    );
}

#[test]
fn missing_match_and_name_are_refused() {
    let (place, problem) = refusal("mappings:\n  - name: x\n");
    assert_eq!(
        place,
        Place::Mapping {
            number: 1,
            pattern: None
        }
    );
    assert_eq!(problem, Problem::MissingMatch);

    let text = "mappings:\n  - match: a.*\n    name: a\n  - match: b.*\n";
    let (place, problem) = refusal(text);
    assert_eq!(
        place,
        Place::Mapping {
            number: 2,
            pattern: Some("b.*".to_owned())
        }
    );
    assert_eq!(problem, Problem::MissingName);
    let message = load_error(text).to_string();
    assert!(
        message.contains(ORIGIN)
            && message.contains("mapping 2 (match \"b.*\")")
            && message.contains("action: drop"),
        "{message}"
    );
}

#[test]
fn an_invalid_regex_is_refused_with_its_pattern() {
    let text = "mappings:\n  - match: 'a(b'\n    match_type: regex\n    name: x\n";
    let (place, problem) = refusal(text);
    assert_eq!(
        place,
        Place::Mapping {
            number: 1,
            pattern: Some("a(b".to_owned())
        }
    );
    assert!(
        matches!(&problem, Problem::InvalidRegex { pattern, .. } if pattern == "a(b"),
        "{problem:?}"
    );
    let message = load_error(text).to_string();
    assert!(
        message.contains(ORIGIN) && message.contains("mapping 1"),
        "{message}"
    );
    // The same text is a fine glob: parentheses are literal there.
    let mapper = load("mappings:\n  - match: 'a(b'\n    name: x\n");
    assert_eq!(metric(&mapper, "a(b", StatKind::Counter).name, "x");
}

#[test]
fn invalid_label_names_are_refused() {
    for bad in ["1abc", "with-dash", "dotted.name", "\"\""] {
        let text = format!("mappings:\n  - match: a.*\n    name: x\n    labels:\n      {bad}: v\n");
        let (place, problem) = refusal(&text);
        assert!(matches!(place, Place::Mapping { number: 1, .. }));
        assert!(
            matches!(problem, Problem::InvalidLabelName { .. }),
            "{bad}: {problem:?}"
        );
    }
    let mapper =
        load("mappings:\n  - match: a.*\n    name: x\n    labels:\n      a: v\n      _b9: w\n");
    assert_eq!(
        metric(&mapper, "a.z", StatKind::Counter).labels,
        labels(&[("_b9", "w"), ("a", "v")])
    );
}

#[test]
fn unknown_enumerated_values_are_refused() {
    for (key, value) in [
        ("match_type", "wildcard"),
        ("observer_type", "Histogram"),
        ("timer_type", "meter"),
        ("action", "keep"),
        ("match_metric_type", "counters"),
    ] {
        let text = format!("mappings:\n  - match: a.*\n    name: x\n    {key}: {value}\n");
        let (place, problem) = refusal(&text);
        assert!(matches!(place, Place::Mapping { number: 1, .. }));
        match problem {
            Problem::UnknownValue {
                key: k, value: v, ..
            } => assert_eq!((k, v.as_str()), (key, value)),
            other => panic!("{key}: {other:?}"),
        }
    }
    let (place, problem) = refusal("defaults:\n  match_type: fuzzy\n");
    assert_eq!(place, Place::Defaults);
    assert!(matches!(
        problem,
        Problem::UnknownValue {
            key: "match_type",
            ..
        }
    ));
    assert!(load_error("defaults:\n  match_type: fuzzy\n")
        .to_string()
        .contains("under `defaults`"));
}

#[test]
fn bad_buckets_and_quantiles_are_refused() {
    let mapping = |options: &str| {
        format!("mappings:\n  - match: a.*\n    name: x\n    observer_type: histogram\n{options}")
    };
    assert_eq!(
        refusal(&mapping(
            "    histogram_options:\n      buckets: [1, 3, 2]\n"
        ))
        .1,
        Problem::UnorderedBuckets {
            key: "histogram_options.buckets",
            previous: 3.0,
            next: 2.0
        }
    );
    assert!(matches!(
        refusal(&mapping("    buckets: [1, 1]\n")).1,
        Problem::UnorderedBuckets { key: "buckets", .. }
    ));
    assert_eq!(
        refusal(&mapping("    histogram_options:\n      buckets: []\n")).1,
        Problem::EmptyBuckets {
            key: "histogram_options.buckets"
        }
    );
    assert!(matches!(
        refusal(&mapping("    buckets: [1, .nan]\n")).1,
        Problem::InvalidBucket { .. }
    ));
    assert!(matches!(
        refusal(&mapping("    buckets: [1, two]\n")).1,
        Problem::WrongType { .. }
    ));
    assert_eq!(
        refusal("defaults:\n  histogram_options:\n    buckets: [2, 1]\n").0,
        Place::Defaults
    );

    let summary = |q: &str| {
        format!("mappings:\n  - match: a.*\n    name: x\n    summary_options:\n      quantiles:\n        - quantile: {q}\n")
    };
    for q in ["0", "1", "1.5", "-0.1"] {
        assert!(
            matches!(refusal(&summary(q)).1, Problem::QuantileOutOfRange { .. }),
            "{q}"
        );
    }
    assert!(matches!(
        refusal("mappings:\n  - match: a.*\n    name: x\n    quantiles:\n      - error: 0.1\n").1,
        Problem::WrongType { .. }
    ));
}

#[test]
fn options_of_the_other_observer_and_doubled_legacy_keys_are_refused() {
    assert_eq!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    observer_type: histogram\n    summary_options:\n      quantiles: []\n").1,
            Problem::OptionsMismatch { options: "summary_options", observer: "histogram" }
        );
    assert_eq!(
            refusal("defaults:\n  observer_type: summary\nmappings:\n  - match: a.*\n    name: x\n    histogram_options:\n      buckets: [1]\n").1,
            Problem::OptionsMismatch { options: "histogram_options", observer: "summary" }
        );
    assert_eq!(
            refusal("mappings:\n  - match: a.*\n    name: x\n    observer_type: histogram\n    buckets: [1]\n    histogram_options:\n      buckets: [2]\n").1,
            Problem::LegacyConflict { legacy: "buckets", current: "histogram_options.buckets" }
        );
}

#[test]
fn wrong_shapes_are_refused_not_panicked_on() {
    assert_eq!(refusal("- a\n- b\n").0, Place::TopLevel);
    assert_eq!(refusal("mappings: {}\n").0, Place::TopLevel);
    assert!(matches!(
        refusal("mappings:\n  - just a string\n").0,
        Place::Mapping { number: 1, .. }
    ));
    assert!(matches!(
        refusal("mappings:\n  - match: a.*\n    name: [x]\n").1,
        Problem::WrongType { .. }
    ));
    assert!(matches!(
        refusal("mappings:\n  - match: a.*\n    name: x\n    labels: [a]\n").1,
        Problem::WrongType { .. }
    ));
    assert!(matches!(
        refusal("mappings:\n  - match: a.*\n    name: x\n    scale: fast\n").1,
        Problem::WrongType { .. }
    ));
    assert!(matches!(
        refusal("mappings:\n  - match: a.*\n    name: x\n    scale: .inf\n").1,
        Problem::InvalidScale { .. }
    ));
    let mapper = load("mappings:\n  - match: a.*\n    name: x\n    scale: 2\n");
    assert_eq!(metric(&mapper, "a.b", StatKind::Observer).scale, 2.0);
}

#[test]
fn files_are_read_and_missing_files_named() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("mapper.yaml");
    std::fs::write(&path, "mappings:\n  - match: a.*\n    name: from_file\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mapper = MetricMapper::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(metric(&mapper, "a.b", StatKind::Counter).name, "from_file");

    let missing = dir.path().join("absent.yaml");
    let error = match MetricMapper::from_file(&missing) {
        Ok(_) => panic!("a missing file loaded"),
        Err(error) => error,
    };
    assert!(matches!(error, MappingError::Read { .. }));
    assert!(error.to_string().contains(&missing.display().to_string()));

    std::fs::write(&path, "mappings:\n  - match: a.*\n").unwrap_or_else(|e| panic!("{e}"));
    let error = match MetricMapper::from_file(&path) {
        Ok(_) => panic!("a mapping without a name loaded"),
        Err(error) => error,
    };
    assert!(error.to_string().contains(&path.display().to_string()));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    #[test]
    fn no_input_panics(text in "[ -~\n]{0,200}", name in "[ -~]{0,40}") {
        if let Ok(mapper) = MetricMapper::from_yaml(&text, ORIGIN) {
            let _ = mapper.map(&name, StatKind::Counter);
        }
        let _ = MetricMapper::reference_default(false).map(&name, StatKind::Observer);
    }

    #[test]
    fn mapped_names_are_valid_prometheus_names(name in "\\PC{0,40}") {
        let mapper = MetricMapper::reference_default(false);
        for kind in [StatKind::Counter, StatKind::Gauge, StatKind::Observer] {
            if let Mapped::Metric(m) = mapper.map(&name, kind) {
                let mut chars = m.name.chars();
                proptest::prop_assert!(chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_'));
                proptest::prop_assert!(chars.all(|c| c.is_ascii_alphanumeric() || c == '_'));
            }
        }
    }
}
