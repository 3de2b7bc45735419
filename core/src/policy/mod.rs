//! The third floor: what the operator configured and what a request asks. The descriptor rule
//! tree, the configuration files that build it, the request and its checks, the HTTP check
//! profiles, limits changed at run time, RLQS's division of a rule among Envoys, the lease
//! requests of applications and the rules' one-line descriptions.

pub mod adjustment;
pub mod config;
pub mod describe;
pub mod http_check;
pub mod lease_request;
pub mod request;
pub mod rlqs;
pub mod rules;
