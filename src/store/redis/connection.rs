//! The connection to Redis: a small pool of multiplexed sockets (concurrent calls are pipelined
//! on each; calls take them in turn) that reconnect by themselves, behind a deadline on every
//! call. Credentials never reach an error: errors name the server as `host:port/db`, and
//! Redis's own messages are scrubbed of the passwords (`credentials.rs`) before they are passed
//! on.
//!
//! # Pool
//!
//! `--redis-pool-size N` opens N sockets to the same server. One socket already carries any
//! number of concurrent calls; more help only when one socket's reader task is the bottleneck
//! (many cores, a fast Redis). Each socket is a `ConnectionManager`, reconnecting on its own.
//! Batched decisions on a plain server (TCP or a unix socket, not TLS) take sockets of their own
//! instead (`own_socket.rs`), reaching the server in use through [`Connection::plain_endpoint`].
//!
//! # Following a Sentinel failover
//!
//! With `--redis-type sentinel` the server is whatever the sentinels name as master
//! (`sentinel.rs`), checked with `ROLE`. A failed call (an error such as `READONLY` from a
//! demoted master, a refused connection, or its deadline) asks the sentinels again in the
//! background, at most one search at a time and one per [`FOLLOW_INTERVAL`], each bounded by
//! the connect timeout; when they name another master, the pool is replaced by one to it. The
//! failed call itself still ends at its deadline. Once the circuit breaker is open only its
//! probes fail, so the search runs at the probes' pace, and the first probe after the switch
//! closes the breaker.
//!
//! # Silent sockets
//!
//! A socket whose calls miss their deadline and that has answered nothing for a while is
//! replaced by a new connection (`silence.rs` says when and why): after a partition, waiting
//! for TCP's backed-off retransmissions on the old one would keep decisions away for seconds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, Role,
    Script, ScriptInvocation,
};

use super::credentials::{auth_secrets, redact_url, scrub, url_secrets, with_auth};
use super::errors::{misconfigured, unavailable};
use super::options::{RedisOptions, Topology};
use super::script::Call;
use super::sentinel::Sentinels;
use super::silence::Watches;
use super::tls::{self, ClientSetup};
use crate::store::StoreError;

/// The longest pause between reconnection attempts: a restarted Redis is found again quickly
/// (with the breaker's probe every 500 ms, decisions resume within 1 s of Redis returning).
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(250);

/// The shortest time between two searches for the master: failures come in bursts (every call
/// in flight fails at once) and one answer serves them all.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(250);

/// The most sockets `--redis-pool-size` may open.
pub const MAX_POOL_SIZE: usize = 256;

/// The connection(s) to one Redis server, or to the master the sentinels name.
#[derive(Clone)]
pub(super) struct Connection {
    shared: Arc<Shared>,
}

struct Shared {
    links: ArcSwap<Links>,
    /// Round-robin position over `links.pool`.
    next: AtomicUsize,
    opener: Opener,
    /// Sentinel mode: where to ask when the master seems gone.
    following: Option<Following>,
    /// When each socket of the pool last answered.
    watches: Watches,
}

/// The pool to one server.
struct Links {
    /// `host:port/db`, safe for logs. Shared: every call takes it along for its error message.
    server: Arc<str>,
    /// Sentinel mode: the master's address as the sentinels gave it.
    address: Option<(String, u16)>,
    pool: Pool,
    /// What the pool's sockets were made with: a silent one is made again the same way.
    client: redis::Client,
    config: ConnectionManagerConfig,
}

impl Links {
    /// These links with the socket at `position` (modulo the pool's size) replaced.
    fn with_socket(&self, position: usize, manager: ConnectionManager) -> Links {
        let mut pool = Pool {
            first: self.pool.first.clone(),
            others: self.pool.others.clone(),
        };
        match position % pool.len() {
            0 => pool.first = manager,
            index => {
                if let Some(slot) = pool.others.get_mut(index - 1) {
                    *slot = manager;
                }
            }
        }
        Links {
            server: self.server.clone(),
            address: self.address.clone(),
            pool,
            client: self.client.clone(),
            config: self.config.clone(),
        }
    }
}

