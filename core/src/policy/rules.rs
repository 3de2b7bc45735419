//! The descriptor rule tree of envoyproxy/ratelimit and how a request's descriptor finds its
//! rule in it (`../shared/reference/envoy-ratelimit-compat.md` §1.4–1.6).
//!
//! The tree is built once per load and then only read, so it is laid out for size: children
//! in sorted boxed slices (binary search) instead of hash maps, rules and their rarely used
//! extensions behind boxes so that inner nodes stay small, and the keys and values repeated
//! across rules (`generic_key`, a value on the path of many rules, the file name) shared
//! through `Arc<str>`. 20 000 rules used to take 5.7 KB of RSS each (docs/benchmarks.md).

use std::sync::Arc;

use crate::arithmetic::algorithm::{Algorithm, Quota};
use crate::policy::http_check::profile::{CheckProfile, CheckProfiles};
use crate::policy::request::Entry;

/// The rate-limit settings of one descriptor node that has `rate_limit` or `rate_limits`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Config path: domain, then per level `key` (key-only default) or `key_value`, joined by
    /// dots (`edge.generic_key_api.client_id`). Names the rule in errors, metrics and logs.
    pub path: String,
    /// The rule's place in its rule set, from 0 to [`RuleSet::rule_count`] − 1: per-rule state
    /// kept beside a rule set (its metric series) sits in a flat table at this index.
    pub index: usize,
    /// The configured descriptors from the domain to this rule, one per level. Stats keys are
    /// built from these pieces: `path` cannot be split back into levels because keys and
    /// values may contain dots (`remote_address_10.0.0.1`).
    pub config_path: Box<[PathLevel]>,
    /// The file the rule came from, as given to the loader (shared by the file's rules).
    pub source: Arc<str>,
    /// `rate_limit.name`, returned as `current_limit.name`; target of other rules' `replaces`.
    pub name: Option<String>,
    /// Names of rules this one replaces for the requests in which both match.
    pub replaces: Vec<String>,
    /// Every limit that must admit (one for `rate_limit`, several for `rate_limits`). Empty
    /// exactly when `unlimited`.
    pub limits: Vec<Quota>,
    pub unlimited: bool,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub detailed_metric: bool,
    pub value_to_metric: bool,
    pub share_threshold: bool,
    /// Whether the rule's descriptor has `descriptors:` below it. envoyproxy/ratelimit answers
    /// a `detailed_metric` rule without them with a limit rebuilt for its stats, which drops
    /// the rule's `metadata:` (`core::decision::dynamic_metadata`).
    pub has_descriptors: bool,
    /// `metadata:`, as the protobuf Struct it is returned as in dynamic metadata
    /// (`core::decision::dynamic_metadata`): converted once here, so that an answer only copies it.
    pub metadata: Option<Box<crate::ground::metadata::MetadataStruct>>,
    /// `adaptive:`: the limit moves between bounds with a latency signal (`core::arithmetic::aimd`).
    pub adaptive: Option<Box<crate::arithmetic::aimd::AdaptiveSettings>>,
    /// `priority:`: classes sharing this rule's counters (`core::arithmetic::priority`).
    pub priority: Option<Box<crate::arithmetic::priority::Priority>>,
    /// `concurrency:`: the rule counts leases in flight, not hits (`core::arithmetic::lease`); `limits`
    /// is empty then.
    pub concurrency: Option<Box<crate::arithmetic::lease::Concurrency>>,
    /// `ban:`: a key the limits keep refusing is refused outright for a while
    /// (`core::arithmetic::ban`).
    pub ban: Option<crate::arithmetic::ban::BanPolicy>,
    /// `heavy_hitters:`: how the rule's values show among its heavy hitters
    /// (`core::arithmetic::heavy_hitters`).
    pub hitter_values: crate::arithmetic::heavy_hitters::HitterValues,
}

impl Rule {
    /// The first of a request's matched rules (one per descriptor, `None` where no rule
    /// matched) whose `replaces` names this rule, with its place: every matched rule may
    /// replace, limited or not, and a replaced rule is not counted. The planner and `explain`
    /// both ask this, so that they agree.
    pub fn replaced_by<'r>(
        &self,
        matched: impl IntoIterator<Item = Option<&'r Rule>>,
    ) -> Option<(usize, &'r Rule)> {
        let name = self.name.as_deref()?;
        matched.into_iter().enumerate().find_map(|(index, other)| {
            other
                .filter(|other| other.replaces.iter().any(|replaced| replaced == name))
                .map(|other| (index, other))
        })
    }
}

