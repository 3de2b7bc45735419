//! The two charging modes on worked requests, with a tiny store: a map of key → state that
//! keeps what `settle` says is kept.

use std::collections::HashMap;

use super::*;
use crate::arithmetic::algorithm::{
    Algorithm, CheckRule, Overflow, Quota, Share, MAX_RECORDED_COUNT,
};
use crate::ground::time::MICROS_PER_SECOND;
use crate::ground::unit::Unit;
use crate::ground::verdict::Role;

const NOW: Micros = 1_700_000_000 * MICROS_PER_SECOND;

fn counter(descriptor: usize, key: &str, quota: &Quota, hits: Hits, role: Role) -> Counter {
    Counter {
        descriptor,
        key: key.as_bytes().to_vec(),
        quota: quota.clone(),
        hits,
        role,
        share: Share::FULL,
    }
}

fn charge(descriptor: usize, key: &str, quota: &Quota, hits: u64) -> Counter {
    counter(descriptor, key, quota, Hits::Charge(hits), Role::Enforced)
}

fn window(limit: u32) -> Quota {
    Quota::new(limit, Unit::Minute)
}

fn bucket(limit: u32) -> Quota {
    Quota::new(limit, Unit::Minute).with_algorithm(Algorithm::TokenBucket)
}

/// Counters by key, as a store keeps them.
#[derive(Default)]
struct Store {
    states: HashMap<Vec<u8>, State>,
}

impl Store {
    fn decide(
        &mut self,
        counters: &[Counter],
        charging: Charging,
    ) -> (Settled, Vec<CounterOutcome>) {
        let settled = settle(counters, charging, false, NOW, |index| {
            counters
                .get(index)
                .and_then(|counter| self.states.get(&counter.key))
        });
        for (index, counter) in counters.iter().enumerate() {
            if settled.kept[index] {
                self.states.insert(
                    counter.key.clone(),
                    settled.evaluations[index].next_state.clone(),
                );
            }
        }
        let outcomes = settled.outcomes().collect();
        (settled, outcomes)
    }

    /// What one more hit on `key` alone would find left.
    fn remaining(&self, key: &str, quota: &Quota) -> u64 {
        let state = self.states.get(key.as_bytes());
        evaluate_counter(quota, state, NOW, (Hits::PEEK, 0), Refused::TakeNothing)
            .committed
            .remaining
    }

    fn count(&self, key: &str) -> Option<u64> {
        match self.states.get(key.as_bytes()) {
            Some(State::FixedWindow { count, .. }) => Some(*count),
            Some(State::SlidingWindow { current, .. }) => Some(u64::from(*current)),
            _ => None,
        }
    }
}

/// `key` charged `hits` times alone, admitted each time.
fn fill(store: &mut Store, key: &str, quota: &Quota, hits: u64) {
    for _ in 0..hits {
        let (settled, _) = store.decide(&[charge(0, key, quota, 1)], Charging::AllOrNothing);
        assert!(!settled.over_limit, "filling {key}");
    }
}

#[test]
fn names_are_the_flags_values() {
    for mode in Charging::ALL {
        assert_eq!(Charging::parse(mode.name()), Some(mode));
    }
    assert_eq!(Charging::default(), Charging::AllOrNothing);
    assert_eq!(Charging::parse("every"), None);
}

#[test]
fn all_or_nothing_charges_nothing_of_a_rejected_request() {
    for quota in [window(3), bucket(3)] {
        let mut store = Store::default();
        fill(&mut store, "full", &quota, 3);
        let request = [charge(0, "fresh", &quota, 1), charge(1, "full", &quota, 1)];
        let (settled, outcomes) = store.decide(&request, Charging::AllOrNothing);
        assert!(settled.over_limit);
        assert_eq!(settled.kept.as_slice(), [false, false]);
        assert!(outcomes[0].admitted && !outcomes[0].charged);
        assert_eq!(outcomes[0].snapshot.remaining, 3, "shown as it was");
        assert_eq!(store.remaining("fresh", &quota), 3);
        assert_eq!(store.remaining("full", &quota), 0);
    }
}

