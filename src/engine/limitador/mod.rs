//! Limitador's limits, live: the limits file in force ([`limits_file`], CEL in
//! [`expression`]), reloaded when it changes ([`follow`]), and the calls Limitador answers —
//! check, report, check-and-report, reserve, commit — over the Limitador-format counters of
//! `store::held_windows`. The servers (`server::kuadrant`, `server::limitador_http` and the
//! RLS service for a domain that is a Limitador namespace) only translate to these calls.

pub mod expression;
pub mod follow;
pub mod limits_file;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::core::arithmetic::held_window::HoldBounds;
use crate::store::held_windows::{CounterSpec, HeldWindows, HoldRequest, LiveCounter};
use crate::store::StoreError;
use expression::Bindings;
use limits_file::{namespace_key_prefix, Limit, LimitSet};

/// A call Limitador could not answer.
#[derive(Debug, thiserror::Error)]
pub enum LimitadorError {
    #[error("limit {limit}: the {role} `{expression}` cannot be evaluated: {reason}")]
    Evaluation {
        limit: String,
        role: &'static str,
        expression: String,
        reason: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A counter a call matched, with what the call left of it.
#[derive(Debug, Clone)]
pub struct CounterAnswer {
    pub limit: Arc<Limit>,
    /// Each variable's source and value.
    pub values: BTreeMap<String, String>,
    pub remaining: u64,
    pub expires_in: Duration,
}

/// The answer to a check, a check-and-report or a reservation.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub limited: bool,
    pub counters: Vec<CounterAnswer>,
    /// A reservation's id when one is held (admitted, and something to hold).
    pub reservation_id: Option<String>,
    /// The amount a reservation holds.
    pub held: u64,
}

/// The counters of one call: each matching limit with its variables' values.
struct Matched {
    limits: Vec<(Arc<Limit>, BTreeMap<String, String>)>,
    specs: Vec<CounterSpec>,
}

/// Limitador's limits in force over a store of their counters.
pub struct Limitador {
    limits: ArcSwap<LimitSet>,
    counters: Arc<dyn HeldWindows>,
    bounds: HoldBounds,
}

impl Limitador {
    pub fn new(limits: LimitSet, counters: Arc<dyn HeldWindows>, bounds: HoldBounds) -> Self {
        Self {
            limits: ArcSwap::from_pointee(limits),
            counters,
            bounds,
        }
    }

    /// Puts `limits` in force; counters of limits kept (same namespace, seconds, conditions
    /// and variables) keep their values, as in Limitador.
    pub fn replace_limits(&self, limits: LimitSet) {
        self.limits.store(Arc::new(limits));
    }

    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.limits.load().has_namespace(namespace)
    }

    /// The limits of `namespace`.
    pub fn limits(&self, namespace: &str) -> Vec<Arc<Limit>> {
        self.limits.load().namespace(namespace).to_vec()
    }

    /// Whether `delta` more fits every matching counter (holds ignored); `apply`: charged
    /// when it does (Limitador's `check_and_report`, Envoy's `ShouldRateLimit`).
    pub async fn check(
        &self,
        namespace: &str,
        bindings: Bindings,
        delta: u64,
        apply: bool,
    ) -> Result<Answer, LimitadorError> {
        let matched = self.matching(namespace, &bindings)?;
        if matched.specs.is_empty() {
            return Ok(Answer::default());
        }
        let decided = self.counters.check(&matched.specs, delta, apply).await?;
        Ok(answer(matched, decided))
    }

    /// Adds `delta` to every matching counter, unconditionally.
    pub async fn report(
        &self,
        namespace: &str,
        bindings: Bindings,
        delta: u64,
    ) -> Result<(), LimitadorError> {
        let matched = self.matching(namespace, &bindings)?;
        if matched.specs.is_empty() {
            return Ok(());
        }
        Ok(self.counters.add(&matched.specs, delta).await?)
    }

    /// Holds `amount` (clamped by the hold bounds) against every matching counter when, with
    /// the holds outstanding, it fits all of them; for at most `ttl` (the maximum when none).
    pub async fn reserve(
        &self,
        namespace: &str,
        bindings: Bindings,
        amount: u64,
        ttl: Option<Duration>,
    ) -> Result<Answer, LimitadorError> {
        let matched = self.matching(namespace, &bindings)?;
        if matched.specs.is_empty() {
            return Ok(Answer::default());
        }
        let hold_amount = self
            .bounds
            .hold_amount(amount, matched.specs.iter().map(|spec| spec.max_value));
        let ttl = self
            .bounds
            .hold_ttl(ttl.map(|ttl| ttl.as_micros().try_into().unwrap_or(u64::MAX)));
        let id = reservation_id();
        let request = HoldRequest {
            id: &id,
            check_amount: amount,
            hold_amount,
            ttl,
        };
        let decided = self.counters.reserve(&matched.specs, request).await?;
        let mut answer = answer(matched, decided);
        if !answer.limited {
            answer.held = hold_amount;
            answer.reservation_id = (hold_amount > 0).then_some(id);
        }
        Ok(answer)
    }

