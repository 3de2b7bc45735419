//! Finding the master through Redis Sentinel, as Sentinel's client protocol describes it: ask
//! the sentinels `SENTINEL get-master-addr-by-name`, take the first answer, and let the caller
//! verify with `ROLE` that the server named is a master (a sentinel may not have noticed a
//! failover yet).
//!
//! Written here rather than taken from the `redis` crate's `sentinel` module because every step
//! must stay inside one deadline (the crate's lookups connect without one) and because the
//! master is then reached through the same client set-up as a single server (`tls.rs`), which
//! is what lets REDIS_TLS_SKIP_HOSTNAME_VERIFICATION apply to it. All sentinels are asked at
//! once, so a dead or silent one costs nothing while another answers.

use std::time::Duration;

use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};
use tokio::task::JoinSet;

use super::credentials::{redact_url, scrub, url_secrets, with_auth};
use super::errors::misconfigured;
use super::tls::ClientSetup;
use crate::store::StoreError;

/// A master name and the sentinels that watch it, from envoyproxy/ratelimit's
/// `REDIS_URL=mastername,host1:port1,host2:port2…` (each sentinel may also be a `redis://` or
/// `rediss://` URL).
#[derive(Debug, Clone)]
pub(super) struct Sentinels {
    pub master_name: String,
    nodes: Vec<ConnectionInfo>,
    /// Whether the sentinels (and so the master and its replicas) are reached over TLS.
    pub tls: bool,
}

impl Sentinels {
    /// Parses `spec`; `auth` (`password` or `user:password`, envoyproxy/ratelimit's
    /// `REDIS_SENTINEL_AUTH`) applies to sentinels whose URL has no password, and `tls` makes
    /// bare `host:port` entries `rediss://`.
    pub fn parse(spec: &str, auth: Option<&str>, tls: bool) -> Result<Self, StoreError> {
        let mut parts = spec.split(',').map(str::trim);
        let master_name = parts.next().unwrap_or_default();
        let addresses: Vec<&str> = parts.filter(|part| !part.is_empty()).collect();
        if master_name.is_empty() || master_name.contains("://") || addresses.is_empty() {
            return Err(misconfigured(format!(
                "invalid Redis Sentinel address {}: --redis-type sentinel expects \
                 MASTER_NAME,HOST:PORT[,HOST:PORT…] (the master's name as the sentinels know \
                 it, then every sentinel's address), e.g. mymaster,10.0.0.1:26379,10.0.0.2:26379",
                redact_spec(spec)
            )));
        }
        let mut nodes = Vec::with_capacity(addresses.len());
        for address in addresses {
            let url = if address.contains("://") {
                address.to_owned()
            } else if tls {
                format!("rediss://{address}")
            } else {
                format!("redis://{address}")
            };
            let info = url.as_str().into_connection_info().map_err(|error| {
                misconfigured(format!(
                    "invalid sentinel address {} in --redis-url: {} (expected HOST:PORT)",
                    redact_url(&url),
                    scrub(&error.to_string(), &url_secrets(&url))
                ))
            })?;
            if matches!(info.addr(), ConnectionAddr::Unix(_)) {
                return Err(misconfigured(format!(
                    "sentinel address {} is a socket: sentinels are reached over TCP",
                    redact_url(&url)
                )));
            }
            nodes.push(with_auth(info, auth));
        }
        let tls_nodes = nodes.iter().filter(|node| is_tls(node.addr())).count();
        if tls_nodes != 0 && tls_nodes != nodes.len() {
            return Err(misconfigured(
                "the sentinel addresses mix redis:// and rediss://: reach all of them the same \
                 way (REDIS_TLS=true makes bare HOST:PORT entries rediss://)"
                    .to_owned(),
            ));
        }
        Ok(Self {
            master_name: master_name.to_owned(),
            tls: tls_nodes != 0,
            nodes,
        })
    }

