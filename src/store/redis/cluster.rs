//! The link to a Redis Cluster (`--redis-type cluster`): seed nodes in, one multiplexed
//! connection per node out (the redis crate's async cluster client), which follows `MOVED` and
//! `ASK` redirections and refreshes its slot map when the topology changes. Every call has a
//! deadline; credentials never appear in what it reports.
//!
//! The decision script is loaded on every node when the link opens (`SCRIPT LOAD` goes to all
//! nodes). A node that lost it (restart, failover to a replica that never had it, `SCRIPT
//! FLUSH`) answers `NOSCRIPT`; `ScriptInvocation::invoke_async` then loads it again on every
//! node and retries the `EVALSHA` on the node that owns the slot, within the same deadline.

use std::future::Future;
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, Script, ScriptInvocation,
};

use super::credentials::{auth_secrets, redact_url, scrub, url_secrets, with_auth};
use super::errors::{misconfigured, unavailable};
use super::options::{describe_seeds, seed_urls, RedisOptions};
use super::script::Call;
use super::tls::{tcp_settings, TlsOptions};
use crate::store::StoreError;

/// How often one request is retried after a redirection or a lost connection. A decision's
/// deadline is short (25 ms by default), so more would only keep abandoned requests alive.
const RETRIES: u32 = 3;

/// The shortest and longest pause (ms) before retrying a request whose node was unreachable.
const MIN_RETRY_WAIT_MS: u64 = 5;
const MAX_RETRY_WAIT_MS: u64 = 100;

/// A connection to every node of a cluster, and what to call it in logs.
pub(super) struct ClusterLink {
    connection: ClusterConnection,
    server: String,
    /// Scrubbed out of every error message.
    secrets: Vec<String>,
}

impl ClusterLink {
    /// Connects through the seeds of `options.url` (comma-separated `host:port` or `redis://`
    /// / `rediss://` URLs) within the connect timeout and loads `script` on every node.
    /// `options.auth` (`password` or `user:password`) applies to seeds without a password;
    /// `options.tls` as for a single server.
    pub async fn open(options: &RedisOptions, script: &Script) -> Result<Self, StoreError> {
        let urls = seed_urls(&options.url, options.tls.enabled).map_err(unavailable)?;
        let server = format!(
            "cluster via {}",
            describe_seeds(&options.url, options.tls.enabled)
        );
        let mut secrets: Vec<String> = urls.iter().flat_map(|url| url_secrets(url)).collect();
        secrets.extend(options.auth.iter().flat_map(|auth| auth_secrets(auth)));
        secrets.retain(|secret| !secret.is_empty());
        let nodes = seed_nodes(&urls, options, &mut secrets)?;
        let client = client_builder(nodes, options)?
            .build()
            .map_err(|error| failed("cannot use", &server, &secrets, &error))?;
        let connection = connect(&client, options.connect_timeout, &server, &secrets).await?;
        let link = Self {
            connection,
            server,
            secrets,
        };
        link.load(script, options.script_load_deadline()).await?;
        Ok(link)
    }

