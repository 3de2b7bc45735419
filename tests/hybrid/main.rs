//! The hybrid store (`--store hybrid`): local decisions synced to Redis in the background,
//! against real redis-server processes: the sync script against the core's merge, the store
//! against the exact memory store when it syncs around every decision, and three floodgate
//! processes on one hot key (the over-admission bound, Redis and an instance killed under load),
//! and per-rule counting (`counting: exact | hybrid`) beside each other in one rule set.

mod hybrid_differential;
mod hybrid_per_rule;
mod hybrid_processes;
mod hybrid_sync_script;
