//! `queue:`, `delay:` and `max_wait_ms:` of a leaky bucket: nginx's `limit_req` without
//! `nodelay` (`core::arithmetic::algorithm::Queue`). Left out, the bucket answers at once, as
//! every rule did before queues existed.

use super::limit_fields::LimitFields;
use super::walk::FileWalk;
use crate::arithmetic::algorithm::{Algorithm, Queue, Quota, MAX_QUEUE_WAIT};
use crate::ground::time::{Micros, MICROS_PER_SECOND};

const MICROS_PER_MS: Micros = 1_000;

/// `quota` with the queue its fields ask for, or `None` after reporting why they cannot be.
pub(super) fn with_queue(
    fields: &LimitFields,
    path: &str,
    walk: &mut FileWalk,
    quota: Quota,
) -> Option<Quota> {
    let queued = fields.queue == Some(true);
    if !queued {
        return options_without_queue(fields, path, walk).then_some(quota);
    }
    if !queue_fits(fields, path, walk, &quota) {
        return None;
    }
    let delay = fields.delay.unwrap_or(0);
    let max_wait = match fields.max_wait_ms {
        Some(ms) => Micros::from(ms) * MICROS_PER_MS,
        None => queue_drain_checked(fields, path, walk, &quota, delay)?,
    };
    Some(quota.with_queue(Queue::new(delay, max_wait)))
}

/// `delay` and `max_wait_ms` mean something only in a queue.
fn options_without_queue(fields: &LimitFields, path: &str, walk: &mut FileWalk) -> bool {
    let mut valid = true;
    for (option, written) in [
        ("delay", fields.delay.is_some()),
        ("max_wait_ms", fields.max_wait_ms.is_some()),
    ] {
        if written {
            walk.report.error(
                path,
                format!(
                    "`{}` shapes a queue, but this limit does not queue: add `queue: true` \
                     (a leaky_bucket that holds answers until each request's turn), or remove \
                     `{option}`",
                    fields.field_name(option)
                ),
            );
            valid = false;
        }
    }
    valid
}

/// Whether a queue fits the limit: a leaky bucket, not `nodelay`, a delay within the burst and
/// a longest wait a proxy can allow.
fn queue_fits(fields: &LimitFields, path: &str, walk: &mut FileWalk, quota: &Quota) -> bool {
    let queue = fields.field_name("queue");
    let mut problems = Vec::new();
    if quota.algorithm != Algorithm::LeakyBucket {
        problems.push(format!(
            "`{queue}` only applies to leaky_bucket, but this limit uses {}: set `algorithm: \
             leaky_bucket`, or remove `queue`",
            quota.algorithm
        ));
    }
    if fields.nodelay == Some(true) {
        problems.push(format!(
            "`{queue}: true` holds answers until each request's turn and `nodelay: true` \
             answers at once: remove one (nginx's `nodelay` is a leaky_bucket without `queue`)"
        ));
    }
    let burst = quota.burst.unwrap_or(0);
    if let Some(delay) = fields.delay.filter(|&delay| delay > burst) {
        problems.push(format!(
            "`{}: {delay}` lets more requests through at once than the burst of {burst} holds, \
             so the queue would hold none: set `delay` to at most `burst`, or remove `queue` \
             (answer every admitted request at once)",
            fields.field_name("delay")
        ));
    }
    if let Some(ms) = fields
        .max_wait_ms
        .filter(|&ms| Micros::from(ms) * MICROS_PER_MS > MAX_QUEUE_WAIT)
    {
        problems.push(format!(
            "`{}: {ms}` is over 60000 (one minute): no proxy waits that long for a rate limit \
             answer (Envoy's route timeout is 15 s by default); lower it, and raise the proxy's \
             rate limit timeout to match",
            fields.field_name("max_wait_ms")
        ));
    }
    let valid = problems.is_empty();
    for problem in problems {
        walk.report.error(path, problem);
    }
    valid
}

/// The longest wait of a queue without `max_wait_ms`: the time its full queue takes to drain,
/// `(burst − delay) / rate`, refused past a minute.
fn queue_drain_checked(
    fields: &LimitFields,
    path: &str,
    walk: &mut FileWalk,
    quota: &Quota,
    delay: u32,
) -> Option<Micros> {
    let held = i128::from(quota.burst.unwrap_or(0).saturating_sub(delay));
    let rate = i128::from(quota.requests_per_unit.max(1));
    let drain = held * i128::from(quota.window_micros()) / rate;
    if drain <= i128::from(MAX_QUEUE_WAIT) {
        return Some(MAX_QUEUE_WAIT);
    }
    walk.report.error(
        path,
        format!(
            "this queue holds requests for up to {} s ((burst − delay) / rate), more than the \
             60 s any proxy would wait for a rate limit answer: set `{}` (at most 60000) to \
             refuse longer waits at once, or a smaller `burst`",
            drain / i128::from(MICROS_PER_SECOND),
            fields.field_name("max_wait_ms")
        ),
    );
    None
}
