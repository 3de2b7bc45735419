//! Why a request's descriptors got the rules they got: the lookup of `DomainRules::lookup`,
//! walked again level by level and recorded, plus `replaces` across the request. Pure; the
//! text people read is rendered by the command line (`floodgate::cmd::explain_text`).
//!
//! The nested matching rules are what users find hardest (reference §1.4): the depth must
//! match, a matched value never falls back to its key-only sibling, and a value-specific node
//! without a limit exempts that value. Each of those outcomes has its own variant here, so the
//! explanation can name it.

use crate::policy::request::Entry;
use crate::policy::rules::{DomainRules, MatchedLevel, Node, Rule, RuleSet, StepMiss};

/// How one request entry matched a level of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelMatch<'a> {
    /// A node with this key and exactly this value.
    Exact,
    /// The first wildcard of this key, in file order, whose pattern matches the value.
    Wildcard {
        pattern: &'a str,
        /// `share_threshold`: every value matching the pattern shares one counter.
        shared: bool,
    },
    /// The key-only node: no node had this value and no pattern matched it.
    Default {
        /// Patterns of this key that were tried first and did not match.
        patterns_tried: Vec<&'a str>,
    },
}

/// One matched level: the entry, how it matched, and the node it led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelExplanation<'a> {
    pub entry: &'a Entry,
    pub how: LevelMatch<'a>,
    /// Config path of the node reached (`edge.generic_key_api.client_id`).
    pub node_path: String,
}

/// Why an entry matched no node at its level.
#[derive(Debug, Clone, PartialEq)]
pub enum Miss<'a> {
    /// The node reached so far has no children: the request has more entries than the tree
    /// is deep on this branch. `node_rule` is the limit the node has, which applies only to
    /// requests that end there.
    TreeEnds {
        node_path: String,
        node_rule: Option<&'a Rule>,
    },
    /// No node at this level has the entry's key.
    NoSuchKey { keys: Vec<&'a str> },
    /// Nodes with this key exist, but none has this value, no pattern matches it, and there is
    /// no key-only node to fall back to.
    NoValue {
        values: Vec<&'a str>,
        patterns: Vec<&'a str>,
    },
}

/// What decides one descriptor.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict<'a> {
    /// The request's domain has no rules: every descriptor is OK without a limit.
    UnknownDomain,
    /// A descriptor without entries matches nothing.
    NoEntries,
    /// Entry `level` (0-based) matched no node.
    Missed {
        level: usize,
        entry: &'a Entry,
        miss: Miss<'a>,
    },
    /// Every entry matched, but the node reached has no `rate_limit`.
    NoLimitHere {
        /// Keys of the node's children: requests with one more entry continue there.
        deeper_keys: Vec<&'a str>,
        /// A value-specific node without limit and without children "whitelists" its value;
        /// this is the rule of its key-only sibling that it keeps from applying.
        exempted_from: Option<&'a Rule>,
    },
    /// This rule decides: it limits the descriptor.
    Limited(&'a Rule),
    /// This rule decides: `unlimited: true`.
    Unlimited(&'a Rule),
    /// The rule matched, but a rule matched by another descriptor of the same request lists
    /// its name in `replaces`, so it is not counted.
    Replaced {
        rule: &'a Rule,
        by: &'a Rule,
        by_descriptor: usize,
    },
}

/// A rule a different branch would have reached. Lookup never backtracks, so it is not used;
/// shown because "why not that rule?" is the usual question.
#[derive(Debug, Clone, PartialEq)]
pub struct NotTried<'a> {
    /// The level (0-based) where the other branch starts.
    pub level: usize,
    /// The node the lookup took at that level.
    pub taken: String,
    /// The node it did not try.
    pub instead: String,
    pub rule: &'a Rule,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DescriptorExplanation<'a> {
    pub entries: &'a [Entry],
    /// The levels that matched, in order (all of them unless the verdict is `Missed`).
    pub levels: Vec<LevelExplanation<'a>>,
    pub verdict: Verdict<'a>,
    /// Filled only when no rule applies.
    pub not_tried: Vec<NotTried<'a>>,
}

#[derive(Debug, Clone)]
pub struct RequestExplanation<'a> {
    pub domain_name: &'a str,
    /// `None`: unknown domain.
    pub domain: Option<&'a DomainRules>,
    /// Every domain the rules have, sorted (to name them when the domain is unknown).
    pub known_domains: Vec<&'a str>,
    pub descriptors: Vec<DescriptorExplanation<'a>>,
}

