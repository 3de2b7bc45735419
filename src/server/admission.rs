//! Self-protection: a bound on calls in flight and a respect for callers' deadlines, in the
//! spirit of tower's `limit` and `load_shed`, but answering instead of waiting: a fast answer
//! beats a timeout (Envoy gives up on a rate-limit call after 20 ms).
//!
//! [`Admission`] is the process's one `--max-in-flight` budget, shared by the gRPC listener and
//! the HTTP decision endpoints (`/json`, `/check`; `server::http::admission` takes their
//! permits). Shared, not one budget per listener, because what it protects is shared: the same
//! worker threads, store connection and memory decide both, so one number bounds the process,
//! as the flag promises; two budgets would let the listeners together hold twice the bound. A
//! deployment is normally fronted by one kind of proxy, so the sharing costs nothing there.
//!
//! A permit is taken only once the whole request has been read: a client that sends headers
//! and then its message (or body) slowly, or never, holds no permit, so it cannot starve the
//! callers that send theirs at once. Reading is bounded by time elsewhere (the call's
//! deadline, `--body-timeout-ms`: `server::connections`).
//!
//! On the gRPC side, [`Admitted::check`] runs at the top of the handler, once tonic has decoded
//! the message: it takes one of `--max-in-flight` permits without waiting, held until the
//! answer is built. A call beyond the bound gets the overload answer
//! (`core::decision::overload`) at once; a call whose deadline ran out while its message
//! arrived is not decided at all (DEADLINE_EXCEEDED); any other call gets the rest of its
//! deadline. The arrival time and deadline are the call's clock, read from its headers by
//! `server::grpc_deadline`, which also answers (and counts) a call still unanswered at its
//! deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tonic::Status;

use super::grpc_deadline::CallClock;
use crate::core::decision::overload::{remaining_budget, Budget, OverloadAnswer};
use crate::engine::limiter::CallStart;
use crate::telemetry::metrics::{self, OverloadReason};

/// Calls decided at once unless `--max-in-flight` says otherwise.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// Streams one HTTP/2 connection may have open at once, at least. hyper's own default.
const MIN_STREAMS_PER_CONNECTION: u32 = 200;

/// A unary call's deadline when its caller sends no `grpc-timeout`, unless
/// `--grpc-default-deadline-ms` says otherwise.
pub const DEFAULT_GRPC_DEADLINE: Duration = Duration::from_secs(10);

/// `--max-in-flight`, `--overload-answer` and `--grpc-default-deadline-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionSettings {
    /// Calls (read and not yet answered) at once; beyond it calls get `overload_answer`.
    /// 0 refuses every call: a drill of how the proxies behave when floodgate is overloaded.
    pub max_in_flight: usize,
    pub overload_answer: OverloadAnswer,
    /// The deadline of a ShouldRateLimit call that comes without `grpc-timeout`.
    pub default_deadline: Duration,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        Self {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            overload_answer: OverloadAnswer::default(),
            default_deadline: DEFAULT_GRPC_DEADLINE,
        }
    }
}

