//! One `descriptors:` list and its descriptors, recursively: key, value, flags, metadata,
//! children; the limits are read by `limit`.

use serde_yaml::{Mapping, Value};

use super::adaptive_concurrency_yaml::read_concurrency_adaptive;
use super::adaptive_yaml::read_adaptive;
use super::ban::read_ban;
use super::concurrency::read_concurrency;
use super::keys::{check_keys, Place};
use super::limit::read_rule;
use super::priority::read_priority;
use super::spec::{DescriptorFlags, DescriptorSpec};
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, not_a_map, render, wrong_type};
use crate::arithmetic::heavy_hitters::HitterValues;

/// Reads the descriptors of `list` (the value of a `descriptors:` key) under `parent_path`.
pub(super) fn read_descriptors(
    list: Option<&Value>,
    parent_path: &str,
    walk: &mut FileWalk,
) -> Vec<DescriptorSpec> {
    let Some(list) = list else {
        return Vec::new();
    };
    let Value::Sequence(items) = list else {
        let message = wrong_type(
            "descriptors",
            "a list of descriptors",
            &describe(list),
            "descriptors: [{key: generic_key, value: api}]",
        );
        walk.report.error(parent_path, message);
        return Vec::new();
    };
    let mut descriptors = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        read_item(item, index, parent_path, walk, &mut descriptors);
    }
    descriptors
}

/// [`read_descriptors`] of a list taken out of its tree: each descriptor's YAML is dropped as
/// soon as it is read, so that a file's parsed form and its specs are not both held whole.
pub(super) fn read_owned_descriptors(
    list: Option<Value>,
    parent_path: &str,
    walk: &mut FileWalk,
) -> Vec<DescriptorSpec> {
    let items = match list {
        Some(Value::Sequence(items)) => items,
        other => return read_descriptors(other.as_ref(), parent_path, walk),
    };
    let mut descriptors = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        read_item(&item, index, parent_path, walk, &mut descriptors);
    }
    descriptors
}

fn read_item(
    item: &Value,
    index: usize,
    parent_path: &str,
    walk: &mut FileWalk,
    descriptors: &mut Vec<DescriptorSpec>,
) {
    match item {
        Value::Mapping(map) => descriptors.push(read_descriptor(map, index, parent_path, walk)),
        other => {
            let message = not_a_map(other, "descriptors", "key: generic_key");
            walk.report.error(parent_path, message);
        }
    }
}

fn read_descriptor(
    map: &Mapping,
    index: usize,
    parent_path: &str,
    walk: &mut FileWalk,
) -> DescriptorSpec {
    // Until the key is known, the descriptor is named by its place in the list.
    let place = format!("{parent_path}.descriptors[{index}]");
    let written_key = walk.text(map, "key", "key", &place, "key: generic_key");
    // Missing or "" (a key of the wrong type was reported by `text`).
    let key_missing = field(map, "key").is_none() || written_key.as_deref() == Some("");
    let key = written_key.unwrap_or_default();
    // An empty value is no value, as in the reference (`key` alone is the composite key).
    let value = walk
        .text(map, "value", "value", &place, "value: api")
        .filter(|value| !value.is_empty());
    let path = match (&key, &value) {
        (key, _) if key.is_empty() => place,
        (key, Some(value)) => format!("{parent_path}.{key}_{value}"),
        (key, None) => format!("{parent_path}.{key}"),
    };

    check_keys(map, Place::Descriptor, &path, &mut walk.report);
    if key_missing {
        walk.report.error(
            &path,
            "descriptor has empty key: add `key:` with the descriptor key Envoy sends \
             (generic_key, remote_address, or the descriptor_key of a request_headers action)",
        );
    }
    if key.contains('*') {
        walk.report.warning(
            &path,
            format!(
                "'*' in the key '{key}' is a literal character here; only `value` may hold \
                 wildcards (envoyproxy/ratelimit also matched a '*' in a key as a wildcard)"
            ),
        );
    }

    let rule = read_rule(map, &path, walk);
    let flags = DescriptorFlags {
        shadow_mode: walk.flag(map, "shadow_mode", "shadow_mode", &path),
        quota_mode: walk.flag(map, "quota_mode", "quota_mode", &path),
        detailed_metric: walk.flag(map, "detailed_metric", "detailed_metric", &path),
        value_to_metric: walk.flag(map, "value_to_metric", "value_to_metric", &path),
        share_threshold: walk.flag(map, "share_threshold", "share_threshold", &path),
    };
    let is_wildcard = value.as_deref().is_some_and(|value| value.contains('*'));
    if flags.share_threshold && !is_wildcard {
        let composite = match &value {
            Some(value) => format!("{key}_{value}"),
            None => key.clone(),
        };
        walk.report.error(
            &path,
            format!(
                "share_threshold can only be used with wildcard values (containing '*'), but \
                 found key '{composite}': give this descriptor a `value` with '*' (like \
                 `value: \"files/*\"`) or remove share_threshold"
            ),
        );
    }
    let metadata = read_metadata(map, &path, walk);
    let children = read_descriptors(field(map, "descriptors"), &path, walk);
    let concurrency = read_concurrency(map, rule.as_ref(), &children, &path, walk);
    if concurrency.is_some() {
        check_concurrency_flags(flags, &path, walk);
    }
    let adaptive = match &concurrency {
        Some(concurrency) => read_concurrency_adaptive(map, concurrency, &path, walk),
        None if field(map, "concurrency").is_some() && rule.is_none() => None,
        None => read_adaptive(map, rule.as_ref(), &path, walk),
    };
    let rule = rule.or(concurrency);
    let priority = read_priority(map, rule.as_ref(), &children, &path, walk);
    let ban = read_ban(map, rule.as_ref(), flags, &path, walk);
    let hitter_values = read_hitter_values(map, &path, walk);

    DescriptorSpec {
        key,
        value,
        path,
        rule,
        flags,
        metadata,
        adaptive,
        priority,
        ban,
        hitter_values,
        children,
    }
}

