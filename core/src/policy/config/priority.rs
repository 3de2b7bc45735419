//! `priority:` on a descriptor (floodgate): classes sharing the descriptor's limits, each
//! allowed a share of the capacity (see `core::arithmetic::priority` for how requests name their class).
//!
//! ```yaml
//! priority:
//!   key: priority                                  # the descriptor entry naming the class
//!   classes: {critical: 100%, normal: 80%, low: 50%}
//!   default: low                                   # no entry, or one naming no class
//! ```
//!
//! Shares are percentages above 0 and at most 100, with up to four decimals (`12.5%`); at
//! least one class has 100 %, otherwise part of the capacity would serve nobody. Class names
//! are plain words (letters, digits, `_`, `-`, `.`): they appear in a response header and a
//! metric label.

use serde_yaml::{Mapping, Value};

use super::keys::{did_you_mean, floodgate_map};
use super::spec::{DescriptorSpec, RuleSpec};
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, render, wrong_type};
use crate::arithmetic::algorithm::Share;
use crate::arithmetic::priority::{Priority, PriorityClass};

const PRIORITY_KEYS: [&str; 3] = ["key", "classes", "default"];

/// Enough for any scheme of importance; each class is a metric series per rule.
pub(super) const MAX_CLASSES: usize = 16;

const MAX_CLASS_NAME_LEN: usize = 64;

const EXAMPLE: &str =
    "priority: {key: priority, classes: {critical: 100%, normal: 80%, low: 50%}, default: low}";

/// Reads `priority:` of one descriptor whose limits are `rule` and whose children are
/// `children` (already read).
pub(super) fn read_priority(
    descriptor: &Mapping,
    rule: Option<&RuleSpec>,
    children: &[DescriptorSpec],
    path: &str,
    walk: &mut FileWalk,
) -> Option<Priority> {
    let value = field(descriptor, "priority")?;
    let map = floodgate_map(
        value,
        "priority",
        &PRIORITY_KEYS,
        EXAMPLE,
        path,
        &mut walk.report,
    )?;
    let key = class_key(map, children, path, walk);
    let classes = classes(map, path, walk);
    let default = classes
        .as_deref()
        .and_then(|classes| default_class(map, classes, path, walk));
    let limited = check_rule(rule, path, walk);
    let (key, classes, default) = (key?, classes?, default?);
    if let Some(rule) = rule {
        warn_about_empty_shares(rule, &classes, path, walk);
    }
    limited.then_some(Priority {
        key,
        classes,
        default,
    })
}

fn class_key(
    map: &Mapping,
    children: &[DescriptorSpec],
    path: &str,
    walk: &mut FileWalk,
) -> Option<String> {
    let key = walk
        .text(map, "key", "priority.key", path, "key: priority")
        .unwrap_or_default();
    if key.is_empty() {
        walk.report.error(
            path,
            "`priority.key` is missing: name the descriptor entry that carries the class, the \
             `descriptor_key` Envoy gives it (e.g. `key: priority` with a request_headers \
             action on a header your edge sets)",
        );
        return None;
    }
    if children.iter().any(|child| child.key == key) {
        walk.report.error(
            path,
            format!(
                "`priority.key: {key}` is also the key of a nested descriptor here: the class \
                 entry is the request's last entry and is not a level of the tree, so an entry \
                 `{key}` could mean either; give the class entry another key"
            ),
        );
        return None;
    }
    Some(key)
}

