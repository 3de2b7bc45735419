//! RLQS (Envoy's rate_limit_quota filter) against real Envoy 1.40 processes with the guide's
//! bootstrap (`deploy/envoy/rlqs.yaml`): one Envoy held to its assignment, two and three with
//! unequal load sharing one limit (and after a demand shift), floodgate restarted under load,
//! an idle bucket abandoned, the allow-all and deny-all defaults; and the stream's answers to
//! malformed reports and bounds, from a gRPC client.
//!
//! Envoy 1.40 reports every 5 s whatever `reporting_interval` says, so convergence takes one
//! or two reports: the tests wait for it and measure over windows of several seconds, with
//! bounds wide enough for a loaded 2-core host and tight enough to catch a wrong division.

mod classes;
mod harness;
mod lifecycle;
mod sharing;
mod transients;
mod upstream;
mod wire;
