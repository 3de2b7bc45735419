//! Priority classes of one rule: several kinds of traffic share the rule's counters, each
//! allowed a share of the capacity, so the lower classes are refused first and the rest stays
//! for the higher ones (`low: 50%, normal: 80%, critical: 100%`).
//!
//! # The class entry and the tree
//!
//! A request names its class with one more descriptor entry, the rule's `priority.key`
//! (Envoy sets it from a header, a route or `header_value_match`). It must be the last entry of
//! the descriptor and it is not a level of the tree: `(pool=checkout, priority=low)` finds the
//! rule of `(pool=checkout)`, exactly as `(pool=checkout)` alone does, and every class charges
//! that rule's counters, whose identity leaves the class entry out (`rules::DomainRules::
//! lookup`, `plan`). A descriptor without the entry, or whose entry names no class, gets the
//! `default` class. The loader refuses a rule whose descriptor has children keyed like its
//! class entry, so the entry can never be mistaken for a level.
//!
//! The arithmetic (what a share allows of each algorithm) is in `algorithm::Share`.

use crate::arithmetic::algorithm::Share;

/// `priority:` of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Priority {
    /// The descriptor entry key that names the class (`priority`).
    pub key: String,
    /// In configuration order; never empty, at least one class has the whole capacity.
    pub classes: Vec<PriorityClass>,
    /// Index of the class of requests that name none (or one that does not exist).
    pub default: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClass {
    pub name: String,
    pub share: Share,
}

impl Priority {
    /// The class a request's class entry value selects (`None`: no entry).
    pub fn class_for(&self, value: Option<&str>) -> ClassChoice<'_> {
        let index = value
            .and_then(|value| self.classes.iter().position(|class| class.name == value))
            .unwrap_or(self.default);
        ClassChoice {
            priority: self,
            index,
        }
    }
}

/// The class one request descriptor was decided in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassChoice<'a> {
    pub priority: &'a Priority,
    pub index: usize,
}

impl<'a> ClassChoice<'a> {
    fn class(&self) -> Option<&'a PriorityClass> {
        self.priority.classes.get(self.index)
    }

    pub fn name(&self) -> &'a str {
        self.class().map_or("", |class| class.name.as_str())
    }

    pub fn share(&self) -> Share {
        self.class().map_or(Share::FULL, |class| class.share)
    }

    /// The classes that may use more of the capacity than this one, smallest share first:
    /// whom its reserve is kept for.
    pub fn reserved_for(&self) -> Vec<&'a str> {
        let share = self.share();
        let mut above: Vec<&PriorityClass> = self
            .priority
            .classes
            .iter()
            .filter(|class| class.share > share)
            .collect();
        above.sort_by_key(|class| class.share);
        above.into_iter().map(|class| class.name.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn percent(value: u32) -> Share {
        Share::from_millionths(value * 10_000).unwrap_or(Share::FULL)
    }

    fn priority() -> Priority {
        let class = |name: &str, share| PriorityClass {
            name: name.to_owned(),
            share: percent(share),
        };
        Priority {
            key: "priority".to_owned(),
            classes: vec![
                class("critical", 100),
                class("low", 50),
                class("normal", 80),
            ],
            default: 1,
        }
    }

    #[test]
    fn unknown_or_missing_classes_get_the_default() {
        let priority = priority();
        assert_eq!(priority.class_for(Some("normal")).name(), "normal");
        assert_eq!(priority.class_for(Some("Normal")).name(), "low");
        assert_eq!(priority.class_for(Some("")).name(), "low");
        assert_eq!(priority.class_for(None).name(), "low");
        assert_eq!(priority.class_for(Some("critical")).share(), Share::FULL);
    }

    #[test]
    fn the_reserve_is_kept_for_the_larger_shares_smallest_first() {
        let priority = priority();
        assert_eq!(
            priority.class_for(Some("low")).reserved_for(),
            ["normal", "critical"]
        );
        assert_eq!(
            priority.class_for(Some("normal")).reserved_for(),
            ["critical"]
        );
        assert!(priority
            .class_for(Some("critical"))
            .reserved_for()
            .is_empty());
    }
}