/// At least one socket, by construction.
struct Pool {
    first: ConnectionManager,
    others: Vec<ConnectionManager>,
}

impl Pool {
    fn len(&self) -> usize {
        1 + self.others.len()
    }

    /// The socket at `position` (modulo the size).
    fn get(&self, position: usize) -> &ConnectionManager {
        match position % self.len() {
            0 => &self.first,
            index => self.others.get(index - 1).unwrap_or(&self.first),
        }
    }
}

/// How pools are opened (at start, and again after a failover).
struct Opener {
    setup: ClientSetup,
    pool_size: usize,
    connect_timeout: Duration,
    /// Scrubbed out of every error message (empty: nothing to scrub).
    secrets: Vec<String>,
}

struct Following {
    sentinels: Sentinels,
    /// `--redis-auth` for the master, whichever server it is.
    auth: Option<String>,
    search: Mutex<Search>,
}

#[derive(Default)]
struct Search {
    running: bool,
    last_started: Option<Instant>,
}

impl Connection {
    /// Connects as `options` say (single server or Sentinel, TLS, pool size) within its
    /// connect timeout.
    pub async fn open(options: &RedisOptions) -> Result<Self, StoreError> {
        if options.pool_size == 0 || options.pool_size > MAX_POOL_SIZE {
            return Err(misconfigured(format!(
                "invalid Redis options: the pool size must be 1 to {MAX_POOL_SIZE} sockets \
                 (--redis-pool-size, REDIS_POOL_SIZE), not {}",
                options.pool_size
            )));
        }
        let setup = ClientSetup::new(&options.tls)?;
        let secrets: Vec<String> = options
            .auth
            .iter()
            .flat_map(|auth| auth_secrets(auth))
            .collect();
        if options.topology == Topology::Sentinel {
            Self::open_through_sentinels(options, setup, secrets).await
        } else {
            Self::open_single(options, setup, secrets).await
        }
    }

    /// The master the sentinels of `options.url` name, followed from then on.
    async fn open_through_sentinels(
        options: &RedisOptions,
        setup: ClientSetup,
        mut secrets: Vec<String>,
    ) -> Result<Self, StoreError> {
        let sentinels = Sentinels::parse(
            &options.url,
            options.sentinel_auth.as_deref(),
            options.tls.enabled,
        )?;
        if options.tls.has_settings() && !sentinels.tls {
            return Err(not_tls());
        }
        secrets.extend(sentinels.secrets().map(str::to_owned));
        // Bare HOST:PORT entries and the master's name hold nothing secret.
        secrets.extend(
            options
                .url
                .split(',')
                .filter(|part| part.contains("://"))
                .flat_map(url_secrets),
        );
        secrets.extend(
            options
                .sentinel_auth
                .iter()
                .flat_map(|auth| auth_secrets(auth)),
        );
        let following = Following {
            sentinels,
            auth: options.auth.clone(),
            search: Mutex::new(Search::default()),
        };
        let opener = Opener::new(setup, options, secrets);
        let links = tokio::time::timeout(opener.connect_timeout, opener.open_master(&following))
            .await
            .map_err(|_| {
                unavailable(format!(
                    "cannot find the Redis master {:?} through the sentinels at {} within {:?}",
                    following.sentinels.master_name,
                    following.sentinels.describe(),
                    opener.connect_timeout
                ))
            })??;
        Ok(Self::with(links, opener, Some(following)))
    }

    /// The one server of `options.url`.
    async fn open_single(
        options: &RedisOptions,
        setup: ClientSetup,
        mut secrets: Vec<String>,
    ) -> Result<Self, StoreError> {
        let url = options.normalized_url();
        secrets.extend(url_secrets(&url));
        let info = single_server(&url, options, &secrets)?;
        secrets.extend(info.redis_settings().password().map(str::to_owned));
        let opener = Opener::new(setup, options, secrets);
        let links = opener.open(info, None).await?;
        Ok(Self::with(links, opener, None))
    }