/// `heavy_hitters: raw | hashed`: how the rule's values show among its heavy hitters.
fn read_hitter_values(map: &Mapping, path: &str, walk: &mut FileWalk) -> HitterValues {
    let example = "heavy_hitters: raw";
    let Some(written) = walk.text(map, "heavy_hitters", "heavy_hitters", path, example) else {
        return HitterValues::default();
    };
    HitterValues::parse(&written).unwrap_or_else(|| {
        walk.report.error(
            path,
            format!(
                "heavy_hitters must be `hashed` (the default: values shown as a keyed hash) or \
                 `raw` (values shown as sent), not {written:?}"
            ),
        );
        HitterValues::default()
    })
}

/// `shadow_mode` and `quota_mode` change what a refused count means; a lease refused is not a
/// count, so neither has a meaning there yet.
fn check_concurrency_flags(flags: DescriptorFlags, path: &str, walk: &mut FileWalk) {
    for (flag, set) in [
        ("shadow_mode", flags.shadow_mode),
        ("quota_mode", flags.quota_mode),
    ] {
        if set {
            walk.report.error(
                path,
                format!(
                    "`{flag}` cannot be used with `concurrency` (a refused lease is refused): \
                     remove `{flag}`, or put it on a rate limit"
                ),
            );
        }
    }
}

/// `metadata:` is any map, kept as written; inside it only the keys are checked.
fn read_metadata(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<Value> {
    let metadata = field(map, "metadata")?;
    if let Value::Mapping(entries) = metadata {
        if let Some(key) = entries.keys().find(|key| !key.is_string()) {
            walk.report.error(
                path,
                format!(
                    "error parsing metadata: the key {} is not a string: metadata becomes a \
                     protobuf Struct, whose keys are strings; quote the key",
                    render(key)
                ),
            );
        } else if let Some(key) = collection_key(metadata) {
            walk.report.error(
                path,
                format!(
                    "error parsing metadata: the key {} is a list or a map: metadata becomes a \
                     protobuf Struct, whose keys are strings; use a string key",
                    render(key)
                ),
            );
        }
        return Some(metadata.clone());
    }
    let message = wrong_type(
        "metadata",
        "a map",
        &describe(metadata),
        "metadata: {team: payments}",
    );
    walk.report.error(path, message);
    None
}

/// A key anywhere inside `value` that is itself a list or a map: yaml.v2 refuses those
/// (`invalid map key`), so the reference cannot load them.
fn collection_key(value: &Value) -> Option<&Value> {
    match value {
        Value::Mapping(entries) => entries.iter().find_map(|(key, inner)| {
            if key.is_sequence() || key.is_mapping() {
                Some(key)
            } else {
                collection_key(inner)
            }
        }),
        Value::Sequence(items) => items.iter().find_map(collection_key),
        Value::Tagged(tagged) => collection_key(&tagged.value),
        _ => None,
    }
}
