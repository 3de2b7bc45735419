//! TEMPORARY: lets the lead build before the rule tree lands. Removed when lookup exists.
use super::rules::{DomainRules, Entry, Matched, RuleSet};
impl DomainRules {
    pub fn lookup(&self, _entries: &[Entry]) -> Option<Matched<'_>> { None }
}
impl RuleSet {
    pub fn domain(&self, name: &str) -> Option<&DomainRules> { self.domains.get(name) }
}
impl RuleSet {
    pub fn domains(&self) -> impl Iterator<Item = &DomainRules> { self.domains.values() }
    pub fn rule_count(&self) -> usize { 0 }
}
impl DomainRules {
    pub fn rules(&self) -> impl Iterator<Item = &super::rules::Rule> { std::iter::empty() }
}
