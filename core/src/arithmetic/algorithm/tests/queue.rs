//! A leaky bucket that queues: nginx's `limit_req` without `nodelay`, and with `delay=`.

use super::*;
use crate::arithmetic::algorithm::{Queue, MAX_QUEUE_WAIT};

/// nginx `limit_req rate=10r/s burst=20` (`delay=…` when `delay` > 0).
fn queued(delay: u32, max_wait: Micros) -> Quota {
    quota(Algorithm::LeakyBucket, 10, Unit::Second)
        .with_burst(20)
        .with_queue(Queue::new(delay, max_wait))
}

const TURN: Micros = 100_000;

#[test]
fn a_burst_waits_its_turn_one_hundred_ms_apart_and_the_queue_holds_the_burst() {
    let mut sim = Sim::new(queued(0, MAX_QUEUE_WAIT), T0);
    let waits: Vec<Option<Micros>> = (0..25)
        .map(|_| {
            let evaluation = sim.charge(1);
            evaluation.admitted.then_some(evaluation.wait)
        })
        .collect();
    let expected: Vec<Option<Micros>> = (0..25).map(|i| (i <= 20).then_some(i * TURN)).collect();
    assert_eq!(waits, expected);
    let refused = sim.peek(Hits::Charge(1));
    assert_eq!(refused.retry_after, TURN);
    assert_eq!(refused.wait, 0);
}

#[test]
fn delay_lets_the_first_excess_through_at_once_as_nginx_delay() {
    let mut sim = Sim::new(queued(5, MAX_QUEUE_WAIT), T0);
    let waits: Vec<Micros> = (0..21).map(|_| sim.charge(1).wait).collect();
    let expected: Vec<Micros> = (0..21).map(|i| (i - 5).max(0) * TURN).collect();
    assert_eq!(waits, expected);
    assert!(!sim.charge(1).admitted);
}

#[test]
fn a_wait_past_the_longest_is_refused_without_taking_the_turn() {
    let mut sim = Sim::new(queued(0, 250_000), T0);
    assert_eq!(sim.burst(10), 3);
    let refused = sim.peek(Hits::Charge(1));
    assert!(!refused.admitted);
    // The fourth would wait 300 ms: it may once 50 ms have drained.
    assert_eq!(refused.retry_after, 50_000);
    sim.advance(50_000);
    let admitted = sim.charge(1);
    assert!(admitted.admitted);
    assert_eq!(admitted.wait, 250_000);
}

#[test]
fn a_request_with_a_shorter_deadline_is_refused_and_leaves_the_turn_to_the_next() {
    let quota = queued(0, MAX_QUEUE_WAIT);
    let mut sim = Sim::new(quota.clone(), T0);
    assert_eq!(sim.burst(3), 3);
    let mut hurried = quota.clone();
    hurried.queue = quota.queue.map(|queue| queue.within(20_000));
    let refused = evaluate(&hurried, sim.state.as_ref(), sim.now, Hits::Charge(1));
    assert!(!refused.admitted);
    assert_eq!(sim.charge(1).wait, 3 * TURN);
}

#[test]
fn the_queue_drains_at_the_rate() {
    let mut sim = Sim::new(queued(0, MAX_QUEUE_WAIT), T0);
    assert_eq!(sim.burst(21), 21);
    sim.advance(1_000_000);
    assert_eq!(sim.charge(1).wait, 21 * TURN - 1_000_000);
    sim.advance(5_000_000);
    assert_eq!(sim.charge(1).wait, 0);
}

#[test]
fn checks_and_refunds_never_wait() {
    let mut sim = Sim::new(queued(0, MAX_QUEUE_WAIT), T0);
    sim.burst(3);
    assert_eq!(sim.peek(Hits::PEEK).wait, 0);
    assert!(sim.peek(Hits::PEEK).admitted);
    assert_eq!(sim.hit(Hits::Refund(1)).wait, 0);
}

#[test]
fn without_a_queue_nothing_waits() {
    let mut sim = Sim::new(
        quota(Algorithm::LeakyBucket, 10, Unit::Second).with_burst(20),
        T0,
    );
    assert!((0..21).all(|_| sim.charge(1).wait == 0));
}
