//! Which batching lane (`batch/`) a request joins, and where each lane's calls go.
//!
//! On one server (or the master Sentinel names) there is a lane per socket of the pool, and
//! requests take the lanes in turn, as lone calls take the sockets. Over plain TCP or a unix
//! socket each lane calls on a socket of its own (`own_socket.rs`); over TLS, on the pool's
//! socket at its position. On a cluster a lane is one hash
//! slot: a script may only touch keys of one slot, so requests can share a call only when all
//! their keys are in the same slot, and then they all live on the node that serves it. A
//! request whose counters span slots (`--redis-hash-tag descriptor`) is split into slot groups
//! before it gets here (`slot.rs`), each group joining its slot's lane. Cluster lanes are made
//! when a slot is first used: a few hundred bytes each, and at most one per slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::Script;

use super::batch::{Lane, Target};
use super::cluster::ClusterLink;
use super::connection::{lock, Connection};
use super::own_socket::OwnSocket;
use super::script::{Call, RequestArgs};
use crate::store::{Decided, StoreError};

/// One lane's socket.
pub(super) enum Socket {
    /// A socket of its own (`own_socket.rs`), on a plain server (TCP or a unix socket).
    Own(OwnSocket),
    /// The socket at `position` of the connection's pool, shared with every other command:
    /// over TLS.
    Pooled {
        connection: Connection,
        position: usize,
        script: Arc<Script>,
    },
}

impl Target for Socket {
    async fn invoke(&self, call: &Call, deadline: Duration) -> Result<Vec<i64>, StoreError> {
        match self {
            Self::Own(socket) => socket.invoke(call, deadline).await,
            Self::Pooled {
                connection,
                position,
                script,
            } => {
                connection
                    .invoke_on(*position, script, call, deadline)
                    .await
            }
        }
    }

    fn late(&self, deadline: Duration) -> StoreError {
        match self {
            Self::Own(socket) => socket.late(deadline),
            Self::Pooled { connection, .. } => connection.late(deadline),
        }
    }
}

/// The node of a cluster that serves the slot of the call's keys (the client routes it).
pub(super) struct SlotNode {
    cluster: Arc<ClusterLink>,
    script: Arc<Script>,
}

impl Target for SlotNode {
    async fn invoke(&self, call: &Call, deadline: Duration) -> Result<Vec<i64>, StoreError> {
        self.cluster.invoke(&self.script, call, deadline).await
    }

    fn late(&self, deadline: Duration) -> StoreError {
        self.cluster.late(deadline)
    }
}

/// Every lane of a store.
pub(super) enum Lanes {
    Sockets {
        lanes: Vec<Arc<Lane<Socket>>>,
        next: AtomicUsize,
    },
    Slots {
        cluster: Arc<ClusterLink>,
        script: Arc<Script>,
        max: usize,
        lanes: Mutex<HashMap<Slot, Arc<Lane<SlotNode>>>>,
    },
}

impl Lanes {
    /// One lane per socket of `connection`'s pool of `pool_size`, each call carrying up to
    /// `max` requests: each lane with a socket of its own on a plain server (no TLS), else on the
    /// pool's socket at its position.
    pub fn sockets(
        connection: &Connection,
        pool_size: usize,
        script: &Arc<Script>,
        max: usize,
    ) -> Self {
        let own = connection.plain_endpoint().is_some();
        let lanes = (0..pool_size.max(1))
            .map(|position| {
                let socket = if own {
                    Socket::Own(OwnSocket::new(connection.clone(), script))
                } else {
                    Socket::Pooled {
                        connection: connection.clone(),
                        position,
                        script: Arc::clone(script),
                    }
                };
                Lane::new(socket, max)
            })
            .collect();
        Self::Sockets {
            lanes,
            next: AtomicUsize::new(0),
        }
    }

    /// One lane per hash slot of `cluster`, made on first use.
    pub fn slots(cluster: &Arc<ClusterLink>, script: &Arc<Script>, max: usize) -> Self {
        Self::Slots {
            cluster: Arc::clone(cluster),
            script: Arc::clone(script),
            max,
            lanes: Mutex::new(HashMap::new()),
        }
    }

    /// Decides `request` (whose keys share one slot on a cluster) in its lane's next call,
    /// within `timeout`.
    pub async fn decide(
        &self,
        request: RequestArgs,
        timeout: Duration,
    ) -> Result<Decided, StoreError> {
        match self {
            Self::Sockets { lanes, next } => {
                let position = next.fetch_add(1, Ordering::Relaxed) % lanes.len().max(1);
                match lanes.get(position).or(lanes.first()) {
                    Some(lane) => lane.decide(request, timeout).await,
                    None => Err(super::errors::unavailable(
                        "no Redis socket to call".to_owned(),
                    )),
                }
            }
            Self::Slots {
                cluster,
                script,
                max,
                lanes,
            } => {
                let slot = Slot::for_key(request.keys.first().map_or("", String::as_str));
                let lane = Arc::clone(lock(lanes).entry(slot).or_insert_with(|| {
                    let node = SlotNode {
                        cluster: Arc::clone(cluster),
                        script: Arc::clone(script),
                    };
                    Lane::new(node, *max)
                }));
                lane.decide(request, timeout).await
            }
        }
    }
}
