//! How many label values a family of metric series may carry, and which: Prometheus keeps
//! every series it was ever given, so label values that keep coming (rule paths across
//! reloads, request values) would grow memory and the scrape without end. Every per-rule and
//! per-value metric admits its labels through a [`LabelBudget`].
//!
//! A label is a `(scope, value)` pair (the domain and the rule label). Two kinds share one
//! capacity:
//! * **configured**: the label of something in the configuration in force, a rule; the
//!   first `capacity` of them (by their position in the configuration) are admitted, the
//!   rest never are;
//! * **spare**: a label made from request values (`detailed_metric`, Envoy's limit
//!   overrides), admitted first come while the configured ones leave room, optionally owned
//!   by the rule it counts for.
//!
//! A label that is not admitted is counted by the caller under its overflow label (`other`).
//! Admitted labels follow the configuration in force, not the history: at every swap
//! [`LabelBudget::follow`] releases the labels of rules that are gone (and the spare labels
//! they owned) and hands their values back, so the caller can remove the series from the
//! registry; the room they leave goes to new rules and values. Labels are admitted when first
//! used, so a rule that is never hit costs nothing here.
//!
//! Reads (a label already admitted) take a read lock and allocate nothing.

use std::collections::{HashMap, HashSet};

use parking_lot::RwLock;

use crate::core::policy::rules::{Rule, RuleSet};

/// The admitted labels of one metric family, each with its value `V` (the resolved series).
#[derive(Debug)]
pub struct LabelBudget<V> {
    capacity: usize,
    state: RwLock<State<V>>,
}

#[derive(Debug)]
struct State<V> {
    /// Labels held for the configuration in force, whether admitted yet or not.
    configured: usize,
    /// Spare labels admitted.
    spare: usize,
    /// By scope, then label value.
    held: HashMap<Box<str>, HashMap<Box<str>, Held<V>>>,
}

#[derive(Debug)]
struct Held<V> {
    value: V,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Configured,
    /// Owned by the rule of that label in the same scope, if any.
    Spare {
        owner: Option<Box<str>>,
    },
}

/// What [`LabelBudget::follow`] asks about one held label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    /// A configured label: is its rule still in force (at a position below the capacity)?
    Configured,
    /// A spare label owned by the rule `owner` (`None`: by no rule): is its owner in force?
    Spare { owner: Option<&'a str> },
}

