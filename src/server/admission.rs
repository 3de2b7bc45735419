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
//! On the gRPC side, two pieces:
//! - [`AdmissionInterceptor`] runs when the call's headers arrive. It stamps the arrival time
//!   and the call's deadline (its `grpc-timeout`, or `--grpc-default-deadline-ms`).
//! - [`Admitted::check`], at the top of the handler, once tonic has decoded the message: it
//!   takes one of `--max-in-flight` permits without waiting, held until the answer is built.
//!   A call beyond the bound gets the overload answer (`core::decision::overload`) at once; a call whose
//!   deadline ran out while its message arrived is not decided at all (DEADLINE_EXCEEDED); any
//!   other call gets the rest of its deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::service::Interceptor;
use tonic::Status;

use crate::core::decision::overload::{
    parse_grpc_timeout, remaining_budget, Budget, OverloadAnswer,
};
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
    default_deadline: Duration,
}

impl Admission {
    pub fn new(settings: AdmissionSettings) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(
                settings.max_in_flight.min(Semaphore::MAX_PERMITS),
            )),
            overload_answer: settings.overload_answer,
            default_deadline: settings.default_deadline,
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

    /// The gRPC listener's side of this budget.
    pub fn interceptor(&self) -> AdmissionInterceptor {
        AdmissionInterceptor {
            admission: self.clone(),
        }
    }
}

/// Stamps each call with its arrival and deadline.
#[derive(Debug, Clone)]
pub struct AdmissionInterceptor {
    admission: Admission,
}

impl Interceptor for AdmissionInterceptor {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        let arrived = Instant::now();
        let default = self.admission.default_deadline;
        let timeout = Some(grpc_timeout(request.metadata()).map_or(default, |t| t.min(default)));
        let watch = timeout
            .and_then(|timeout| arrived.checked_add(timeout))
            .map(|deadline| {
                Arc::new(DeadlineWatch {
                    deadline,
                    settled: AtomicBool::new(false),
                })
            });
        request.extensions_mut().insert(Arrival {
            at: arrived,
            timeout,
            admission: self.admission.clone(),
            watch,
        });
        Ok(request)
    }
}

/// The caller's `grpc-timeout`. A malformed one is no deadline, as tonic's own server reads it.
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    metadata
        .get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| parse_grpc_timeout(text).ok())
}

/// What the interceptor found when the call arrived, carried to the handler in the request's
/// extensions (which is why it is `Clone`: the permit and the watch are shared, not copied).
#[derive(Debug, Clone)]
struct Arrival {
    at: Instant,
    timeout: Option<Duration>,
    /// Where the handler takes its permit once the message is in.
    admission: Admission,
    watch: Option<Arc<DeadlineWatch>>,
}

/// Counts a call with a deadline as `floodgate_overload_rejections_total{reason="deadline"}`
/// when it is dropped unanswered past that deadline. One place for every way that happens: the
/// handler found it spent, the handler's timeout fired, or `server::grpc_deadline` dropped the
/// call while its message was still arriving, before the handler ran.
#[derive(Debug)]
pub struct DeadlineWatch {
    deadline: Instant,
    /// Answered (decided or shed): not a deadline rejection, whenever it is dropped.
    settled: AtomicBool,
}

impl Drop for DeadlineWatch {
    fn drop(&mut self) {
        if !self.settled.load(Ordering::Relaxed) && Instant::now() >= self.deadline {
            metrics::overload_rejected(OverloadReason::Deadline);
        }
    }
}

fn settle(watch: Option<&Arc<DeadlineWatch>>) {
    if let Some(watch) = watch {
        watch.settled.store(true, Ordering::Relaxed);
    }
}

/// How the handler goes on with a call.
#[derive(Debug)]
pub enum Admitted {
    /// Decide (`server::grpc_deadline` ends the call at its deadline); hold the permit until
    /// answered and call [`Admitted::settle`] once decided.
    Decide {
        /// Held, not read: the in-flight bound counts it until the answer drops it.
        _permit: Option<OwnedSemaphorePermit>,
        watch: Option<Arc<DeadlineWatch>>,
        /// What is left of the call's deadline (`None`: none): an answer held for its turn
        /// (`engine::waiting`) past it is refused at once instead.
        budget: Option<Duration>,
    },
    /// Do not decide: answer with this overload answer now.
    Overloaded(OverloadAnswer),
    /// Do not decide: the caller's deadline has passed.
    Expired,
}

impl Admitted {
    /// Takes the arrival stamp out of the request (so the permit lives as long as the returned
    /// value, not as long as the request) and says what to do with the call. A call that came
    /// without the interceptor counts as arriving now.
    pub fn check<T>(request: &mut tonic::Request<T>) -> Self {
        let arrival = match request.extensions_mut().remove::<Arrival>() {
            Some(arrival) => arrival,
            None => {
                return Admitted::Decide {
                    _permit: None,
                    watch: None,
                    budget: None,
                }
            }
        };
        let Some(permit) = arrival.admission.try_admit() else {
            settle(arrival.watch.as_ref());
            metrics::overload_rejected(OverloadReason::InFlight);
            return Admitted::Overloaded(arrival.admission.overload_answer);
        };
        match remaining_budget(arrival.timeout, arrival.at.elapsed()) {
            Budget::Unbounded => Admitted::Decide {
                _permit: Some(permit),
                watch: arrival.watch,
                budget: None,
            },
            Budget::Remaining(left) => Admitted::Decide {
                _permit: Some(permit),
                watch: arrival.watch,
                budget: Some(left),
            },
            // The watch, dropped unsettled past the deadline, counts it.
            Budget::Expired => Admitted::Expired,
        }
    }