#[test]
fn every_descriptor_charges_the_fresh_one_and_counts_the_refused_hit_of_a_window() {
    let quota = window(3);
    let mut store = Store::default();
    fill(&mut store, "full", &quota, 3);
    let request = [charge(0, "fresh", &quota, 1), charge(1, "full", &quota, 1)];
    let (settled, outcomes) = store.decide(&request, Charging::EveryDescriptor);
    assert!(settled.over_limit, "the request is still rejected");
    assert_eq!(settled.kept.as_slice(), [true, true]);
    assert_eq!(outcomes[0].snapshot.remaining, 2, "after its charge");
    assert!(!outcomes[1].admitted && outcomes[1].charged);
    // As the reference's INCRBY: 3 + 1.
    assert_eq!(store.count("full"), Some(4));
    assert_eq!(store.count("fresh"), Some(1));
}

#[test]
fn every_descriptor_takes_nothing_from_a_bucket_for_a_refused_hit() {
    let quota = bucket(3);
    let mut store = Store::default();
    fill(&mut store, "full", &quota, 3);
    let full_before = store.states.get("full".as_bytes()).cloned();
    let request = [charge(0, "fresh", &quota, 1), charge(1, "full", &quota, 1)];
    let (settled, outcomes) = store.decide(&request, Charging::EveryDescriptor);
    assert!(settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [true, false]);
    assert_eq!(store.remaining("fresh", &quota), 2);
    assert_eq!(store.states.get("full".as_bytes()).cloned(), full_before);
    assert!(outcomes[1].retry_after > 0);
}

#[test]
fn hits_beyond_what_is_left_are_all_counted_by_a_window_and_none_by_a_bucket() {
    let mut store = Store::default();
    let (windowed, bucketed) = (window(10), bucket(10));
    fill(&mut store, "w", &windowed, 8);
    fill(&mut store, "b", &bucketed, 8);
    let request = [charge(0, "w", &windowed, 5), charge(1, "b", &bucketed, 5)];
    let (settled, outcomes) = store.decide(&request, Charging::EveryDescriptor);
    assert!(!outcomes[0].admitted && !outcomes[1].admitted);
    assert_eq!(settled.kept.as_slice(), [true, false]);
    assert_eq!(store.count("w"), Some(13));
    assert_eq!(store.remaining("b", &bucketed), 2);
    // Shown as judged: 2 were left when 5 were asked.
    assert_eq!(outcomes[0].snapshot.remaining, 2);
}

#[test]
fn a_descriptor_is_settled_as_if_it_were_the_only_one() {
    // One descriptor, two limits: the window refuses, so the bucket (which admitted) takes
    // nothing, while the window counts the refused hit.
    let (windowed, bucketed) = (window(2), bucket(5));
    let mut store = Store::default();
    fill(&mut store, "w", &windowed, 2);
    let request = [charge(0, "b", &bucketed, 1), charge(0, "w", &windowed, 1)];
    let (settled, outcomes) = store.decide(&request, Charging::EveryDescriptor);
    assert!(outcomes[0].admitted && !outcomes[1].admitted);
    assert_eq!(settled.kept.as_slice(), [false, true]);
    assert_eq!(store.remaining("b", &bucketed), 5);
    assert_eq!(store.count("w"), Some(3));
}

#[test]
fn shadow_and_quota_descriptors_settle_as_they_would_alone() {
    let quota = bucket(1);
    let mut store = Store::default();
    fill(&mut store, "full", &quota, 1);
    // A shadow descriptor never rejects: its admitted counter is charged, its refused one not.
    let shadow = [
        counter(0, "s", &quota, Hits::Charge(1), Role::Shadow),
        counter(0, "full", &quota, Hits::Charge(1), Role::Shadow),
    ];
    let (settled, _) = store.decide(&shadow, Charging::EveryDescriptor);
    assert!(!settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [true, false]);
    // A quota descriptor alone rejects when it is over: nothing of it is kept.
    let quota_mode = [
        counter(0, "q", &quota, Hits::Charge(1), Role::Quota),
        counter(0, "full", &quota, Hits::Charge(1), Role::Quota),
    ];
    let (settled, _) = store.decide(&quota_mode, Charging::EveryDescriptor);
    assert!(settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [false, false]);
}