    fn with(links: Links, opener: Opener, following: Option<Following>) -> Self {
        let watches = Watches::new(opener.pool_size);
        Self {
            shared: Arc::new(Shared {
                links: ArcSwap::from_pointee(links),
                next: AtomicUsize::new(0),
                opener,
                following,
                watches,
            }),
        }
    }

    /// The server now in use, as `host:port/db` (safe for logs).
    pub fn server(&self) -> String {
        self.shared.links.load().server.to_string()
    }

    /// `SCRIPT LOAD`s `script` (once: the script cache is the server's, not the socket's).
    pub async fn load_script(&self, script: &Script, deadline: Duration) -> Result<(), StoreError> {
        let (position, server, mut manager) = self.shared.pick();
        self.shared
            .within(
                position,
                &server,
                deadline,
                script.prepare_invoke().load_async(&mut manager),
            )
            .await
            .map(drop)
    }

    /// Runs `script` with `call`'s keys and arguments (`EVALSHA`, and `SCRIPT LOAD` again on
    /// `NOSCRIPT`) within `deadline`; a Redis error or the deadline becomes `Unavailable`.
    pub async fn invoke(
        &self,
        script: &Script,
        call: &Call,
        deadline: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        self.invoke_on(self.shared.next_position(), script, call, deadline)
            .await
    }

    /// The same on the pool's socket at `position` (modulo its size): a batching lane keeps
    /// to its own socket (`batch/`).
    pub async fn invoke_on(
        &self,
        position: usize,
        script: &Script,
        call: &Call,
        deadline: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        self.run_on(position, &call.invocation(script), deadline)
            .await
    }

    /// Runs a prepared script `invocation` (`EVALSHA`, and `SCRIPT LOAD` again on
    /// `NOSCRIPT`) on the next socket of the pool within `deadline`, answering `T`.
    pub async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        self.run_on(self.shared.next_position(), invocation, deadline)
            .await
    }

    async fn run_on<T: redis::FromRedisValue>(
        &self,
        position: usize,
        invocation: &ScriptInvocation<'_>,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let (server, mut manager) = self.shared.pick_at(position);
        let result = self
            .shared
            .within(
                position,
                &server,
                deadline,
                invocation.invoke_async(&mut manager),
            )
            .await;
        if result.is_err() {
            Shared::follow_master_soon(&self.shared);
        }
        result
    }

    /// One plain command within `deadline`, beside the decisions.
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        self.on_next_socket(deadline, |mut manager| async move {
            command.query_async(&mut manager).await
        })
        .await
    }

    /// Sends `pipeline` on the next socket of the pool, one write, within `deadline`: the
    /// replies its commands do not `ignore`, in order.
    pub async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipeline: &redis::Pipeline,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        self.on_next_socket(deadline, |mut manager| async move {
            pipeline.query_async(&mut manager).await
        })
        .await
    }

    /// `call` on the next socket of the pool within `deadline`; a failure may mean the master
    /// moved (Sentinel), so it is looked for again.
    async fn on_next_socket<T, F>(
        &self,
        deadline: Duration,
        call: impl FnOnce(ConnectionManager) -> F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, RedisError>>,
    {
        let (position, server, manager) = self.shared.pick();
        let result = self
            .shared
            .within(position, &server, deadline, call(manager))
            .await;
        if result.is_err() {
            Shared::follow_master_soon(&self.shared);
        }
        result
    }

    /// What a call gets when `deadline` passed before Redis answered.
    pub fn late(&self, deadline: Duration) -> StoreError {
        late(&self.server(), deadline)
    }

    /// Where a socket of one's own reaches the server now in use, when it is plain (TCP or a
    /// unix socket, not TLS): what `own_socket.rs` connects to.
    pub fn plain_endpoint(&self) -> Option<PlainEndpoint> {
        let links = self.shared.links.load();
        let info = links.client.get_connection_info();
        let address = match info.addr() {
            ConnectionAddr::Tcp(host, port) => PlainAddress::Tcp {
                host: host.clone(),
                port: *port,
            },
            ConnectionAddr::Unix(path) => PlainAddress::Unix(path.clone()),
            _ => return None,
        };
        let settings = info.redis_settings();
        Some(PlainEndpoint {
            server: Arc::clone(&links.server),
            address,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
        })
    }

    /// Whether `server` (a `PlainEndpoint::server`) is still the server in use: a Sentinel
    /// failover replaces it.
    pub fn still_serves(&self, server: &Arc<str>) -> bool {
        Arc::ptr_eq(&self.shared.links.load().server, server)
    }

    /// How long a new connection may take.
    pub fn connect_timeout(&self) -> Duration {
        self.shared.opener.connect_timeout
    }

    /// `message` with the credentials taken out.
    pub fn scrub(&self, message: &str) -> String {
        scrub(message, &self.shared.opener.secrets)
    }

    /// After a call failed elsewhere than on the pool: the master may have moved (Sentinel).
    pub fn call_failed(&self) {
        Shared::follow_master_soon(&self.shared);
    }
}

