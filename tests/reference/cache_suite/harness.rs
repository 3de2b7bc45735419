//! The reference's `DoLimit` as floodgate's cache layer answers it: the request planned
//! against the rules, decided by either store, the answer assembled, and the per-rule stats the
//! reference asserts as floodgate's metrics count them — the core's classification that
//! `telemetry::record` adds to `floodgate_requests_allowed_total`,
//! `floodgate_requests_rejected_total` and `floodgate_near_limit_total`, read here per request
//! because the process's metric registry follows one rule set at a time. A manual clock stands
//! for the Go tests' mocked time source.

use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::CheckRule;
use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::headers::HeaderMode;
use floodgate::core::decision::outcome::{
    classify_descriptor, descriptor_near_limit, RejectReason, RuleVerdict,
};
use floodgate::core::decision::plan::{plan, DescriptorPlan, PlanSettings};
use floodgate::core::decision::response::{assemble, Decided, Response};
use floodgate::core::decision::semantics::Semantics;
use floodgate::core::decision::status::{Code, CurrentLimit, DescriptorStatus};
use floodgate::core::ground::time::{Clock, ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::ground::unit::Unit;
use floodgate::core::policy::config::load_valid;
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::request::{Descriptor, Request, RequestBounds};
use floodgate::core::policy::rules::RuleSet;
use floodgate::store::memory::MemoryStore;
use floodgate::store::redis::{RedisStore, ReferenceCounters};
use floodgate::store::Store;
use floodgate::telemetry::DEFAULT_NEAR_LIMIT_RATIO;
use floodgate_testkit::redis::RedisServer;

/// Where the counters live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// Redis, under floodgate's own keys.
    Redis,
    /// Redis, under envoyproxy/ratelimit's keys and its commands (`--redis-counters
    /// reference`, the `ratelimit` door's default): only with the reference's charging.
    RedisReferenceKeys,
}

impl Backend {
    /// The backends every charging mode can use.
    pub const ALL: [Backend; 2] = [Backend::Memory, Backend::Redis];
    /// With the reference's keys too, for the reference's charging modes.
    pub const WITH_REFERENCE_KEYS: [Backend; 3] =
        [Backend::Memory, Backend::Redis, Backend::RedisReferenceKeys];

    fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
            Backend::RedisReferenceKeys => "redis_reference",
        }
    }
}

enum Stores {
    Memory(MemoryStore),
    Redis(RedisStore),
}

/// One floodgate cache: rules, a store, a clock.
pub struct Cache {
    rules: RuleSet,
    store: Stores,
    clock: Arc<ManualClock>,
    /// The rules' domain, unique to the test, backend and mode (Redis keys of one server are
    /// never shared anyway; the name says whose a key is).
    pub domain: String,
    charging: Charging,
    check_only: CheckRule,
    /// Kept running while the cache is.
    redis: Option<RedisServer>,
}

/// Options beside the rules.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub backend: Backend,
    pub charging: Charging,
    /// Which check-only descriptor a counter admits.
    pub check_only: CheckRule,
    /// The mocked `UnixNow()`, in seconds.
    pub now_seconds: i64,
}

impl Cache {
    /// A cache for `rules`, a YAML file whose `domain:` is `{domain}` (replaced by a domain
    /// unique to `test` and `setup`).
    pub async fn start(test: &str, rules: &str, setup: Setup) -> Cache {
        Self::start_with_prefix(test, rules, setup, None).await
    }

    /// [`Cache::start`], with Redis keys under `prefix` (`CACHE_KEY_PREFIX`).
    pub async fn start_with_prefix(
        test: &str,
        rules: &str,
        setup: Setup,
        prefix: Option<&str>,
    ) -> Cache {
        let domain =
            format!("{test}_{}_{}", setup.backend.name(), setup.charging).replace('-', "_");
        let rules = load_valid("cache_suite.yaml", &rules.replace("{domain}", &domain));
        let clock = Arc::new(ManualClock::new(setup.now_seconds * MICROS_PER_SECOND));
        let (store, redis) = match setup.backend {
            Backend::Memory => {
                let store = MemoryStore::new(10_000, clock.clone()).charging(setup.charging);
                (Stores::Memory(store), None)
            }
            Backend::Redis | Backend::RedisReferenceKeys => {
                let server = RedisServer::start();
                let mut options = server.options(Some(clock.clone() as Arc<dyn Clock>));
                options.charging = setup.charging;
                if let Some(prefix) = prefix {
                    options.key_prefix = prefix.to_owned();
                }
                if setup.backend == Backend::RedisReferenceKeys {
                    options.reference_counters = Some(ReferenceCounters {
                        expiration_jitter_max_seconds: 0,
                        ..ReferenceCounters::new(prefix.unwrap_or_default())
                    });
                }
                let store = RedisStore::connect(&options)
                    .await
                    .unwrap_or_else(|error| panic!("cannot connect the store: {error}"));
                (Stores::Redis(store), Some(server))
            }
        };
        Cache {
            rules,
            store,
            clock,
            domain,
            charging: setup.charging,
            check_only: setup.check_only,
            redis,
        }
    }

