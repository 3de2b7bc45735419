//! The run loop of `serve`: health and the drain, the limiter over the store that was built,
//! the background tasks that store needs, rule reloads, and the servers until shutdown.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::cmd::app_error::AppError;
use crate::cmd::cli::ServeArgs;
use crate::cmd::hybrid_settings::CountingNotes;
use crate::cmd::serve_source::RulesFollower;
use crate::core::decision::charging::Charging;
use crate::core::policy::rules::RuleSet;
use crate::engine::adaptive::shared::SharesLimits;
use crate::engine::adaptive::signals::PushedSignals;
use crate::engine::limitador::Limitador;
use crate::engine::limiter::{Limiter, LimiterSettings};
use crate::engine::overrides::sync::SharedOverrides;
use crate::engine::reload::{self, ReloadStatus};
use crate::engine::shutdown;
use crate::engine::tasks;
use crate::engine::waiting::WaitingRoom;
use crate::server;
use crate::server::health::{self, Health};
use crate::server::tls;
use crate::store::memory::MemoryStore;
use crate::store::{RlqsPeers, Store};
use crate::telemetry::statsd::options::StatsdOptions;
use crate::telemetry::DecisionTelemetry;

use super::listeners::{connection_limits, BoundListeners, BoundPorts};
use super::settings::ConfigGate;
use super::store::{memory_store, redis_problems, redis_problems_without_hybrid, BuiltStore};

/// What every store's server needs, made before the store is chosen.
pub(super) struct Serving {
    addresses: [std::net::SocketAddr; 3],
    /// Bound, listened on once the limiter is ready ([`run_limiter`]).
    ports: BoundPorts,
    http_settings: server::HttpSettings,
    pub shutdown: shutdown::Shutdown,
    operations: server::Operations,
    /// Overrides shared through Redis (`--store redis` or `hybrid`).
    shared_overrides: Option<Arc<SharedOverrides>>,
    /// SIGHUP, listened for since the start.
    hangup: reload::Hangup,
    /// What a reloaded rule set does to health.
    config_gate: ConfigGate,
    /// What the store says about the rules' `counting:`, at start and at every reload.
    pub counting_notes: CountingNotes,
}

/// The signals `serve` listens for from its first moment.
pub(super) struct Signals {
    /// SIGHUP: reload.
    pub hangup: reload::Hangup,
    /// SIGTERM or SIGINT: drain, then stop.
    pub stopped: shutdown::Shutdown,
}

impl Signals {
    /// A SIGHUP or SIGTERM that comes while the config loads or the ports open is then a
    /// reload or a drain, not the default action (the end of the process).
    pub(super) fn install() -> Self {
        let stop_signals = shutdown::StopSignals::install();
        let hangup = reload::hangup_signal();
        // Fired from now on, so a SIGTERM while the first xDS snapshot is awaited stops the wait.
        let (signal_trigger, stopped) = shutdown::channel();
        tokio::spawn(stop_signals.fire_on_signal(signal_trigger));
        Self { hangup, stopped }
    }
}

impl Serving {
    /// Serves Limitador's limits beside the rules.
    pub(super) fn serve_limitador(&mut self, limitador: Arc<Limitador>) {
        self.operations.limitador = Some(limitador);
    }

