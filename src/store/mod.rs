//! Where counters live. A store evaluates every counter of one request, asks the core whether
//! the request is over its limits and which counters it charges (all or none by default,
//! `core::decision::charging`), and charges them, atomically.

pub mod held_windows;
pub mod hybrid;
pub mod memory;
pub mod redis;

use std::future::Future;
use std::time::Duration;

use self::redis::UnsupportedQuota;
use crate::core::arithmetic::algorithm::{Quota, State};
use crate::core::arithmetic::ban::BanOutcome;
use crate::core::arithmetic::lease::{LeaseCall, LeaseOutcome};
use crate::core::decision::bans::BanCall;
use crate::core::decision::plan::Counter;
pub use crate::core::decision::response::Decided;
use crate::core::ground::time::Micros;
use crate::core::policy::rlqs::BucketKey;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the {backend} store is unavailable: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },
    /// The store's settings cannot work (a malformed address, TLS files for a plain
    /// connection…): unlike an unreachable server, waiting does not help.
    #[error("the {backend} store is misconfigured: {reason}")]
    Misconfigured {
        backend: &'static str,
        reason: String,
    },
    /// The memory store holds `max_keys` counters, all exhausted: a new one would need one of
    /// them forgotten, which would hand its budget back.
    #[error(
        "the memory store is full of exhausted counters (--max-keys {max_keys}); raise --max-keys"
    )]
    Full { max_keys: usize },
    /// A limit this store cannot count exactly, which only the request brought (an Envoy limit
    /// override; the configuration checks refuse such rules at load): the request's fault,
    /// answered as an invalid request, not by the failure policy.
    #[error("the {backend} store cannot count this limit exactly: {reason}")]
    Unsupported {
        backend: &'static str,
        reason: String,
    },
}

/// A place that keeps counters.
pub trait Store: Send + Sync + 'static {
    /// Evaluates `counters` together and charges them as the store's charging mode says (all
    /// or none unless told; `global_shadow`: the request is never over; see `core::ground::verdict` and
    /// `core::decision::charging`).
    fn decide(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> impl Future<Output = Result<Decided, StoreError>> + Send;

    /// Decides a request's lease calls (concurrency rules) together, as `core::arithmetic::lease::settle`
    /// does: one outcome per call, in order, and when an acquire is refused nothing changes.
    fn leases(
        &self,
        calls: &[LeaseCall],
    ) -> impl Future<Output = Result<Vec<LeaseOutcome>, StoreError>> + Send;

    /// A short name for logs and metrics (`memory`, `redis`).
    fn backend(&self) -> &'static str;

    /// Whether this store decides `quota` exactly, or why not: a store that decides with the
    /// Redis scripts cannot count every quota in their doubles (`redis::check_quota`). Rules
    /// are checked so at load; an operator's override is checked so before it applies. A store
    /// in this process decides every quota.
    fn check_quota(&self, quota: &Quota) -> Result<(), UnsupportedQuota> {
        let _ = quota;
        Ok(())
    }

    /// Whether the store can take requests now; health is NOT_SERVING while it cannot. Polled
    /// about once a second (an answer later than 2 s counts as not ready). A store in this
    /// process is always ready.
    fn ready(&self) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// What the store holds for each of `counters`, in order (`None`: nothing, or a state past
    /// its expiry), changing nothing: for an operator who asks what one counter holds.
    fn held(
        &self,
        counters: &[Counter],
    ) -> impl Future<Output = Result<Vec<Option<HeldCounter>>, StoreError>> + Send {
        let _ = counters;
        async { Err(self.cannot_inspect()) }
    }

    /// How a request of one hit would find each of `counters`, which the caller made
    /// check-only (they charge nothing): as every instance sees them, where a store keeps
    /// views of its own.
    fn look(
        &self,
        counters: &[Counter],
    ) -> impl Future<Output = Result<Decided, StoreError>> + Send {
        self.decide(counters, false)
    }

    /// Forgets `counters` (their next request finds a fresh counter): how many it held.
    fn reset(
        &self,
        counters: &[Counter],
    ) -> impl Future<Output = Result<usize, StoreError>> + Send {
        let _ = counters;
        async { Err(self.cannot_inspect()) }
    }

    /// Decides `calls` on their keys' ban records in order (`core::arithmetic::ban::decide`),
    /// each seeing what the earlier ones left: one outcome per call.
    fn bans(
        &self,
        calls: &[BanCall],
    ) -> impl Future<Output = Result<Vec<BanOutcome>, StoreError>> + Send {
        let _ = calls;
        async {
            Err(StoreError::Unsupported {
                backend: self.backend(),
                reason: "this store keeps no bans".to_owned(),
            })
        }
    }

    /// The answer of a store that cannot show or forget one counter (a test double).
    fn cannot_inspect(&self) -> StoreError {
        StoreError::Unsupported {
            backend: self.backend(),
            reason: "this store cannot show or reset one counter".to_owned(),
        }
    }
}

/// One counter's stored state, as a store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldCounter {
    pub state: State,
    /// After this instant (µs on the store's clock) the state means the same as none.
    pub expires_at: Micros,
}

/// One bucket's demand an instance publishes to the others (RLQS across floodgates).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DemandItem<'a> {
    pub domain: &'a str,
    pub bucket: &'a BucketKey,
    /// Requests per second this instance's Envoys offer on it; `None` while none is measured.
    pub demand: Option<f64>,
}

/// Which published demands an exchange counts (`core::policy::rlqs::peer_entry`), and how long it may
/// take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExchangeTerms {
    /// An instance that published within it is live.
    pub horizon: Duration,
    /// One that stopped publishing still counts this long after its last demand.
    pub memory: Duration,
    /// Forget, now, the instances that stopped publishing: the caller has heard every Envoy
    /// since they stopped.
    pub retire: bool,
    pub deadline: Duration,
}

/// Where floodgates that serve RLQS for the same Envoys fleet meet (`engine::rlqs::exchange`).
pub trait RlqsPeers: Send + Sync + 'static {
    /// Publishes `instance`'s demand on each bucket of `items` and reads back, per item in
    /// order, the demands of every other instance that count under `terms`.
    fn exchange_demands(
        &self,
        instance: u64,
        items: &[DemandItem<'_>],
        terms: ExchangeTerms,
    ) -> impl Future<Output = Result<Vec<Vec<Option<f64>>>, StoreError>> + Send;
}

/// Values every instance that shares a store sees, beside the counters: adaptive limits, who
/// steps them, pushed signals, operators' overrides. Each call has its own `deadline` (these
/// calls are off the decision path; a store may grant a longer one it was told to use).
pub trait SharedValues: Send + Sync {
    /// The prefix this store's keys start with (`--redis-prefix`).
    fn key_prefix(&self) -> &str;

    /// `value` at `key` for `ttl`, unless `key` holds a value already: whether it was set.
    fn set_if_absent(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// `value` at `key` for `ttl`, replacing what was there.
    fn set(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The value at `key`, if any.
    fn get(
        &self,
        key: &str,
        deadline: Duration,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// `value` at `field` of the map `key`, and the whole map kept for `ttl` from now.
    fn put_field(
        &self,
        key: &str,
        field: &str,
        value: &str,
        ttl: Duration,
        deadline: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes `fields` from the map `key`: how many were there.
    fn remove_fields(
        &self,
        key: &str,
        fields: &[String],
        deadline: Duration,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every field of the map `key` with its value.
    fn fields(
        &self,
        key: &str,
        deadline: Duration,
    ) -> impl Future<Output = Result<Vec<(String, String)>, StoreError>> + Send;
}
