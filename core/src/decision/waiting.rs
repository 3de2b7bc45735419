//! How long a request's answer may be held: the waits of its queueing leaky buckets bounded
//! by what the caller can wait for. A request whose turn would come after its own deadline
//! (gRPC `grpc-timeout`), or that finds the process holding all the answers it may, is
//! refused at once, and takes no turn: the bucket refuses it as one past its longest wait.

use crate::arithmetic::algorithm::Hits;
use crate::decision::plan::Counter;
use crate::decision::response::CounterOutcome;
use crate::ground::time::Micros;
use crate::ground::verdict::Role;

/// Whether any of `counters` may hold the answer (a queueing leaky bucket's charge).
pub fn may_wait(counters: &[Counter]) -> bool {
    counters
        .iter()
        .any(|counter| counter.quota.queue.is_some() && matches!(counter.hits, Hits::Charge(_)))
}

/// How long the answer to a request that passed with `counters` (one outcome each in
/// `outcomes`) is held: until the last turn its queueing leaky buckets charged. A counter of a
/// rule in shadow mode (or the whole request under `--shadow-mode`, `global_shadow`) never
/// holds it: shadow mode reports and changes no answer.
pub fn answer_wait(
    counters: &[Counter],
    outcomes: &[CounterOutcome],
    global_shadow: bool,
) -> Micros {
    if global_shadow {
        return 0;
    }
    counters
        .iter()
        .zip(outcomes)
        .filter(|(counter, outcome)| {
            counter.role != Role::Shadow && outcome.admitted && outcome.charged
        })
        .map(|(_, outcome)| outcome.wait)
        .max()
        .unwrap_or(0)
}

/// Bounds every queue among `counters` to `longest` µs of waiting (0: answer at once or refuse).
pub fn wait_at_most(counters: &mut [Counter], longest: Micros) {
    for counter in counters {
        if let Some(queue) = counter.quota.queue {
            counter.quota.queue = Some(queue.within(longest));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arithmetic::algorithm::Snapshot;
    use crate::arithmetic::algorithm::{Algorithm, Queue, Quota, Share};
    use crate::ground::unit::Unit;

    fn counter(queue: Option<Queue>, hits: Hits) -> Counter {
        let mut quota = Quota::new(10, Unit::Second).with_algorithm(Algorithm::LeakyBucket);
        quota.queue = queue;
        Counter {
            descriptor: 0,
            key: b"k".to_vec(),
            quota,
            hits,
            role: Role::Enforced,
            share: Share::FULL,
        }
    }

    #[test]
    fn only_queued_charges_may_wait_and_their_waits_are_bounded() {
        let queue = Queue::new(2, 5_000_000);
        assert!(!may_wait(&[counter(None, Hits::Charge(1))]));
        assert!(!may_wait(&[counter(Some(queue), Hits::PEEK)]));
        let mut counters = [
            counter(None, Hits::Charge(1)),
            counter(Some(queue), Hits::Charge(1)),
        ];
        assert!(may_wait(&counters));
        wait_at_most(&mut counters, 20_000);
        assert_eq!(counters[0].quota.queue, None);
        assert_eq!(counters[1].quota.queue, Some(Queue::new(2, 20_000)));
    }

    fn outcome(admitted: bool, charged: bool, wait: Micros) -> CounterOutcome {
        CounterOutcome {
            admitted,
            snapshot: Snapshot {
                remaining: 0,
                reset_after: 0,
            },
            retry_after: 0,
            charged,
            withheld: false,
            wait,
        }
    }

    #[test]
    fn the_answer_waits_for_the_last_charged_turn_never_for_a_shadowed_one() {
        let queue = Some(Queue::new(0, 5_000_000));
        let mut shadowed = counter(queue, Hits::Charge(1));
        shadowed.role = Role::Shadow;
        let counters = [
            counter(queue, Hits::Charge(1)),
            counter(queue, Hits::Charge(1)),
            shadowed,
        ];
        let outcomes = [
            outcome(true, true, 300),
            outcome(true, false, 900),
            outcome(true, true, 700),
        ];
        assert_eq!(answer_wait(&counters, &outcomes, false), 300);
        assert_eq!(answer_wait(&counters, &outcomes, true), 0);
    }
}
