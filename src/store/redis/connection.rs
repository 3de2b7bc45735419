//! The connection to Redis: one multiplexed socket (concurrent calls are pipelined on it) that
//! reconnects by itself, behind a deadline on every call. Credentials never leave this file:
//! errors name the server as `host:port/db`, and Redis's own messages are scrubbed of the
//! password before they are passed on.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError,
};

use crate::store::StoreError;

pub(super) const BACKEND: &str = "redis";

/// The longest pause between reconnection attempts: a restarted Redis is found again quickly
/// (with the breaker's probe every 500 ms, decisions resume within 1 s of Redis returning).
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(250);

/// A connection manager and the redacted name of the server it talks to.
pub(super) struct Connection {
    pub manager: ConnectionManager,
    pub server: String,
    /// Scrubbed out of every error message (empty: nothing to scrub).
    secrets: Vec<String>,
}

impl Connection {
    /// Connects to `url` within `connect_timeout`. `auth` (`password` or `user:password`)
    /// applies when the URL carries no password.
    pub async fn open(
        url: &str,
        auth: Option<&str>,
        connect_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let info: ConnectionInfo = url.into_connection_info().map_err(|error| {
            let secrets = url_secrets(url);
            unavailable(format!(
                "invalid Redis URL {}: {}",
                redact_url(url),
                scrub(&error.to_string(), &secrets)
            ))
        })?;
        let info = with_auth(info, auth);
        let server = describe_server(&info);
        let settings = info.redis_settings();
        let secrets: Vec<String> = settings
            .password()
            .into_iter()
            .map(str::to_owned)
            .chain(url_secrets(url))
            .filter(|secret| !secret.is_empty())
            .collect();
        let client = redis::Client::open(info).map_err(|error| {
            unavailable(format!(
                "cannot use Redis at {server}: {}",
                scrub(&error.to_string(), &secrets)
            ))
        })?;
        // One plain attempt first: the manager retries every failure until its deadline, which
        // would hide a wrong password or a refused connection behind "no connection".
        let probe = async {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(connect_timeout));
            let mut probe = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<()>(&mut probe).await
        };
        match tokio::time::timeout(connect_timeout, probe).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(unavailable(format!(
                    "cannot connect to Redis at {server}: {}",
                    scrub(&error.to_string(), &secrets)
                )))
            }
            Err(_) => {
                return Err(unavailable(format!(
                    "cannot connect to Redis at {server}: no answer within {connect_timeout:?}"
                )))
            }
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_max_delay(MAX_RECONNECT_DELAY);
        let connecting = ConnectionManager::new_with_config(client, config);
        let manager = match tokio::time::timeout(connect_timeout, connecting).await {
            Ok(Ok(manager)) => manager,
            Ok(Err(error)) => {
                return Err(unavailable(format!(
                    "cannot connect to Redis at {server}: {}",
                    scrub(&error.to_string(), &secrets)
                )))
            }
            Err(_) => {
                return Err(unavailable(format!(
                    "cannot connect to Redis at {server}: no connection within {connect_timeout:?}"
                )))
            }
        };
        Ok(Self {
            manager,
            server,
            secrets,
        })
    }

    /// Runs `call` with a deadline; a Redis error or the deadline becomes `Unavailable`.
    pub async fn within<T>(
        &self,
        deadline: Duration,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(deadline, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(unavailable(format!(
                "Redis at {} failed: {}",
                self.server,
                scrub(&error.to_string(), &self.secrets)
            ))),
            Err(_) => Err(unavailable(format!(
                "Redis at {} did not answer within {deadline:?}",
                self.server
            ))),
        }
    }
}

pub(super) fn unavailable(reason: String) -> StoreError {
    StoreError::Unavailable {
        backend: BACKEND,
        reason,
    }
}

/// `info` with the credentials of `auth` (`password` or `user:password`, as
/// envoyproxy/ratelimit's `REDIS_AUTH`) unless it has a password already.
fn with_auth(info: ConnectionInfo, auth: Option<&str>) -> ConnectionInfo {
    let Some(auth) = auth.filter(|auth| !auth.is_empty()) else {
        return info;
    };
    if info.redis_settings().password().is_some() {
        return info;
    }
    let settings = info.redis_settings().clone();
    let settings = match auth.split_once(':') {
        Some((user, password)) => settings.set_username(user).set_password(password),
        None => settings.set_password(auth),
    };
    info.set_redis_settings(settings)
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

/// Query parameters of a Redis URL that hold credentials (`unix:///socket?user=…&pass=…`).
const CREDENTIAL_PARAMETERS: [&str; 3] = ["user", "pass", "password"];

/// `url` with any user and password (in the authority or the query) replaced by `***`.
pub(super) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL at all: nothing in it can be shown safely.
        return "(not a URL)".to_owned();
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority_end = before_query.find(['/', '#']).unwrap_or(before_query.len());
    let mut redacted = match before_query[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &before_query[at..]),
        None => format!("{scheme}://{before_query}"),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if CREDENTIAL_PARAMETERS.contains(&name) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&pairs.join("&"));
    }
    redacted
}