/// The levels one descriptor matched, on the stack for up to four (a descriptor rarely has more).
pub type MatchedLevels<'a> = smallvec::SmallVec<[MatchedLevel<'a>; 4]>;

/// How one level of a request descriptor matched the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedLevel<'a> {
    /// `key` + `value` equal to the request's entry.
    Exact,
    /// A `value` containing `*` that matched the request's value. With `share_threshold`, every
    /// value matching the pattern shares one counter.
    Wildcard { pattern: &'a str, shared: bool },
    /// A key-only node (no `value`): any value of that key.
    Default,
}

/// Why one step of the lookup found no child (`Node::step`).
pub(crate) enum StepMiss<'a> {
    /// The node has no children: the request has more entries than the tree has levels.
    Childless,
    /// No child has the entry's key.
    UnknownKey,
    /// Children have the key, but none has the value, no pattern matches it and there is no
    /// key-only child.
    UnmatchedValue(&'a KeyChildren),
}

/// A request descriptor's rule, with how each of its entries matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched<'a> {
    pub rule: &'a Rule,
    /// One per request entry, in order.
    pub levels: MatchedLevels<'a>,
    /// The configured descriptors on the way to the rule, one per request entry. Stats keys are
    /// built from these pieces: `rule.path` cannot be split back into levels because keys and
    /// values may contain dots (`remote_address_10.0.0.1`).
    pub config_path: &'a [PathLevel],
    /// Index of the rule's priority class entry among the request's entries, when it ended
    /// with one; that entry is not a level (`levels` is one shorter than the entries).
    pub class_entry: Option<usize>,
    /// Index of a concurrency rule's lease id entry, and of its release marker, among the
    /// request's entries (`core::arithmetic::lease`); neither is a level either.
    pub lease_entry: Option<usize>,
    pub release_entry: Option<usize>,
}

/// One configured descriptor on the way from the domain to a rule. The texts are shared with
/// the tree and with the other rules below the same descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathLevel {
    pub key: Arc<str>,
    /// The configured `value` (a pattern when it contains `*`); `None` for a key-only node.
    pub value: Option<Arc<str>>,
    /// `value_to_metric` of this descriptor: its level shows the request's value in stats.
    pub value_to_metric: bool,
    /// `share_threshold` of this descriptor: every value its pattern matches shares a counter.
    pub share_threshold: bool,
}

impl PathLevel {
    /// The reference's composite key of this level: `key`, or `key_value` when a value is set.
    pub fn composite_key(&self) -> String {
        match &self.value {
            Some(value) => format!("{}_{}", self.key, value),
            None => self.key.to_string(),
        }
    }
}

/// The children of a node that share one `key`.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyChildren {
    pub(crate) key: Arc<str>,
    /// `key` + literal `value`, sorted by value: found by binary search, which needs no hash
    /// of request text and no spare slots.
    pub(crate) exact: Box<[(Arc<str>, Node)]>,
    /// `key` + `value` with `*`, in config order: the first that matches wins.
    pub(crate) wildcards: Box<[(WildcardPattern, Node)]>,
    /// `key` without `value`.
    pub(crate) default: Option<Box<Node>>,
}

impl KeyChildren {
    /// The child whose `value` is exactly `value`.
    pub(crate) fn exact(&self, value: &str) -> Option<&Node> {
        let at = self
            .exact
            .binary_search_by(|(configured, _)| (**configured).cmp(value))
            .ok()?;
        self.exact.get(at).map(|(_, node)| node)
    }

    /// The configured literal values, sorted.
    pub(crate) fn exact_values(&self) -> impl Iterator<Item = &str> {
        self.exact.iter().map(|(value, _)| &**value)
    }
}

/// A node of the descriptor tree.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    pub(crate) rule: Option<Box<Rule>>,
    /// Sorted by key.
    pub(crate) children: Box<[KeyChildren]>,
    /// This descriptor's `share_threshold` (reported per level in [`MatchedLevel::Wildcard`]).
    pub(crate) share_threshold: bool,
}

/// A value pattern where `*` matches any run of characters (also none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WildcardPattern {
    pub(crate) text: Box<str>,
}