    /// Every password the sentinel addresses carry, to scrub from messages.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.nodes
            .iter()
            .filter_map(|node| node.redis_settings().password())
    }

    /// `host:port, host:port…` of the sentinels (nothing secret).
    pub fn describe(&self) -> String {
        self.nodes
            .iter()
            .map(|node| node_address(node.addr()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The master's address as the first sentinel to know it says, asking all at once; every
    /// sentinel's own failure is in the error. The caller bounds the whole search in time.
    pub async fn master_address(
        &self,
        setup: &ClientSetup,
        connect_timeout: Duration,
    ) -> Result<(String, u16), String> {
        let mut asking = JoinSet::new();
        for (index, node) in self.nodes.iter().enumerate() {
            let client = setup.client(node.clone());
            let master = self.master_name.clone();
            asking.spawn(async move {
                let answer = async {
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(connect_timeout))
                        .set_response_timeout(Some(connect_timeout));
                    let mut connection = client?
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(&master)
                        .query_async::<Option<(String, u16)>>(&mut connection)
                        .await
                };
                (index, answer.await)
            });
        }
        let mut failures = Vec::new();
        while let Some(joined) = asking.join_next().await {
            let Ok((index, answer)) = joined else {
                continue;
            };
            let name = self
                .nodes
                .get(index)
                .map(|node| node_address(node.addr()))
                .unwrap_or_default();
            match answer {
                Ok(Some(address)) => return Ok(address),
                Ok(None) => failures.push(format!(
                    "{name}: does not know a master named {:?}",
                    self.master_name
                )),
                Err(error) => failures.push(format!("{name}: {error}")),
            }
        }
        Err(format!(
            "no sentinel named the master {:?} ({})",
            self.master_name,
            failures.join("; ")
        ))
    }
}

/// `spec` with the credentials of its URL entries hidden (bare entries hold none).
fn redact_spec(spec: &str) -> String {
    spec.split(',')
        .map(|part| {
            if part.contains("://") {
                redact_url(part.trim())
            } else {
                part.trim().to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
}

fn node_address(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(spec: &str) -> String {
        match Sentinels::parse(spec, None, false) {
            Ok(_) => panic!("{spec} should have been refused"),
            Err(StoreError::Misconfigured { reason, .. }) => reason,
            Err(other) => panic!("expected Misconfigured, got {other}"),
        }
    }

    #[test]
    fn the_reference_format_is_read() {
        let sentinels = Sentinels::parse(
            "mymaster, 10.0.0.1:26379,redis://:pw@10.0.0.2:26380",
            Some("sentinel-secret"),
            false,
        )
        .unwrap_or_else(|error| panic!("a valid address: {error}"));
        assert_eq!(sentinels.master_name, "mymaster");
        assert_eq!(sentinels.describe(), "10.0.0.1:26379, 10.0.0.2:26380");
        assert!(!sentinels.tls);
        // REDIS_SENTINEL_AUTH fills in only where the URL has no password.
        let secrets: Vec<&str> = sentinels.secrets().collect();
        assert_eq!(secrets, ["sentinel-secret", "pw"]);
    }

    #[test]
    fn tls_makes_bare_addresses_rediss() {
        let sentinels = Sentinels::parse("m,10.0.0.1:26379", None, true)
            .unwrap_or_else(|error| panic!("a valid address: {error}"));
        assert!(sentinels.tls);
        assert!(refused("m,redis://a:1,rediss://b:2").contains("mix"));
    }

    #[test]
    fn malformed_addresses_say_the_expected_form() {
        for spec in ["mymaster", "10.0.0.1:26379", ",10.0.0.1:26379", "m,"] {
            let reason = refused(spec);
            assert!(reason.contains("MASTER_NAME,HOST:PORT"), "{spec}: {reason}");
        }
        let reason = refused("redis://u:hunter22@10.0.0.1:26379,10.0.0.2:26379");
        assert!(reason.contains("MASTER_NAME"), "{reason}");
        assert!(!reason.contains("hunter22"), "{reason}");
    }
}