    /// Health (not ready until the limiter is), the drain a stop signal starts, the gRPC
    /// certificates' watch and the statsd sink; the store is chosen after.
    pub(super) fn start(
        args: &ServeArgs,
        settings: ServingSettings,
        bound: BoundListeners,
        signals: Signals,
        rules: &RuleSet,
    ) -> Self {
        let ServingSettings {
            grpc_tls,
            config_gate,
            store_gate,
            statsd,
            reload_status,
        } = settings;
        // SIGTERM first turns health NOT_SERVING; the listeners close --drain-seconds later.
        let (trigger, shutdown) = shutdown::channel();
        let health = Health::not_ready();
        config_gate.apply(&health, rules);
        tokio::spawn(health::drain_then_stop(
            signals.stopped,
            health.clone(),
            Duration::from_secs(args.drain_seconds),
            trigger,
        ));
        if let Some(grpc_tls) = &grpc_tls {
            tokio::spawn(tls::watch_certificates(grpc_tls.clone(), shutdown.clone()));
        }
        start_statsd_sink(statsd, &shutdown);
        let operations = server::Operations {
            health,
            reload: Some(reload_status),
            grpc_tls,
            admission: server::admission::AdmissionSettings {
                max_in_flight: args.max_in_flight,
                overload_answer: args.overload_answer,
                default_deadline: args.connections.grpc_default_deadline(),
            },
            connections: connection_limits(args, bound.ports.admin.is_some()),
            store_gate,
            rlqs: crate::engine::rlqs::QuotaBoard::new(args.rlqs.quota_settings()),
            without_grpc_reflection: !args.grpc_reflection,
            limitador: None,
            grpc_calls: args
                .connections
                .grpc_calls(tokio::runtime::Handle::current().metrics().num_workers()),
        };
        let addresses = &bound.addresses;
        Serving {
            addresses: [addresses.grpc, addresses.http, addresses.debug],
            ports: bound.ports,
            http_settings: server::HttpSettings {
                deny_status: args.http_deny_status.into(),
            },
            shutdown,
            operations,
            shared_overrides: None,
            hangup: signals.hangup,
            config_gate,
            counting_notes: CountingNotes::Silent,
        }
    }
}

/// The settings the servers take, with the status of the reloader.
pub(super) struct ServingSettings {
    pub grpc_tls: Option<crate::server::tls::ServerTls>,
    pub config_gate: ConfigGate,
    pub store_gate: health::StoreGate,
    pub statsd: Option<StatsdOptions>,
    pub reload_status: Arc<ReloadStatus>,
}

/// envoyproxy/ratelimit's stats sent to statsd, when it is configured and the stats are on.
fn start_statsd_sink(statsd: Option<StatsdOptions>, shutdown: &shutdown::Shutdown) {
    if let (Some(options), Some(stats)) = (statsd, crate::telemetry::reference::stats::global()) {
        crate::telemetry::statsd::sink::register_metrics();
        let sink = crate::telemetry::statsd::sink::StatsdSink::new(options);
        tokio::spawn(sink.run(stats, shutdown.clone().fired()));
    }
}

/// What the limiter is made of, whichever store it decides with.
pub(super) struct LimiterParts {
    pub rules: RuleSet,
    pub settings: LimiterSettings,
    pub telemetry: DecisionTelemetry,
    /// Whether a configuration loaded (else every call fails until one does).
    pub loaded: bool,
    pub reloader: RulesFollower,
    /// The in-process store's bounds, for the fallback of `failure_policy: local`.
    pub max_keys: usize,
    pub charging: Charging,
    /// `--max-waiting`: answers held at once until their turn.
    pub max_waiting: usize,
}

impl LimiterParts {
    /// The limiter over `store`, deciding with `local_fallback` while the store fails under
    /// `failure_policy: local`, and what follows its rules.
    fn into_limiter<S: Store>(
        self,
        store: S,
        local_fallback: Option<MemoryStore>,
    ) -> (Arc<Limiter<S>>, RulesFollower) {
        let mut limiter = Limiter::new(self.rules, store, self.settings)
            .with_telemetry(self.telemetry)
            .with_waiting_room(WaitingRoom::new(self.max_waiting));
        if let Some(fallback) = local_fallback {
            limiter = limiter.with_local_fallback(fallback);
        }
        // Every call fails until the first configuration loads, unless one did.
        if !self.loaded {
            limiter = limiter.awaiting_configuration();
        }
        (Arc::new(limiter), self.reloader)
    }
}

