//! The files' specs → one [`DomainRules`] per domain: unique domains (or merged ones with
//! `MERGE_DOMAIN_CONFIG`), unique composite keys per level, the trees the lookup walks.

use std::collections::{HashMap, HashSet};

use super::report::Report;
use super::spec::{DescriptorSpec, FileSpec, RuleSpec};
use super::LoadOptions;
use crate::core::algorithm::Algorithm;
use crate::core::rules::{DomainRules, Node, PathLevel, Rule, WildcardPattern};

pub(super) fn build_domains(
    files: Vec<FileSpec>,
    options: &LoadOptions,
    report: &mut Report,
) -> HashMap<String, DomainRules> {
    let mut domains: HashMap<String, DomainBuild> = HashMap::new();
    for file in files {
        if file.domain.is_empty() {
            // Reported already; its tree is still built to find duplicates inside it.
            DomainBuild::new(&file, options).add(file, report);
            continue;
        }
        match domains.get_mut(&file.domain) {
            None => {
                let mut domain = DomainBuild::new(&file, options);
                domain.add(file, report);
                domains.insert(domain.rules.name.clone(), domain);
            }
            Some(domain) if options.merge_domains => {
                domain.check_default_algorithm(&file, report);
                domain.check_failure_policy(&file, report);
                domain.add(file, report);
            }
            Some(domain) => {
                let message = duplicate_domain_message(&file, domain, report);
                report.error(file.file, &file.domain, message);
                DomainBuild::new(&file, options).add(file, report);
            }
        }
    }
    domains
        .into_iter()
        .map(|(name, domain)| (name, domain.finish(report)))
        .collect()
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

/// A domain being assembled from one or more files.
struct DomainBuild {
    rules: DomainRules,
    first_file: Option<usize>,
    /// The first file that set `default_algorithm:`, and what it set.
    explicit_default: Option<(Algorithm, usize)>,
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
                failure_policy: file.failure_policy,
                root: Node::default(),
            },
            first_file: None,
            explicit_default: file
                .default_algorithm
                .map(|algorithm| (algorithm, file.file)),
            top_level: HashMap::new(),
            names: HashSet::new(),
            replaced: Vec::new(),
        }
    }

    /// Request-side overrides use the domain's default algorithm, so merged files must agree.
    fn check_default_algorithm(&mut self, file: &FileSpec, report: &mut Report) {
        let Some(algorithm) = file.default_algorithm else {
            return;
        };
        match self.explicit_default {
            Some((first, first_file)) if first != algorithm => {
                let message = format!(
                    "`default_algorithm: {algorithm}` differs from `default_algorithm: {first}` \
                     in {}, which defines the same domain: merged files must agree (it is also \
                     the algorithm of limits Envoy sends with a request); set `algorithm:` on \
                     the rules instead",
                    report.file_name(first_file)
                );
                report.error(file.file, &file.domain, message);
            }
            Some(_) => {}
            None => {
                self.explicit_default = Some((algorithm, file.file));
                self.rules.default_algorithm = algorithm;
            }
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

    fn add(&mut self, file: FileSpec, report: &mut Report) {
        self.first_file.get_or_insert(file.file);
        self.rules
            .sources
            .push(report.file_name(file.file).to_owned());
        let mut level = Level {
            file: file.file,
            report,
            names: &mut self.names,
            replaced: &mut self.replaced,
        };
        level.insert(
            &mut self.rules.root,
            &mut self.top_level,
            file.descriptors,
            &[],
        );
    }

    fn finish(self, report: &mut Report) -> DomainRules {
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

/// Inserting the descriptors of one file into a tree.
struct Level<'b> {
    file: usize,
    report: &'b mut Report,
    names: &'b mut HashSet<String>,
    replaced: &'b mut Vec<(usize, String, String)>,
}

impl Level<'_> {
    /// Adds `descriptors` as children of `node`; `seen` holds the composite keys already at
    /// this level (for the top level of a merged domain, those of earlier files).
    fn insert(
        &mut self,
        node: &mut Node,
        seen: &mut HashMap<String, usize>,
        descriptors: Vec<DescriptorSpec>,
        parent_levels: &[PathLevel],
    ) {
        for mut descriptor in descriptors {
            if descriptor.key.is_empty() {
                // Reported already; its children may still hold problems of their own.
                self.insert_detached(descriptor.children, parent_levels);
                continue;
            }
            let composite = descriptor.composite_key();
            if let Some(first_file) = seen.get(&composite).copied() {
                self.report_duplicate(&descriptor.path, first_file);
                self.insert_detached(descriptor.children, parent_levels);
                continue;
            }
            seen.insert(composite, self.file);

            let mut levels = parent_levels.to_vec();
            levels.push(PathLevel {
                key: descriptor.key.clone(),
                value: descriptor.value.clone(),
                value_to_metric: descriptor.flags.value_to_metric,
                share_threshold: descriptor.flags.share_threshold,
            });
            let rule = descriptor
                .rule
                .take()
                .map(|spec| self.rule(spec, &descriptor));
            let mut child = Node {
                config_path: if rule.is_some() {
                    levels.clone().into_boxed_slice()
                } else {
                    Box::default()
                },
                rule,
                share_threshold: descriptor.flags.share_threshold,
                children: HashMap::new(),
            };
            self.insert(
                &mut child,
                &mut HashMap::new(),
                descriptor.children,
                &levels,
            );

            let slot = node.children.entry(descriptor.key.into()).or_default();
            match descriptor.value {
                None => slot.default = Some(Box::new(child)),
                Some(value) if value.contains('*') => {
                    slot.wildcards.push((WildcardPattern::new(value), child));
                }
                Some(value) => {
                    slot.exact.insert(value.into(), child);
                }
            }
        }
    }

    /// Builds a subtree that is thrown away, only to report the problems inside it.
    fn insert_detached(&mut self, descriptors: Vec<DescriptorSpec>, parent_levels: &[PathLevel]) {
        self.insert(
            &mut Node::default(),
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

    fn rule(&mut self, spec: RuleSpec, descriptor: &DescriptorSpec) -> Rule {
        if let Some(name) = &spec.name {
            self.names.insert(name.clone());
        }
        for replaced in &spec.replaces {
            self.replaced
                .push((self.file, descriptor.path.clone(), replaced.clone()));
        }
        let flags = descriptor.flags;
        Rule {
            path: descriptor.path.clone(),
            source: self.report.file_name(self.file).to_owned(),
            name: spec.name,
            replaces: spec.replaces,
            limits: spec.limits,
            unlimited: spec.unlimited,
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            detailed_metric: flags.detailed_metric,
            value_to_metric: flags.value_to_metric,
            share_threshold: flags.share_threshold,
            metadata: descriptor.metadata.clone(),
            adaptive: descriptor.adaptive.clone(),
            priority: descriptor.priority.clone(),
        }
    }
}