    /// `SCRIPT LOAD`s `script` on every node within `deadline`.
    async fn load(&self, script: &Script, deadline: Duration) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        self.within(
            deadline,
            script.prepare_invoke().load_async(&mut connection),
        )
        .await
        .map(drop)
    }

    /// The seeds, as `cluster via redis://host:port,…` (safe for logs).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Runs `call` of `script` on the node that owns its keys' slot, within `deadline`.
    pub async fn invoke(
        &self,
        script: &Script,
        call: &Call,
        deadline: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        self.run(&call.invocation(script), deadline).await
    }

    /// Runs a prepared script `invocation` on the node that owns its keys' slot, within
    /// `deadline`, answering `T`.
    pub async fn run<T: redis::FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        self.within(deadline, invocation.invoke_async(&mut connection))
            .await
    }

    /// One plain command, routed by its key, within `deadline`.
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        self.within(deadline, command.query_async(&mut connection))
            .await
    }

    /// One `SCAN` page from the master of `key`'s hash slot, within `deadline` (SCAN names no
    /// key, so the client would send it to any node).
    pub async fn scan_page_at(
        &self,
        scan: &redis::Cmd,
        key: &str,
        deadline: Duration,
    ) -> Result<(u64, Vec<String>), StoreError> {
        let master = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
            key,
            SlotAddr::Master,
        )));
        let mut connection = self.connection.clone();
        let page = self
            .within(deadline, connection.route_command(scan.clone(), master))
            .await?;
        redis::from_redis_value(page).map_err(|error| {
            unavailable(format!(
                "Redis {} answered SCAN with something else than a page: {error}",
                self.server
            ))
        })
    }

    /// Sends `pipeline`, whose keys must share one slot, to the node that owns it, within
    /// `deadline`.
    pub async fn pipeline<T: redis::FromRedisValue>(
        &self,
        pipeline: &redis::Pipeline,
        deadline: Duration,
    ) -> Result<T, StoreError> {
        let mut connection = self.connection.clone();
        self.within(deadline, pipeline.query_async(&mut connection))
            .await
    }

    async fn within<T>(
        &self,
        deadline: Duration,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(unavailable(format!(
                "Redis {} failed: {}",
                self.server,
                scrub(&error.to_string(), &self.secrets)
            ))),
            Err(_) => Err(self.late(deadline)),
        }
    }

    /// What a call gets when `deadline` passed before Redis answered.
    pub fn late(&self, deadline: Duration) -> StoreError {
        unavailable(format!(
            "Redis {} did not answer within {deadline:?}",
            self.server
        ))
    }
}

/// The seeds of `urls`, checked (`check_seed`), with `options.auth` where a seed has no
/// password; each password found is added to `secrets`.
fn seed_nodes(
    urls: &[String],
    options: &RedisOptions,
    secrets: &mut Vec<String>,
) -> Result<Vec<ConnectionInfo>, StoreError> {
    let mut nodes = Vec::with_capacity(urls.len());
    for url in urls {
        let info: ConnectionInfo = url.as_str().into_connection_info().map_err(|error| {
            misconfigured(format!(
                "invalid Redis Cluster seed {}: {}",
                redact_url(url),
                scrub(&error.to_string(), secrets)
            ))
        })?;
        check_seed(&info, url, &options.tls)?;
        let info = with_auth(info, options.auth.as_deref());
        secrets.extend(info.redis_settings().password().map(str::to_owned));
        nodes.push(info);
    }
    Ok(nodes)
}

/// The cluster client's settings: timeouts, retries, and TLS when a seed uses it.
fn client_builder(
    nodes: Vec<ConnectionInfo>,
    options: &RedisOptions,
) -> Result<ClusterClientBuilder, StoreError> {
    let tls = nodes
        .iter()
        .any(|node| matches!(node.addr(), ConnectionAddr::TcpTls { .. }));
    // Each call's own deadline (`within`) ends it; the crate's, per attempt, only bounds what
    // no call waits for (the slot-map refresh), and never cuts a call before its deadline.
    let mut builder = ClusterClientBuilder::new(nodes)
        .tcp_settings(tcp_settings())
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.response_backstop())
        .overall_response_timeout(None)
        .retries(RETRIES)
        .min_retry_wait(MIN_RETRY_WAIT_MS)
        .max_retry_wait(MAX_RETRY_WAIT_MS);
    if tls {
        if let Some(certificates) = options.tls.certificates()? {
            builder = builder.certs(certificates);
        }
        builder = builder.danger_accept_invalid_hostnames(options.tls.skip_hostname_verification);
    }
    Ok(builder)
}

/// The connection to every node, within `connect_timeout`.
async fn connect(
    client: &ClusterClient,
    connect_timeout: Duration,
    server: &str,
    secrets: &[String],
) -> Result<ClusterConnection, StoreError> {
    match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
        Ok(Ok(connection)) => Ok(connection),
        Ok(Err(error)) => Err(failed("cannot connect to", server, secrets, &error)),
        Err(_) => Err(unavailable(format!(
            "cannot connect to Redis {server}: no answer within {connect_timeout:?}"
        ))),
    }
}

/// "`what` Redis `server`: `error`", scrubbed of `secrets`.
fn failed(what: &str, server: &str, secrets: &[String], error: &RedisError) -> StoreError {
    unavailable(format!(
        "{what} Redis {server}: {}",
        scrub(&error.to_string(), secrets)
    ))
}