/// A plain server (no TLS) and what a new socket to it must say first.
pub(super) struct PlainEndpoint {
    /// `host:port/db` (or `path/db`), safe for logs; the same `Arc` for as long as this server
    /// is in use.
    pub server: Arc<str>,
    pub address: PlainAddress,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: i64,
}

/// Where a plain server listens.
pub(super) enum PlainAddress {
    Tcp { host: String, port: u16 },
    Unix(std::path::PathBuf),
}

/// What a call gets when Redis at `server` answered with an error or the socket failed
/// (`message`, scrubbed of credentials).
pub(super) fn failed(server: &str, message: &str) -> StoreError {
    unavailable(format!("Redis at {server} failed: {message}"))
}

fn late(server: &str, deadline: Duration) -> StoreError {
    unavailable(format!(
        "Redis at {server} did not answer within {deadline:?}"
    ))
}

impl Shared {
    fn next_position(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The next socket of the pool: its position, the server's name and the socket.
    fn pick(&self) -> (usize, Arc<str>, ConnectionManager) {
        let position = self.next_position();
        let (server, manager) = self.pick_at(position);
        (position, server, manager)
    }

    /// The server's name and the socket at `position` (modulo the pool's size).
    fn pick_at(&self, position: usize) -> (Arc<str>, ConnectionManager) {
        let links = self.links.load();
        (links.server.clone(), links.pool.get(position).clone())
    }

    /// `call` on the socket at `position`, within `deadline`; a late one may get the socket
    /// replaced (`silence.rs`).
    async fn within<T>(
        self: &Arc<Self>,
        position: usize,
        server: &str,
        deadline: Duration,
        call: impl std::future::Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(deadline, call).await {
            Ok(Ok(value)) => {
                self.watches.heard(position);
                Ok(value)
            }
            Ok(Err(error)) => Err(failed(
                server,
                &scrub(&error.to_string(), &self.opener.secrets),
            )),
            Err(_) => {
                Self::replace_if_silent(self, position);
                Err(late(server, deadline))
            }
        }
    }

    /// After a late call on the socket at `position`: when it has been silent too long and
    /// no replacement is under way, makes a new socket in the background (within the connect
    /// timeout) and swaps it in once it is up.
    fn replace_if_silent(shared: &Arc<Self>, position: usize) {
        let Some(silent_for) = shared.watches.should_replace(position) else {
            return;
        };
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            let links = shared.links.load_full();
            let made = tokio::time::timeout(
                shared.opener.connect_timeout,
                ConnectionManager::new_with_config(links.client.clone(), links.config.clone()),
            )
            .await;
            let succeeded = match made {
                Ok(Ok(manager)) => {
                    // Into the pool in use, unless it now leads elsewhere (a failover).
                    shared.links.rcu(|current| {
                        if current.server == links.server && current.address == links.address {
                            Arc::new(current.with_socket(position, manager.clone()))
                        } else {
                            Arc::clone(current)
                        }
                    });
                    tracing::info!(
                        redis = %links.server,
                        "Redis socket replaced: calls timed out and it answered nothing for \
                         {silent_for:?}"
                    );
                    true
                }
                Ok(Err(error)) => {
                    tracing::debug!(
                        redis = %links.server,
                        "cannot replace a silent Redis socket yet: {}",
                        scrub(&error.to_string(), &shared.opener.secrets)
                    );
                    false
                }
                Err(_) => {
                    tracing::debug!(
                        redis = %links.server,
                        "cannot replace a silent Redis socket yet: no connection within {:?}",
                        shared.opener.connect_timeout
                    );
                    false
                }
            };
            shared.watches.replaced(position, succeeded);
        });
    }

    /// Sentinel mode: starts a search for the master unless one runs or ran a moment ago.
    fn follow_master_soon(shared: &Arc<Self>) {
        let Some(following) = &shared.following else {
            return;
        };
        {
            let mut search = lock(&following.search);
            let recent = search
                .last_started
                .is_some_and(|started| started.elapsed() < FOLLOW_INTERVAL);
            if search.running || recent {
                return;
            }
            search.running = true;
            search.last_started = Some(Instant::now());
        }
        let shared = Arc::clone(shared);
        tokio::spawn(async move { shared.follow_master().await });
    }

    async fn follow_master(&self) {
        let Some(following) = &self.following else {
            return;
        };
        // Cleared however this task ends.
        let _running = SearchRunning(&following.search);
        let current = self.links.load().address.clone();
        let search = async {
            let address = following
                .sentinels
                .master_address(&self.opener.setup, self.opener.connect_timeout)
                .await
                .map_err(|reason| unavailable(scrub(&reason, &self.opener.secrets)))?;
            if current.as_ref() == Some(&address) {
                return Ok(None);
            }
            self.opener.open_at(address, following).await.map(Some)
        };
        match tokio::time::timeout(self.opener.connect_timeout, search).await {
            Ok(Ok(Some(links))) => {
                let previous = self.links.load().server.clone();
                tracing::warn!(
                    redis = %links.server,
                    previous = %previous,
                    "Redis master changed: the sentinels name a new master, now used"
                );
                self.links.store(Arc::new(links));
            }
            Ok(Ok(None)) => {}
            Ok(Err(error)) => tracing::debug!("Redis master not found yet: {error}"),
            Err(_) => tracing::debug!(
                "Redis master not found yet: no answer within {:?}",
                self.opener.connect_timeout
            ),
        }
    }
}

