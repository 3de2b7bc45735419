//! From a request and the domain's rules to the counters the request touches: rule lookup,
//! `replaces`, `unlimited`, limit overrides, hits and roles. Pure; the store does the counting.

use super::algorithm::{Hits, Quota};
use super::key::counter_key;
use super::request::{Descriptor, LimitOverride, Request};
use super::rules::{DomainRules, MatchedLevel, Rule};
use super::verdict::Role;

/// One counter a request touches: which descriptor asks, its identity, its limit, what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    pub descriptor: usize,
    pub key: Vec<u8>,
    pub quota: Quota,
    pub hits: Hits,
    pub role: Role,
}

/// What decides one descriptor.
#[derive(Debug, Clone, PartialEq)]
pub enum DescriptorPlan<'a> {
    /// Unknown domain, no matching rule, or a matched node without a limit: OK, no limit shown.
    NoRule,
    /// Another matched rule `replaces` this one for this request: OK, its counter untouched.
    Replaced { rule: &'a Rule },
    /// `unlimited: true`: OK with the largest remaining.
    Unlimited { rule: &'a Rule },
    /// Counters `counters` (a range into `Plan::counters`) decide it.
    Limited {
        limit: LimitSource<'a>,
        counters: std::ops::Range<usize>,
    },
}

/// Where a descriptor's limits came from.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitSource<'a> {
    Rule(&'a Rule),
    /// Envoy's per-descriptor `limit`; the configured rule is not used.
    Override {
        path: String,
        quotas: Vec<Quota>,
    },
}

impl LimitSource<'_> {
    pub fn path(&self) -> &str {
        match self {
            LimitSource::Rule(rule) => &rule.path,
            LimitSource::Override { path, .. } => path,
        }
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            LimitSource::Rule(rule) => rule.name.as_deref(),
            LimitSource::Override { .. } => None,
        }
    }

    pub fn quotas(&self) -> &[Quota] {
        match self {
            LimitSource::Rule(rule) => &rule.limits,
            LimitSource::Override { quotas, .. } => quotas,
        }
    }

    pub fn shadow_mode(&self) -> bool {
        matches!(self, LimitSource::Rule(rule) if rule.shadow_mode)
    }
}

/// Everything the store and the response need for one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan<'a> {
    pub descriptors: Vec<DescriptorPlan<'a>>,
    pub counters: Vec<Counter>,
}

/// Settings that change how requests are planned (`QUOTA_MODE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanSettings {
    pub global_quota_mode: bool,
}

/// Plans `request` against `domain` (`None`: the domain is unknown).
pub fn plan<'a>(
    request: &Request,
    domain: Option<&'a DomainRules>,
    settings: PlanSettings,
) -> Plan<'a> {
    let Some(domain) = domain else {
        return Plan {
            descriptors: vec![DescriptorPlan::NoRule; request.descriptors.len()],
            counters: Vec::new(),
        };
    };
    let found: Vec<Found<'a>> = request
        .descriptors
        .iter()
        .map(|descriptor| find(domain, descriptor))
        .collect();
    let replaced = replaced_names(&found);

    let mut plan = Plan {
        descriptors: Vec::with_capacity(found.len()),
        counters: Vec::with_capacity(found.len()),
    };
    for (index, (descriptor, found)) in request.descriptors.iter().zip(found).enumerate() {
        let descriptor_plan = match found {
            Found::Nothing => DescriptorPlan::NoRule,
            Found::Rule { rule, .. } if is_replaced(rule, &replaced) => {
                DescriptorPlan::Replaced { rule }
            }
            Found::Rule { rule, .. } if rule.unlimited => DescriptorPlan::Unlimited { rule },
            Found::Rule { rule, levels } => {
                let role = role_of(rule.shadow_mode, rule.quota_mode, settings);
                let source = LimitSource::Rule(rule);
                let hits = request.hits_for(descriptor);
                add_counters(
                    &mut plan, index, domain, descriptor, &levels, source, hits, role,
                )
            }
            Found::Override(limit) => {
                let source = override_source(domain, descriptor, &limit);
                let hits = request.hits_for(descriptor);
                let role = role_of(false, false, settings);
                let levels = vec![MatchedLevel::Exact; descriptor.entries.len()];
                add_counters(
                    &mut plan, index, domain, descriptor, &levels, source, hits, role,
                )
            }
        };
        plan.descriptors.push(descriptor_plan);
    }
    plan
}

enum Found<'a> {
    Nothing,
    Rule {
        rule: &'a Rule,
        levels: Vec<MatchedLevel<'a>>,
    },
    Override(LimitOverride),
}

fn find<'a>(domain: &'a DomainRules, descriptor: &Descriptor) -> Found<'a> {
    if let Some(limit) = descriptor.limit_override {
        return Found::Override(limit);
    }
    match domain.lookup(&descriptor.entries) {
        Some(matched) => Found::Rule {
            rule: matched.rule,
            levels: matched.levels,
        },
        None => Found::Nothing,
    }
}

fn replaced_names<'a>(found: &[Found<'a>]) -> Vec<&'a str> {
    found
        .iter()
        .filter_map(|found| match found {
            Found::Rule { rule, .. } => Some(rule.replaces.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect()
}

fn is_replaced(rule: &Rule, replaced: &[&str]) -> bool {
    rule.name
        .as_deref()
        .is_some_and(|name| replaced.contains(&name))
}

fn role_of(shadow_mode: bool, quota_mode: bool, settings: PlanSettings) -> Role {
    if shadow_mode {
        Role::Shadow
    } else if quota_mode || settings.global_quota_mode {
        Role::Quota
    } else {
        Role::Enforced
    }
}

fn override_source<'a>(
    domain: &DomainRules,
    descriptor: &Descriptor,
    limit: &LimitOverride,
) -> LimitSource<'a> {
    // Keys only: request values would make one metric label per value.
    let mut path = domain.name.clone();
    for entry in &descriptor.entries {
        path.push('.');
        path.push_str(&entry.key);
    }
    path.push_str("[override]");
    // validate() refuses an override without a unit before planning.
    let unit = limit.unit.unwrap_or(super::unit::Unit::Second);
    let quota = Quota::new(limit.requests_per_unit, unit)
        .with_algorithm(domain.default_algorithm)
        .with_multiplier(limit.unit_multiplier.unwrap_or(1).max(1));
    LimitSource::Override {
        path,
        quotas: vec![quota],
    }
}

#[allow(clippy::too_many_arguments)]
fn add_counters<'a>(
    plan: &mut Plan<'a>,
    index: usize,
    domain: &DomainRules,
    descriptor: &Descriptor,
    levels: &[MatchedLevel<'_>],
    source: LimitSource<'a>,
    hits: Hits,
    role: Role,
) -> DescriptorPlan<'a> {
    let first = plan.counters.len();
    for (limit_index, quota) in source.quotas().iter().enumerate() {
        plan.counters.push(Counter {
            descriptor: index,
            key: counter_key(
                &domain.name,
                source.path(),
                limit_index,
                quota,
                &descriptor.entries,
                levels,
            ),
            quota: quota.clone(),
            hits,
            role,
        });
    }
    DescriptorPlan::Limited {
        limit: source,
        counters: first..plan.counters.len(),
    }
}
