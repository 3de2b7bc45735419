//! A request's counters split by Redis Cluster hash slot, and the answers of the slot groups
//! put back together.
//!
//! Cluster runs a script only on keys of one slot, so with `--redis-hash-tag descriptor` a
//! request whose descriptors land in several slots becomes one script call per slot. Each call
//! decides its group exactly as a single-node call decides a whole request (verdict, then
//! charge all of the group's counters or none); the calls run concurrently. The request is over
//! its limits when any group is — the same verdict one call would reach, because an enforced
//! descriptor rejects on its own and every quota-mode counter is in the domain's slot, so one
//! group sees them all (`keys.rs`). What differs is the charging: a group that admitted has
//! charged while another rejected (an over-count, never an under-count). With `--charge
//! every-descriptor` nothing differs: each descriptor is settled on its own anyway, and all the
//! limits of one descriptor share its slot.

use redis::cluster_routing::Slot;

use super::keys::KeyLayout;
use crate::core::decision::plan::Counter;
use crate::core::decision::response::CounterOutcome;
use crate::store::Decided;

/// The positions (indexes into `counters`) of each slot group, in order of first mention; a
/// group keeps the request's order, so a descriptor's counters stay together.
pub fn slot_groups(counters: &[Counter], layout: &KeyLayout) -> Vec<Vec<usize>> {
    key_slot_groups(counters.iter().map(|counter| layout.key_of(counter)))
}

/// The positions of `keys` by slot, in order of first mention, each group in the keys' order.
pub fn key_slot_groups<K: AsRef<str>>(keys: impl IntoIterator<Item = K>) -> Vec<Vec<usize>> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (position, key) in keys.into_iter().enumerate() {
        let slot = Slot::for_key(key.as_ref());
        match slots.iter().position(|known| *known == slot) {
            Some(group) => groups[group].push(position),
            None => {
                slots.push(slot);
                groups.push(vec![position]);
            }
        }
    }
    groups
}

/// The counters of one group, in order.
pub fn group_counters(counters: &[Counter], positions: &[usize]) -> Vec<Counter> {
    positions
        .iter()
        .filter_map(|&position| counters.get(position).cloned())
        .collect()
}

/// Answers that do not fit the groups they are meant for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("slot group answers do not cover the request's {counters} counters")]
pub struct Mismatch {
    counters: usize,
}