/// Marks the search finished when dropped.
struct SearchRunning<'a>(&'a Mutex<Search>);

impl Drop for SearchRunning<'_> {
    fn drop(&mut self) {
        lock(self.0).running = false;
    }
}

/// `mutex` locked, poisoned or not: what this module and `batch/` guard are a few plain
/// fields that a panic elsewhere cannot leave inconsistent.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Opener {
    fn new(setup: ClientSetup, options: &RedisOptions, mut secrets: Vec<String>) -> Self {
        secrets.retain(|secret| !secret.is_empty());
        Self {
            setup,
            pool_size: options.pool_size,
            connect_timeout: options.connect_timeout,
            secrets,
        }
    }

    /// The master the sentinels name, checked and connected.
    async fn open_master(&self, following: &Following) -> Result<Links, StoreError> {
        let address = following
            .sentinels
            .master_address(&self.setup, self.connect_timeout)
            .await
            .map_err(|reason| {
                unavailable(format!(
                    "cannot find the Redis master through the sentinels at {}: {}",
                    following.sentinels.describe(),
                    scrub(&reason, &self.secrets)
                ))
            })?;
        self.open_at(address, following).await
    }

    /// A pool to the master at `address`, refused unless the server says it is a master.
    async fn open_at(
        &self,
        (host, port): (String, u16),
        following: &Following,
    ) -> Result<Links, StoreError> {
        let addr = if following.sentinels.tls {
            ConnectionAddr::TcpTls {
                host: host.clone(),
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.clone(), port)
        };
        let info = addr.into_connection_info().map_err(|error| {
            unavailable(format!(
                "the sentinels name the master {host}:{port}, which cannot be used: {error}"
            ))
        })?;
        let info = with_auth(info, following.auth.as_deref());
        let name = &following.sentinels.master_name;
        let mut links = self.open(info, Some(name)).await?;
        links.address = Some((host, port));
        Ok(links)
    }

    /// A pool of `pool_size` sockets to `info`, after one plain attempt (and, for a master
    /// found through Sentinel, `ROLE`).
    async fn open(&self, info: ConnectionInfo, master: Option<&str>) -> Result<Links, StoreError> {
        let opening = Opening::new(&info, master, &self.secrets);
        let client = self
            .setup
            .client(info)
            .map_err(|error| opening.fail("cannot use", error.to_string()))?;
        self.probe(&client, master.is_some(), &opening).await?;
        let config = self.manager_config();
        let pool = self.open_pool(&client, &config, &opening).await?;
        Ok(Links {
            server: opening.server.into(),
            address: None,
            pool,
            client,
            config,
        })
    }

    /// One plain attempt first: the manager retries every failure until its deadline, which
    /// would hide a wrong password or a refused connection behind "no connection". `PING`,
    /// and with `expect_master` `ROLE`, within the connect timeout.
    async fn probe(
        &self,
        client: &redis::Client,
        expect_master: bool,
        opening: &Opening<'_>,
    ) -> Result<(), StoreError> {
        let timeout = self.connect_timeout;
        let probe = async {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout));
            let mut probe = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<()>(&mut probe).await?;
            if expect_master {
                redis::cmd("ROLE")
                    .query_async::<Role>(&mut probe)
                    .await
                    .map(Some)
            } else {
                Ok(None)
            }
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(Ok(None | Some(Role::Primary { .. }))) => Ok(()),
            Ok(Ok(Some(_))) => Err(opening.fail(
                "cannot use",
                "the sentinels name it master but it answers ROLE as a replica (a failover in \
                 progress?)"
                    .to_owned(),
            )),
            Ok(Err(error)) => Err(opening
                .refused(&error)
                .unwrap_or_else(|| opening.fail("cannot connect to", error.to_string()))),
            Err(_) => {
                Err(opening.fail("cannot connect to", format!("no answer within {timeout:?}")))
            }
        }
    }

    /// How the pool's sockets connect and reconnect. No response timeout of the crate's own:
    /// every call on these sockets goes through `within`, with its deadline. The crate's
    /// default (500 ms) used to end calls first, whatever `--redis-timeout-ms` said.
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_max_delay(MAX_RECONNECT_DELAY)
    }

    /// `pool_size` sockets made with `client` and `config`, all within the connect timeout.
    async fn open_pool(
        &self,
        client: &redis::Client,
        config: &ConnectionManagerConfig,
        opening: &Opening<'_>,
    ) -> Result<Pool, StoreError> {
        let timeout = self.connect_timeout;
        let connecting = async {
            let first = ConnectionManager::new_with_config(client.clone(), config.clone()).await?;
            let mut others = Vec::with_capacity(self.pool_size.saturating_sub(1));
            for _ in 1..self.pool_size {
                others.push(
                    ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
                );
            }
            Ok::<_, RedisError>(Pool { first, others })
        };
        match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(pool)) => Ok(pool),
            Ok(Err(error)) => Err(opening.fail("cannot connect to", error.to_string())),
            Err(_) => Err(opening.fail(
                "cannot connect to",
                format!("no connection within {timeout:?}"),
            )),
        }
    }
}

