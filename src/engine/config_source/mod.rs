//! Where the rules come from, and reading them: the I/O shells around the pure loader
//! (`core::policy::config::load`).
//!
//! * [`files`]: YAML files on disk, at a path or in envoyproxy/ratelimit's runtime layout
//!   (`CONFIG_TYPE=FILE`, the default);
//! * [`xds`]: `RateLimitConfig` resources pushed by a management server over an ADS
//!   state-of-the-world stream (`CONFIG_TYPE=GRPC_XDS_SOTW`, as Envoy Gateway runs the
//!   reference), each turned into the YAML the loader reads.
//!
//! Both end in [`SourceFile`](crate::core::policy::config::SourceFile)s loaded together, so a rule
//! means the same wherever it came from; swapping the rules in is `engine::reload`'s job.

pub mod files;
pub mod xds;

pub use files::{
    location_directories, location_path, read_sources, ConfigLocation, SourceError,
    DEFAULT_MAX_CONFIG_BYTES,
};