/// Refuses what a cluster cannot serve: unix sockets (nodes announce IP addresses), any
/// database but 0 (Cluster has only one), and TLS settings for a seed without TLS.
fn check_seed(info: &ConnectionInfo, url: &str, tls: &TlsOptions) -> Result<(), StoreError> {
    if matches!(info.addr(), ConnectionAddr::Unix(_)) {
        return Err(misconfigured(format!(
            "Redis Cluster seed {} is a unix socket: cluster nodes are reached by address, \
             give host:port",
            redact_url(url)
        )));
    }
    let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    if (tls.enabled || tls.has_settings()) && !is_tls {
        return Err(misconfigured(format!(
            "Redis Cluster seed {} is not TLS, but REDIS_TLS or --redis-tls-* settings ask for \
             it: use rediss:// or a bare host:port",
            redact_url(url)
        )));
    }
    let db = info.redis_settings().db();
    if db != 0 {
        return Err(misconfigured(format!(
            "Redis Cluster seed {} names database {db}: Cluster has only database 0, drop \
             `/{db}` from the URL",
            redact_url(url)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::Topology;

    #[test]
    fn seeds_take_both_forms() {
        assert_eq!(
            seed_urls(
                "10.0.0.1:7000, 10.0.0.2:7001,,redis://:pw@10.0.0.3:7002",
                false
            ),
            Ok(vec![
                "redis://10.0.0.1:7000".to_owned(),
                "redis://10.0.0.2:7001".to_owned(),
                "redis://:pw@10.0.0.3:7002".to_owned(),
            ])
        );
        assert_eq!(
            seed_urls("10.0.0.1:7000,redis://10.0.0.2:7001", true),
            Ok(vec![
                "rediss://10.0.0.1:7000".to_owned(),
                "redis://10.0.0.2:7001".to_owned(),
            ])
        );
        let empty = seed_urls(" , ", false).expect_err("no seed");
        assert!(empty.contains("host:port"), "{empty}");
    }

    #[test]
    fn every_seed_loses_its_credentials_in_descriptions() {
        let shown = describe_seeds(
            "redis://:first@a:7000,redis://bob:second@b:7001,c:7002",
            false,
        );
        assert_eq!(
            shown,
            "redis://***@a:7000,redis://***@b:7001,redis://c:7002"
        );
    }

    #[test]
    fn sockets_databases_and_missing_tls_are_refused() {
        let check = |url: &str, tls: &TlsOptions| {
            let info = url.into_connection_info().expect("a valid URL");
            match check_seed(&info, url, tls) {
                Ok(()) => String::new(),
                Err(StoreError::Misconfigured { reason, .. }) => reason,
                Err(other) => panic!("expected Misconfigured, got {other}"),
            }
        };
        let plain = TlsOptions::default();
        assert_eq!(check("redis://10.0.0.1:7000/0", &plain), "");
        assert!(check("unix:///run/redis.sock", &plain).contains("unix socket"));
        let db = check("redis://:hunter22@10.0.0.1:7000/3", &plain);
        assert!(db.contains("only database 0"), "{db}");
        assert!(!db.contains("hunter22"), "{db}");
        let tls = TlsOptions {
            enabled: true,
            ..TlsOptions::default()
        };
        assert!(check("redis://10.0.0.1:7000", &tls).contains("not TLS"));
        assert_eq!(check("rediss://10.0.0.1:7000", &tls), "");
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_reported_without_credentials() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("a free port");
        let mut options = RedisOptions::new(format!("redis://:hunter22@127.0.0.1:{port}"));
        options.topology = Topology::Cluster;
        options.auth = Some("alice:other-secret".to_owned());
        options.connect_timeout = Duration::from_millis(500);
        let result = ClusterLink::open(&options, &Script::new("return 1")).await;
        let Err(StoreError::Unavailable { reason, .. }) = result else {
            panic!("nothing listens on port {port}");
        };
        assert!(
            !reason.contains("hunter22") && !reason.contains("other-secret"),
            "{reason}"
        );
        assert!(reason.contains(&format!("127.0.0.1:{port}")), "{reason}");
    }
}
