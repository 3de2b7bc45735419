//! What the xDS client is told: the management server, this node, the stream's metadata, TLS,
//! and the pauses between attempts. The texts of envoyproxy/ratelimit's variables are read here
//! as the reference reads them (`CONFIG_GRPC_XDS_SERVER_URL` as a gRPC target,
//! `CONFIG_GRPC_XDS_NODE_METADATA` as `k=v,k2=v2`, `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`
//! as envconfig's map `k:v,k2:v2`); durations and switches arrive parsed from the command line.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

/// Everything the client needs; built by `cmd` from the flags and variables.
#[derive(Debug, Clone)]
pub struct XdsSettings {
    pub server: ServerAddress,
    /// `CONFIG_GRPC_XDS_NODE_ID`: the node the management server keys its snapshots by.
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`, each value a string in `node.metadata`.
    pub node_metadata: Vec<(String, String)>,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`: gRPC metadata sent on every stream.
    pub headers: StreamHeaders,
    /// `CONFIG_GRPC_XDS_SERVER_USE_TLS` with its files; `None` is plain HTTP/2.
    pub tls: Option<XdsTlsFiles>,
    /// `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`: between attempts to connect while the
    /// server cannot be reached (±50 %, as the reference's `BackoffLinearWithJitter`).
    pub connect_retry_interval: Duration,
    /// `XDS_CLIENT_BACKOFF_*`: the pause before opening a stream again after one ended.
    pub backoff: BackoffSettings,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: the largest response accepted [default: gRPC's 4 MiB].
    pub max_message_bytes: Option<usize>,
}

/// The TLS files of the connection to the management server (read at every connection, so a
/// rotated certificate is used from the next reconnect on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdsTlsFiles {
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_CERT` and `_KEY`: the client certificate, for mutual TLS.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`: the CA the server's certificate must chain to
    /// [default: the system's roots].
    pub server_ca: Option<PathBuf>,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`: the name the server's certificate is verified against
    /// [default: the host of the server URL].
    pub server_name: Option<String>,
}

/// envoyproxy/ratelimit's `XDS_CLIENT_BACKOFF_*`, handed to jpillora/backoff as
/// `Min`, `Max`, `Factor` and `Jitter` (see `backoff`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffSettings {
    pub initial: Duration,
    pub max: Duration,
    pub factor: f64,
    pub jitter: bool,
}

impl Default for BackoffSettings {
    /// The reference's defaults: 10 s, 60 s, 0.5, jitter on.
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        }
    }
}

/// A setting's text that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "CONFIG_GRPC_XDS_SERVER_URL={text:?}: {problem}; write the management server as \
         host:port (envoy-gateway:18001, 10.0.0.7:18000, [fd00::7]:18000), as for \
         envoyproxy/ratelimit"
    )]
    ServerUrl { text: String, problem: &'static str },
    #[error(
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: {item:?} is not a header: {problem}; write \
         the headers as name:value pairs separated by commas (x-team:edge,x-zone:a), as \
         envoyproxy/ratelimit reads the variable"
    )]
    Header { item: String, problem: &'static str },
}

/// The management server's address: a host (name or IP) and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddress {
    host: String,
    port: u16,
}

/// gRPC-go's default port when a target names none.
const DEFAULT_GRPC_PORT: u16 = 443;

impl ServerAddress {
    /// A gRPC target as the reference's `grpc.Dial` takes it: `host:port`, optionally behind the
    /// `dns:///` or `passthrough:///` scheme gRPC-go understands; no port means 443, as there.
    pub fn parse(text: &str) -> Result<Self, SettingsError> {
        let refuse = |problem| SettingsError::ServerUrl {
            text: text.to_owned(),
            problem,
        };
        let trimmed = text.trim();
        let target = ["dns:///", "passthrough:///", "dns:"]
            .iter()
            .find_map(|scheme| trimmed.strip_prefix(scheme))
            .unwrap_or(trimmed);
        if target.starts_with("unix:") || target.starts_with('/') {
            return Err(refuse(
                "floodgate reaches the management server over TCP only, not a Unix socket",
            ));
        }
        if target.contains("://") {
            return Err(refuse(
                "a URL scheme is not a gRPC target (TLS is CONFIG_GRPC_XDS_SERVER_USE_TLS)",
            ));
        }
        let (host, port) = split_host_port(target)
            .ok_or_else(|| refuse("the port is not a number from 1 to 65535"))?;
        if host.is_empty() {
            return Err(refuse("the host is missing"));
        }
        if host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@') {
            return Err(refuse("the host is not a name or an IP address"));
        }
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }

    /// The host, without brackets: what the server's certificate is checked against by default.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The URI tonic connects to.
    pub fn uri(&self, tls: bool) -> String {
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{self}")
    }
}

/// `host:port`, `[v6]:port`, `host` (port 443) or a bare IPv6 address (port 443).
fn split_host_port(target: &str) -> Option<(&str, u16)> {
    let port = |text: &str| text.parse::<u16>().ok().filter(|port| *port > 0);
    if let Some(rest) = target.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(text) => Some((host, port(text)?)),
            None if after.is_empty() => Some((host, DEFAULT_GRPC_PORT)),
            None => None,
        };
    }
    match target.matches(':').count() {
        0 => Some((target, DEFAULT_GRPC_PORT)),
        1 => {
            let (host, text) = target.split_once(':')?;
            Some((host, port(text)?))
        }
        // An IPv6 address without brackets and without a port.
        _ => target
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|_| (target, DEFAULT_GRPC_PORT)),
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// `CONFIG_GRPC_XDS_NODE_METADATA` as the reference reads it: entries separated by `,`, each
/// `key=value` split at the first `=`; an entry without `=` is skipped (returned second, to be
/// said), and a key given twice keeps its last value.
pub fn parse_node_metadata(text: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut skipped = Vec::new();
    if text.is_empty() {
        return (entries, skipped);
    }
    for item in text.split(',') {
        match item.split_once('=') {
            Some((key, value)) => {
                entries.retain(|(known, _)| known != key);
                entries.push((key.to_owned(), value.to_owned()));
            }
            None => skipped.push(item.to_owned()),
        }
    }
    (entries, skipped)
}

