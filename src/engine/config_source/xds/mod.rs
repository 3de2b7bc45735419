//! Rules pushed over xDS: envoyproxy/ratelimit's `CONFIG_TYPE=GRPC_XDS_SOTW`, as Envoy
//! Gateway runs it. A client of the Aggregated Discovery Service, state of the world, subscribed
//! to `type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig` (see docs/xds.md).
//!
//! * `settings`: the management server, the node, headers, TLS files, pauses;
//! * `exchange`: what to send after which response (ACK, NACK, the pause before a repeated
//!   NACK), pure;
//! * `backoff`: the pauses between attempts, as the reference computes them, pure;
//! * `convert`: resources → the sources the loader reads (`xds:<resource name>`), pure;
//! * `tls`, `stream`: the connection and the stream;
//! * `client`: all of it as one subscription that hands over new snapshots.
//!
//! Loading a snapshot and swapping it in is `engine::reload`'s job, as for files.

mod backoff;
mod client;
pub mod convert;
mod exchange;
mod settings;
mod stream;
mod tls;

pub use client::{fetch_once, Snapshot, XdsClient};
pub use convert::{decode_all, to_source};
#[cfg(test)]
pub use exchange::RATE_LIMIT_CONFIG_TYPE;
pub use settings::{
    parse_node_metadata, BackoffSettings, ServerAddress, StreamHeaders, XdsSettings, XdsTlsFiles,
};
pub use tls::XdsTlsError;