    /// The Go test's `timeSource.EXPECT().UnixNow().Return(seconds)`.
    pub fn set_time(&self, seconds: i64) {
        self.clock.set(seconds * MICROS_PER_SECOND);
    }

    pub fn redis(&self) -> Option<&RedisServer> {
        self.redis.as_ref()
    }

    /// `DoLimit` for one request of this cache's domain.
    pub async fn do_limit(&self, descriptors: &[Hit<'_>]) -> Response {
        self.measured(descriptors).await.0
    }

    /// `DoLimit`, with what the request adds to the stats of each descriptor's rule.
    pub async fn measured(&self, descriptors: &[Hit<'_>]) -> (Response, Vec<Stats>) {
        let request = Request {
            domain: self.domain.clone(),
            descriptors: descriptors.iter().map(Hit::descriptor).collect(),
            hits_addend: 1,
        };
        if let Err(invalid) = request.validate(&RequestBounds::default()) {
            panic!("{}: {invalid}", self.domain);
        }
        let settings = PlanSettings {
            check_only: self.check_only,
            ..PlanSettings::default()
        };
        let plan = plan(&request, self.rules.domain(&request.domain), settings);
        let decided = if plan.counters.is_empty() {
            Decided::default()
        } else {
            let decided = match &self.store {
                Stores::Memory(store) => store.decide(&plan.counters, false).await,
                Stores::Redis(store) => store.decide(&plan.counters, false).await,
            };
            decided.unwrap_or_else(|error| panic!("{}: {error}", self.domain))
        };
        let response = assemble(
            &plan,
            &decided.outcomes,
            decided.over_limit,
            HeaderMode::None,
        );
        let stats = plan
            .descriptors
            .iter()
            .zip(&response.statuses)
            .map(|(descriptor, status)| {
                let mut stats = match classify_descriptor(descriptor, status, false, &[]) {
                    None => Stats::default(),
                    Some(RuleVerdict::Allowed) => Stats {
                        allowed: 1,
                        ..Stats::default()
                    },
                    Some(RuleVerdict::Rejected(RejectReason::Shadow)) => Stats {
                        shadow: 1,
                        ..Stats::default()
                    },
                    Some(RuleVerdict::Rejected(_)) => Stats {
                        over_limit: 1,
                        ..Stats::default()
                    },
                };
                if let DescriptorPlan::Limited { counters, .. } = descriptor {
                    stats.near_limit =
                        descriptor_near_limit(&plan, counters, &decided, DEFAULT_NEAR_LIMIT_RATIO);
                }
                stats
            })
            .collect();
        (response, stats)
    }

    /// Adds hits to the fixed-window counter of the descriptor `entries` (alone in its
    /// request), whose limit is `limit`, to take it from `from` to `to`: what the Go test's
    /// mocked `INCRBY` reply implies was there before the hits it asserts. Every-descriptor
    /// counts past the limit as the reference does; all or nothing cannot, so there the
    /// counter stops at its limit, where every further hit is refused just the same.
    pub async fn raise(&self, entries: &[(&str, &str)], (from, to): (u64, u64), limit: u64) {
        let (from, to) = match self.charging {
            // A lone descriptor's refused hits are recorded in both.
            Charging::EveryDescriptor | Charging::AllOrRefused => (from, to),
            Charging::AllOrNothing => (from.min(limit), to.min(limit)),
        };
        if to > from {
            self.do_limit(&[Hit::new(entries, to - from)]).await;
        }
    }
}

/// What floodgate's metrics count of the reference's per-limit stats for one request. With one
/// hit per descriptor,
/// `within_limit` is `allowed`, `over_limit` is `over_limit` (plus `shadow` for a shadow-mode
/// limit, which the reference counts in both) and `total_hits` is their sum; `near_limit` is
/// the same count of hits whatever the hits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// `floodgate_requests_allowed_total`: descriptors admitted.
    pub allowed: u64,
    /// `floodgate_requests_rejected_total{reason="limit"}`: descriptors over their limit.
    pub over_limit: u64,
    /// `floodgate_requests_rejected_total{reason="shadow"}`: over, answered OK (shadow mode).
    pub shadow: u64,
    /// `floodgate_near_limit_total`: hits past the near-limit ratio.
    pub near_limit: u64,
}

/// One descriptor of a request: its entries and its own `hits_addend` (`None`: the request's, 1).
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    pub entries: &'a [(&'a str, &'a str)],
    pub hits: Option<u64>,
    /// `is_negative_hits`: the hits are given back.
    pub refund: bool,
}

