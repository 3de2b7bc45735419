//! Leases on worked calls: a store of one map per key that keeps what `settle` says is kept.

use std::collections::HashMap;

use super::*;
use crate::ground::time::MICROS_PER_SECOND;

const NOW: Micros = 1_700_000_000 * MICROS_PER_SECOND;
const TTL: Micros = 30 * MICROS_PER_SECOND;

fn call(id: &str, action: LeaseAction, max: u32, reserve: u32) -> LeaseCall {
    LeaseCall {
        descriptor: 0,
        key: b"pool".to_vec(),
        lease_id: id.to_owned(),
        action,
        max_in_flight: max,
        reserve,
        lease_ttl: TTL,
        shed_above: 0,
        draw: 0,
    }
}

fn acquire(id: &str, max: u32) -> LeaseCall {
    call(id, LeaseAction::Acquire, max, 0)
}

fn release(id: &str) -> LeaseCall {
    call(id, LeaseAction::Release, 2, 0)
}

#[derive(Default)]
struct Store {
    counters: HashMap<Vec<u8>, Leases>,
}

impl Store {
    fn run(&mut self, calls: &[LeaseCall], now: Micros) -> Settled {
        let (settled, next) = settle(calls, now, |key| {
            self.counters.get(key).cloned().unwrap_or_default()
        });
        for (key, leases) in next {
            self.counters.insert(key, leases);
        }
        settled
    }

    fn one(&mut self, call: LeaseCall, now: Micros) -> LeaseOutcome {
        self.run(&[call], now).outcomes[0]
    }
}

#[test]
fn acquires_until_the_limit_then_refuses() {
    let mut store = Store::default();
    assert!(store.one(acquire("a", 2), NOW).admitted);
    let second = store.one(acquire("b", 2), NOW + 1);
    assert!(second.admitted);
    assert_eq!(second.in_flight, 2);
    let third = store.one(acquire("c", 2), NOW + 2);
    assert!(!third.admitted);
    assert_eq!(third.in_flight, 2);
    // The first lease expires at NOW + TTL: the earliest a slot frees by itself.
    assert_eq!(third.retry_after, TTL - 2);
}

#[test]
fn a_release_frees_exactly_its_lease() {
    let mut store = Store::default();
    store.one(acquire("a", 2), NOW);
    store.one(acquire("b", 2), NOW);
    let released = store.one(release("a"), NOW + 1);
    assert!(released.released && released.admitted);
    assert_eq!(released.in_flight, 1);
    assert_eq!(store.counters[&b"pool".to_vec()].slots_of("b"), [NOW + TTL]);
    assert!(store.one(acquire("c", 2), NOW + 2).admitted);
    assert!(!store.one(acquire("d", 2), NOW + 3).admitted);
}

#[test]
fn a_release_says_how_long_its_slot_was_held_since_its_acquire() {
    let mut store = Store::default();
    store.one(acquire("a", 2), NOW);
    assert_eq!(store.one(release("a"), NOW + 4_250).held_for, 4_250);
    // Two slots of one id: the first release frees the one acquired first.
    store.one(acquire("b", 2), NOW);
    store.one(acquire("b", 2), NOW + 1_000);
    assert_eq!(store.one(release("b"), NOW + 1_600).held_for, 1_600);
    assert_eq!(store.one(release("b"), NOW + 1_700).held_for, 700);
    assert_eq!(store.one(release("b"), NOW + 1_800).held_for, 0);
    assert_eq!(store.one(acquire("c", 2), NOW).held_for, 0);
}

#[test]
fn an_unknown_id_releases_nothing() {
    let mut store = Store::default();
    store.one(acquire("a", 1), NOW);
    let unknown = store.one(release("zzz"), NOW + 1);
    assert!(unknown.admitted);
    assert!(!unknown.released);
    assert_eq!(unknown.in_flight, 1);
    assert!(!store.one(acquire("b", 1), NOW + 2).admitted);
}

#[test]
fn each_acquire_of_one_id_takes_a_slot_and_each_release_frees_one() {
    const N: u32 = 5;
    let mut store = Store::default();
    for n in 1..=N {
        let again = store.one(acquire("same", N), NOW + Micros::from(n));
        assert!(again.admitted && again.in_flight == n, "{again:?}");
    }
    // The id holds every slot: one more acquire with it is refused like any other.
    let full = store.one(acquire("same", N), NOW + 10);
    assert!(!full.admitted);
    assert_eq!(
        full.retry_after,
        TTL + 1 - 10,
        "until the first slot expires"
    );
    assert!(!store.one(acquire("other", N), NOW + 10).admitted);
    for n in (0..N).rev() {
        let freed = store.one(release("same"), NOW + 20);
        assert!(freed.released && freed.in_flight == n, "{freed:?}");
    }
    assert!(!store.one(release("same"), NOW + 21).released);
    assert!(store.counters[&b"pool".to_vec()].is_empty());
}

#[test]
fn a_release_frees_the_slot_of_its_id_that_expires_soonest() {
    let mut store = Store::default();
    store.one(acquire("a", 3), NOW);
    // A reload shortened the TTL since: the second slot expires first.
    let short = LeaseCall {
        lease_ttl: TTL / 3,
        ..acquire("a", 3)
    };
    store.one(short, NOW + 1);
    store.one(acquire("b", 3), NOW + 2);
    assert!(store.one(release("a"), NOW + 3).released);
    let left = &store.counters[&b"pool".to_vec()];
    assert_eq!(left.slots_of("a"), [NOW + TTL]);
    assert_eq!(left.slots_of("b"), [NOW + 2 + TTL]);
}