#[test]
fn a_later_descriptor_sees_what_an_earlier_one_kept_not_what_it_gave_up() {
    let (bucketed, tight) = (bucket(5), bucket(1));
    let mut store = Store::default();
    fill(&mut store, "tight", &tight, 1);
    let request = [
        // Kept: "b" has 4 left for the next mention.
        charge(0, "b", &bucketed, 1),
        // Over because of "tight": its charge of "b" is given up.
        charge(1, "b", &bucketed, 1),
        charge(1, "tight", &tight, 1),
        // Sees the 4 the first descriptor left.
        charge(2, "b", &bucketed, 1),
    ];
    let (settled, outcomes) = store.decide(&request, Charging::EveryDescriptor);
    assert_eq!(settled.kept.as_slice(), [true, false, false, true]);
    assert_eq!(
        outcomes[1].snapshot.remaining, 4,
        "given up: shown as judged"
    );
    assert_eq!(outcomes[3].snapshot.remaining, 3);
    assert_eq!(store.remaining("b", &bucketed), 3);
}

#[test]
fn within_a_descriptor_a_key_named_twice_sees_its_earlier_mention() {
    let quota = bucket(3);
    for charging in Charging::ALL {
        let mut store = Store::default();
        let request = [charge(0, "b", &quota, 2), charge(0, "b", &quota, 2)];
        let (settled, outcomes) = store.decide(&request, charging);
        assert!(outcomes[0].admitted && !outcomes[1].admitted, "{charging}");
        assert_eq!(settled.kept.as_slice(), [false, false], "{charging}");
        assert_eq!(store.remaining("b", &quota), 3, "{charging}");
    }
}

#[test]
fn checks_are_never_charged_and_refunds_always_are_in_every_descriptor() {
    let quota = window(2);
    let mut store = Store::default();
    fill(&mut store, "w", &quota, 2);
    let request = [
        counter(0, "w", &quota, Hits::PEEK, Role::Enforced),
        counter(1, "r", &quota, Hits::Refund(1), Role::Enforced),
    ];
    let (settled, outcomes) = store.decide(&request, Charging::EveryDescriptor);
    assert!(settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [false, true]);
    assert!(!outcomes[0].charged && outcomes[1].charged);
    assert_eq!(store.count("w"), Some(2));
}

#[test]
fn a_sliding_window_counts_refused_hits_like_a_fixed_one() {
    let quota = window(2).with_algorithm(Algorithm::SlidingWindow);
    let mut store = Store::default();
    fill(&mut store, "s", &quota, 2);
    let before = store.decide(&[charge(0, "s", &quota, 1)], Charging::EveryDescriptor);
    assert!(before.0.over_limit);
    assert_eq!(store.count("s"), Some(3));
    // The refused hit is counted: it is waited for too, later than without it.
    let without = evaluate_counter(
        &quota,
        Some(&State::SlidingWindow {
            window_start: NOW - NOW.rem_euclid(60 * MICROS_PER_SECOND),
            previous: 0,
            current: 2,
        }),
        NOW,
        (Hits::Charge(1), 0),
        Refused::TakeNothing,
    );
    assert!(before.1[0].retry_after > without.retry_after);
}

#[test]
fn recorded_counts_stop_at_the_cap() {
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let quota = window(10).with_algorithm(algorithm);
        let mut store = Store::default();
        for _ in 0..2 {
            store.decide(
                &[charge(0, "k", &quota, u64::MAX)],
                Charging::EveryDescriptor,
            );
        }
        assert_eq!(store.count("k"), Some(MAX_RECORDED_COUNT), "{algorithm}");
        assert_eq!(store.remaining("k", &quota), 0, "{algorithm}");
    }
}

