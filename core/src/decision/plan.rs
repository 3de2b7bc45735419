//! From a request and the domain's rules to the counters the request touches: rule lookup,
//! `replaces`, `unlimited`, limit overrides, hits and roles. Pure; the store does the counting.

use smallvec::SmallVec;

use crate::arithmetic::algorithm::{CheckRule, Hits, Quota, Share};
use crate::arithmetic::lease::{
    adjusted_max_in_flight, is_usable_lease_id, reserve_at, Concurrency, LeaseAction, LeaseCall,
    LeaseOutcome,
};
use crate::arithmetic::priority::ClassChoice;
use crate::arithmetic::shed;
use crate::decision::key::{counter_key, lease_key};
use crate::ground::verdict::Role;
use crate::policy::adjustment::{Adjustment, AdjustmentsAt};
use crate::policy::request::Entry;
use crate::policy::request::{Descriptor, LimitOverride, Request};
use crate::policy::rules::{DomainRules, MatchedLevel, MatchedLevels, Rule};

/// One counter a request touches: which descriptor asks, its identity, its limit, what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    pub descriptor: usize,
    pub key: Vec<u8>,
    pub quota: Quota,
    pub hits: Hits,
    pub role: Role,
    /// The share of the capacity the descriptor's priority class may use (`Share::FULL`
    /// without classes); the store evaluates with `quota.reserve(share)`.
    pub share: Share,
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
    /// A concurrency rule decides it with the lease call `lease` (an index into
    /// `Plan::leases`); `None` when the descriptor carries no usable lease id (no lease entry,
    /// or one that `lease::is_usable_lease_id` refuses): refused, as nothing could release
    /// it.
    Concurrency {
        rule: &'a Rule,
        lease: Option<usize>,
        class: Option<ClassChoice<'a>>,
    },
    /// Counters `counters` (a range into `Plan::counters`) decide it.
    Limited {
        limit: LimitSource<'a>,
        counters: std::ops::Range<usize>,
        /// The priority class the descriptor was decided in, when its rule has classes.
        class: Option<ClassChoice<'a>>,
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
    /// The rule, with a limit changed at run time (`core::policy::adjustment`): `quotas` are in force.
    Adjusted {
        rule: &'a Rule,
        quotas: Vec<Quota>,
        adjustment: &'a Adjustment,
    },
}

impl LimitSource<'_> {
    pub fn path(&self) -> &str {
        match self {
            LimitSource::Rule(rule) | LimitSource::Adjusted { rule, .. } => &rule.path,
            LimitSource::Override { path, .. } => path,
        }
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            LimitSource::Rule(rule) | LimitSource::Adjusted { rule, .. } => rule.name.as_deref(),
            LimitSource::Override { .. } => None,
        }
    }

    pub fn quotas(&self) -> &[Quota] {
        match self {
            LimitSource::Rule(rule) => &rule.limits,
            LimitSource::Override { quotas, .. } | LimitSource::Adjusted { quotas, .. } => quotas,
        }
    }

    pub fn shadow_mode(&self) -> bool {
        matches!(self, LimitSource::Rule(rule) | LimitSource::Adjusted { rule, .. } if rule.shadow_mode)
    }

    /// The configured rule behind these limits (none for Envoy's per-descriptor `limit`).
    pub fn rule(&self) -> Option<&Rule> {
        match self {
            LimitSource::Rule(rule) | LimitSource::Adjusted { rule, .. } => Some(rule),
            LimitSource::Override { .. } => None,
        }
    }
}

/// Everything the store and the response need for one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan<'a> {
    pub descriptors: Vec<DescriptorPlan<'a>>,
    pub counters: Vec<Counter>,
    /// The lease calls of the descriptors that concurrency rules decide.
    pub leases: Vec<LeaseCall>,
}

