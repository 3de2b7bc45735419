//! The top floor: one request decided. The plan (the counters a request touches and their
//! keys), the charging both stores follow, the answer with its statuses, headers and dynamic
//! metadata, the reference's counts and stats keys, the explanation of a lookup, and the
//! choices (`semantics`) and self-protection (`overload`) that shape the answer.

pub mod bans;
pub mod charging;
pub mod dynamic_metadata;
pub mod error_codes;
pub mod explain;
pub mod headers;
pub mod key;
pub mod outcome;
pub mod overload;
pub mod plan;
pub mod reference_cache;
pub mod response;
pub mod semantics;
pub mod status;
pub mod waiting;