#[test]
fn the_two_modes_agree_on_requests_that_pass() {
    let quota = window(5);
    let request = [charge(0, "a", &quota, 2), charge(1, "b", &quota, 3)];
    let mut stores = [Store::default(), Store::default()];
    let answers: Vec<_> = Charging::ALL
        .iter()
        .zip(&mut stores)
        .map(|(charging, store)| store.decide(&request, *charging))
        .collect();
    assert_eq!(answers[0], answers[1]);
}

fn owing(quota: Quota) -> Quota {
    quota.with_overflow(Overflow::Owe)
}

#[test]
fn a_rule_that_owes_counts_usage_past_its_limit_in_either_mode() {
    // AI Gateway's sequence on a limit of 100 tokens: 20 used, then 10 000 reported at stream
    // end against the 80 left, then one more request: refused, because the 10 000 are owed.
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        for mode in Charging::ALL {
            let quota = owing(window(100).with_algorithm(algorithm));
            let mut store = Store::default();
            let (settled, _) = store.decide(&[charge(0, "tokens", &quota, 20)], mode);
            assert!(!settled.over_limit);
            let (settled, outcomes) = store.decide(&[charge(0, "tokens", &quota, 10_000)], mode);
            assert!(settled.over_limit, "{algorithm} {mode}: the report is over");
            assert!(!outcomes[0].admitted && outcomes[0].charged, "but counted");
            assert_eq!(store.count("tokens"), Some(10_020), "{algorithm} {mode}");
            let check = counter(0, "tokens", &quota, Hits::PEEK, Role::Enforced);
            let (settled, _) = store.decide(&[check], mode);
            assert!(settled.over_limit, "{algorithm} {mode}: owed, so refused");
        }
    }
}

#[test]
fn a_rule_that_owes_is_counted_even_when_another_descriptor_refuses() {
    let refusing = window(1);
    let owed = owing(window(100));
    let mut store = Store::default();
    fill(&mut store, "full", &refusing, 1);
    let request = [
        charge(0, "usage", &owed, 5),
        charge(1, "full", &refusing, 1),
    ];
    let (settled, _) = store.decide(&request, Charging::AllOrNothing);
    assert!(settled.over_limit);
    assert_eq!(
        settled.kept.as_slice(),
        [true, false],
        "usage happened; the other takes nothing"
    );
    assert_eq!(store.count("usage"), Some(5));
    assert_eq!(store.count("full"), Some(1));
}

#[test]
fn owing_changes_nothing_for_checks_refunds_and_buckets() {
    let owed = owing(window(3));
    let check = counter(0, "k", &owed, Hits::PEEK, Role::Enforced);
    let refund = counter(0, "k", &owed, Hits::Refund(1), Role::Enforced);
    for mode in Charging::ALL {
        assert!(!mode.records(&check) && !mode.records(&refund));
        // The config refuses `owe` on a bucket; were one to arrive, it would take nothing.
        assert!(!mode.records(&charge(0, "b", &owing(bucket(3)), 1)));
        assert!(mode.records(&charge(0, "k", &owed, 1)));
    }
}

/// A check before a call (`hits_addend: 0`), judged by `rule`.
fn check(key: &str, quota: &Quota, rule: CheckRule) -> Counter {
    counter(0, key, quota, Hits::CheckOnly(rule), Role::Enforced)
}

/// The calls of `cost` tokens a budget of `quota` admits, each checked before (by `rule`) and
/// charged after, as Envoy's `apply_on_stream_done` does; at most `most` calls.
fn calls_admitted(quota: &Quota, rule: CheckRule, charging: Charging, cost: u64) -> usize {
    let mut store = Store::default();
    let most = 1_000;
    for call in 0..most {
        let (checked, _) = store.decide(&[check("budget", quota, rule)], charging);
        if checked.over_limit {
            return call;
        }
        store.decide(&[charge(0, "budget", quota, cost)], charging);
    }
    most
}

