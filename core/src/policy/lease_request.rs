//! Lease calls from applications (the HTTP pair `/lease/acquire` and `/lease/release`): the
//! caller names a concurrency rule by its descriptor entries, as Envoy would send them, and a
//! lease id; this builds the request Envoy's two calls would be, so that both tiers count in
//! the same counter and are decided by the same path.

use crate::arithmetic::lease::{is_usable_lease_id, LeaseAction, MAX_LEASE_ID_LEN};
use crate::policy::request::Entry;
use crate::policy::request::{Descriptor, Request};
use crate::policy::rules::RuleSet;

/// What an application asks: the rule's entries (a priority class entry may end them) and the
/// lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    pub domain: String,
    pub entries: Vec<Entry>,
    pub lease_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseRequestError {
    #[error(
        "the lease id is empty, longer than {MAX_LEASE_ID_LEN} bytes or holds a NUL byte: give \
         each request its own short id (a UUID), and the same one to its release"
    )]
    BadLeaseId,
    #[error("no domain {0:?} in the rules: give a domain that `floodgate validate` lists")]
    UnknownDomain(String),
    #[error(
        "no concurrency rule of domain {domain:?} matches the entries [{entries}]: give the \
         entries of a descriptor with `concurrency:` (without its lease and release entries, \
         which this call adds)"
    )]
    NoConcurrencyRule { domain: String, entries: String },
}

/// The request `lease` makes for `action`: the rule's entries, the lease entry, for a release
/// the release marker, then the class entry if the caller gave one.
pub fn as_request(
    rules: &RuleSet,
    lease: &LeaseRequest,
    action: LeaseAction,
) -> Result<Request, LeaseRequestError> {
    if !is_usable_lease_id(&lease.lease_id) {
        return Err(LeaseRequestError::BadLeaseId);
    }
    let domain = rules
        .domain(&lease.domain)
        .ok_or_else(|| LeaseRequestError::UnknownDomain(lease.domain.clone()))?;
    let no_rule = || LeaseRequestError::NoConcurrencyRule {
        domain: lease.domain.clone(),
        entries: lease
            .entries
            .iter()
            .map(|entry| format!("{}={}", entry.key, entry.value))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let matched = domain.lookup(&lease.entries).ok_or_else(no_rule)?;
    let concurrency = match matched.rule.concurrency.as_deref() {
        Some(concurrency) if matched.lease_entry.is_none() && matched.release_entry.is_none() => {
            concurrency
        }
        _ => return Err(no_rule()),
    };
    let mut entries: Vec<Entry> = lease
        .entries
        .get(..matched.levels.len())
        .unwrap_or(&lease.entries)
        .to_vec();
    entries.push(Entry {
        key: concurrency.lease_key.clone(),
        value: lease.lease_id.clone(),
    });
    if action == LeaseAction::Release {
        entries.push(Entry {
            key: concurrency.release.key.clone(),
            value: concurrency.release.value.clone(),
        });
    }
    if let Some(class) = matched.class_entry.and_then(|at| lease.entries.get(at)) {
        entries.push(class.clone());
    }
    Ok(Request {
        domain: lease.domain.clone(),
        descriptors: vec![Descriptor::new(entries)],
        hits_addend: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::load_valid;

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    fn rules() -> RuleSet {
        load_valid(
            "d.yaml",
            "domain: d\n\
             descriptors:\n\
             \x20 - key: backend\n\
             \x20   concurrency: {max_in_flight: 2, lease: request_id, ttl: 10s,\n\
             \x20                 release: {key: phase, value: done}}\n\
             \x20   priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}\n\
             \x20 - key: plain\n\
             \x20   rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
    }

    fn lease(entries: Vec<Entry>) -> LeaseRequest {
        LeaseRequest {
            domain: "d".to_owned(),
            entries,
            lease_id: "job-1".to_owned(),
        }
    }

    #[test]
    fn a_release_adds_the_lease_and_the_marker_before_the_class() {
        let asked = lease(vec![entry("backend", "a"), entry("priority", "critical")]);
        let request = as_request(&rules(), &asked, LeaseAction::Release);
        let entries = request.map(|request| request.descriptors[0].entries.clone());
        assert_eq!(
            entries,
            Ok(vec![
                entry("backend", "a"),
                entry("request_id", "job-1"),
                entry("phase", "done"),
                entry("priority", "critical"),
            ])
        );
        let acquire = as_request(
            &rules(),
            &lease(vec![entry("backend", "a")]),
            LeaseAction::Acquire,
        );
        assert_eq!(
            acquire.map(|request| request.descriptors[0].entries.len()),
            Ok(2)
        );
    }

    #[test]
    fn only_a_concurrency_rule_takes_leases() {
        let rules = rules();
        for entries in [vec![entry("plain", "x")], vec![entry("other", "x")], vec![]] {
            let refused = as_request(&rules, &lease(entries), LeaseAction::Acquire);
            assert!(
                matches!(refused, Err(LeaseRequestError::NoConcurrencyRule { .. })),
                "{refused:?}"
            );
        }
        let mut unknown = lease(vec![entry("backend", "a")]);
        unknown.domain = "nope".to_owned();
        assert!(matches!(
            as_request(&rules, &unknown, LeaseAction::Acquire),
            Err(LeaseRequestError::UnknownDomain(_))
        ));
        for bad in [
            String::new(),
            "a\0b".to_owned(),
            "x".repeat(MAX_LEASE_ID_LEN + 1),
        ] {
            unknown.lease_id = bad;
            assert_eq!(
                as_request(&rules, &unknown, LeaseAction::Acquire),
                Err(LeaseRequestError::BadLeaseId)
            );
        }
    }
}