/// A server being connected to, as its errors name it (`host:port/db`, and the master's name
/// under Sentinel), and what they must not show.
struct Opening<'a> {
    server: String,
    tls: bool,
    secrets: &'a [String],
}

impl<'a> Opening<'a> {
    fn new(info: &ConnectionInfo, master: Option<&str>, secrets: &'a [String]) -> Self {
        let server = match master {
            Some(name) => format!("{} (master {name:?})", describe_server(info)),
            None => describe_server(info),
        };
        Self {
            server,
            tls: matches!(info.addr(), ConnectionAddr::TcpTls { .. }),
            secrets,
        }
    }

    /// "`what` Redis at `server`: `message`", scrubbed, with a hint for a TLS failure; a TLS
    /// refusal that retrying cannot change is a misconfiguration, anything else unavailable.
    fn fail(&self, what: &str, message: String) -> StoreError {
        let server = &self.server;
        let message = scrub(&message, self.secrets);
        let hint = if self.tls { tls::hint(&message) } else { None };
        let text = match hint {
            Some(hint) => format!("{what} Redis at {server}: {message} ({hint})"),
            None => format!("{what} Redis at {server}: {message}"),
        };
        if self.tls && tls::is_settled_refusal(&message) {
            misconfigured(text)
        } else {
            unavailable(text)
        }
    }