#[test]
fn with_the_references_check_a_budget_of_n_admits_n_over_c_plus_one_calls_of_c() {
    // AI Gateway's end-to-end expectation, under the reference's default charging and under
    // all or nothing with the overflow owed (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true).
    let counted = [
        (Charging::EveryDescriptor, window(100)),
        (Charging::AllOrNothing, owing(window(100))),
    ];
    for (charging, quota) in counted {
        for (cost, calls) in [(25, 5), (30, 4), (1, 101), (100, 2), (1_000, 1)] {
            assert_eq!(
                calls_admitted(&quota, CheckRule::WithinLimit, charging, cost),
                calls,
                "{charging}, calls of {cost}"
            );
        }
    }
    // floodgate's check stands for one more hit: the call that would start at the limit is
    // refused.
    assert_eq!(
        calls_admitted(
            &window(100),
            CheckRule::OneMoreFits,
            Charging::EveryDescriptor,
            25
        ),
        4
    );
}

#[test]
fn with_the_references_check_twenty_then_ten_thousand_tokens_pass_then_one_is_refused() {
    let counted = [
        (Charging::EveryDescriptor, window(100)),
        (Charging::AllOrNothing, owing(window(100))),
    ];
    for (charging, quota) in counted {
        let mut store = Store::default();
        for used in [20, 10_000] {
            let (checked, _) =
                store.decide(&[check("budget", &quota, CheckRule::WithinLimit)], charging);
            assert!(!checked.over_limit, "{charging}: the call of {used} passes");
            store.decide(&[charge(0, "budget", &quota, used)], charging);
        }
        assert_eq!(
            store.count("budget"),
            Some(10_020),
            "{charging}: all counted"
        );
        let (checked, _) =
            store.decide(&[check("budget", &quota, CheckRule::WithinLimit)], charging);
        assert!(checked.over_limit, "{charging}: the next call is refused");
    }
    // Under all or nothing without owing, the report that overflows is lost.
    let mut store = Store::default();
    store.decide(
        &[charge(0, "budget", &window(100), 20)],
        Charging::AllOrNothing,
    );
    store.decide(
        &[charge(0, "budget", &window(100), 10_000)],
        Charging::AllOrNothing,
    );
    assert_eq!(store.count("budget"), Some(20));
}

#[test]
fn all_or_refused_charges_a_rejected_request_only_its_refused_hits() {
    // The reference's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, its own test: key4 at 13 of
    // 15 and key5 at 13 of 14, two hits each: key5 would go over, so it alone is incremented.
    let (key4, key5) = (window(15), window(14));
    let mut store = Store::default();
    fill(&mut store, "key4", &key4, 13);
    fill(&mut store, "key5", &key5, 13);
    let request = [charge(0, "key4", &key4, 2), charge(1, "key5", &key5, 2)];
    let (settled, outcomes) = store.decide(&request, Charging::AllOrRefused);
    assert!(settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [false, true]);
    assert_eq!(outcomes[0].snapshot.remaining, 2, "key4 shown as it was");
    assert_eq!(store.count("key4"), Some(13));
    assert_eq!(store.count("key5"), Some(15));
    // A request that passes charges every counter, as all or nothing does.
    let passing = [charge(0, "key4", &key4, 1), charge(1, "fresh", &key5, 1)];
    let (settled, _) = store.decide(&passing, Charging::AllOrRefused);
    assert!(!settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [true, true]);
    // A bucket holds admitted hits only: refused, it takes nothing in this mode either.
    let full_bucket = bucket(1);
    fill(&mut store, "bucket", &full_bucket, 1);
    let refused = [charge(0, "bucket", &full_bucket, 1)];
    let (settled, _) = store.decide(&refused, Charging::AllOrRefused);
    assert_eq!(settled.kept.as_slice(), [false]);
    // An owed charge is kept whatever the verdict, in this mode as in the others.
    let owed = owing(window(100));
    let request = [charge(0, "usage", &owed, 5), charge(1, "key5", &key5, 1)];
    let (settled, _) = store.decide(&request, Charging::AllOrRefused);
    assert_eq!(settled.kept.as_slice(), [true, true]);
}

