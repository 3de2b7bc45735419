//! The files' specs → one [`DomainRules`] per domain: unique domains (or merged ones with
//! `MERGE_DOMAIN_CONFIG`), unique composite keys per level, the trees the lookup walks.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::report::Report;
use super::spec::{DescriptorSpec, FileSpec, RuleSpec};
use super::LoadOptions;
use crate::arithmetic::algorithm::{Algorithm, Overflow};
use crate::ground::metadata::MetadataStruct;
use crate::policy::rules::{
    DomainRules, KeyChildren, KeyOrder, Node, PathLevel, Rule, WildcardPattern,
};

/// Every domain being built, fed one file at a time so that a file's parsed form can be
/// dropped before the next file is parsed.
#[derive(Default)]
pub(super) struct DomainsBuild {
    domains: HashMap<String, DomainBuild>,
    shared: Shared,
}

/// What all domains of one load share.
#[derive(Default)]
struct Shared {
    /// Keys, values and file names, each kept once for the whole rule set.
    texts: HashSet<Arc<str>>,
    /// The next rule's [`Rule::index`].
    next_index: usize,
}

impl Shared {
    fn text(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.texts.get(text) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(text);
        self.texts.insert(Arc::clone(&shared));
        shared
    }
}

impl DomainsBuild {
    pub(super) fn add(&mut self, file: FileSpec, options: &LoadOptions, report: &mut Report) {
        let shared = &mut self.shared;
        if file.domain.is_empty() {
            // Reported already; its tree is still built to find duplicates inside it.
            DomainBuild::new(&file, options).add(file, report, shared);
            return;
        }
        match self.domains.get_mut(&file.domain) {
            None => {
                let mut domain = DomainBuild::new(&file, options);
                domain.add(file, report, shared);
                self.domains.insert(domain.rules.name.clone(), domain);
            }
            Some(domain) if options.merge_domains => {
                domain.check_default_algorithm(&file, report);
                domain.check_failure_policy(&file, report);
                domain.check_overflow(&file, report);
                domain.add(file, report, shared);
            }
            Some(domain) => {
                let message = duplicate_domain_message(&file, domain, report);
                report.error(file.file, &file.domain, message);
                DomainBuild::new(&file, options).add(file, report, shared);
            }
        }
    }

    /// Rules made so far (by files that loaded, and by those with errors).
    pub(super) fn rule_count(&self) -> usize {
        self.shared.next_index
    }

    /// The domains' rules, sorted by name (`RuleSet::domains`).
    pub(super) fn finish(self, report: &mut Report) -> Box<[DomainRules]> {
        let mut domains: Vec<DomainRules> = self
            .domains
            .into_values()
            .map(|domain| domain.finish(report))
            .collect();
        domains.sort_by(|a, b| a.name.cmp(&b.name));
        domains.into_boxed_slice()
    }
}

fn duplicate_domain_message(file: &FileSpec, domain: &DomainBuild, report: &Report) -> String {
    let first = domain
        .first_file
        .map_or("", |index| report.file_name(index));
    let this = report.file_name(file.file);
    let configmap_hint = if first.contains("/..") || this.contains("/..") {
        " This looks like a Kubernetes ConfigMap read twice through its `..data` directory: \
         skip dot-files (RUNTIME_IGNOREDOTFILES=true) or point at the mounted directory."
    } else {
        ""
    };
    format!(
        "duplicate domain '{}' in config file: it is already defined in {first}; give each \
         file its own domain, or set MERGE_DOMAIN_CONFIG=true to add this file's descriptors \
         to that domain.{configmap_hint}",
        file.domain
    )
}