impl Plan<'_> {
    /// The priority share a call as a whole is treated with when floodgate sheds its own load
    /// (`core::arithmetic::shed`): its most important descriptor's, so a call carrying one critical
    /// descriptor is critical. `Share::FULL` when no descriptor was decided in a class, so
    /// deployments without classes shed every call alike.
    pub fn call_share(&self) -> Share {
        self.descriptors
            .iter()
            .filter_map(|descriptor| match descriptor {
                DescriptorPlan::Limited { class, .. }
                | DescriptorPlan::Concurrency { class, .. } => class.map(|class| class.share()),
                _ => None,
            })
            .max()
            .unwrap_or(Share::FULL)
    }
}

/// Whether `plan`'s concurrency rules refuse the request, given one outcome per lease call:
/// a refused acquire, or a descriptor with no lease id to count.
pub fn leases_over_limit(plan: &Plan<'_>, outcomes: &[LeaseOutcome]) -> bool {
    plan.descriptors.iter().any(|descriptor| match descriptor {
        DescriptorPlan::Concurrency { lease, .. } => !lease
            .and_then(|at| outcomes.get(at))
            .is_some_and(|o| o.admitted),
        _ => false,
    })
}

/// Settings that change how requests are planned (`QUOTA_MODE`, the check-only rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanSettings {
    pub global_quota_mode: bool,
    /// Which check-only descriptor (`hits_addend: 0`) a counter admits.
    pub check_only: CheckRule,
}

/// Plans `request` against `domain` (`None`: the domain is unknown), with the configured limits.
pub fn plan<'a>(
    request: &Request,
    domain: Option<&'a DomainRules>,
    settings: PlanSettings,
) -> Plan<'a> {
    plan_adjusted(request, domain, settings, None)
}

/// `plan`, where a rule with an adjustment in `adjustments` counts with the adjusted limits.
pub fn plan_adjusted<'a>(
    request: &Request,
    domain: Option<&'a DomainRules>,
    settings: PlanSettings,
    adjustments: Option<AdjustmentsAt<'a>>,
) -> Plan<'a> {
    let Some(domain) = domain else {
        return Plan {
            descriptors: vec![DescriptorPlan::NoRule; request.descriptors.len()],
            counters: Vec::new(),
            leases: Vec::new(),
        };
    };
    // On the stack for the usual few descriptors: a decision allocates neither list.
    let found: SmallVec<[Found<'a>; 4]> = request
        .descriptors
        .iter()
        .map(|descriptor| find(domain, descriptor))
        .collect();
    let matched: SmallVec<[Option<&'a Rule>; 4]> = found.iter().map(Found::rule).collect();
    let mut planner = Planner {
        request,
        domain,
        settings,
        adjustments,
        plan: Plan {
            descriptors: Vec::with_capacity(found.len()),
            counters: Vec::with_capacity(found.len()),
            leases: Vec::new(),
        },
    };
    for (index, (descriptor, found)) in request.descriptors.iter().zip(found).enumerate() {
        let descriptor_plan = match found {
            Found::Nothing => DescriptorPlan::NoRule,
            Found::Rule(found) if found.rule.replaced_by(matched.iter().copied()).is_some() => {
                DescriptorPlan::Replaced { rule: found.rule }
            }
            Found::Rule(found) if found.rule.unlimited => {
                DescriptorPlan::Unlimited { rule: found.rule }
            }
            Found::Rule(found) if found.rule.concurrency.is_some() => {
                planner.concurrency(index, descriptor, &found)
            }
            Found::Rule(found) => planner.limited(index, descriptor, &found),
            Found::Override(limit) => planner.overridden(index, descriptor, &limit),
        };
        planner.plan.descriptors.push(descriptor_plan);
    }
    planner.plan
}

/// What a descriptor found in the domain: a rule, an override of its own, or nothing.
enum Found<'a> {
    Nothing,
    Rule(FoundRule<'a>),
    Override(LimitOverride),
}

struct FoundRule<'a> {
    rule: &'a Rule,
    levels: MatchedLevels<'a>,
    /// Index of the priority class entry among the descriptor's entries.
    class_entry: Option<usize>,
    /// Indexes of a concurrency rule's lease id entry and release marker.
    lease_entry: Option<usize>,
    release_entry: Option<usize>,
}

