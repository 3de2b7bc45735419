//! A bad network between floodgate and Redis. Each test makes a network namespace and veth
//! pair of its own (`testkit::netns`), runs redis-server inside it and floodgate on the host
//! (one domain per failure policy, `--redis-timeout-ms 100`), loads every domain and breaks
//! the network in one way: packet loss and a partition with nftables rules inside the
//! namespace (this kernel has no netem qdisc), latency and a server that never answers with
//! the delaying proxy (`testkit::delay_proxy`), a SIGSTOP'd Redis. `verdicts.rs` says what
//! each run must show. Where namespaces cannot be made (no root, no `ip`/`nft`) the tests skip
//! with the reason, except under `CI=true`, where that is a failure.
//!
//! The tests take turns (harness.rs): their latency bound is asserted.

mod harness;
mod latency;
mod load;
mod loss;
mod partition;
mod silent;
mod verdicts;