/// A domain-wide setting that the limits Envoy sends with a request take from their domain (its
/// default algorithm, its `overflow:`), which merged files must therefore agree on: the first
/// file's word (`first`) stands, and a later file that `said` otherwise is an error. Returns the
/// value to take when `file` is the first to say one. `key`: the top-level key, and the key
/// that says it on a rule.
fn first_word<T: Copy + PartialEq + std::fmt::Display>(
    first: &mut Option<(T, usize)>,
    (file, said): (&FileSpec, Option<T>),
    (key, on_rules): (&str, &str),
    report: &mut Report,
) -> Option<T> {
    let said = said?;
    match *first {
        Some((earlier, earlier_file)) if earlier != said => {
            let message = format!(
                "`{key}: {said}` differs from `{key}: {earlier}` in {}, which defines the same \
                 domain: merged files must agree (it also applies to the limits Envoy sends \
                 with a request); set `{on_rules}:` on the rules instead",
                report.file_name(earlier_file)
            );
            report.error(file.file, &file.domain, message);
            None
        }
        Some(_) => None,
        None => {
            *first = Some((said, file.file));
            Some(said)
        }
    }
}

/// A domain being assembled from one or more files.
struct DomainBuild {
    /// Its `root` is filled by `finish`, from `top`.
    rules: DomainRules,
    top: ChildrenBuild,
    first_file: Option<usize>,
    /// The first file that set `default_algorithm:`, and what it set.
    explicit_default: Option<(Algorithm, usize)>,
    /// The first file that set `overflow:`, and what it set.
    explicit_overflow: Option<(Overflow, usize)>,
    /// Composite keys of the top level, with the file that defined each.
    top_level: HashMap<String, usize>,
    names: HashSet<String>,
    /// Every `replaces` entry: file, rule path, replaced name.
    replaced: Vec<(usize, String, String)>,
}

impl DomainBuild {
    fn new(file: &FileSpec, options: &LoadOptions) -> Self {
        Self {
            rules: DomainRules {
                name: file.domain.clone(),
                sources: Vec::new(),
                default_algorithm: file.default_algorithm.unwrap_or(options.default_algorithm),
                calendar_months: options.calendar_months,
                failure_policy: file.failure_policy,
                overflow: file.overflow.unwrap_or(options.default_overflow),
                root: Node::default(),
                key_orders: Box::default(),
            },
            top: ChildrenBuild::default(),
            first_file: None,
            explicit_default: file
                .default_algorithm
                .map(|algorithm| (algorithm, file.file)),
            explicit_overflow: file.overflow.map(|overflow| (overflow, file.file)),
            top_level: HashMap::new(),
            names: HashSet::new(),
            replaced: Vec::new(),
        }
    }

    /// Request-side overrides use the domain's default algorithm, so merged files must agree.
    fn check_default_algorithm(&mut self, file: &FileSpec, report: &mut Report) {
        let said = (file, file.default_algorithm);
        let key = ("default_algorithm", "algorithm");
        if let Some(algorithm) = first_word(&mut self.explicit_default, said, key, report) {
            self.rules.default_algorithm = algorithm;
        }
    }

    /// Request-side overrides owe as the domain's `overflow:` says, so merged files must agree.
    fn check_overflow(&mut self, file: &FileSpec, report: &mut Report) {
        let said = (file, file.overflow);
        let key = ("overflow", "overflow");
        if let Some(overflow) = first_word(&mut self.explicit_overflow, said, key, report) {
            self.rules.overflow = overflow;
        }
    }

    /// One domain, one policy: merged files that disagree would make it depend on file order.
    fn check_failure_policy(&mut self, file: &FileSpec, report: &mut Report) {
        let Some(policy) = file.failure_policy else {
            return;
        };
        match self.rules.failure_policy {
            Some(first) if first != policy => {
                let message = format!(
                    "`failure_policy: {policy}` differs from `failure_policy: {first}` set by \
                     another file of the same domain: merged files must agree"
                );
                report.error(file.file, &file.domain, message);
            }
            Some(_) => {}
            None => self.rules.failure_policy = Some(policy),
        }
    }

    fn add(&mut self, file: FileSpec, report: &mut Report, shared: &mut Shared) {
        self.first_file.get_or_insert(file.file);
        self.rules
            .sources
            .push(report.file_name(file.file).to_owned());
        let source = shared.text(report.file_name(file.file));
        let mut level = Level {
            file: file.file,
            source,
            report,
            shared,
            names: &mut self.names,
            replaced: &mut self.replaced,
        };
        // The tree is built from the specs, which are dropped whole afterwards: moving pieces
        // of the specs into the tree would leave every long-lived piece on a memory page among
        // the specs' dropped ones, which the allocator then cannot give back.
        level.insert(&mut self.top, &mut self.top_level, &file.descriptors, &[]);
    }