/// Explains how `descriptors` (each a list of entries) of one request to `domain` are matched.
/// Agrees with `DomainRules::lookup` and with the planner's handling of `replaces`.
pub fn explain<'a>(
    rules: &'a RuleSet,
    domain_name: &'a str,
    descriptors: &'a [Vec<Entry>],
) -> RequestExplanation<'a> {
    let known_domains = rules.domains().map(|domain| domain.name.as_str()).collect();
    let domain = rules.domain(domain_name);
    let mut explained: Vec<DescriptorExplanation<'a>> = descriptors
        .iter()
        .map(|entries| match domain {
            Some(domain) => explain_descriptor(domain, entries),
            None => DescriptorExplanation {
                entries,
                levels: Vec::new(),
                verdict: Verdict::UnknownDomain,
                not_tried: Vec::new(),
            },
        })
        .collect();
    apply_replaces(&mut explained);
    RequestExplanation {
        domain_name,
        domain,
        known_domains,
        descriptors: explained,
    }
}

fn explain_descriptor<'a>(
    domain: &'a DomainRules,
    entries: &'a [Entry],
) -> DescriptorExplanation<'a> {
    let mut explanation = DescriptorExplanation {
        entries,
        levels: Vec::with_capacity(entries.len()),
        verdict: Verdict::NoEntries,
        not_tried: Vec::new(),
    };
    if entries.is_empty() {
        return explanation;
    }
    // The node reached at each level, starting with the root, for the backtracking hints.
    let mut nodes: Vec<&'a Node> = vec![&domain.root];
    let mut node_path = domain.name.clone();
    for (level, entry) in entries.iter().enumerate() {
        let node = nodes[nodes.len() - 1];
        match step(node, entry) {
            Ok((next, how)) => {
                node_path = format!("{node_path}.{}", composite(entry, &how));
                explanation.levels.push(LevelExplanation {
                    entry,
                    how,
                    node_path: node_path.clone(),
                });
                nodes.push(next);
            }
            // Entries the rule reads rather than levels (a priority class entry, a concurrency
            // rule's lease and release entries) end the lookup at its rule, as in `lookup`.
            Err(_) if node.reads_rest(entries, level) => {
                if let Some(rule) = node.rule() {
                    explanation.verdict = Verdict::Limited(rule);
                }
                return explanation;
            }
            Err(miss) => {
                let miss = match miss {
                    StepMiss::Childless => Miss::TreeEnds {
                        node_path: node_path.clone(),
                        node_rule: node.rule(),
                    },
                    StepMiss::UnknownKey => Miss::NoSuchKey {
                        keys: sorted(node.child_keys()),
                    },
                    StepMiss::UnmatchedValue(children) => Miss::NoValue {
                        values: sorted(children.exact_values()),
                        patterns: children
                            .wildcards
                            .iter()
                            .map(|(pattern, _)| pattern.as_str())
                            .collect(),
                    },
                };
                explanation.verdict = Verdict::Missed { level, entry, miss };
                explanation.not_tried = not_tried(&explanation.levels, &nodes, entries);
                return explanation;
            }
        }
    }
    let last = nodes[nodes.len() - 1];
    explanation.verdict = match last.rule() {
        Some(rule) if rule.unlimited => Verdict::Unlimited(rule),
        Some(rule) => Verdict::Limited(rule),
        None => {
            let parent = nodes[nodes.len() - 2];
            let exempted_from = match explanation.levels.last().map(|level| &level.how) {
                Some(LevelMatch::Exact | LevelMatch::Wildcard { .. })
                    if last.children.is_empty() =>
                {
                    entries
                        .last()
                        .and_then(|entry| parent.children_of(&entry.key))
                        .and_then(|children| children.default.as_deref())
                        .and_then(Node::rule)
                }
                _ => None,
            };
            Verdict::NoLimitHere {
                deeper_keys: sorted(last.child_keys()),
                exempted_from,
            }
        }
    };
    if !matches!(
        explanation.verdict,
        Verdict::Limited(_) | Verdict::Unlimited(_)
    ) {
        explanation.not_tried = not_tried(&explanation.levels, &nodes, entries);
    }
    explanation
}