impl<'a> Found<'a> {
    fn rule(&self) -> Option<&'a Rule> {
        match self {
            Found::Rule(found) => Some(found.rule),
            _ => None,
        }
    }
}

impl<'a> FoundRule<'a> {
    /// The value of the descriptor's entry at `at`, if the rule found one there.
    fn value_at(descriptor: &Descriptor, at: Option<usize>) -> Option<&str> {
        at.and_then(|at| descriptor.entries.get(at))
            .map(|entry| entry.value.as_str())
    }

    /// The entries that make the counters' identity: those the rule's levels matched (a
    /// priority class entry, a lease id and a release marker left out).
    fn counted<'d>(&self, descriptor: &'d Descriptor) -> &'d [Entry] {
        descriptor
            .entries
            .get(..self.levels.len())
            .unwrap_or(&descriptor.entries)
    }

    /// The priority class the descriptor is decided in, when the rule has classes.
    fn class(&self, descriptor: &Descriptor) -> Option<ClassChoice<'a>> {
        let class_value = Self::value_at(descriptor, self.class_entry);
        self.rule
            .priority
            .as_ref()
            .map(|p| p.class_for(class_value))
    }
}

/// One request being planned against one domain: the descriptors' plans are added in order.
struct Planner<'a, 'r> {
    request: &'r Request,
    domain: &'a DomainRules,
    settings: PlanSettings,
    adjustments: Option<AdjustmentsAt<'a>>,
    plan: Plan<'a>,
}

impl<'a> Planner<'a, '_> {
    /// A concurrency rule's descriptor: one lease call when the descriptor names a usable
    /// lease id (a descriptor without one is refused by [`leases_over_limit`]).
    fn concurrency(
        &mut self,
        index: usize,
        descriptor: &Descriptor,
        found: &FoundRule<'a>,
    ) -> DescriptorPlan<'a> {
        let rule = found.rule;
        let class = found.class(descriptor);
        let lease_id =
            FoundRule::value_at(descriptor, found.lease_entry).filter(|id| is_usable_lease_id(id));
        let lease = rule
            .concurrency
            .as_deref()
            .zip(lease_id)
            .map(|(concurrency, id)| {
                let call = self.lease_call(index, descriptor, found, concurrency, id, class);
                self.plan.leases.push(call);
                self.plan.leases.len() - 1
            });
        DescriptorPlan::Concurrency { rule, lease, class }
    }

    fn lease_call(
        &self,
        index: usize,
        descriptor: &Descriptor,
        found: &FoundRule<'a>,
        concurrency: &Concurrency,
        lease_id: &str,
        class: Option<ClassChoice>,
    ) -> LeaseCall {
        let share = class.map_or(Share::FULL, |class| class.share());
        let adjusted = self
            .adjustments
            .and_then(|at| at.for_rule(&self.domain.name, found.rule));
        let max_in_flight = adjusted.map_or(concurrency.max_in_flight, |adjustment| {
            adjusted_max_in_flight(adjustment.requests_per_unit)
        });
        LeaseCall {
            descriptor: index,
            key: lease_key(
                &self.domain.name,
                &found.rule.path,
                found.counted(descriptor),
                &found.levels,
            ),
            lease_id: lease_id.to_owned(),
            action: if found.release_entry.is_some() {
                LeaseAction::Release
            } else {
                LeaseAction::Acquire
            },
            max_in_flight,
            reserve: reserve_at(max_in_flight, share),
            lease_ttl: concurrency.lease_ttl,
            shed_above: concurrency.shed_above.map_or(0, |soft| {
                shed::threshold_for(
                    scaled_threshold(soft, concurrency.max_in_flight, max_in_flight),
                    share,
                )
            }),
            // The shell draws; 0 survives, so a call it did not draw for is never shed.
            draw: 0,
        }
    }

    /// A rate-limited rule's descriptor: its counters, with the limits adjusted if an
    /// adjustment is in force.
    fn limited(
        &mut self,
        index: usize,
        descriptor: &Descriptor,
        found: &FoundRule<'a>,
    ) -> DescriptorPlan<'a> {
        let rule = found.rule;
        let role = role_of(rule.shadow_mode, rule.quota_mode, self.settings);
        let adjustment = self
            .adjustments
            .and_then(|at| at.for_rule(&self.domain.name, rule));
        let source = match adjustment {
            Some(adjustment) => LimitSource::Adjusted {
                rule,
                quotas: adjustment.apply(&rule.limits),
                adjustment,
            },
            None => LimitSource::Rule(rule),
        };
        let hits = self.request.hits_for(descriptor, self.settings.check_only);
        add_counters(
            &mut self.plan,
            index,
            self.domain,
            (found.counted(descriptor), &found.levels),
            source,
            (hits, role),
            // The class entry picks the class; it is no part of the counters' identity.
            found.class(descriptor),
        )
    }

    /// A descriptor with Envoy's `limit` override: counted as the override says, every entry
    /// part of the identity.
    fn overridden(
        &mut self,
        index: usize,
        descriptor: &Descriptor,
        limit: &LimitOverride,
    ) -> DescriptorPlan<'a> {
        let source = override_source(self.domain, descriptor, limit);
        let hits = self.request.hits_for(descriptor, self.settings.check_only);
        let role = role_of(false, false, self.settings);
        let levels = MatchedLevels::from_elem(MatchedLevel::Exact, descriptor.entries.len());
        add_counters(
            &mut self.plan,
            index,
            self.domain,
            (&descriptor.entries, &levels),
            source,
            (hits, role),
            None,
        )
    }
}