/// Serves with the limiter over `store` until shutdown, with the background tasks that store
/// needs.
pub(super) async fn serve_store(
    store: BuiltStore,
    parts: LimiterParts,
    serving: Serving,
) -> Result<(), AppError> {
    match store {
        BuiltStore::Memory(store) => {
            let (limiter, reloader) = parts.into_limiter(store, None);
            tokio::spawn(tasks::sweep_memory(
                Arc::clone(&limiter),
                serving.shutdown.clone(),
            ));
            run_limiter(limiter, reloader, serving).await
        }
        BuiltStore::Redis(store) => {
            let (limiter, reloader) = shared_limiter(store, parts, &serving);
            let reloader = reloader.with_store_check(redis_problems_without_hybrid);
            serve_shared(limiter, reloader, serving).await
        }
        BuiltStore::Hybrid(store) => {
            let (limiter, reloader) = shared_limiter(*store, parts, &serving);
            tokio::spawn(tasks::sync_hybrid(
                Arc::clone(&limiter),
                serving.shutdown.clone(),
            ));
            serve_shared(limiter, reloader.with_store_check(redis_problems), serving).await
        }
    }
}

/// The limiter of a store shared through Redis, with the in-process store that
/// `failure_policy: local` decides with while Redis fails, swept in the background.
fn shared_limiter<S: Store>(
    store: S,
    parts: LimiterParts,
    serving: &Serving,
) -> (Arc<Limiter<S>>, RulesFollower) {
    // Always there (it costs nothing until used): a reload may give a domain
    // `failure_policy: local`. Bounded by --max-keys like the memory store.
    let local_fallback = memory_store(parts.max_keys, parts.charging);
    let (limiter, reloader) = parts.into_limiter(store, Some(local_fallback));
    tokio::spawn(tasks::sweep_local_fallback(
        Arc::clone(&limiter),
        serving.shutdown.clone(),
    ));
    (limiter, reloader)
}

/// A limiter whose store other instances share: RLQS demands exchanged with them, overrides
/// set on any of them followed, then served until shutdown.
async fn serve_shared<S: SharesLimits + RlqsPeers>(
    limiter: Arc<Limiter<S>>,
    reloader: RulesFollower,
    serving: Serving,
) -> Result<(), AppError> {
    exchange_quota_demands(&limiter, &serving);
    crate::engine::heavy_hitters_sync::start(&limiter, serving.shutdown.clone()).await;
    let serving = share_overrides(&limiter, serving).await;
    run_limiter(limiter, reloader, serving).await
}

/// RLQS across the floodgates that share the limiter's Redis (`engine::rlqs::exchange`).
fn exchange_quota_demands<S: Store + RlqsPeers>(limiter: &Arc<Limiter<S>>, serving: &Serving) {
    tokio::spawn(crate::engine::rlqs::exchange::run(
        Arc::clone(&serving.operations.rlqs),
        Arc::clone(limiter),
        serving.shutdown.clone(),
    ));
}

/// Overrides set on any instance, through the Redis beneath the limiter's store: read once
/// before serving, then polled.
async fn share_overrides<S: SharesLimits>(limiter: &Arc<Limiter<S>>, serving: Serving) -> Serving {
    let host: Arc<dyn crate::engine::overrides::sync::OverrideHost> = limiter.clone();
    let Some(shared) = SharedOverrides::new(host).map(Arc::new) else {
        return serving;
    };
    shared.poll().await;
    tokio::spawn(Arc::clone(&shared).run(serving.shutdown.clone()));
    Serving {
        shared_overrides: Some(shared),
        ..serving
    }
}

/// Answers held for their turn are sent at once when the listeners close: the callers get
/// their OK before their connections go, and their turns stay taken.
fn release_held_answers_on_shutdown(room: WaitingRoom, shutdown: shutdown::Shutdown) {
    tokio::spawn(async move {
        shutdown.fired().await;
        room.release_all();
    });
}

