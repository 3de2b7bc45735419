//! `floodgate check --explain`: the explanation of `core::decision::explain` as text for people.

use std::fmt::Write as _;

use crate::core::decision::explain::{
    DescriptorExplanation, LevelExplanation, LevelMatch, Miss, RequestExplanation, Verdict,
};
use crate::core::policy::describe::rule_summary;
use crate::core::policy::request::Entry;
use crate::core::policy::rules::Rule;

/// Longest list of keys, values or patterns shown in full.
const LIST_LIMIT: usize = 12;

/// The whole explanation, one block per descriptor.
pub fn render(request: &RequestExplanation<'_>) -> String {
    let mut text = String::new();
    match request.domain {
        Some(domain) => {
            let _ = writeln!(
                text,
                "domain {} (from {})",
                domain.name,
                domain.sources.join(", ")
            );
        }
        None => {
            let _ = writeln!(
                text,
                "domain {:?}: no rules (domains loaded: {}); every descriptor is OK without a \
                 limit. Check the `domain` the proxy sends.",
                request.domain_name,
                list(&request.known_domains)
            );
        }
    }
    for (index, descriptor) in request.descriptors.iter().enumerate() {
        let _ = writeln!(
            text,
            "\ndescriptor {index} [{}]",
            entries_text(descriptor.entries)
        );
        render_descriptor(&mut text, descriptor);
    }
    text
}

/// One descriptor: the levels the lookup went down, its verdict, and the branches it did not
/// try.
fn render_descriptor(text: &mut String, descriptor: &DescriptorExplanation<'_>) {
    for (level, matched) in descriptor.levels.iter().enumerate() {
        let _ = writeln!(text, "  level {}: {}", level + 1, level_text(matched));
    }
    render_verdict(text, descriptor);
    render_not_tried(text, descriptor);
}

fn render_verdict(text: &mut String, descriptor: &DescriptorExplanation<'_>) {
    match &descriptor.verdict {
        Verdict::UnknownDomain => {
            let _ = writeln!(text, "  => OK, no limit (unknown domain)");
        }
        Verdict::NoEntries => {
            let _ = writeln!(
                text,
                "  => OK, no limit: a descriptor without entries matches nothing"
            );
        }
        Verdict::Missed { level, entry, miss } => {
            let _ = writeln!(
                text,
                "  level {}: {}={} matches nothing: {}",
                level + 1,
                entry.key,
                entry.value,
                miss_text(*level, descriptor.entries.len(), entry, miss)
            );
            let _ = writeln!(text, "  => OK, no limit (no rule matches)");
        }
        Verdict::NoLimitHere {
            deeper_keys,
            exempted_from,
        } => render_no_limit_here(text, descriptor, deeper_keys, *exempted_from),
        Verdict::Limited(rule) => render_limited(text, descriptor, rule),
        Verdict::Unlimited(rule) => {
            let _ = writeln!(text, "  rule {}", rule_text(rule));
            let _ = writeln!(text, "  => OK, unlimited ({})", rule.path);
        }
        Verdict::Replaced {
            rule,
            by,
            by_descriptor,
        } => {
            let _ = writeln!(text, "  rule {}", rule_text(rule));
            let _ = writeln!(
                text,
                "  => OK, not counted: {} (matched by descriptor {by_descriptor}) replaces {:?}",
                by.path,
                rule.name.as_deref().unwrap_or_default()
            );
        }
    }
}

/// The lookup reached a node without `rate_limit`: exempted, a leaf, or one entry short.
fn render_no_limit_here(
    text: &mut String,
    descriptor: &DescriptorExplanation<'_>,
    deeper_keys: &[&str],
    exempted_from: Option<&Rule>,
) {
    let reached = descriptor
        .levels
        .last()
        .map_or("", |level| level.node_path.as_str());
    match exempted_from {
        Some(rule) => {
            let _ = writeln!(
                text,
                "  {reached} has no rate_limit and no descriptors below it: it exempts \
                 (\"whitelists\") this value. The key-only rule {} would otherwise apply; \
                 a value-specific node always wins over its key-only sibling.",
                rule.path
            );
        }
        None if deeper_keys.is_empty() => {
            let _ = writeln!(text, "  {reached} has no rate_limit.");
        }
        None => {
            let _ = writeln!(
                text,
                "  {reached} has no rate_limit; the rules below it need one more entry \
                 (keys: {}). The depth must match exactly.",
                list(deeper_keys)
            );
        }
    }
    let _ = writeln!(text, "  => OK, no limit (no rule on the node reached)");
}

