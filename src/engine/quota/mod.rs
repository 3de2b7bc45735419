//! RLQS's live state: which Envoys (streams) report on which buckets and what each offered at
//! its last report, bounded per stream, per domain and in streams. The division itself is pure
//! (`core::quota`); this keeps what it divides over. One floodgate aggregates its own streams:
//! Envoys connected to different floodgates do not share a limit yet.

mod board;
mod settings;
mod stream;

pub use board::{QuotaBoard, StreamsExhausted};
pub use settings::QuotaSettings;
pub use stream::{BucketReport, InForce, QuotaStream, ReportError, StreamAction};

#[cfg(test)]
mod tests;
