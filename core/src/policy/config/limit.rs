//! `rate_limit:` (the reference's one limit) and `rate_limits:` (floodgate: several limits that
//! must all admit) of one descriptor → a [`RuleSpec`].
//!
//! In `rate_limits`, `name` and `replaces` describe the rule, not one limit: each may be
//! written in at most one entry (any one; the first is the natural place). `unlimited` has no
//! place in `rate_limits` (an unlimited rule has no limits to list).

use serde_yaml::{Mapping, Value};

use super::keys::{check_keys, Place};
use super::limit_fields::{field_label, LimitFields};
use super::spec::RuleSpec;
use super::validate::{check_replaces, check_unlimited, quota_of};
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, not_a_map, wrong_type};

pub(super) fn read_rule(descriptor: &Mapping, path: &str, walk: &mut FileWalk) -> Option<RuleSpec> {
    let single = field(descriptor, "rate_limit");
    // `rate_limits:` left empty is a mistake, not "no limits": look at the raw entry.
    let several = descriptor.get("rate_limits");
    if single.is_some() && several.is_some() {
        walk.report.error(
            path,
            "a descriptor has either `rate_limit` or `rate_limits`, not both: move the \
             `rate_limit` into the `rate_limits` list",
        );
    }
    let from_single = single.and_then(|value| read_single(value, path, walk));
    let from_several = several.and_then(|value| read_several(value, path, walk));
    from_single.or(from_several)
}

fn read_single(value: &Value, path: &str, walk: &mut FileWalk) -> Option<RuleSpec> {
    let Value::Mapping(map) = value else {
        let message = wrong_type(
            "rate_limit",
            "a map",
            &describe(value),
            "rate_limit: {unit: second, requests_per_unit: 10}",
        );
        walk.report.error(path, message);
        return None;
    };
    let fields = read_fields(map, "rate_limit".to_owned(), path, walk);
    check_replaces(
        fields.name.as_deref(),
        fields.replaces.as_deref(),
        path,
        walk,
    );
    if fields.unlimited {
        check_unlimited(&fields, path, walk);
        return Some(RuleSpec {
            name: fields.name,
            replaces: fields.replaces.unwrap_or_default(),
            unlimited: true,
            limits: Vec::new(),
            concurrency: None,
        });
    }
    let quota = quota_of(&fields, path, walk)?;
    Some(RuleSpec {
        name: fields.name,
        replaces: fields.replaces.unwrap_or_default(),
        unlimited: false,
        limits: vec![quota],
        concurrency: None,
    })
}

fn read_several(value: &Value, path: &str, walk: &mut FileWalk) -> Option<RuleSpec> {
    let items = match value {
        Value::Sequence(items) if !items.is_empty() => items,
        other => {
            let message = wrong_type(
                "rate_limits",
                "a list of at least one limit",
                &describe(other),
                "rate_limits: [{unit: second, requests_per_unit: 10}, {unit: hour, requests_per_unit: 1000}]",
            );
            walk.report.error(path, message);
            return None;
        }
    };
    let mut entries = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match item {
            Value::Mapping(map) => {
                entries.push(read_fields(
                    map,
                    format!("rate_limits[{index}]"),
                    path,
                    walk,
                ));
            }
            other => {
                let message = not_a_map(
                    other,
                    "rate_limits",
                    "{unit: second, requests_per_unit: 10}",
                );
                walk.report.error(path, message);
            }
        }
    }

    let name = only_once(&entries, "name", path, walk, |fields| fields.name.clone());
    let replaces = only_once(&entries, "replaces", path, walk, |fields| {
        fields.replaces.clone()
    });
    check_replaces(name.as_deref(), replaces.as_deref(), path, walk);
    let mut limits = Vec::with_capacity(entries.len());
    let mut complete = entries.len() == items.len();
    for fields in &entries {
        if fields.unlimited {
            walk.report.error(
                path,
                format!(
                    "`{}` cannot be used inside `rate_limits`: an unlimited rule has no limits; \
                     write `rate_limit: {{unlimited: true}}` instead",
                    fields.field_name("unlimited")
                ),
            );
            complete = false;
            continue;
        }
        match quota_of(fields, path, walk) {
            Some(quota) => limits.push(quota),
            None => complete = false,
        }
    }
    complete.then_some(RuleSpec {
        name,
        replaces: replaces.unwrap_or_default(),
        unlimited: false,
        limits,
        concurrency: None,
    })
}