impl<'a> Hit<'a> {
    pub fn new(entries: &'a [(&'a str, &'a str)], hits: u64) -> Self {
        Self {
            entries,
            hits: Some(hits),
            refund: false,
        }
    }

    pub fn one(entries: &'a [(&'a str, &'a str)]) -> Self {
        Self {
            entries,
            hits: None,
            refund: false,
        }
    }

    /// `hits` given back (`is_negative_hits`).
    pub fn refund(entries: &'a [(&'a str, &'a str)], hits: u64) -> Self {
        Self {
            refund: true,
            ..Self::new(entries, hits)
        }
    }

    fn descriptor(&self) -> Descriptor {
        Descriptor {
            hits_addend: self.hits,
            is_negative_hits: self.refund,
            ..Descriptor::new(
                self.entries
                    .iter()
                    .map(|(key, value)| Entry::new(*key, *value))
                    .collect(),
            )
        }
    }
}

/// The Go tests' expected `DescriptorStatus`: code, `CurrentLimit` (`requests_per_unit` and
/// unit, or none), `LimitRemaining` and `DurationUntilReset` (whole seconds, as the reference's
/// `CalculateReset` gives them; none without a limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub code: Code,
    pub limit: Option<(u32, Unit)>,
    pub remaining: u32,
    pub reset_seconds: Option<i64>,
}

impl Expected {
    pub fn ok(limit: u32, unit: Unit, remaining: u32, reset_seconds: i64) -> Self {
        Self {
            code: Code::Ok,
            limit: Some((limit, unit)),
            remaining,
            reset_seconds: Some(reset_seconds),
        }
    }

    pub fn over(limit: u32, unit: Unit, reset_seconds: i64) -> Self {
        Self {
            code: Code::OverLimit,
            limit: Some((limit, unit)),
            remaining: 0,
            reset_seconds: Some(reset_seconds),
        }
    }

    /// No limit applies (the reference's empty cache key).
    pub fn no_limit() -> Self {
        Self {
            code: Code::Ok,
            limit: None,
            remaining: 0,
            reset_seconds: None,
        }
    }

    fn of(status: &DescriptorStatus) -> Self {
        let limit = status.current_limit.as_ref().map(
            |CurrentLimit {
                 requests_per_unit,
                 unit,
                 ..
             }| (*requests_per_unit, *unit),
        );
        Self {
            code: status.code,
            limit,
            remaining: status.limit_remaining,
            reset_seconds: status.duration_until_reset.map(whole_seconds),
        }
    }
}

fn whole_seconds(micros: Micros) -> i64 {
    micros.div_euclid(MICROS_PER_SECOND)
}

/// Asserts the statuses of `response`, in order.
pub fn assert_statuses(response: &Response, expected: &[Expected], what: &str) {
    let got: Vec<Expected> = response.statuses.iter().map(Expected::of).collect();
    assert_eq!(got, expected, "{what}");
}

/// The setups of a port that holds in both charging modes: every backend, each mode, and the
/// `ratelimit` door's own, the reference's keys.
pub fn every_setup(now_seconds: i64) -> Vec<Setup> {
    let setup = |backend, semantics: Semantics| Setup {
        backend,
        charging: semantics.charging,
        check_only: semantics.check_only,
        now_seconds,
    };
    Backend::ALL
        .into_iter()
        .flat_map(|backend| {
            // `floodgate serve`'s answers, and the `ratelimit` door's (the reference's).
            [Semantics::FLOODGATE, Semantics::REFERENCE].map(|semantics| setup(backend, semantics))
        })
        .chain([setup(Backend::RedisReferenceKeys, Semantics::REFERENCE)])
        .collect()
}