impl<V: Clone> LabelBudget<V> {
    /// A budget of `capacity` labels, all spare until [`LabelBudget::follow`] says how many
    /// the configuration holds.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            state: RwLock::new(State {
                configured: 0,
                spare: 0,
                held: HashMap::new(),
            }),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Labels admitted now (configured and spare).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let state = self.state.read();
        state.held.values().map(HashMap::len).sum()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of an admitted label.
    pub fn get(&self, scope: &str, label: &str) -> Option<V> {
        let state = self.state.read();
        state.lookup(scope, label).map(|held| held.value.clone())
    }

    /// Whether the configured label at `position` (0 for the first rule) has a place.
    pub fn admits_position(&self, position: usize) -> bool {
        position < self.capacity
    }

    /// The configured label `(scope, label)` of the rule at `position`: admitted (made by
    /// `make` on first use) when the position is below the capacity, `None` otherwise.
    pub fn configured<E>(
        &self,
        scope: &str,
        label: &str,
        position: usize,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Option<V>, E> {
        if let Some(value) = self.get(scope, label) {
            return Ok(Some(value));
        }
        if !self.admits_position(position) {
            return Ok(None);
        }
        self.admit(scope, label, Kind::Configured, make)
    }

    /// The spare label `(scope, label)`, owned by the rule labelled `owner` in the same scope
    /// (`None`: no rule; it then stays until the room is needed): admitted (made by `make`)
    /// while the configured labels leave room, `None` once the budget is spent.
    pub fn spare<E>(
        &self,
        scope: &str,
        label: &str,
        owner: Option<&str>,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Option<V>, E> {
        {
            let state = self.state.read();
            if let Some(held) = state.lookup(scope, label) {
                return Ok(Some(held.value.clone()));
            }
            if !state.spare_room(self.capacity) {
                return Ok(None);
            }
        }
        let owner = owner.map(Box::from);
        self.admit(scope, label, Kind::Spare { owner }, make)
    }

    fn admit<E>(
        &self,
        scope: &str,
        label: &str,
        kind: Kind,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Option<V>, E> {
        let mut state = self.state.write();
        // Another thread may have admitted it, or taken the last spare place, meanwhile.
        if let Some(held) = state.lookup(scope, label) {
            return Ok(Some(held.value.clone()));
        }
        let spare = kind != Kind::Configured;
        if spare && !state.spare_room(self.capacity) {
            return Ok(None);
        }
        let value = make()?;
        state.held.entry(Box::from(scope)).or_default().insert(
            Box::from(label),
            Held {
                value: value.clone(),
                kind,
            },
        );
        if spare {
            state.spare += 1;
        }
        Ok(Some(value))
    }

    /// Follows a new configuration: it holds `configured` labels (its rule count; at most the
    /// capacity are kept), and `in_force(scope, label, holder)` tells whether a held label
    /// still belongs to it. Releases the labels that do not, then spare labels beyond the
    /// room that is left, and returns the values of all released labels.
    pub fn follow(
        &self,
        configured: usize,
        in_force: impl Fn(&str, &str, Holder<'_>, &V) -> bool,
    ) -> Vec<V> {
        let mut state = self.state.write();
        state.configured = configured.min(self.capacity);
        let mut released = Vec::new();
        let mut spare: usize = 0;
        for (scope, labels) in &mut state.held {
            labels.retain(|label, held| {
                let holder = match &held.kind {
                    Kind::Configured => Holder::Configured,
                    Kind::Spare { owner } => Holder::Spare {
                        owner: owner.as_deref(),
                    },
                };
                let keep = in_force(scope, label, holder, &held.value);
                if !keep {
                    released.push(held.value.clone());
                } else if holder != Holder::Configured {
                    spare += 1;
                }
                keep
            });
        }
        // A configuration with more rules leaves less room for request values.
        let room = self.capacity.saturating_sub(state.configured);
        let mut excess = spare.saturating_sub(room);
        for labels in state.held.values_mut() {
            if excess == 0 {
                break;
            }
            labels.retain(|_, held| {
                if excess == 0 || held.kind == Kind::Configured {
                    return true;
                }
                excess -= 1;
                spare -= 1;
                released.push(held.value.clone());
                false
            });
        }
        state.held.retain(|_, labels| !labels.is_empty());
        state.spare = spare;
        released
    }

    /// Follows `rules`, the rule set now in force (scopes are its domains, configured labels
    /// its rule paths): a configured label stays while its rule is in force below the capacity
    /// and `still_fits(rule, value)`; a spare label while its owner is, or, owning none, while
    /// its domain is. Returns the values released.
    pub fn follow_rules(&self, rules: &RuleSet, still_fits: impl Fn(&Rule, &V) -> bool) -> Vec<V> {
        let looked_up = self.look_up_rules(rules);
        self.release_gone(rules, &looked_up, still_fits)
    }

    /// The rules of `rules` that the labels held now depend on, looked up once (not per label
    /// in the whole rule set).
    fn look_up_rules<'r>(&self, rules: &'r RuleSet) -> HeldLabelRules<'r> {
        let asked: HashSet<(Box<str>, Box<str>)> = self.dependencies().into_iter().collect();
        let mut in_force = HashMap::new();
        for domain in rules.domains() {
            if !asked.iter().any(|(scope, _)| **scope == *domain.name) {
                continue;
            }
            for rule in domain.rules() {
                let key = (
                    Box::from(domain.name.as_str()),
                    Box::from(rule.path.as_str()),
                );
                if asked.contains(&key) {
                    in_force.insert(key, rule);
                }
            }
        }
        HeldLabelRules { asked, in_force }
    }

    /// Releases the labels whose rule `looked_up` found gone. A label admitted after the
    /// lookup, by a decision already on `rules` (the rule set is swapped in before it is
    /// followed), was not asked about and is kept: releasing it would take away the value that
    /// decision's rule set keeps using (a series gone from the registry, its rule missing from
    /// the scrape until the next reload).
    fn release_gone(
        &self,
        rules: &RuleSet,
        looked_up: &HeldLabelRules<'_>,
        still_fits: impl Fn(&Rule, &V) -> bool,
    ) -> Vec<V> {
        self.follow(
            rules.rule_count(),
            |scope, label, holder, value| match holder {
                Holder::Configured => match looked_up.rule(scope, label) {
                    Known::InForce(rule) => {
                        self.admits_position(rule.index) && still_fits(rule, value)
                    }
                    Known::Gone => false,
                    Known::NotAsked => true,
                },
                Holder::Spare { owner: Some(owner) } => {
                    !matches!(looked_up.rule(scope, owner), Known::Gone)
                }
                Holder::Spare { owner: None } => rules.domain(scope).is_some(),
            },
        )
    }

    /// Every `(scope, name)` the held labels depend on: the label of each configured one and
    /// the owner of each owned spare one. What `follow`'s `in_force` will be asked about.
    fn dependencies(&self) -> Vec<(Box<str>, Box<str>)> {
        let state = self.state.read();
        let mut names = Vec::new();
        for (scope, labels) in &state.held {
            for (label, held) in labels {
                let name = match &held.kind {
                    Kind::Configured => label,
                    Kind::Spare { owner: Some(owner) } => owner,
                    Kind::Spare { owner: None } => continue,
                };
                names.push((scope.clone(), name.clone()));
            }
        }
        names
    }
}

impl<V> State<V> {
    fn lookup(&self, scope: &str, label: &str) -> Option<&Held<V>> {
        self.held.get(scope)?.get(label)
    }

    fn spare_room(&self, capacity: usize) -> bool {
        self.configured + self.spare < capacity
    }
}

/// What [`LabelBudget::follow_rules`] found of the rules its held labels depend on.
struct HeldLabelRules<'r> {
    /// Every (domain, rule label) asked about: what the held labels depended on when the
    /// lookup began.
    asked: HashSet<(Box<str>, Box<str>)>,
    /// Those of them still in the rule set, with their rule.
    in_force: HashMap<(Box<str>, Box<str>), &'r Rule>,
}

