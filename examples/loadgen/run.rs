//! Sending: the connections, one call, the open-loop dispatcher and the closed-loop workers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitRequest;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::cli::Arrivals;
use crate::grpc::Connection;
use crate::schedule::{until_count, ArrivalClock, Bursts, Plan};
use crate::stats::{ClassStats, Outcome, Recorder, StageStats};
use crate::timer::FineTimer;
use crate::workload::Workload;

/// Opens `count` HTTP/2 connections to `address`.
pub async fn connect(
    address: SocketAddr,
    count: u32,
    timeout: Duration,
) -> Result<Vec<Connection>, String> {
    let mut connections = Vec::with_capacity(count as usize);
    for _ in 0..count {
        connections.push(Connection::open(address, timeout).await?);
    }
    Ok(connections)
}

/// The hard cap on requests sent.
#[derive(Debug)]
pub struct Budget {
    left: AtomicU64,
    exhausted: AtomicBool,
}

impl Budget {
    pub fn new(requests: u64) -> Self {
        Self {
            left: AtomicU64::new(requests),
            exhausted: AtomicBool::new(false),
        }
    }

    /// Takes one request from the budget; false once it is spent.
    fn take(&self) -> bool {
        let taken = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if !taken {
            self.exhausted.store(true, Ordering::Relaxed);
        }
        taken
    }

    pub fn exhausted(&self) -> bool {
        self.exhausted.load(Ordering::Relaxed)
    }
}

/// What every sender shares.
pub struct Shared {
    pub connections: Vec<Connection>,
    pub next_connection: AtomicUsize,
    pub workload: Workload,
    pub recorder: Recorder,
    pub timeout: Duration,
    pub budget: Budget,
}

/// How a call failed, for the error breakdown.
type ErrorKind = String;

impl Shared {
    /// One ShouldRateLimit call on the next connection (round robin); the latency is from
    /// handing the request to the client to having the whole response.
    async fn call(&self, request: RateLimitRequest) -> (Result<Outcome, ErrorKind>, Duration) {
        self.call_from(Instant::now(), request).await
    }

    /// One call whose latency runs from `start` (when the open loop let the request go).
    async fn call_from(
        &self,
        start: Instant,
        request: RateLimitRequest,
    ) -> (Result<Outcome, ErrorKind>, Duration) {
        let index = self.next_connection.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let call = self.connections[index].should_rate_limit(&request);
        let result = tokio::time::timeout(self.timeout, call).await;
        let latency = start.elapsed();
        let outcome = match result {
            Err(_) => Err("timeout".to_owned()),
            Ok(Err(error)) => Err(error.to_string()),
            Ok(Ok(response)) => match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => Ok(Outcome::Ok),
                Ok(Code::OverLimit) => Ok(Outcome::OverLimit),
                _ => Err(format!("overall_code {}", response.overall_code)),
            },
        };
        (outcome, latency)
    }

    fn record(&self, class: &ClassStats, outcome: Result<Outcome, ErrorKind>, latency: Duration) {
        match outcome {
            Ok(outcome) => class.finished(outcome, latency),
            Err(kind) => {
                class.finished(Outcome::Error, latency);
                self.recorder.error_kind(kind);
            }
        }
    }

    /// A legitimate request's answer, counted in `legit` and in its `--mix` class, if any.
    fn record_legit(
        &self,
        stats: &StageStats,
        mix_class: Option<usize>,
        outcome: Result<Outcome, ErrorKind>,
        latency: Duration,
    ) {
        if let Some(class) = mix_class.and_then(|index| stats.mix.get(index)) {
            class.finished(*outcome.as_ref().unwrap_or(&Outcome::Error), latency);
        }
        self.record(&stats.legit, outcome, latency);
    }
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunEnd {
    /// How far into the plan sending went (short of its end when the request cap hit).
    pub elapsed: Duration,
    /// Requests still unanswered when the drain gave up.
    pub abandoned: u64,
}