impl WildcardPattern {
    pub fn new(text: impl Into<Box<str>>) -> Self {
        Self { text: text.into() }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches: the text between `*`s must appear in order, the part before the
    /// first `*` is a prefix and the part after the last a suffix (they may not overlap).
    pub fn matches(&self, value: &str) -> bool {
        let mut segments = self.text.split('*');
        let Some(prefix) = segments.next() else {
            return value.is_empty();
        };
        let Some(rest) = value.strip_prefix(prefix) else {
            return false;
        };
        // Without any `*` the pattern is literal text.
        let Some(suffix) = segments.next_back() else {
            return rest.is_empty();
        };
        let Some(mut middle) = rest.strip_suffix(suffix) else {
            return false;
        };
        // Taking each segment at its leftmost place leaves the most room for the later ones.
        for segment in segments {
            match middle.find(segment) {
                Some(at) => middle = &middle[at + segment.len()..],
                None => return false,
            }
        }
        true
    }
}

/// One domain's rules: the tree of one configuration file (or of several, when merged).
#[derive(Debug, Clone)]
pub struct DomainRules {
    pub name: String,
    /// The file(s) the domain came from.
    pub sources: Vec<String>,
    /// What `algorithm:` defaults to in this domain; also used for request-side overrides.
    pub default_algorithm: Algorithm,
    /// Whether MONTH limits count in UTC calendar months (`--calendar-months`); also used for
    /// request-side overrides.
    pub calendar_months: bool,
    /// `failure_policy:` (what a request gets when the store fails); `None`: the global
    /// `--redis-failure-policy`.
    pub failure_policy: Option<crate::arithmetic::failure::FailurePolicy>,
    /// What a charge that does not fit does under Envoy's `limit` override: the domain's
    /// `overflow:`, else `--overflow` (applied when the domain's default algorithm counts hits
    /// in windows).
    pub overflow: crate::arithmetic::algorithm::Overflow,
    pub(crate) root: Node,
    /// For RLQS buckets, which carry keys without an order: each set of keys that some rule's
    /// descriptor path has (sorted), with the order of that path. The load refuses two orders
    /// of one set, so a bucket's keys name at most one path (`core::policy::rlqs::bucket`).
    pub(crate) key_orders: Box<[KeyOrder]>,
}

/// One key set of a domain's rule paths and the order in which the path has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyOrder {
    pub(crate) sorted: Box<[Arc<str>]>,
    pub(crate) ordered: Box<[Arc<str>]>,
}

impl DomainRules {
    /// Finds the rule for one request descriptor, exactly as envoyproxy/ratelimit's `GetLimit`
    /// walks its tree (reference §1.4):
    ///
    /// * per level, the first of: the child with the entry's key and exactly its value; the
    ///   first wildcard child of that key, in config order, whose pattern matches the value;
    ///   the key-only child of that key;
    /// * no backtracking: a level that matched a value never falls back to its key-only
    ///   sibling when a deeper level misses (so a value with neither limit nor children
    ///   "whitelists" that value);
    /// * the depth must match: every entry must match a level, and the rule is the one on the
    ///   node of the last entry (a limit on an inner node applies only to requests that end
    ///   there); a node without a rule gives `None`.
    ///
    /// One deliberate difference: the reference matches a wildcard against the joined string
    /// `key_value`, so `key: a, value: "*"` also matched the key `a_b` (quirk §9.7). Here the
    /// key must be equal and only the value is matched against the pattern.
    ///
    /// floodgate's addition: a rule with `priority` classes takes one more, last entry keyed by
    /// its `priority.key`, which names the class and is not a level (`core::arithmetic::priority`); a
    /// `concurrency` rule takes its lease id entry and release marker before it, neither a
    /// level (`core::arithmetic::lease`).
    ///
    /// Allocates only the returned `levels`.
    pub fn lookup(&self, entries: &[Entry]) -> Option<Matched<'_>> {
        let last = entries.len().checked_sub(1)?;
        let mut node = &self.root;
        let mut levels = MatchedLevels::new();
        for (index, entry) in entries.iter().enumerate() {
            let Some((next, how)) = node.child_for(entry) else {
                return node.rule_with_extra_entries(entries, index, levels);
            };
            levels.push(how);
            if index == last {
                let rule = next.rule()?;
                return Some(Matched {
                    rule,
                    levels,
                    config_path: &rule.config_path,
                    class_entry: None,
                    lease_entry: None,
                    release_entry: None,
                });
            }
            node = next;
        }
        None
    }

    /// Every rule of the domain, ordered by path.
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        let mut rules = Vec::new();
        self.root.collect_rules(&mut rules);
        rules.sort_by(|a, b| a.path.cmp(&b.path));
        rules.into_iter()
    }

    pub fn rule_count(&self) -> usize {
        self.root.count_rules()
    }

    /// The rule whose config path is `path` (`edge.generic_key_api.client_id`).
    pub fn rule_by_path(&self, path: &str) -> Option<&Rule> {
        self.rules().find(|rule| rule.path == path)
    }
}