/// Reloads rules into `limiter` and serves it until shutdown.
async fn run_limiter<S: SharesLimits>(
    limiter: Arc<Limiter<S>>,
    reloader: RulesFollower,
    serving: Serving,
) -> Result<(), AppError> {
    start_reloading(
        &limiter,
        reloader,
        serving.hangup,
        &serving.shutdown,
        serving.operations.health.clone(),
        serving.config_gate,
        serving.counting_notes,
    );
    release_held_answers_on_shutdown(limiter.waiting_room().clone(), serving.shutdown.clone());
    // The limiter is ready: from here on a connection is answered, where it was refused.
    let open = serving.ports.listen()?;
    let [grpc_addr, http_addr, debug_addr] = serving.addresses;
    tracing::info!(
        grpc = %grpc_addr, http = %http_addr, debug = %debug_addr,
        domains = limiter.rules().domains().count(),
        rules = limiter.rules().rule_count(),
        store = limiter.store().backend(),
        "floodgate serving"
    );
    tokio::spawn(crate::engine::tasks::maintain_adjustments(
        Arc::clone(&limiter),
        serving.shutdown.clone(),
    ));
    let signals = Arc::new(PushedSignals::default());
    tokio::spawn(crate::engine::adaptive::run(
        Arc::clone(&limiter),
        Arc::clone(&signals),
        open.admin.is_some(),
        serving.shutdown.clone(),
    ));
    serve_side_listeners(
        (open.reference_metrics, open.limitador_http),
        &serving.operations,
        &serving.shutdown,
    );
    let admin = open.admin.map(|(listener, token, addr)| {
        crate::server::admin::announce(addr);
        let routes =
            crate::server::admin::override_routes(Arc::clone(&limiter), serving.shared_overrides)
                .merge(crate::server::admin::signals::routes(
                    signals,
                    Arc::clone(&limiter),
                ))
                .merge(crate::server::admin::counters::routes(Arc::clone(&limiter)));
        crate::server::admin::serve(
            listener,
            token,
            routes,
            serving.operations.connections,
            serving.shutdown.clone(),
        )
    });
    let served = server::serve_with(
        limiter,
        open.service,
        serving.http_settings,
        serving.shutdown,
        serving.operations,
    );
    match admin {
        Some(admin) => {
            let (served, ()) = tokio::join!(served, admin);
            served?;
        }
        None => served.await?,
    }
    Ok(())
}

/// The listeners beside the service's that answer without the limiter: envoyproxy/ratelimit's
/// stats (`--use-prometheus`) and Limitador's HTTP API (`--limitador-http-addr`).
fn serve_side_listeners(
    (reference_metrics, limitador_http): (Option<(TcpListener, String)>, Option<TcpListener>),
    operations: &server::Operations,
    shutdown: &shutdown::Shutdown,
) {
    let limits = operations.connections;
    if let Some((listener, path)) = reference_metrics {
        let shutdown = shutdown.clone();
        tracing::info!(path = %path, "serving envoyproxy/ratelimit's stats (USE_PROMETHEUS)");
        tokio::spawn(async move {
            crate::server::reference_metrics::serve(listener, &path, limits, shutdown).await;
        });
    }
    if let (Some(listener), Some(limitador)) = (limitador_http, &operations.limitador) {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving Limitador's HTTP API");
        }
        tokio::spawn(crate::server::limitador_http::serve(
            listener,
            Arc::clone(limitador),
            limits,
            shutdown.clone(),
        ));
    }
}

/// Swaps the rule sets the source brings into `limiter` until shutdown.
fn start_reloading<S: Store>(
    limiter: &Arc<Limiter<S>>,
    reloader: RulesFollower,
    hangup: reload::Hangup,
    shutdown: &shutdown::Shutdown,
    health: Health,
    config_gate: ConfigGate,
    counting_notes: CountingNotes,
) {
    let live = Arc::clone(limiter);
    reloader.spawn(
        move |rules| {
            config_gate.apply(&health, &rules);
            counting_notes.log(&rules);
            Box::new(live.replace_rules(rules)) as Box<dyn reload::Retired>
        },
        hangup,
        shutdown.clone(),
    );
}
