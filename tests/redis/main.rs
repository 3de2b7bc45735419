//! The Redis store: scripts, atomicity, TTLs, pools, timeouts, failure policies, TLS, Sentinel
//! and Cluster, against real redis-server processes (failures under load: `tests/redis_failure/`).

mod redis_atomicity;
mod redis_bans;
mod redis_batch;
mod redis_calendar_month;
mod redis_clock_skew;
mod redis_cluster;
mod redis_concurrency;
mod redis_connection;
mod redis_differential;
mod redis_failure_policy_config;
mod redis_health;
mod redis_heavy_hitters;
mod redis_held_windows;
mod redis_leases;
mod redis_limitador;
mod redis_own_socket;
mod redis_pool;
mod redis_processes;
mod redis_reference_door;
mod redis_reference_keys;
mod redis_reference_stop;
mod redis_rlqs_exchange;
mod redis_scripts;
mod redis_sentinel;
mod redis_startup;
mod redis_timeout;
mod redis_tls;
mod redis_ttl;
mod redis_unsupported_quota;