impl Node {
    pub(crate) fn rule(&self) -> Option<&Rule> {
        self.rule.as_deref()
    }

    /// The children keyed `key`.
    pub(crate) fn children_of(&self, key: &str) -> Option<&KeyChildren> {
        let at = self
            .children
            .binary_search_by(|children| (*children.key).cmp(key))
            .ok()?;
        self.children.get(at)
    }

    /// The keys of the children, sorted.
    pub(crate) fn child_keys(&self) -> impl Iterator<Item = &str> {
        self.children.iter().map(|children| &*children.key)
    }

    /// This node's rule, when the entries from `first` on are all entries it reads rather than
    /// levels: a concurrency rule's lease id entry and release marker (each at most once), then
    /// a priority class entry, last (the loader keeps children keyed like these away, so such
    /// an entry is never a level).
    fn rule_with_extra_entries<'s>(
        &'s self,
        entries: &[Entry],
        first: usize,
        levels: MatchedLevels<'s>,
    ) -> Option<Matched<'s>> {
        let rule = self.rule()?;
        let mut matched = Matched {
            rule,
            levels,
            config_path: &rule.config_path,
            class_entry: None,
            lease_entry: None,
            release_entry: None,
        };
        let last = entries.len().checked_sub(1)?;
        for (index, entry) in entries.iter().enumerate().skip(first) {
            let concurrency = rule.concurrency.as_deref();
            let slot = if concurrency.is_some_and(|c| c.lease_key == entry.key) {
                &mut matched.lease_entry
            } else if concurrency
                .is_some_and(|c| c.release.key == entry.key && c.release.value == entry.value)
            {
                &mut matched.release_entry
            } else if index == last
                && rule
                    .priority
                    .as_deref()
                    .is_some_and(|priority| priority.key == entry.key)
            {
                &mut matched.class_entry
            } else {
                return None;
            };
            if slot.replace(index).is_some() {
                return None;
            }
        }
        Some(matched)
    }

    /// Whether the entries from `first` on are all entries this node's rule reads rather than
    /// levels ([`DomainRules::lookup`]; `--explain` asks the same).
    pub(crate) fn reads_rest(&self, entries: &[Entry], first: usize) -> bool {
        self.rule_with_extra_entries(entries, first, MatchedLevels::new())
            .is_some()
    }

    fn child_for(&self, entry: &Entry) -> Option<(&Node, MatchedLevel<'_>)> {
        self.step(entry).ok()
    }

    /// One level of the lookup, the one step both [`DomainRules::lookup`] and `--explain`
    /// (`core::decision::explain`) take: the child with the entry's key and exactly its value, else the
    /// first wildcard of that key in file order whose pattern matches the value, else the
    /// key-only child.
    pub(crate) fn step(&self, entry: &Entry) -> Result<(&Node, MatchedLevel<'_>), StepMiss<'_>> {
        if self.children.is_empty() {
            return Err(StepMiss::Childless);
        }
        let Some(children) = self.children_of(&entry.key) else {
            return Err(StepMiss::UnknownKey);
        };
        if let Some(node) = children.exact(&entry.value) {
            return Ok((node, MatchedLevel::Exact));
        }
        if let Some((pattern, node)) = children
            .wildcards
            .iter()
            .find(|(pattern, _)| pattern.matches(&entry.value))
        {
            let how = MatchedLevel::Wildcard {
                pattern: pattern.as_str(),
                shared: node.share_threshold,
            };
            return Ok((node, how));
        }
        match children.default.as_deref() {
            Some(node) => Ok((node, MatchedLevel::Default)),
            None => Err(StepMiss::UnmatchedValue(children)),
        }
    }

    fn child_nodes(&self) -> impl Iterator<Item = &Node> {
        self.children.iter().flat_map(|children| {
            children
                .exact
                .iter()
                .map(|(_, node)| node)
                .chain(children.wildcards.iter().map(|(_, node)| node))
                .chain(children.default.as_deref())
        })
    }

    fn collect_rules<'a>(&'a self, rules: &mut Vec<&'a Rule>) {
        if let Some(rule) = self.rule() {
            rules.push(rule);
        }
        for child in self.child_nodes() {
            child.collect_rules(rules);
        }
    }

    fn count_rules(&self) -> usize {
        usize::from(self.rule.is_some()) + self.child_nodes().map(Node::count_rules).sum::<usize>()
    }
}

