//! The descriptor rule tree of envoyproxy/ratelimit and how a request's descriptor finds its
//! rule in it (`../shared/reference/envoy-ratelimit-compat.md` §1.4–1.6).

use std::collections::HashMap;

use super::algorithm::{Algorithm, Quota};

/// One `(key, value)` pair of a request descriptor. An empty value is legal (Envoy sends one for
/// an empty header).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

impl Entry {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// The rate-limit settings of one descriptor node that has `rate_limit` or `rate_limits`.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Config path: domain, then per level `key` (key-only default) or `key_value`, joined by
    /// dots (`edge.generic_key_api.client_id`). Names the rule in errors, metrics and logs.
    pub path: String,
    /// The file the rule came from, as given to the loader.
    pub source: String,
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
    /// `metadata:` as written (returned in dynamic metadata when enabled).
    pub metadata: Option<serde_yaml::Value>,
}

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

/// A request descriptor's rule, with how each of its entries matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched<'a> {
    pub rule: &'a Rule,
    /// One per request entry, in order.
    pub levels: Vec<MatchedLevel<'a>>,
}

/// The children of a node that share one `key`.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyChildren {
    /// `key` + literal `value`.
    pub(crate) exact: HashMap<Box<str>, Node>,
    /// `key` + `value` with `*`, in config order: the first that matches wins.
    pub(crate) wildcards: Vec<(WildcardPattern, Node)>,
    /// `key` without `value`.
    pub(crate) default: Option<Box<Node>>,
}

/// A node of the descriptor tree.
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    pub(crate) rule: Option<Rule>,
    pub(crate) children: HashMap<Box<str>, KeyChildren>,
}

/// A value pattern where `*` matches any run of characters (also none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WildcardPattern {
    pub(crate) text: Box<str>,
}

/// One domain's rules: the tree of one configuration file (or of several, when merged).
#[derive(Debug, Clone)]
pub struct DomainRules {
    pub name: String,
    /// The file(s) the domain came from.
    pub sources: Vec<String>,
    /// What `algorithm:` defaults to in this domain; also used for request-side overrides.
    pub default_algorithm: Algorithm,
    pub(crate) root: Node,
}

/// Every domain's rules: what one successful load produces, swapped in whole.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    pub(crate) domains: HashMap<String, DomainRules>,
}