    /// Redis answered and refused these credentials: only new settings can help.
    fn refused(&self, error: &RedisError) -> Option<StoreError> {
        let text = scrub(&error.to_string(), self.secrets);
        match error.kind() {
            redis::ErrorKind::AuthenticationFailed => true,
            _ => text.contains("WRONGPASS") || text.contains("NOAUTH"),
        }
        .then(|| {
            misconfigured(format!(
                "Redis at {} refused the credentials: {text}",
                self.server
            ))
        })
    }
}

/// The single server of `url`, with `options`' credentials and TLS checked against the URL.
fn single_server(
    url: &str,
    options: &RedisOptions,
    secrets: &[String],
) -> Result<ConnectionInfo, StoreError> {
    let info: ConnectionInfo = url.into_connection_info().map_err(|error| {
        misconfigured(format!(
            "invalid Redis URL {}: {}",
            redact_url(url),
            scrub(&error.to_string(), secrets)
        ))
    })?;
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    if options.tls.enabled && !tls {
        return Err(misconfigured(format!(
            "invalid Redis options: REDIS_TLS (--redis-tls) asks for TLS but the URL {} does \
             not: use rediss://, or a bare HOST:PORT",
            redact_url(url)
        )));
    }
    if options.tls.has_settings() && !tls {
        return Err(not_tls());
    }
    if let ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
        tracing::warn!(
            "Redis TLS without certificate verification (#insecure in the URL): anyone on the \
             path can read and change what floodgate sends"
        );
    }
    Ok(with_auth(info, options.auth.as_deref()))
}

fn not_tls() -> StoreError {
    misconfigured(
        "invalid Redis options: TLS files or settings are given (--redis-tls-*, REDIS_TLS_*) \
         but the connection is not TLS: use a rediss:// URL (or a bare HOST:PORT with \
         REDIS_TLS=true)"
            .to_owned(),
    )
}

/// `host:port/db` or the socket path: enough to find the server, nothing secret.
fn describe_server(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}/{db}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}/{db} (TLS)"),
        ConnectionAddr::Unix(path) => format!("{}/{db}", path.display()),
        other => format!("{other}/{db}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_named_without_credentials() {
        let info = "redis://alice:hunter22@10.1.2.3:6390/4"
            .into_connection_info()
            .expect("a valid URL");
        assert_eq!(describe_server(&info), "10.1.2.3:6390/4");
    }

    #[tokio::test]
    async fn a_bad_url_is_refused_without_echoing_it() {
        let mut options = RedisOptions::new("redis://user:hunter22@");
        options.connect_timeout = Duration::from_millis(100);
        let result = Connection::open(&options).await;
        let Err(StoreError::Misconfigured { reason, .. }) = result else {
            panic!("an invalid URL must be refused");
        };
        assert!(!reason.contains("hunter22"), "{reason}");
        assert!(reason.contains("invalid Redis URL"), "{reason}");
    }
}