    fn finish(mut self, report: &mut Report) -> DomainRules {
        self.rules.root.children = std::mem::take(&mut self.top).finish();
        self.rules.key_orders = key_orders(&self.rules, self.first_file.unwrap_or(0), report);
        for (file, path, name) in &self.replaced {
            if !self.names.contains(name) {
                report.warning(
                    *file,
                    path,
                    format!(
                        "replaces '{name}', but no rule in domain '{}' has `name: {name}`: \
                         check the spelling",
                        self.rules.name
                    ),
                );
            }
        }
        self.rules
    }
}

/// The key order of every key set among the domain's rule paths, for RLQS buckets (whose keys
/// come unordered). Two paths with one key set in different orders would leave a bucket two
/// rules to meet: the first in the file is the one, and a warning names both. (Not an error:
/// envoyproxy/ratelimit loads such files, and for RLS they mean two different rules.)
fn key_orders(domain: &DomainRules, file: usize, report: &mut Report) -> Box<[KeyOrder]> {
    let mut orders: Vec<(KeyOrder, String)> = Vec::new();
    for rule in domain.rules() {
        let ordered: Box<[Arc<str>]> = rule
            .config_path
            .iter()
            .map(|level| Arc::clone(&level.key))
            .collect();
        let mut sorted = ordered.clone();
        sorted.sort();
        match orders.iter().find(|(order, _)| order.sorted == sorted) {
            Some((order, _)) if order.ordered == ordered => {}
            Some((_, first_path)) => {
                let message = format!(
                    "the rules '{first_path}' and '{}' have the same descriptor keys in different \
                     orders: an RLQS bucket, whose keys have no order, meets only '{first_path}' \
                     (RLS requests are not affected); keep one order of these keys in domain \
                     '{}' if RLQS buckets should meet the other",
                    rule.path, domain.name
                );
                report.warning(file, &rule.path, message);
            }
            None => orders.push((KeyOrder { sorted, ordered }, rule.path.clone())),
        }
    }
    orders.into_iter().map(|(order, _)| order).collect()
}

/// The children of one node while its descriptors are inserted.
#[derive(Default)]
struct ChildrenBuild {
    by_key: HashMap<Arc<str>, KeyBuild>,
}

#[derive(Default)]
struct KeyBuild {
    exact: Vec<(Arc<str>, Node)>,
    wildcards: Vec<(WildcardPattern, Node)>,
    default: Option<Box<Node>>,
}

impl ChildrenBuild {
    /// The node's children as the lookup reads them: keys and exact values sorted, patterns
    /// in config order, nothing spare.
    fn finish(self) -> Box<[KeyChildren]> {
        let mut children: Vec<KeyChildren> = self
            .by_key
            .into_iter()
            .map(|(key, mut build)| {
                build.exact.sort_by(|(a, _), (b, _)| a.cmp(b));
                KeyChildren {
                    key,
                    exact: build.exact.into_boxed_slice(),
                    wildcards: build.wildcards.into_boxed_slice(),
                    default: build.default,
                }
            })
            .collect();
        children.sort_by(|a, b| a.key.cmp(&b.key));
        children.into_boxed_slice()
    }
}

/// Inserting the descriptors of one file into a tree.
struct Level<'b> {
    file: usize,
    /// The file's name, shared by its rules.
    source: Arc<str>,
    report: &'b mut Report,
    shared: &'b mut Shared,
    names: &'b mut HashSet<String>,
    replaced: &'b mut Vec<(usize, String, String)>,
}