/// Unrecorded closed-loop traffic: one request in flight per connection.
pub async fn warm_up(shared: &Arc<Shared>, duration: Duration) {
    if duration.is_zero() {
        return;
    }
    let deadline = Instant::now() + duration;
    let mut workers = Vec::new();
    for _ in 0..shared.connections.len() {
        let shared = Arc::clone(shared);
        workers.push(tokio::spawn(async move {
            let mut rng = SmallRng::from_rng(&mut rand::rng());
            while Instant::now() < deadline && shared.budget.take() {
                let (request, _) = shared.workload.legit(&mut rng);
                let _ = shared.call(request).await;
            }
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
}

/// Closed loop: `concurrency` workers each send as soon as their last answer is in, for
/// `duration`. Only answers that arrive before the deadline are counted.
pub async fn closed_loop(shared: &Arc<Shared>, duration: Duration, concurrency: u32) -> RunEnd {
    let start = Instant::now();
    let deadline = start + duration;
    let mut workers = Vec::with_capacity(concurrency as usize);
    for _ in 0..concurrency {
        let shared = Arc::clone(shared);
        workers.push(tokio::spawn(async move {
            let mut rng = SmallRng::from_rng(&mut rand::rng());
            while Instant::now() < deadline && shared.budget.take() {
                let (request, mix_class) = shared.workload.legit(&mut rng);
                let (outcome, latency) = shared.call(request).await;
                if Instant::now() <= deadline {
                    let stats = &shared.recorder.stages[0];
                    stats.legit.sent();
                    if let Some(class) = mix_class.and_then(|index| stats.mix.get(index)) {
                        class.sent();
                    }
                    shared.record_legit(stats, mix_class, outcome, latency);
                }
            }
        }));
    }
    for worker in workers {
        let _ = worker.await;
    }
    RunEnd {
        elapsed: start.elapsed().min(duration),
        abandoned: 0,
    }
}

/// Open loop: requests leave on the plan's schedule whatever the answers do; one that
/// finds all `concurrency` slots busy is not sent and counts as shed.
pub async fn open_loop(
    shared: &Arc<Shared>,
    plan: &Plan,
    bursts: Option<Bursts>,
    arrivals: Arrivals,
    concurrency: u32,
) -> Result<RunEnd, String> {
    let slots = Arc::new(Semaphore::new(concurrency as usize));
    let timer =
        FineTimer::new().map_err(|error| format!("cannot create the pacing timer: {error}"))?;
    let pacer = Pacer {
        shared: Arc::clone(shared),
        slots: Arc::clone(&slots),
        plan: plan.clone(),
        bursts,
        arrivals,
    };
    let t = pacer.run(&timer).await?;
    // Let the calls in flight finish (each is bounded by the request timeout).
    let drain = shared.timeout + Duration::from_secs(1);
    let abandoned = match tokio::time::timeout(drain, slots.acquire_many(concurrency)).await {
        Ok(_) => 0,
        Err(_) => u64::from(concurrency).saturating_sub(slots.available_permits() as u64),
    };
    Ok(RunEnd {
        elapsed: t,
        abandoned,
    })
}

/// What the open loop sends with.
struct Pacer {
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    plan: Plan,
    bursts: Option<Bursts>,
    arrivals: Arrivals,
}

/// The longest the pacer sleeps, so a ramp starting from 0 is noticed soon enough.
const MAX_PACER_SLEEP: Duration = Duration::from_millis(1);
/// The shortest: above a rate of one request per this, requests leave in small batches rather
/// than the pacer waking for each (which would leave the answers no time to be read).
const MIN_PACER_SLEEP: Duration = Duration::from_micros(50);

impl Pacer {
    /// Sends every request when it is due; returns how far into the plan it got.
    async fn run(&self, timer: &FineTimer) -> Result<Duration, String> {
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let mut legit = ArrivalClock::new(self.arrivals, &self.plan, &mut rng);
        let total = self.plan.total();
        let mut bot_due_sent = 0u64;
        let start = Instant::now();
        let mut wake_at = start;
        loop {
            let now = Instant::now();
            let t = now.saturating_duration_since(start).min(total);
            let stage = self
                .plan
                .stage_at(t.saturating_sub(Duration::from_nanos(1)));
            let stats = &self.shared.recorder.stages[stage];
            stats.lag(now.saturating_duration_since(wake_at));

            let legit_due = legit.due_by(t, &self.plan, &mut rng);
            while legit.sent < legit_due {
                legit.sent += 1;
                if !self.dispatch(now, stats, stage, false, &mut rng) {
                    return Ok(t);
                }
            }
            let mut wait = legit.until_next(t, &self.plan);
            if let Some(bursts) = &self.bursts {
                let bot_due = bursts.arrivals_by(t).floor() as u64;
                while bot_due_sent < bot_due {
                    bot_due_sent += 1;
                    if !self.dispatch(now, stats, stage, true, &mut rng) {
                        return Ok(t);
                    }
                }
                let bots_wait =
                    until_count(bot_due_sent + 1, bursts.arrivals_by(t), bursts.rate_at(t));
                wait = wait.min(bots_wait);
            }
            if t >= total {
                return Ok(t);
            }
            let wait = wait.clamp(MIN_PACER_SLEEP, MAX_PACER_SLEEP).min(total - t);
            wake_at = now + wait;
            timer
                .sleep(wait)
                .await
                .map_err(|error| format!("the pacing timer failed: {error}"))?;
        }
    }

    /// Sends one request if a slot is free (else counts it shed); false once the budget is
    /// spent. Its `--mix` class is drawn before the slot is looked for, so a shed request
    /// counts against its class too. Its latency runs from `sent`.
    fn dispatch(
        &self,
        sent: Instant,
        stats: &StageStats,
        stage: usize,
        bot: bool,
        rng: &mut SmallRng,
    ) -> bool {
        let shared = &self.shared;
        let mix_class = if bot {
            None
        } else {
            shared.workload.next_class()
        };
        let class = if bot { &stats.bot } else { &stats.legit };
        let mix_stats = mix_class.and_then(|index| stats.mix.get(index));
        let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() else {
            class.shed();
            if let Some(mix_stats) = mix_stats {
                mix_stats.shed();
            }
            return true;
        };
        if !shared.budget.take() {
            return false;
        }
        class.sent();
        if let Some(mix_stats) = mix_stats {
            mix_stats.sent();
        }
        let request = if bot {
            shared.workload.bot(rng)
        } else {
            shared.workload.legit_in(mix_class, rng)
        };
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            let (outcome, latency) = shared.call_from(sent, request).await;
            let stats = &shared.recorder.stages[stage];
            if bot {
                shared.record(&stats.bot, outcome, latency);
            } else {
                shared.record_legit(stats, mix_class, outcome, latency);
            }
            drop(permit);
        });
        true
    }
}