fn find<'a>(domain: &'a DomainRules, descriptor: &Descriptor) -> Found<'a> {
    if let Some(limit) = descriptor.limit_override {
        return Found::Override(limit);
    }
    match domain.lookup(&descriptor.entries) {
        Some(matched) => Found::Rule(FoundRule {
            rule: matched.rule,
            levels: matched.levels,
            class_entry: matched.class_entry,
            lease_entry: matched.lease_entry,
            release_entry: matched.release_entry,
        }),
        None => Found::Nothing,
    }
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
    let unit = limit.unit.unwrap_or(crate::ground::unit::Unit::Second);
    let mut quota = Quota::new(limit.requests_per_unit, unit)
        .with_algorithm(domain.default_algorithm)
        .with_multiplier(limit.unit_multiplier.unwrap_or(1).max(1))
        .with_calendar_months(domain.calendar_months);
    // Envoy Gateway's `limit.fromMetadata` budgets come this way; they owe as the domain says.
    if domain.default_algorithm.counts_in_windows() {
        quota = quota.with_overflow(domain.overflow);
    }
    LimitSource::Override {
        path,
        quotas: vec![quota],
    }
}

/// Adds the counters of one descriptor: `entries` make their identity (a priority class
/// entry left out), `levels` say how each matched.
fn add_counters<'a>(
    plan: &mut Plan<'a>,
    index: usize,
    domain: &DomainRules,
    (entries, levels): (&[Entry], &[MatchedLevel<'_>]),
    source: LimitSource<'a>,
    (hits, role): (Hits, Role),
    class: Option<ClassChoice<'a>>,
) -> DescriptorPlan<'a> {
    let share = class.map_or(Share::FULL, |class| class.share());
    let first = plan.counters.len();
    for (limit_index, quota) in source.quotas().iter().enumerate() {
        plan.counters.push(Counter {
            descriptor: index,
            key: counter_key(
                &domain.name,
                source.path(),
                limit_index,
                quota,
                entries,
                levels,
            ),
            quota: quota.clone(),
            hits,
            role,
            share,
        });
    }
    DescriptorPlan::Limited {
        limit: source,
        counters: first..plan.counters.len(),
        class,
    }
}

/// A shedding threshold set for `configured` in flight, moved along with an adjusted limit
/// (`adjusted`): the same share of it, at least 1.
fn scaled_threshold(soft: u32, configured: u32, adjusted: u32) -> u32 {
    if configured == adjusted || configured == 0 {
        return soft;
    }
    let scaled = u64::from(soft) * u64::from(adjusted) / u64::from(configured);
    u32::try_from(scaled).unwrap_or(soft).max(1)
}