impl AdmissionSettings {
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS` of the gRPC listener. Not a shedding tool: a
    /// client at that limit queues its calls on its side, where floodgate cannot answer them.
    /// So it is set to let one connection (Envoy keeps few) use the whole in-flight budget and
    /// still reach floodgate with the calls beyond it, which then get the fast overload answer;
    /// it only bounds the memory one connection may tie up.
    pub fn streams_per_connection(&self) -> u32 {
        u32::try_from(self.max_in_flight)
            .unwrap_or(u32::MAX)
            .saturating_mul(2)
            .max(MIN_STREAMS_PER_CONNECTION)
    }
}

/// The in-flight budget of the whole process and the answer beyond it. Clones share the budget.
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    overload_answer: OverloadAnswer,
}

impl Admission {
    pub fn new(settings: AdmissionSettings) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(
                settings.max_in_flight.min(Semaphore::MAX_PERMITS),
            )),
            overload_answer: settings.overload_answer,
        }
    }

    /// A permit to decide one call, held until it is answered; `None` at the bound. Never waits:
    /// a call that would wait gets the overload answer instead.
    pub fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }

    pub fn overload_answer(&self) -> OverloadAnswer {
        self.overload_answer
    }
}

/// What admission made of a gRPC call whose message is in.
#[derive(Debug)]
pub enum Admitted<'a> {
    /// Decide it from `start` (its budget the rest of its deadline; `None`: no deadline),
    /// holding the permit until the answer is built.
    Decide {
        _permit: SemaphorePermit<'a>,
        start: CallStart,
    },
    /// Beyond the in-flight bound: answer with this at once.
    Overloaded(OverloadAnswer),
    /// Its deadline passed while its message arrived: not decided.
    Expired,
}

impl<'a> Admitted<'a> {
    /// Admits the call being answered on this task (its clock from `server::grpc_deadline`)
    /// into `admission`'s budget. Refusals are counted here. The clock read that spends the
    /// deadline is also where the decision's duration starts.
    pub fn check(admission: &'a Admission) -> Self {
        let Ok(permit) = admission.permits.try_acquire() else {
            metrics::overload_rejected(OverloadReason::InFlight);
            return Admitted::Overloaded(admission.overload_answer);
        };
        let now = Instant::now();
        let decide = |budget| Admitted::Decide {
            _permit: permit,
            start: CallStart { at: now, budget },
        };
        let Some(clock) = CallClock::of_this_call() else {
            return decide(None);
        };
        let waited = now.saturating_duration_since(clock.arrived);
        match remaining_budget(clock.timeout, waited) {
            Budget::Unbounded => decide(None),
            Budget::Remaining(left) => decide(Some(left)),
            Budget::Expired => {
                metrics::overload_rejected(OverloadReason::Deadline);
                Admitted::Expired
            }
        }
    }
}

/// Why a call refused at the in-flight bound under `--overload-answer unavailable` was refused.
pub const OVERLOADED_MESSAGE: &str = "floodgate is overloaded: too many calls in flight";

/// The status of a call refused at the in-flight bound under `--overload-answer unavailable`.
pub fn overloaded_status() -> Status {
    Status::unavailable(OVERLOADED_MESSAGE)
}

/// The status of a call whose deadline passed before or while it was decided.
pub fn expired_status() -> Status {
    Status::deadline_exceeded("the deadline (grpc-timeout) passed before a decision")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Admits a call that arrived now with `timeout` (`None`: no deadline).
    fn arrive(admission: &Admission, timeout: Option<Duration>) -> Admitted<'_> {
        let clock = CallClock {
            arrived: Instant::now(),
            timeout,
        };
        clock.lend(|| Admitted::check(admission))
    }

    fn admission(max_in_flight: usize, answer: OverloadAnswer) -> Admission {
        Admission::new(AdmissionSettings {
            max_in_flight,
            overload_answer: answer,
            ..AdmissionSettings::default()
        })
    }

    const TEN_SECONDS: Option<Duration> = Some(Duration::from_secs(10));

    #[test]
    fn calls_beyond_the_bound_get_the_overload_answer_until_a_permit_returns() {
        let admission = admission(2, OverloadAnswer::OverLimit);
        let first = arrive(&admission, TEN_SECONDS);
        let second = arrive(&admission, TEN_SECONDS);
        assert!(matches!(first, Admitted::Decide { .. }));
        assert!(matches!(second, Admitted::Decide { .. }));
        assert!(matches!(
            arrive(&admission, TEN_SECONDS),
            Admitted::Overloaded(OverloadAnswer::OverLimit)
        ));
        drop(first);
        assert!(matches!(
            arrive(&admission, TEN_SECONDS),
            Admitted::Decide { .. }
        ));
    }

    #[test]
    fn grpc_and_http_calls_draw_on_one_budget() {
        let admission = admission(2, OverloadAnswer::Ok);
        let grpc_call = arrive(&admission, None);
        assert!(matches!(grpc_call, Admitted::Decide { .. }));
        let http_call = admission.try_admit();
        assert!(http_call.is_some());
        assert!(admission.try_admit().is_none());
        assert!(matches!(
            arrive(&admission, None),
            Admitted::Overloaded(OverloadAnswer::Ok)
        ));
        drop(http_call);
        assert!(matches!(arrive(&admission, None), Admitted::Decide { .. }));
    }

    #[test]
    fn unavailable_is_answered_by_the_handler_once_the_message_is_in() {
        let admission = admission(0, OverloadAnswer::Unavailable);
        assert!(matches!(
            arrive(&admission, None),
            Admitted::Overloaded(OverloadAnswer::Unavailable)
        ));
    }

    #[test]
    fn a_spent_deadline_is_not_decided() {
        let admission = admission(4, OverloadAnswer::Ok);
        assert!(matches!(
            arrive(&admission, Some(Duration::from_nanos(1))),
            Admitted::Expired
        ));
    }

    #[test]
    fn a_live_deadline_is_decided_with_what_is_left_of_it() {
        let admission = admission(4, OverloadAnswer::Ok);
        match arrive(&admission, TEN_SECONDS) {
            Admitted::Decide {
                start: CallStart {
                    budget: Some(left), ..
                },
                ..
            } => assert!(left <= Duration::from_secs(10) && left > Duration::from_secs(9)),
            other => panic!("decided within its deadline, not {other:?}"),
        }
        assert!(matches!(
            arrive(&admission, None),
            Admitted::Decide {
                start: CallStart { budget: None, .. },
                ..
            }
        ));
    }

    #[test]
    fn the_decision_starts_at_the_reading_that_spent_the_deadline() {
        let admission = admission(1, OverloadAnswer::Ok);
        let clock = CallClock {
            arrived: Instant::now() - Duration::from_millis(50),
            timeout: TEN_SECONDS,
        };
        let before = Instant::now();
        let admitted = clock.lend(|| Admitted::check(&admission));
        let after = Instant::now();
        let Admitted::Decide {
            start: CallStart {
                at,
                budget: Some(left),
            },
            ..
        } = admitted
        else {
            panic!("decided within its deadline, not {admitted:?}");
        };
        assert!(
            before <= at && at <= after,
            "started at the admission's reading"
        );
        assert_eq!(left, Duration::from_secs(10) - (at - clock.arrived));
    }

    #[test]
    fn a_call_outside_a_listener_is_decided_without_a_deadline() {
        let admission = admission(1, OverloadAnswer::Ok);
        assert!(matches!(
            Admitted::check(&admission),
            Admitted::Decide {
                start: CallStart { budget: None, .. },
                ..
            }
        ));
    }

    #[test]
    fn streams_per_connection_leave_room_beyond_the_bound() {
        let streams = |max_in_flight| {
            AdmissionSettings {
                max_in_flight,
                overload_answer: OverloadAnswer::Ok,
                ..AdmissionSettings::default()
            }
            .streams_per_connection()
        };
        assert_eq!(streams(0), 200);
        assert_eq!(streams(1024), 2048);
        assert_eq!(streams(usize::MAX), u32::MAX);
    }
}