#[test]
fn a_lease_not_released_frees_itself_after_its_ttl() {
    let mut store = Store::default();
    store.one(acquire("lost", 1), NOW);
    assert!(!store.one(acquire("next", 1), NOW + TTL - 1).admitted);
    let after = store.one(acquire("next", 1), NOW + TTL);
    assert!(after.admitted);
    assert_eq!(after.in_flight, 1);
    // The expired lease's release, arriving late, frees nothing.
    assert!(!store.one(release("lost"), NOW + TTL + 1).released);
}

#[test]
fn a_class_leaves_its_reserve_free_for_the_classes_above() {
    let concurrency = Concurrency {
        max_in_flight: 10,
        lease_ttl: TTL,
        lease_key: "request_id".to_owned(),
        release: ReleaseMarker {
            key: "phase".to_owned(),
            value: "done".to_owned(),
        },
        shed_above: None,
    };
    let half = Share::from_millionths(500_000).unwrap_or(Share::FULL);
    let reserve = reserve_at(concurrency.max_in_flight, half);
    assert_eq!(reserve, 5);
    assert_eq!(reserve_at(concurrency.max_in_flight, Share::FULL), 0);
    let mut store = Store::default();
    for id in 0..5 {
        let low = call(&format!("low{id}"), LeaseAction::Acquire, 10, reserve);
        assert!(store.one(low, NOW).admitted);
    }
    let refused = call("low5", LeaseAction::Acquire, 10, reserve);
    let outcome = store.one(refused.clone(), NOW);
    assert!(!outcome.admitted);
    assert_eq!(outcome.remaining(&refused), 0);
    for id in 0..5 {
        let critical = call(&format!("critical{id}"), LeaseAction::Acquire, 10, 0);
        assert!(store.one(critical, NOW).admitted);
    }
    assert!(!store.one(acquire("critical5", 10), NOW).admitted);
}

#[test]
fn a_refused_acquire_keeps_no_call_of_its_request() {
    let mut store = Store::default();
    store.one(acquire("a", 1), NOW);
    let mut other = acquire("b", 5);
    other.key = b"other".to_vec();
    let settled = store.run(&[other, acquire("c", 1)], NOW + 1);
    assert!(!settled.kept);
    assert!(settled.outcomes[0].admitted && !settled.outcomes[1].admitted);
    assert!(!store.counters.contains_key(b"other".as_slice()));
}

#[test]
fn calls_of_one_request_see_each_other() {
    let mut store = Store::default();
    let settled = store.run(&[acquire("a", 2), acquire("b", 2), release("a")], NOW);
    assert!(settled.kept);
    let in_flight: Vec<u32> = settled.outcomes.iter().map(|o| o.in_flight).collect();
    assert_eq!(in_flight, [1, 2, 1]);
    assert_eq!(
        store.counters[&b"pool".to_vec()].latest_expiry(),
        Some(NOW + TTL)
    );
}

#[test]
fn a_request_refused_elsewhere_gives_back_what_it_acquired() {
    let mut store = Store::default();
    let calls = [acquire("a", 2), release("b"), acquire("c", 2)];
    let settled = store.run(&calls, NOW);
    let undo = undo_acquired(&calls, &settled.outcomes);
    let ids: Vec<(&str, LeaseAction)> = undo
        .iter()
        .map(|call| (call.lease_id.as_str(), call.action))
        .collect();
    assert_eq!(
        ids,
        [("a", LeaseAction::Release), ("c", LeaseAction::Release)]
    );
    store.run(&undo, NOW + 1);
    assert!(store.counters[&b"pool".to_vec()].is_empty());
    assert!(admitted_without_store(&calls).iter().all(|o| o.admitted));
}

#[test]
fn past_shed_above_a_new_lease_survives_by_its_draw_and_a_shed_one_waits_briefly() {
    let mut leases = Leases::new();
    let shedding = |id: &str, draw: u32| LeaseCall {
        shed_above: 2,
        draw,
        ..acquire(id, 10)
    };
    // At or below the threshold every draw survives.
    for id in ["a", "b"] {
        assert!(apply(&mut leases, 0, &shedding(id, u32::MAX)).admitted);
    }
    // Third lease: depth 3, survival 2/3. A draw past two thirds of the range is shed.
    let shed = apply(&mut leases, 0, &shedding("c", u32::MAX / 10 * 9));
    assert!(!shed.admitted && shed.shed, "{shed:?}");
    assert_eq!(shed.retry_after, SHED_RETRY_AFTER.min(TTL));
    assert_eq!(leases.held(), 2, "a shed lease takes nothing");
    let survived = apply(&mut leases, 0, &shedding("c", u32::MAX / 10 * 6));
    assert!(survived.admitted && !survived.shed);
    // An id that holds a slot already asks for another one: shed like any new slot.
    let again = apply(&mut leases, 1, &shedding("a", u32::MAX));
    assert!(!again.admitted && again.shed, "{again:?}");
    // At the hard bound it is a plain refusal, not a shed.
    let full = apply(
        &mut leases,
        0,
        &LeaseCall {
            max_in_flight: 3,
            ..shedding("d", 0)
        },
    );
    assert!(!full.admitted && !full.shed);
}