    /// The call was decided in time: whenever it is dropped, it is no deadline rejection.
    pub fn settle(&self) {
        if let Admitted::Decide { watch, .. } = self {
            settle(watch.as_ref());
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

    fn arrive(interceptor: &mut AdmissionInterceptor, timeout: Option<&str>) -> Admitted {
        let mut request = tonic::Request::new(());
        if let Some(timeout) = timeout {
            if let Ok(value) = timeout.parse() {
                request.metadata_mut().insert("grpc-timeout", value);
            }
        }
        match interceptor.call(request) {
            Ok(mut request) => Admitted::check(&mut request),
            Err(status) => panic!("the interceptor refuses nothing, but refused: {status}"),
        }
    }

    fn interceptor(max_in_flight: usize, answer: OverloadAnswer) -> AdmissionInterceptor {
        Admission::new(AdmissionSettings {
            max_in_flight,
            overload_answer: answer,
            ..AdmissionSettings::default()
        })
        .interceptor()
    }

    #[test]
    fn calls_beyond_the_bound_get_the_overload_answer_until_a_permit_returns() {
        let mut interceptor = interceptor(2, OverloadAnswer::OverLimit);
        let first = arrive(&mut interceptor, None);
        let second = arrive(&mut interceptor, None);
        assert!(matches!(first, Admitted::Decide { .. }));
        assert!(matches!(second, Admitted::Decide { .. }));
        assert!(matches!(
            arrive(&mut interceptor, None),
            Admitted::Overloaded(OverloadAnswer::OverLimit)
        ));
        drop(first);
        assert!(matches!(
            arrive(&mut interceptor, None),
            Admitted::Decide { .. }
        ));
    }

    #[test]
    fn grpc_and_http_calls_draw_on_one_budget() {
        let admission = Admission::new(AdmissionSettings {
            max_in_flight: 2,
            overload_answer: OverloadAnswer::Ok,
            ..AdmissionSettings::default()
        });
        let mut grpc = admission.interceptor();
        let grpc_call = arrive(&mut grpc, None);
        assert!(matches!(grpc_call, Admitted::Decide { .. }));
        let http_call = admission.try_admit();
        assert!(http_call.is_some());
        assert!(admission.try_admit().is_none());
        assert!(matches!(
            arrive(&mut grpc, None),
            Admitted::Overloaded(OverloadAnswer::Ok)
        ));
        drop(http_call);
        assert!(matches!(arrive(&mut grpc, None), Admitted::Decide { .. }));
    }

    #[test]
    fn unavailable_is_answered_by_the_handler_once_the_message_is_in() {
        let mut interceptor = interceptor(0, OverloadAnswer::Unavailable);
        assert!(matches!(
            arrive(&mut interceptor, None),
            Admitted::Overloaded(OverloadAnswer::Unavailable)
        ));
    }

    #[test]
    fn a_call_that_never_reaches_the_handler_holds_no_permit() {
        let admission = Admission::new(AdmissionSettings {
            max_in_flight: 1,
            ..AdmissionSettings::default()
        });
        let mut grpc = admission.interceptor();
        // Headers in, message never sent: the interceptor ran, the handler did not.
        let stalled: Vec<_> = (0..100)
            .filter_map(|_| grpc.call(tonic::Request::new(())).ok())
            .collect();
        assert_eq!(stalled.len(), 100);
        assert!(matches!(arrive(&mut grpc, None), Admitted::Decide { .. }));
    }

    #[test]
    fn a_spent_deadline_is_not_decided() {
        let mut interceptor = interceptor(4, OverloadAnswer::Ok);
        assert!(matches!(
            arrive(&mut interceptor, Some("1n")),
            Admitted::Expired
        ));
    }

    #[test]
    fn a_live_deadline_is_decided_and_a_missing_or_malformed_one_gets_the_default() {
        let mut interceptor = interceptor(4, OverloadAnswer::Ok);
        for timeout in [Some("10S"), Some("10x"), None] {
            assert!(
                matches!(arrive(&mut interceptor, timeout), Admitted::Decide { .. }),
                "{timeout:?}"
            );
        }
        let mut stamped = |timeout: Option<&str>| {
            let mut request = tonic::Request::new(());
            if let Some(value) = timeout.and_then(|text| text.parse().ok()) {
                request.metadata_mut().insert("grpc-timeout", value);
            }
            interceptor
                .call(request)
                .ok()
                .and_then(|request| request.extensions().get::<Arrival>().cloned())
                .and_then(|arrival| arrival.timeout)
        };
        assert_eq!(stamped(Some("20m")), Some(Duration::from_millis(20)));
        assert_eq!(stamped(Some("60S")), Some(DEFAULT_GRPC_DEADLINE));
        assert_eq!(stamped(Some("10x")), Some(DEFAULT_GRPC_DEADLINE));
        assert_eq!(stamped(None), Some(DEFAULT_GRPC_DEADLINE));
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