fn classes(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<Vec<PriorityClass>> {
    let example = "classes: {critical: 100%, normal: 80%, low: 50%}";
    let entries = match field(map, "classes") {
        Some(Value::Mapping(entries)) if !entries.is_empty() => entries,
        found @ (Some(Value::Mapping(_)) | None) => {
            let what = if found.is_some() { "empty" } else { "missing" };
            walk.report.error(
                path,
                format!(
                    "`priority.classes` is {what}: list the classes and the share of the \
                     capacity each may use, like `{example}`"
                ),
            );
            return None;
        }
        Some(other) => {
            let found = describe(other);
            let message = wrong_type("priority.classes", "a map of class: share", &found, example);
            walk.report.error(path, message);
            return None;
        }
    };
    if entries.len() > MAX_CLASSES {
        walk.report.error(
            path,
            format!(
                "`priority.classes` has {} classes, more than {MAX_CLASSES}: each class is a \
                 metric series per rule; merge some",
                entries.len()
            ),
        );
        return None;
    }
    let mut classes = Vec::with_capacity(entries.len());
    let mut complete = true;
    for (name, share) in entries {
        match (
            class_name(name, path, walk),
            class_share(name, share, path, walk),
        ) {
            (Some(name), Some(share)) => classes.push(PriorityClass { name, share }),
            _ => complete = false,
        }
    }
    if complete && !classes.iter().any(|class| class.share.is_full()) {
        walk.report.error(
            path,
            "no class in `priority.classes` may use 100% of the capacity, so the rest would \
             serve nobody: give the most important class 100% (e.g. `critical: 100%`)",
        );
        return None;
    }
    complete.then_some(classes)
}

fn class_name(name: &Value, path: &str, walk: &mut FileWalk) -> Option<String> {
    let written = match name {
        Value::String(text) => text.clone(),
        other => render(other),
    };
    let mut chars = written.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && written.len() <= MAX_CLASS_NAME_LEN;
    if matches!(name, Value::String(_)) && well_formed {
        return Some(written);
    }
    walk.report.error(
        path,
        format!(
            "invalid class name '{written}' in `priority.classes`: a class name starts with a \
             letter and holds letters, digits, '_', '-' or '.' (at most {MAX_CLASS_NAME_LEN}), \
             because it appears in a response header and a metric label; the request's class \
             entry must carry exactly this name"
        ),
    );
    None
}

fn class_share(name: &Value, share: &Value, path: &str, walk: &mut FileWalk) -> Option<Share> {
    let shown = format!("priority.classes.{}", render(name));
    let problem = match share {
        Value::String(text) => match parse_percentage(text) {
            Ok(share) => return Some(share),
            Err(problem) => problem,
        },
        other => format!(
            "a share is a percentage of the capacity, found {}",
            describe(other)
        ),
    };
    walk.report.error(
        path,
        format!(
            "`{shown}`: {problem}: write it like `80%` or `12.5%` (above 0, at most 100, up to \
             four decimals)"
        ),
    );
    None
}

/// `80%`, `12.5%`, `100 %` → the share in millionths; the reason otherwise.
fn parse_percentage(text: &str) -> Result<Share, String> {
    let malformed = || format!("'{text}' is not a percentage");
    let number = text
        .trim()
        .strip_suffix('%')
        .ok_or_else(malformed)?
        .trim_end();
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |part: &str| part.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() || whole.len() > 3 || !digits(whole) || !digits(fraction) {
        return Err(malformed());
    }
    if fraction.len() > 4 {
        return Err(format!("'{text}' has more than four decimals"));
    }
    let whole: u32 = whole.parse().map_err(|_| malformed())?;
    let fraction: u32 = format!("{fraction:0<4}").parse().map_err(|_| malformed())?;
    let millionths = whole * 10_000 + fraction;
    if millionths > 1_000_000 {
        return Err(format!("'{text}' is more than the whole capacity"));
    }
    Share::from_millionths(millionths)
        .ok_or_else(|| format!("'{text}' would refuse every request of the class"))
}

fn default_class(
    map: &Mapping,
    classes: &[PriorityClass],
    path: &str,
    walk: &mut FileWalk,
) -> Option<usize> {
    let names: Vec<&str> = classes.iter().map(|class| class.name.as_str()).collect();
    let Some(written) = walk.text(map, "default", "priority.default", path, "default: low") else {
        walk.report.error(
            path,
            format!(
                "`priority.default` is missing: name the class of requests without a class \
                 entry (or with one naming no class), usually the least important one; one of \
                 {}",
                names.join(", ")
            ),
        );
        return None;
    };
    if let Some(index) = names.iter().position(|name| *name == written) {
        return Some(index);
    }
    let hint = did_you_mean(&written, &names);
    walk.report.error(
        path,
        format!(
            "`priority.default: {written}` names no class in `priority.classes`: {hint}use one \
             of {}",
            names.join(", ")
        ),
    );
    None
}

/// Whether the descriptor has limits to share; reports why not.
fn check_rule(rule: Option<&RuleSpec>, path: &str, walk: &mut FileWalk) -> bool {
    match rule {
        Some(rule) if !rule.unlimited => true,
        Some(_) => {
            walk.report.error(
                path,
                "`priority` has nothing to share on an unlimited rule: remove it, or give the \
                 descriptor a limit",
            );
            false
        }
        None => {
            walk.report.error(
                path,
                "`priority` needs a limit on the same descriptor: the classes share the \
                 capacity of its `rate_limit` (or `rate_limits`); add one, or move `priority` \
                 to the descriptor that has it",
            );
            false
        }
    }
}

/// A class whose share of some limit's capacity rounds down to nothing is always refused.
fn warn_about_empty_shares(
    rule: &RuleSpec,
    classes: &[PriorityClass],
    path: &str,
    walk: &mut FileWalk,
) {
    for class in classes {
        for quota in &rule.limits {
            let capacity = quota.capacity();
            if capacity > 0 && class.share.of(capacity) == 0 {
                walk.report.warning(
                    path,
                    format!(
                        "class '{}' may use {} of a capacity of {capacity}, which rounds down \
                         to nothing: it is always refused; raise its share, or the limit \
                         (`burst` for a bucket)",
                        class.name, class.share
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_percentage;

    fn millionths(text: &str) -> Result<u32, String> {
        parse_percentage(text).map(|share| share.millionths())
    }

    #[test]
    fn percentages_with_up_to_four_decimals() {
        assert_eq!(millionths("100%"), Ok(1_000_000));
        assert_eq!(millionths("80%"), Ok(800_000));
        assert_eq!(millionths("12.5%"), Ok(125_000));
        assert_eq!(millionths(" 0.0001 %"), Ok(1));
        assert_eq!(millionths("007%"), Ok(70_000));
        for bad in [
            "80", "0.8", "%", ".5%", "-5%", "1e2%", "5.%x", "1000%", "abc%",
        ] {
            assert!(millionths(bad).is_err(), "{bad}");
        }
        assert!(millionths("100.0001%").is_err_and(|why| why.contains("whole capacity")));
        assert!(millionths("0%").is_err_and(|why| why.contains("refuse every")));
        assert!(millionths("1.00001%").is_err_and(|why| why.contains("four decimals")));
    }
}