/// One (domain, rule label) as the lookup saw it.
enum Known<'r> {
    InForce(&'r Rule),
    Gone,
    /// Admitted after the lookup.
    NotAsked,
}

impl<'r> HeldLabelRules<'r> {
    fn rule(&self, domain: &str, label: &str) -> Known<'r> {
        let key = (Box::from(domain), Box::from(label));
        match self.in_force.get(&key) {
            Some(rule) => Known::InForce(rule),
            None if self.asked.contains(&key) => Known::Gone,
            None => Known::NotAsked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::test_rules::rules_with_keys;

    fn configured(budget: &LabelBudget<u32>, label: &str, position: usize) -> Option<u32> {
        let made = u32::try_from(position).unwrap_or(u32::MAX);
        budget
            .configured("d", label, position, || Ok::<_, ()>(made))
            .unwrap_or(None)
    }

    fn spare(budget: &LabelBudget<u32>, label: &str, owner: Option<&str>) -> Option<u32> {
        budget
            .spare("d", label, owner, || Ok::<_, ()>(100))
            .unwrap_or(None)
    }

    #[test]
    fn configured_labels_are_admitted_below_the_capacity_only() {
        let budget = LabelBudget::new(2);
        budget.follow(3, |_, _, _, _| true);
        assert_eq!(configured(&budget, "d.a", 0), Some(0));
        assert_eq!(configured(&budget, "d.b", 1), Some(1));
        assert_eq!(configured(&budget, "d.c", 2), None);
        // Known labels keep their value.
        assert_eq!(configured(&budget, "d.a", 0), Some(0));
        assert_eq!(budget.len(), 2);
    }

    #[test]
    fn spare_labels_take_the_room_the_configuration_leaves() {
        let budget = LabelBudget::new(3);
        budget.follow(1, |_, _, _, _| true);
        assert_eq!(spare(&budget, "d.x_1", Some("d.x")), Some(100));
        assert_eq!(spare(&budget, "d.x_2", Some("d.x")), Some(100));
        assert_eq!(spare(&budget, "d.x_3", Some("d.x")), None);
        // The configured rule's place was kept for it, hit or not.
        assert_eq!(configured(&budget, "d.x", 0), Some(0));
        assert_eq!(budget.len(), 3);
    }

    #[test]
    fn following_a_configuration_releases_what_is_gone_and_makes_room() {
        let budget = LabelBudget::new(2);
        budget.follow(2, |_, _, _, _| true);
        assert_eq!(configured(&budget, "d.old", 0), Some(0));
        assert_eq!(configured(&budget, "d.kept", 1), Some(1));
        assert_eq!(configured(&budget, "d.new", 2), None);
        let mut dependencies = budget.dependencies();
        dependencies.sort();
        assert_eq!(
            dependencies,
            [("d".into(), "d.kept".into()), ("d".into(), "d.old".into())]
        );
        // `d.old` left the configuration; `d.new` is now second.
        let released = budget.follow(2, |_, label, _, _| label == "d.kept");
        assert_eq!(released, [0]);
        assert_eq!(configured(&budget, "d.new", 1), Some(1));
        assert_eq!(
            configured(&budget, "d.kept", 0),
            Some(1),
            "kept with its value"
        );
    }

    #[test]
    fn spare_labels_go_with_their_owner_or_when_room_is_needed() {
        let budget = LabelBudget::new(3);
        budget.follow(0, |_, _, _, _| true);
        assert_eq!(spare(&budget, "d.x_1", Some("d.x")), Some(100));
        assert_eq!(spare(&budget, "d.y_1", Some("d.y")), Some(100));
        assert_eq!(spare(&budget, "d.override", None), Some(100));
        let released = budget.follow(0, |_, _, holder, _| match holder {
            Holder::Spare { owner } => owner != Some("d.x"),
            Holder::Configured => true,
        });
        assert_eq!(released.len(), 1);
        assert_eq!(budget.len(), 2);
        // Three rules now: no room is left for request values.
        let released = budget.follow(3, |_, _, _, _| true);
        assert_eq!(released.len(), 2);
        assert!(budget.is_empty());
        assert_eq!(spare(&budget, "d.y_2", Some("d.y")), None);
    }

    #[test]
    fn following_rules_releases_gone_rules_and_their_values_and_keeps_the_rest() {
        let budget = LabelBudget::new(10);
        let first = rules_with_keys(&["a", "b"]);
        budget.follow_rules(&first, |_, _| true);
        assert_eq!(configured(&budget, "d.a", 0), Some(0));
        assert_eq!(configured(&budget, "d.b", 1), Some(1));
        assert_eq!(spare(&budget, "d.a_x", Some("d.a")), Some(100));
        assert_eq!(spare(&budget, "d.override", None), Some(100));
        let second = rules_with_keys(&["b", "c"]);
        let mut released = budget.follow_rules(&second, |_, _| true);
        released.sort_unstable();
        assert_eq!(released, [0, 100], "d.a and the value it owned");
        assert_eq!(budget.get("d", "d.b"), Some(1));
        assert_eq!(budget.get("d", "d.override"), Some(100));
        let other_domain = crate::core::policy::config::load_valid(
            "e.yaml",
            "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
        );
        budget.follow_rules(&other_domain, |_, _| true);
        assert!(
            budget.is_empty(),
            "domain d is gone, and with it every label of it"
        );
    }

    #[test]
    fn a_label_admitted_while_the_rules_are_looked_up_is_kept() {
        let budget = LabelBudget::new(10);
        let first = rules_with_keys(&["a", "b"]);
        budget.follow_rules(&first, |_, _| true);
        assert_eq!(configured(&budget, "d.a", 0), Some(0));
        // The new rules are in force and being followed: a decision on them admits `d.c`
        // between the lookup and the release.
        let second = rules_with_keys(&["b", "c"]);
        let looked_up = budget.look_up_rules(&second);
        assert_eq!(configured(&budget, "d.c", 1), Some(1));
        let released = budget.release_gone(&second, &looked_up, |_, _| true);
        assert_eq!(released, [0], "only d.a");
        assert_eq!(
            budget.get("d", "d.c"),
            Some(1),
            "kept: its rule set uses it"
        );
    }
}
