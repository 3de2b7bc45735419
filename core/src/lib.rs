//! The pure core: configuration, the descriptor rule tree, the algorithms and the request
//! semantics. Nothing here does I/O or reads a clock; the shells around it do.
//!
//! # Layout
//!
//! The core is built in four floors, one folder each; a module may use the modules of its own
//! floor and of the floors below it, never those above, and no modules use each other, even
//! through others (`tests/repository/layers.rs` holds both rules).
//!
//! 4. [`decision`]: one request decided: the plan and its counters' keys, the charging both
//!    stores follow, the bans asked around it, the answer (statuses, headers, dynamic
//!    metadata), the reference's counts and stats keys, the explanation of a lookup, the
//!    semantics and the overload answers.
//! 3. [`policy`]: what the operator configured and what a request asks: the rule tree, the
//!    configuration that builds it, the request, check profiles, run-time adjustments, RLQS
//!    assignments, applications' lease requests, the rules' descriptions.
//! 2. [`arithmetic`]: one mechanism at a time: the counting algorithms, concurrency slots,
//!    shedding, priority shares, bans, the adaptive controllers, the hybrid merge, the failure
//!    policy.
//! 1. [`ground`]: the words the others are written in: time, the calendar, units, a counter's
//!    role in the verdict, metadata as a protobuf Struct.
//!
//! No circle is left between the core's modules.

pub mod arithmetic;
pub mod decision;
pub mod ground;
pub mod policy;