/// Something that loads (envoyproxy/ratelimit accepts it too) but probably does not do what
/// was meant, such as a key the reference silently ignores where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    pub file: String,
    /// Rule path, or the YAML location when no rule path exists.
    pub path: String,
    /// What is odd and what to change.
    pub message: String,
}

impl std::fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.path, self.message)
    }
}

/// Every domain's rules: what one successful load produces, swapped in whole.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    /// Sorted by name, found by binary search as the tree's keys and values are: every
    /// decision looks its domain up, and a handful of names compare faster than one is hashed.
    pub(crate) domains: Box<[DomainRules]>,
    /// Things that load but probably do not do what was meant (see [`RuleSet::warnings`]).
    pub(crate) warnings: Vec<ConfigWarning>,
    /// `check_profiles:` of every file, for the HTTP check endpoint (`/check/<name>`).
    pub(crate) check_profiles: CheckProfiles,
}

impl RuleSet {
    pub fn domain(&self, name: &str) -> Option<&DomainRules> {
        let at = self
            .domains
            .binary_search_by(|domain| domain.name.as_str().cmp(name))
            .ok()?;
        self.domains.get(at)
    }

    /// Every domain, ordered by name.
    pub fn domains(&self) -> impl Iterator<Item = &DomainRules> {
        self.domains.iter()
    }

    /// Every rule of every domain, the domains ordered by name.
    pub fn all_rules(&self) -> impl Iterator<Item = &Rule> {
        self.domains.iter().flat_map(DomainRules::rules)
    }

    /// Rules in all domains.
    pub fn rule_count(&self) -> usize {
        self.domains.iter().map(DomainRules::rule_count).sum()
    }

    /// What loaded but is probably a mistake, each naming the file, the place and the fix:
    /// keys envoyproxy/ratelimit ignores where they are written, duplicate YAML keys (the last
    /// wins, as in the reference), `replaces` naming no rule… Worth logging after every load.
    pub fn warnings(&self) -> &[ConfigWarning] {
        &self.warnings
    }

    /// The check profile called `name` (`/check/<name>`).
    pub fn check_profile(&self, name: &str) -> Option<&CheckProfile> {
        self.check_profiles.get(name)
    }

    /// Every check profile, from every file.
    pub fn check_profiles(&self) -> &CheckProfiles {
        &self.check_profiles
    }
}

#[cfg(test)]
mod tests {
    use super::WildcardPattern;

    fn matches(pattern: &str, value: &str) -> bool {
        WildcardPattern::new(pattern).matches(value)
    }

    #[test]
    fn a_trailing_star_is_a_prefix_match() {
        assert!(matches("foo*", "foo"));
        assert!(matches("foo*", "foobar"));
        assert!(!matches("foo*", "fo"));
        assert!(!matches("foo*", "xfoo"));
    }

    #[test]
    fn a_leading_star_is_a_suffix_match() {
        assert!(matches("*.png", "a.png"));
        assert!(matches("*.png", ".png"));
        assert!(!matches("*.png", "a.png.gz"));
    }

    #[test]
    fn middle_and_multiple_stars_match_segments_in_order() {
        assert!(matches("/api/*/action", "/api/v1/action"));
        assert!(matches("/api/*/action", "/api//action"));
        assert!(!matches("/api/*/action", "/api/v1/other"));
        assert!(matches("foo*bar*baz", "foo-bar-baz"));
        assert!(matches("foo*bar*baz", "foobarbaz"));
        assert!(!matches("foo*bar*baz", "foo-baz-bar"));
        assert!(matches("a*b*c", "abxbc"));
    }

    #[test]
    fn prefix_and_suffix_may_not_overlap() {
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("ab*ba", "abba"));
        assert!(!matches("a*a*a", "aa"));
        assert!(matches("a*a*a", "aaa"));
    }

    #[test]
    fn a_lone_star_matches_everything_including_empty() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
        assert!(matches("**", ""));
    }

    #[test]
    fn text_without_star_must_be_equal() {
        assert!(matches("abc", "abc"));
        assert!(!matches("abc", "abcd"));
        assert!(matches("", ""));
        assert!(!matches("", "a"));
    }

    #[test]
    fn multibyte_text_is_matched_by_characters_not_split_inside_them() {
        assert!(matches("é*ü", "éaü"));
        assert!(matches("*ü", "ü"));
        assert!(!matches("é*é", "é"));
    }
}