/// A rule-wide field of `rate_limits` (`name`, `replaces`): from the one entry that has it.
fn only_once<T>(
    entries: &[LimitFields],
    key: &str,
    path: &str,
    walk: &mut FileWalk,
    get: impl Fn(&LimitFields) -> Option<T>,
) -> Option<T> {
    let mut holders = entries
        .iter()
        .filter_map(|fields| Some((&fields.shown, get(fields)?)));
    let (first_place, first) = holders.next()?;
    let others: Vec<&String> = holders.map(|(place, _)| place).collect();
    if !others.is_empty() {
        let places: Vec<&str> = std::iter::once(first_place)
            .chain(others)
            .map(String::as_str)
            .collect();
        walk.report.error(
            path,
            format!(
                "`{key}` is written in {}: it belongs to the whole rule, so write it in one \
                 entry of `rate_limits` only",
                places.join(" and ")
            ),
        );
    }
    Some(first)
}

fn read_fields(map: &Mapping, shown: String, path: &str, walk: &mut FileWalk) -> LimitFields {
    check_keys(map, Place::Limit, path, &mut walk.report);
    let name_of = |name: &str| field_label(&shown, name);
    LimitFields {
        unit: walk.text(map, "unit", &name_of("unit"), path, "unit: second"),
        // Written but invalid counts as written (the error is reported): no "missing" warning.
        requests_per_unit: field(map, "requests_per_unit").map(|_| {
            walk.number(
                map,
                "requests_per_unit",
                &name_of("requests_per_unit"),
                path,
            )
            .unwrap_or(0)
        }),
        unlimited: walk.flag(map, "unlimited", &name_of("unlimited"), path),
        name: walk.text(map, "name", &name_of("name"), path, "name: per_client"),
        replaces: read_replaces(map, &name_of("replaces"), path, walk),
        algorithm: walk.algorithm(map, "algorithm", &name_of("algorithm"), path),
        burst: walk.number(map, "burst", &name_of("burst"), path),
        unit_multiplier: walk.number(map, "unit_multiplier", &name_of("unit_multiplier"), path),
        nodelay: walk.optional_flag(map, "nodelay", &name_of("nodelay"), path),
        queue: walk.optional_flag(map, "queue", &name_of("queue"), path),
        delay: walk.number(map, "delay", &name_of("delay"), path),
        max_wait_ms: walk.number(map, "max_wait_ms", &name_of("max_wait_ms"), path),
        overflow: walk.overflow(map, "overflow", &name_of("overflow"), path),
        counting: walk.counting(map, "counting", &name_of("counting"), path),
        shown,
    }
}

/// `replaces: [{name: …}, …]`: the names, empty ones left out (and reported).
fn read_replaces(
    map: &Mapping,
    shown: &str,
    path: &str,
    walk: &mut FileWalk,
) -> Option<Vec<String>> {
    let value = field(map, "replaces")?;
    let Value::Sequence(items) = value else {
        let message = wrong_type(
            shown,
            "a list",
            &describe(value),
            "replaces: [{name: other_rule}]",
        );
        walk.report.error(path, message);
        return Some(Vec::new());
    };
    let mut names = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Value::Mapping(entry) = item else {
            walk.report
                .error(path, not_a_map(item, "replaces", "name: other_rule"));
            continue;
        };
        check_keys(entry, Place::Replace, path, &mut walk.report);
        let entry_shown = format!("{shown}[{index}].name");
        let name = match field(entry, "name") {
            // A name of the wrong type was reported by `text`.
            Some(_) => match walk.text(entry, "name", &entry_shown, path, "name: other_rule") {
                Some(name) => name,
                None => continue,
            },
            None => String::new(),
        };
        if name.is_empty() {
            walk.report.error(
                path,
                format!(
                    "should not have an empty replaces entry: give `{shown}[{index}]` the \
                     `name:` of the rule it replaces"
                ),
            );
        } else {
            names.push(name);
        }
    }
    Some(names)
}