#[test]
fn all_or_refused_stops_on_any_refusal_whatever_its_role() {
    // The reference's getHitsAddend (fixed_cache_impl.go lines 44-72) looks at no role: a
    // shadow-mode or quota-mode descriptor that goes over stops the others' increments too,
    // though the request passes; and so does one under --shadow-mode.
    let (fresh, tight) = (window(10), window(1));
    for role in [Role::Shadow, Role::Quota] {
        let mut store = Store::default();
        fill(&mut store, "tight", &tight, 1);
        let request = [
            charge(0, "fresh", &fresh, 1),
            counter(1, "tight", &tight, Hits::Charge(1), role),
        ];
        let (settled, outcomes) = store.decide(&request, Charging::AllOrRefused);
        // A lone quota-mode descriptor over rejects; a shadow one never does.
        assert_eq!(settled.over_limit, role == Role::Quota, "{role:?}");
        assert_eq!(settled.kept.as_slice(), [false, true], "{role:?}");
        assert!(outcomes[0].admitted && outcomes[0].withheld, "{role:?}");
        assert!(!outcomes[1].withheld, "{role:?}: refused, recorded");
        assert_eq!(store.count("fresh"), None, "{role:?}");
        assert_eq!(store.count("tight"), Some(2), "{role:?}");
    }
    let mut store = Store::default();
    fill(&mut store, "tight", &tight, 1);
    let request = [charge(0, "fresh", &fresh, 1), charge(1, "tight", &tight, 1)];
    let settled = settle(&request, Charging::AllOrRefused, true, NOW, |index| {
        request
            .get(index)
            .and_then(|counter| store.states.get(&counter.key))
    });
    assert!(!settled.over_limit, "--shadow-mode answers OK");
    assert_eq!(settled.kept.as_slice(), [false, true]);
    assert_eq!(settled.withheld.as_slice(), [true, false]);
    // All or nothing keeps its role-aware verdict: the shadow rule's request charges all.
    let mut store = Store::default();
    fill(&mut store, "tight", &tight, 1);
    let shadowed = [
        charge(0, "fresh", &fresh, 1),
        counter(1, "tight", &tight, Hits::Charge(1), Role::Shadow),
    ];
    let (settled, outcomes) = store.decide(&shadowed, Charging::AllOrNothing);
    assert_eq!(settled.kept.as_slice(), [true, false]);
    assert!(outcomes.iter().all(|outcome| !outcome.withheld));
}

#[test]
fn a_refused_check_stops_the_increments_as_the_references_get_does() {
    // hits_addend 0 on a count past its limit: `GET` + 0 > limit (fixed_cache_impl.go
    // lines 148-156), so the other descriptor's key gets `INCRBY … 0`.
    let (fresh, tight) = (window(10), window(1));
    let mut store = Store::default();
    fill(&mut store, "tight", &tight, 1);
    store.decide(&[charge(0, "tight", &tight, 1)], Charging::AllOrRefused);
    let request = [
        charge(0, "fresh", &fresh, 1),
        check("tight", &tight, CheckRule::WithinLimit),
    ];
    let (settled, outcomes) = store.decide(&request, Charging::AllOrRefused);
    assert!(settled.over_limit);
    assert_eq!(settled.kept.as_slice(), [false, false]);
    assert!(outcomes[0].withheld);
    assert!(!outcomes[1].withheld, "a check is never a withheld charge");
    let mut outcomes = outcomes;
    for outcome in &mut outcomes {
        outcome.withheld = false;
    }
    Charging::AllOrRefused.mark_withheld(&request, &mut outcomes);
    assert_eq!(
        outcomes.iter().map(|o| o.withheld).collect::<Vec<_>>(),
        [true, false],
        "the Redis script's answers are marked the same way"
    );
}
