//! RLQS's live state: which Envoys (streams) report on which buckets and what each offered at
//! its last report, bounded per stream, per domain and in streams. The division itself is pure
//! (`core::policy::rlqs`); this keeps what it divides over. Floodgates that share a Redis exchange
//! their demands (`exchange`), so Envoys connected to different floodgates share one limit.

mod board;
mod division;
pub mod exchange;
mod mailbox;
mod settings;
mod stream;

pub use board::{PublishedDemand, QuotaBoard, StreamsExhausted};
pub use settings::QuotaSettings;
pub use stream::{BucketReport, InForce, QuotaStream, ReportError, StreamAction};

#[cfg(test)]
mod push_tests;
#[cfg(test)]
mod tests;
