//! The second floor: the arithmetic of one mechanism at a time, on the ground floor's words.
//! The counting algorithms and their counters, concurrency slots, shedding, priority classes,
//! the adaptive controllers, the hybrid store's merge, Limitador's windows and holds
//! (`held_window`) and the failure policy. Nothing here knows a rule tree or a request: the
//! floors above hand each mechanism its numbers.

pub mod aimd;
pub mod algorithm;
pub mod ban;
pub mod failure;
pub mod gradient;
pub mod heavy_hitters;
pub mod held_window;
pub mod hybrid;
pub mod lease;
pub mod priority;
pub mod shed;