impl Level<'_> {
    /// Adds `descriptors` to `children`; `seen` holds the composite keys already at this
    /// level (for the top level of a merged domain, those of earlier files).
    fn insert(
        &mut self,
        children: &mut ChildrenBuild,
        seen: &mut HashMap<String, usize>,
        descriptors: &[DescriptorSpec],
        parent_levels: &[PathLevel],
    ) {
        for descriptor in descriptors {
            if descriptor.key.is_empty() {
                // Reported already; its children may still hold problems of their own.
                self.insert_detached(&descriptor.children, parent_levels);
                continue;
            }
            let composite = descriptor.composite_key();
            if let Some(first_file) = seen.get(&composite).copied() {
                self.report_duplicate(&descriptor.path, first_file);
                self.insert_detached(&descriptor.children, parent_levels);
                continue;
            }
            seen.insert(composite, self.file);

            let key = self.shared.text(&descriptor.key);
            let value = descriptor
                .value
                .as_deref()
                .map(|value| self.shared.text(value));
            let mut levels = parent_levels.to_vec();
            levels.push(PathLevel {
                key: Arc::clone(&key),
                value: value.clone(),
                value_to_metric: descriptor.flags.value_to_metric,
                share_threshold: descriptor.flags.share_threshold,
            });
            let rule = descriptor
                .rule
                .as_ref()
                .map(|spec| Box::new(self.rule(spec, descriptor, &levels)));
            let mut grandchildren = ChildrenBuild::default();
            self.insert(
                &mut grandchildren,
                &mut HashMap::new(),
                &descriptor.children,
                &levels,
            );
            let child = Node {
                rule,
                children: grandchildren.finish(),
                share_threshold: descriptor.flags.share_threshold,
            };

            let slot = children.by_key.entry(key).or_default();
            match value {
                None => slot.default = Some(Box::new(child)),
                Some(value) if value.contains('*') => {
                    slot.wildcards.push((WildcardPattern::new(&*value), child));
                }
                Some(value) => slot.exact.push((value, child)),
            }
        }
    }

    /// Builds a subtree that is thrown away, only to report the problems inside it.
    fn insert_detached(&mut self, descriptors: &[DescriptorSpec], parent_levels: &[PathLevel]) {
        self.insert(
            &mut ChildrenBuild::default(),
            &mut HashMap::new(),
            descriptors,
            parent_levels,
        );
    }

    fn report_duplicate(&mut self, path: &str, first_file: usize) {
        let fix = if first_file == self.file {
            "two descriptors at this level have the same key and value: merge them into one \
             (with their `descriptors` side by side), or use `rate_limits:` to put several \
             limits on one descriptor"
                .to_owned()
        } else {
            format!(
                "{} defines it already; merging domains adds the top-level descriptors of each \
                 file side by side, it does not merge them: keep this descriptor in one file",
                self.report.file_name(first_file)
            )
        };
        let message = format!("duplicate descriptor composite key '{path}': {fix}");
        self.report.error(self.file, path, message);
    }

    fn rule(&mut self, spec: &RuleSpec, descriptor: &DescriptorSpec, levels: &[PathLevel]) -> Rule {
        if let Some(name) = &spec.name {
            self.names.insert(name.clone());
        }
        for replaced in &spec.replaces {
            self.replaced
                .push((self.file, descriptor.path.clone(), replaced.clone()));
        }
        let flags = descriptor.flags;
        let index = self.shared.next_index;
        self.shared.next_index += 1;
        Rule {
            path: descriptor.path.clone(),
            index,
            config_path: levels.into(),
            source: Arc::clone(&self.source),
            name: spec.name.clone(),
            replaces: spec.replaces.clone(),
            limits: spec.limits.clone(),
            unlimited: spec.unlimited,
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            detailed_metric: flags.detailed_metric,
            value_to_metric: flags.value_to_metric,
            share_threshold: flags.share_threshold,
            has_descriptors: !descriptor.children.is_empty(),
            metadata: descriptor
                .metadata
                .as_ref()
                .and_then(serde_yaml::Value::as_mapping)
                .map(|mapping| Box::new(MetadataStruct::from_yaml(mapping))),
            adaptive: descriptor.adaptive.clone().map(Box::new),
            priority: descriptor.priority.clone().map(Box::new),
            concurrency: spec.concurrency.clone().map(Box::new),
            ban: descriptor.ban,
            hitter_values: descriptor.hitter_values,
        }
    }
}