    /// Adds the actual usage to every matching counter, unconditionally, and releases the
    /// hold `id`; whether a hold was released.
    pub async fn commit(
        &self,
        namespace: &str,
        bindings: Bindings,
        id: Option<&str>,
        actual: u64,
    ) -> Result<bool, LimitadorError> {
        let matched = self.matching(namespace, &bindings)?;
        if matched.specs.is_empty() {
            return Ok(false);
        }
        self.counters.add(&matched.specs, actual).await?;
        match id {
            Some(id) => Ok(self.counters.release(&matched.specs, id).await?),
            None => Ok(false),
        }
    }

    /// The live counters of `namespace`, each with the limit in force it counts for.
    pub async fn counters(&self, namespace: &str) -> Result<Vec<CounterAnswer>, LimitadorError> {
        let live = self
            .counters
            .live_counters(&namespace_key_prefix(namespace))
            .await?;
        let limits = self.limits(namespace);
        Ok(live
            .into_iter()
            .filter_map(|counter| counter_of(&limits, counter))
            .collect())
    }

    fn matching(&self, namespace: &str, bindings: &Bindings) -> Result<Matched, LimitadorError> {
        let limits = self.limits.load();
        let mut matched = Matched {
            limits: Vec::new(),
            specs: Vec::new(),
        };
        for limit in limits.namespace(namespace) {
            let Some(values) = applies(limit, bindings)? else {
                continue;
            };
            matched.specs.push(CounterSpec {
                key: limit.counter_key(&values),
                max_value: limit.max_value,
                window: limit.seconds.saturating_mul(1_000_000),
            });
            matched.limits.push((Arc::clone(limit), values));
        }
        Ok(matched)
    }
}

/// The values of `limit`'s variables when it applies to the call (every condition true, every
/// variable bound and found), `None` when it does not.
fn applies(
    limit: &Limit,
    bindings: &Bindings,
) -> Result<Option<BTreeMap<String, String>>, LimitadorError> {
    let scope = bindings.for_limit(limit.name.as_deref(), limit.id.as_deref());
    let failed = |role, expression: &expression::Expression, reason| LimitadorError::Evaluation {
        limit: limit.label(),
        role,
        expression: expression.source().to_owned(),
        reason,
    };
    for condition in &limit.conditions {
        if !condition
            .test(&scope)
            .map_err(|reason| failed("condition", condition, reason))?
        {
            return Ok(None);
        }
    }
    if !limit
        .variables
        .iter()
        .all(|variable| variable.is_bound_by(bindings))
    {
        return Ok(None);
    }
    let mut values = BTreeMap::new();
    for variable in &limit.variables {
        match variable
            .value(&scope)
            .map_err(|reason| failed("variable", variable, reason))?
        {
            Some(value) => values.insert(variable.source().to_owned(), value),
            None => return Ok(None),
        };
    }
    Ok(Some(values))
}

fn answer(matched: Matched, decided: crate::store::held_windows::WindowsDecided) -> Answer {
    let counters = matched
        .limits
        .into_iter()
        .zip(decided.admission.remaining.iter().zip(&decided.window_ttls))
        .map(|((limit, values), (remaining, ttl))| CounterAnswer {
            limit,
            values,
            remaining: *remaining,
            expires_in: Duration::from_micros(*ttl),
        })
        .collect();
    Answer {
        limited: !decided.admission.admitted(),
        counters,
        reservation_id: None,
        held: 0,
    }
}

/// The limit in force a stored counter counts for, matched by its key's prefix.
fn counter_of(limits: &[Arc<Limit>], counter: LiveCounter) -> Option<CounterAnswer> {
    limits.iter().find_map(|limit| {
        let values_json = counter.key.strip_prefix(limit.key_prefix())?;
        let values_json = values_json.strip_suffix(']')?;
        let values: BTreeMap<String, String> = serde_json::from_str(values_json).ok()?;
        Some(CounterAnswer {
            limit: Arc::clone(limit),
            values,
            remaining: limit.max_value.saturating_sub(counter.value),
            expires_in: Duration::from_micros(counter.ttl),
        })
    })
}

/// A fresh reservation id, shaped as Limitador shapes its own (a random UUID, version 4), so a
/// client that stores, logs or validates ids sees one shape from either server.
fn reservation_id() -> String {
    crate::core::ground::uuid::version_4(rand::random())
}

/// A call's descriptors as Limitador binds them: each a map of its entries.
pub fn descriptor_maps<'a, D, E>(descriptors: D) -> Vec<HashMap<String, String>>
where
    D: IntoIterator<Item = E>,
    E: IntoIterator<Item = (&'a str, &'a str)>,
{
    descriptors
        .into_iter()
        .map(|entries| {
            entries
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect()
        })
        .collect()
}
