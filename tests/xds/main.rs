//! Rules pushed over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`): floodgate run as a process against the
//! test management server of the testkit (go-control-plane's state-of-the-world server and
//! snapshot cache, as Envoy Gateway runs them), on loopback ports. Snapshots that load and
//! update, snapshots that are NACKed, a server that restarts, TLS, what happens before the
//! first snapshot, and Envoy Gateway's own container environment.

mod envoy_gateway;
mod harness;
mod overflow;
mod reconnect;
mod rejection;
mod snapshots;
mod startup;
mod tls;