/// The credentials in `url` (raw and percent-decoded), to scrub from messages.
fn url_secrets(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![url.to_owned()];
    };
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut secrets = Vec::new();
    let authority_end = before_query.find(['/', '#']).unwrap_or(before_query.len());
    if let Some(at) = before_query[..authority_end].rfind('@') {
        let user_info = &before_query[..at];
        secrets.push(user_info.to_owned());
        if let Some((_, password)) = user_info.split_once(':') {
            secrets.push(password.to_owned());
            secrets.push(percent_decode(password));
        }
    }
    for pair in query.split('&') {
        if let Some((name, value)) = pair.split_once('=') {
            if CREDENTIAL_PARAMETERS.contains(&name) {
                secrets.push(value.to_owned());
                secrets.push(percent_decode(value));
            }
        }
    }
    secrets.retain(|secret| !secret.is_empty());
    secrets
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        let escaped = (byte == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(value) => {
                decoded.push(value);
                index += 3;
            }
            None => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// `message` with every secret replaced by `***`.
fn scrub(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|secret| !secret.is_empty())
        .fold(message.to_owned(), |message, secret| {
            message.replace(secret.as_str(), "***")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_url("redis://user:p%40ss@cache:6380/2"),
            "redis://***@cache:6380/2"
        );
        assert_eq!(redact_url("redis://:secret@cache"), "redis://***@cache");
        assert_eq!(redact_url("redis://cache:6379/0"), "redis://cache:6379/0");
        assert_eq!(
            redact_url("redis://a@b@cache/1?x=y@z"),
            "redis://***@cache/1?x=y@z"
        );
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=2&user=u&pass=hunter22"),
            "unix:///run/redis.sock?db=2&user=***&pass=***"
        );
        assert_eq!(redact_url("secret-without-scheme"), "(not a URL)");
    }

    #[test]
    fn auth_fills_in_missing_credentials_only() {
        let info = |url: &str| url.into_connection_info().expect("a valid URL");
        let with = with_auth(info("redis://cache"), Some("alice:pa:ss"));
        assert_eq!(with.redis_settings().username(), Some("alice"));
        assert_eq!(with.redis_settings().password(), Some("pa:ss"));
        let with = with_auth(info("unix:///run/redis.sock"), Some("secret"));
        assert_eq!(with.redis_settings().username(), None);
        assert_eq!(with.redis_settings().password(), Some("secret"));
        let with = with_auth(info("redis://:own@cache"), Some("other"));
        assert_eq!(with.redis_settings().password(), Some("own"));
    }

    #[test]
    fn secrets_are_scrubbed_raw_and_decoded() {
        let secrets = url_secrets("redis://user:p%40ss@cache:6380/2");
        let message = scrub("auth p@ss failed for user:p%40ss", &secrets);
        assert!(
            !message.contains("p@ss") && !message.contains("p%40ss"),
            "{message}"
        );
        assert!(url_secrets("redis://cache").is_empty());
        let secrets = url_secrets("unix:///s?db=1&pass=hunter22");
        assert_eq!(scrub("bad hunter22", &secrets), "bad ***");
    }

    #[test]
    fn servers_are_named_without_credentials() {
        let info = "redis://alice:hunter22@10.1.2.3:6390/4"
            .into_connection_info()
            .expect("a valid URL");
        assert_eq!(describe_server(&info), "10.1.2.3:6390/4");
    }

    #[tokio::test]
    async fn a_bad_url_is_refused_without_echoing_it() {
        let result =
            Connection::open("redis://user:hunter22@", None, Duration::from_millis(100)).await;
        let Err(StoreError::Unavailable { reason, .. }) = result else {
            panic!("an invalid URL must be refused");
        };
        assert!(!reason.contains("hunter22"), "{reason}");
        assert!(reason.contains("invalid Redis URL"), "{reason}");
    }
}
