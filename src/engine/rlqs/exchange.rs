//! RLQS across floodgates: every `--rlqs-exchange-ms`, each instance publishes what its Envoys
//! offer on each bucket to the store they share and reads what the others published, so each
//! takes its part of every bucket's limit (`core::policy::rlqs::instance_part`) before dividing it
//! among its own Envoys. An instance that stopped publishing is remembered at its last demand
//! for `peer_memory`, or until an instance that started since has heard every Envoy (its
//! startup grace over) and retires it (`core::policy::rlqs::peer_entry`). One call per domain
//! (`RlqsPeers`); no report waits for it but a bucket's first on this instance.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::board::QuotaBoard;
use crate::engine::limiter::Limiter;
use crate::engine::shutdown::{self, Shutdown};
use crate::store::{DemandItem, ExchangeTerms, RlqsPeers, Store};
use crate::telemetry::paced_log::PacedLog;
use crate::telemetry::rlqs as rlqs_metrics;

/// A failed exchange is logged at most this often.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Until `shutdown`: the exchanges of this instance, under an id of its own, every
/// `exchange_interval` and at once when a bucket new to this instance waits for one.
pub async fn run<S: Store + RlqsPeers>(
    board: Arc<QuotaBoard>,
    limiter: Arc<Limiter<S>>,
    shutdown: Shutdown,
) {
    let instance = rand::random::<u64>().max(1);
    let failed = PacedLog::every(FAILURE_LOG_INTERVAL);
    board.exchange_demands();
    shutdown::every_or_woken(
        board.settings().exchange_interval,
        shutdown,
        || board.exchange_wanted(),
        || exchange_once(&board, limiter.store(), instance, &failed),
    )
    .await;
}

/// One exchange: publish, read, record. A failure keeps the last peers.
pub async fn exchange_once<P: RlqsPeers>(
    board: &QuotaBoard,
    store: &P,
    instance: u64,
    failed: &PacedLog,
) {
    let now = Instant::now();
    let published = board.published_demands(now);
    if published.is_empty() {
        return;
    }
    let items: Vec<DemandItem<'_>> = published
        .iter()
        .map(|item| DemandItem {
            domain: &item.domain,
            bucket: &item.bucket,
            demand: item.demand,
        })
        .collect();
    let settings = board.settings();
    let retire = board.retire_due(now);
    let terms = ExchangeTerms {
        horizon: settings.peer_horizon(),
        memory: settings.peer_memory(),
        retire,
        deadline: settings.exchange_interval,
    };
    match store.exchange_demands(instance, &items, terms).await {
        Ok(peers) => {
            if retire {
                board.retired();
            }
            let with_peers = peers.iter().filter(|found| !found.is_empty()).count();
            tracing::debug!(
                buckets = published.len(),
                with_peers,
                "RLQS demands exchanged with the other floodgates"
            );
            board.record_peers(&published, peers);
            rlqs_metrics::exchanged(true);
        }
        Err(error) => {
            rlqs_metrics::exchanged(false);
            board.release_unheard();
            if let Some(suppressed) = failed.allow() {
                tracing::warn!(
                    %error,
                    suppressed,
                    "RLQS demands not exchanged with the other floodgates: each bucket stays \
                     divided as the last exchange left it"
                );
            }
        }
    }
}