/// One level of the lookup (`Node::step`, as `DomainRules::lookup` takes it), with the
/// patterns a key-only match tried first.
fn step<'a>(node: &'a Node, entry: &Entry) -> Result<(&'a Node, LevelMatch<'a>), StepMiss<'a>> {
    let (next, how) = node.step(entry)?;
    let how = match how {
        MatchedLevel::Exact => LevelMatch::Exact,
        MatchedLevel::Wildcard { pattern, shared } => LevelMatch::Wildcard { pattern, shared },
        MatchedLevel::Default => LevelMatch::Default {
            patterns_tried: node
                .children_of(&entry.key)
                .map(|children| {
                    children
                        .wildcards
                        .iter()
                        .map(|(pattern, _)| pattern.as_str())
                        .collect()
                })
                .unwrap_or_default(),
        },
    };
    Ok((next, how))
}

/// The reference's composite key of the node an entry reached: `key`, `key_value` or
/// `key_pattern`.
fn composite(entry: &Entry, how: &LevelMatch<'_>) -> String {
    match how {
        LevelMatch::Exact => format!("{}_{}", entry.key, entry.value),
        LevelMatch::Wildcard { pattern, .. } => format!("{}_{pattern}", entry.key),
        LevelMatch::Default { .. } => entry.key.clone(),
    }
}

/// Rules that the branches not taken would have reached: at every level that matched a value
/// (exactly or by pattern), what the lower-priority siblings (a matching pattern, the key-only
/// node) lead to with the rest of the entries, looked up as usual.
fn not_tried<'a>(
    levels: &[LevelExplanation<'a>],
    nodes: &[&'a Node],
    entries: &'a [Entry],
) -> Vec<NotTried<'a>> {
    let mut found = Vec::new();
    for (level, matched) in levels.iter().enumerate() {
        let Some(children) = nodes[level].children_of(&matched.entry.key) else {
            continue;
        };
        let parent_path = matched
            .node_path
            .rsplit_once('.')
            .map_or(String::new(), |(parent, _)| parent.to_owned());
        let mut alternatives: Vec<(String, &'a Node)> = Vec::new();
        if matched.how == LevelMatch::Exact {
            if let Some((pattern, node)) = children
                .wildcards
                .iter()
                .find(|(pattern, _)| pattern.matches(&matched.entry.value))
            {
                alternatives.push((
                    format!("{parent_path}.{}_{}", matched.entry.key, pattern.as_str()),
                    node,
                ));
            }
        }
        if !matches!(matched.how, LevelMatch::Default { .. }) {
            if let Some(default) = children.default.as_deref() {
                alternatives.push((format!("{parent_path}.{}", matched.entry.key), default));
            }
        }
        for (instead, node) in alternatives {
            if let Some(rule) = lookup_from(node, &entries[level + 1..]) {
                found.push(NotTried {
                    level,
                    taken: matched.node_path.clone(),
                    instead,
                    rule,
                });
            }
        }
    }
    found
}

/// `DomainRules::lookup` starting below `node`: the rule reached with `rest`, if any.
fn lookup_from<'a>(node: &'a Node, rest: &[Entry]) -> Option<&'a Rule> {
    let mut node = node;
    for entry in rest {
        node = step(node, entry).ok()?.0;
    }
    node.rule()
}

/// Marks rules named in another matched rule's `replaces` ([`Rule::replaced_by`], as the
/// planner asks).
fn apply_replaces(descriptors: &mut [DescriptorExplanation<'_>]) {
    let matched: Vec<Option<&Rule>> = descriptors
        .iter()
        .map(|descriptor| match descriptor.verdict {
            Verdict::Limited(rule) | Verdict::Unlimited(rule) => Some(rule),
            _ => None,
        })
        .collect();
    for descriptor in descriptors.iter_mut() {
        let (Verdict::Limited(rule) | Verdict::Unlimited(rule)) = descriptor.verdict else {
            continue;
        };
        if let Some((by_descriptor, by)) = rule.replaced_by(matched.iter().copied()) {
            descriptor.verdict = Verdict::Replaced {
                rule,
                by,
                by_descriptor,
            };
        }
    }
}

fn sorted<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut items: Vec<&'a str> = items.collect();
    items.sort_unstable();
    items
}

#[cfg(test)]
mod tests;