/// A rule with a limit matched: the rule, the priority class the descriptor falls in, and
/// whether it only reports (`shadow_mode`).
fn render_limited(text: &mut String, descriptor: &DescriptorExplanation<'_>, rule: &Rule) {
    let _ = writeln!(text, "  rule {}", rule_text(rule));
    if let Some(priority) = &rule.priority {
        let entry = descriptor.entries.get(descriptor.levels.len());
        let class = priority.class_for(entry.map(|entry| entry.value.as_str()));
        let from = match entry {
            Some(entry) if entry.value == class.name() => "named by the last entry",
            Some(_) => "the default: the last entry names no class",
            None => "the default: no class entry",
        };
        let _ = writeln!(
            text,
            "  priority class {} ({}; may use {} of the capacity)",
            class.name(),
            from,
            class.share()
        );
    }
    let shadow = if rule.shadow_mode {
        " (shadow_mode: counted and reported, never rejected)"
    } else {
        ""
    };
    let _ = writeln!(text, "  => limited by {}{shadow}", rule.path);
}

/// The rules another branch would have led to, which the lookup never goes back for.
fn render_not_tried(text: &mut String, descriptor: &DescriptorExplanation<'_>) {
    // The exempted rule was named with the verdict already.
    let exempted = match &descriptor.verdict {
        Verdict::NoLimitHere {
            exempted_from: Some(rule),
            ..
        } => Some(rule.path.as_str()),
        _ => None,
    };
    for other in descriptor
        .not_tried
        .iter()
        .filter(|other| Some(other.rule.path.as_str()) != exempted)
    {
        let _ = writeln!(
            text,
            "  note: at level {} the lookup took {}; {} would have led to rule {}, but the lookup \
             never goes back to try another branch",
            other.level + 1,
            other.taken,
            other.instead,
            other.rule.path
        );
    }
}

fn level_text(level: &LevelExplanation<'_>) -> String {
    let entry = format!("{}={}", level.entry.key, level.entry.value);
    let how = match &level.how {
        LevelMatch::Exact => "exact value".to_owned(),
        LevelMatch::Wildcard { pattern, shared } => {
            let shared = if *shared {
                "; share_threshold: every matching value shares one counter"
            } else {
                "; each value has its own counter"
            };
            format!("wildcard {pattern:?} (the first matching pattern in file order{shared})")
        }
        LevelMatch::Default { patterns_tried } if patterns_tried.is_empty() => {
            "key-only descriptor (no descriptor has this value)".to_owned()
        }
        LevelMatch::Default { patterns_tried } => format!(
            "key-only descriptor (no descriptor has this value; patterns tried: {})",
            list(patterns_tried)
        ),
    };
    format!("{entry}: {how} -> {}", level.node_path)
}

fn miss_text(level: usize, entry_count: usize, entry: &Entry, miss: &Miss<'_>) -> String {
    match miss {
        Miss::TreeEnds {
            node_path,
            node_rule,
        } => {
            let depth = level;
            let mut text = format!(
                "the rules end at {node_path} (depth {depth}), but the request has \
                 {entry_count} entries; the depth must match exactly"
            );
            if let Some(rule) = node_rule {
                let _ = write!(
                    text,
                    ". Rule {} applies only to descriptors of exactly {depth} {}",
                    rule.path,
                    if depth == 1 { "entry" } else { "entries" }
                );
            }
            text
        }
        Miss::NoSuchKey { keys } => format!(
            "no descriptor with key {:?} at this level (keys here: {})",
            entry.key,
            list(keys)
        ),
        Miss::NoValue { values, patterns } => {
            let mut text = format!(
                "key {:?} has no descriptor with value {:?} (values: {})",
                entry.key,
                entry.value,
                list(values)
            );
            if !patterns.is_empty() {
                let _ = write!(text, ", no pattern matches (patterns: {})", list(patterns));
            }
            text.push_str(", and no key-only descriptor to fall back to");
            text
        }
    }
}

fn rule_text(rule: &Rule) -> String {
    format!("{} (from {})", rule_summary(rule), rule.source)
}

fn entries_text(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|entry| format!("{}={}", entry.key, entry.value))
        .collect::<Vec<_>>()
        .join(", ")
}

fn list(items: &[&str]) -> String {
    if items.is_empty() {
        return "none".to_owned();
    }
    let shown: Vec<String> = items
        .iter()
        .take(LIST_LIMIT)
        .map(|item| format!("{item:?}"))
        .collect();
    let mut text = shown.join(", ");
    if items.len() > LIST_LIMIT {
        let _ = write!(text, ", … {} more", items.len() - LIST_LIMIT);
    }
    text
}