/// One answer for the request from each group's (`groups[i]` answered by `answers[i]`):
/// outcomes back in the request's order, over its limits if any group is.
pub fn merge(
    counters: usize,
    groups: &[Vec<usize>],
    answers: Vec<Decided>,
) -> Result<Decided, Mismatch> {
    let mismatch = Mismatch { counters };
    if groups.len() != answers.len() {
        return Err(mismatch);
    }
    let mut outcomes: Vec<Option<CounterOutcome>> = vec![None; counters];
    let mut over_limit = false;
    for (positions, answer) in groups.iter().zip(answers) {
        if positions.len() != answer.outcomes.len() {
            return Err(mismatch);
        }
        over_limit |= answer.over_limit;
        for (&position, outcome) in positions.iter().zip(answer.outcomes) {
            let slot = outcomes.get_mut(position).ok_or(mismatch.clone())?;
            if slot.replace(outcome).is_some() {
                return Err(mismatch);
            }
        }
    }
    let outcomes = outcomes
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(mismatch)?;
    Ok(Decided {
        outcomes,
        over_limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arithmetic::algorithm::{Hits, Quota, Share, Snapshot};
    use crate::core::decision::key::counter_key;
    use crate::core::ground::unit::Unit;
    use crate::core::ground::verdict::Role;
    use crate::core::policy::request::Entry;
    use crate::core::policy::rules::MatchedLevel;
    use crate::store::redis::keys::{HashTag, DEFAULT_PREFIX};

    fn counter(descriptor: usize, value: &str, limit_index: usize, role: Role) -> Counter {
        let quota = Quota::new(5, Unit::Minute);
        let entries = [Entry::new("user", value)];
        let key = counter_key(
            "edge",
            "edge.user",
            limit_index,
            &quota,
            &entries,
            &[MatchedLevel::Default],
        );
        Counter {
            descriptor,
            key,
            quota,
            hits: Hits::Charge(1),
            role,
            share: Share::FULL,
        }
    }

    fn layout(hash_tag: HashTag) -> KeyLayout {
        KeyLayout::new(DEFAULT_PREFIX)
            .expect("the default prefix is valid")
            .with_hash_tag(hash_tag)
    }

    fn outcome(remaining: u64) -> CounterOutcome {
        CounterOutcome {
            admitted: true,
            snapshot: Snapshot {
                remaining,
                reset_after: 0,
            },
            retry_after: 0,
            charged: true,
            withheld: false,
            wait: 0,
        }
    }

    /// Descriptor values whose tags land in distinct slots.
    fn values_in_distinct_slots(count: usize) -> Vec<String> {
        let spread = layout(HashTag::Descriptor);
        let mut values: Vec<String> = Vec::new();
        let mut slots = Vec::new();
        for n in 0..1000 {
            let value = format!("u{n}");
            let slot = Slot::for_key(spread.key_of(&counter(0, &value, 0, Role::Enforced)));
            if !slots.contains(&slot) {
                slots.push(slot);
                values.push(value);
            }
            if values.len() == count {
                break;
            }
        }
        values
    }

    #[test]
    fn the_domain_tag_makes_one_group() {
        let values = values_in_distinct_slots(3);
        let counters: Vec<Counter> = values
            .iter()
            .enumerate()
            .map(|(descriptor, value)| counter(descriptor, value, 0, Role::Enforced))
            .collect();
        assert_eq!(
            slot_groups(&counters, &layout(HashTag::Domain)),
            [vec![0, 1, 2]]
        );
    }

    #[test]
    fn descriptor_tags_group_by_slot_keeping_order() {
        let values = values_in_distinct_slots(2);
        let (a, b) = (&values[0], &values[1]);
        let counters = [
            counter(0, a, 0, Role::Enforced),
            counter(0, a, 1, Role::Enforced),
            counter(1, b, 0, Role::Shadow),
            counter(2, a, 0, Role::Enforced),
        ];
        assert_eq!(
            slot_groups(&counters, &layout(HashTag::Descriptor)),
            [vec![0, 1, 3], vec![2]]
        );
        let second = group_counters(&counters, &[2]);
        assert_eq!(second, [counters[2].clone()]);
    }

    #[test]
    fn quota_counters_share_one_group() {
        let values = values_in_distinct_slots(3);
        let counters: Vec<Counter> = values
            .iter()
            .enumerate()
            .map(|(descriptor, value)| counter(descriptor, value, 0, Role::Quota))
            .collect();
        let groups = slot_groups(&counters, &layout(HashTag::Descriptor));
        assert_eq!(groups, [vec![0, 1, 2]]);
    }

    #[test]
    fn answers_merge_back_in_request_order() {
        let groups = vec![vec![0, 2], vec![1]];
        let answers = vec![
            Decided {
                outcomes: vec![outcome(10), outcome(12)],
                over_limit: false,
            },
            Decided {
                outcomes: vec![outcome(11)],
                over_limit: true,
            },
        ];
        let merged = merge(3, &groups, answers).expect("answers fit the groups");
        assert!(merged.over_limit);
        let remaining: Vec<u64> = merged
            .outcomes
            .iter()
            .map(|outcome| outcome.snapshot.remaining)
            .collect();
        assert_eq!(remaining, [10, 11, 12]);
    }

    #[test]
    fn answers_that_do_not_fit_are_refused() {
        let one = |n| Decided {
            outcomes: vec![outcome(n)],
            over_limit: false,
        };
        assert!(merge(2, &[vec![0], vec![1]], vec![one(1)]).is_err());
        assert!(merge(2, &[vec![0], vec![0]], vec![one(1), one(2)]).is_err());
        assert!(merge(2, &[vec![0], vec![5]], vec![one(1), one(2)]).is_err());
        assert!(merge(3, &[vec![0], vec![1]], vec![one(1), one(2)]).is_err());
        assert!(merge(1, &[vec![0, 1]], vec![one(1)]).is_err());
    }
}
