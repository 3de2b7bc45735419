//! RLQS (Envoy's Rate Limit Quota Service) decided without I/O: which rule a bucket meets, how
//! one rule's limit is divided among the Envoys reporting on it, and the assignment each gets.
//! The live per-bucket state is in `engine::rlqs`; the wire in `server::rlqs`.

pub mod assignment;
pub mod bucket;
pub mod peers;
pub mod push;
pub mod share;

pub use assignment::{assign, Assignment, BucketLimit, TokenBucketShape, UnmatchedBucket};
pub use bucket::{BucketError, BucketKey, BucketKeyBounds};
pub use peers::{peer_entry, PeerEntry};
pub use push::{demand_moved, opening, peers_moved, worth_pushing, PushSettings};
pub use share::{aggregate_demand, class_totals, divide, instance_part, ShareSettings};