/// The gRPC metadata every stream carries, checked once.
#[derive(Debug, Clone, Default)]
pub struct StreamHeaders(Vec<(AsciiMetadataKey, AsciiMetadataValue)>);

impl StreamHeaders {
    /// envconfig's map syntax, which the reference's `map[string]string` setting uses: items
    /// separated by `,`, each exactly one `name:value` (a value holding `:` is refused there
    /// too). Names are lower-cased, as gRPC-go's `metadata.New` does; spaces around names and
    /// values are dropped.
    pub fn parse(text: &str) -> Result<Self, SettingsError> {
        let mut headers = Vec::new();
        if text.trim().is_empty() {
            return Ok(Self(headers));
        }
        for item in text.split(',') {
            let refuse = |problem| SettingsError::Header {
                item: item.to_owned(),
                problem,
            };
            let mut parts = item.split(':');
            let (Some(name), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(refuse(
                    "each item is one name and one value joined by a single ':'",
                ));
            };
            let name = name.trim().to_ascii_lowercase();
            if name.ends_with("-bin") {
                return Err(refuse("binary (-bin) metadata is not supported"));
            }
            let key = AsciiMetadataKey::from_bytes(name.as_bytes())
                .map_err(|_| refuse("the name may hold letters, digits, '-', '_' and '.' only"))?;
            let value = value.trim();
            let visible = value.chars().all(|c| c.is_ascii_graphic() || c == ' ');
            let value = AsciiMetadataValue::try_from(value)
                .ok()
                .filter(|_| visible)
                .ok_or_else(|| refuse("the value may hold visible ASCII characters only"))?;
            headers.push((key, value));
        }
        Ok(Self(headers))
    }

    pub fn iter(&self) -> impl Iterator<Item = &(AsciiMetadataKey, AsciiMetadataValue)> {
        self.0.iter()
    }

    /// The names, for logs (values may be credentials).
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|(key, _)| key.as_str()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(text: &str) -> Result<String, SettingsError> {
        ServerAddress::parse(text).map(|address| address.to_string())
    }

    #[test]
    fn server_urls_are_grpc_targets() {
        assert_eq!(address("localhost:18000"), Ok("localhost:18000".to_owned()));
        assert_eq!(
            address(" envoy-gateway:18001 "),
            Ok("envoy-gateway:18001".to_owned())
        );
        assert_eq!(
            address("dns:///xds.internal:9"),
            Ok("xds.internal:9".to_owned())
        );
        assert_eq!(
            address("passthrough:///10.0.0.1:7"),
            Ok("10.0.0.1:7".to_owned())
        );
        assert_eq!(address("[::1]:18000"), Ok("[::1]:18000".to_owned()));
        assert_eq!(address("xds.internal"), Ok("xds.internal:443".to_owned()));
        assert_eq!(address("fd00::7"), Ok("[fd00::7]:443".to_owned()));
        for bad in [
            "",
            ":18000",
            "host:port",
            "host:0",
            "host:70000",
            "http://host:1",
            "unix:///run/xds.sock",
            "a b:1",
            "[::1]x",
        ] {
            assert!(
                matches!(
                    ServerAddress::parse(bad),
                    Err(SettingsError::ServerUrl { .. })
                ),
                "{bad:?}"
            );
        }
        let parsed = ServerAddress::parse("[fd00::7]:1").unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(parsed.host(), "fd00::7");
        assert_eq!(parsed.uri(true), "https://[fd00::7]:1");
        assert_eq!(parsed.uri(false), "http://[fd00::7]:1");
    }

    #[test]
    fn node_metadata_is_read_as_the_reference_reads_it() {
        let (entries, skipped) = parse_node_metadata("zone=a,team=edge=x,bare,zone=b");
        assert_eq!(
            entries,
            vec![
                ("team".to_owned(), "edge=x".to_owned()),
                ("zone".to_owned(), "b".to_owned())
            ]
        );
        assert_eq!(skipped, vec!["bare".to_owned()]);
        assert_eq!(parse_node_metadata(""), (vec![], vec![]));
    }

    #[test]
    fn headers_are_envconfig_maps() {
        let headers = StreamHeaders::parse("X-Team:edge, x-zone : a ")
            .unwrap_or_else(|error| panic!("{error}"));
        let pairs: Vec<(String, String)> = headers
            .iter()
            .map(|(key, value)| {
                (
                    key.as_str().to_owned(),
                    value.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("x-team".to_owned(), "edge".to_owned()),
                ("x-zone".to_owned(), "a".to_owned())
            ]
        );
        assert!(StreamHeaders::parse("").is_ok_and(|headers| headers.names().is_empty()));
        for bad in [
            "x-team",
            "a:b:c",
            "a:b,",
            "bad name:v",
            "x-bin:AAA",
            "x:caf\u{e9}",
        ] {
            assert!(
                matches!(StreamHeaders::parse(bad), Err(SettingsError::Header { .. })),
                "{bad:?}"
            );
        }
    }
}
