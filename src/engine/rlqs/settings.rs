//! The RLQS knobs (`--rlqs-*` flags) and their defaults, explained in docs/rlqs.md.

use std::time::Duration;

use crate::core::policy::rlqs::{BucketKeyBounds, PushSettings, ShareSettings, UnmatchedBucket};

#[derive(Debug, Clone, PartialEq)]
pub struct QuotaSettings {
    /// What a bucket that meets no rule is assigned.
    pub unmatched: UnmatchedBucket,
    /// `assignment_time_to_live` of every assignment: how long an Envoy that hears nothing
    /// more keeps it before its `expired_assignment_behavior`. Whole seconds, at least 1
    /// (Envoy 1.40 reads only the seconds; 0 would expire at once).
    pub assignment_ttl: Duration,
    /// A bucket that an Envoy reports no requests on for this long is abandoned on that
    /// Envoy (`AbandonAction`), which forgets it until its next request.
    pub abandon_after: Duration,
    pub max_buckets_per_stream: usize,
    pub max_buckets_per_domain: usize,
    /// Open RLQS streams, all connections together.
    pub max_streams: usize,
    /// Open RLQS streams on one connection (an Envoy opens one per RLQS filter config).
    pub max_streams_per_connection: usize,
    pub bucket_keys: BucketKeyBounds,
    pub shares: ShareSettings,
    /// Which changes are pushed to the Envoys already on a bucket, and the opening burst.
    pub push: PushSettings,
    /// The least time between two pushes to one stream: each push rebuilds the Envoy's token
    /// buckets, so changes that come faster are gathered into one.
    pub push_interval: Duration,
    /// After this process hears its first report, reports on buckets an Envoy already held
    /// are not answered for this long: the Envoys keep the assignments they had (from this
    /// floodgate before a restart, or another) until every one of them has reported and the
    /// limit can be divided among them all. One report interval of Envoy 1.40 (5 s) and a
    /// margin. Zero: answer at once.
    pub startup_grace: Duration,
    /// How often floodgates sharing a store exchange their demands (`exchange`).
    pub exchange_interval: Duration,
}

impl QuotaSettings {
    /// How long an instance's published demand counts (in the store) and the others' demands
    /// are used here: three exchanges, so one late or failed exchange changes nothing.
    pub fn peer_horizon(&self) -> Duration {
        self.exchange_interval
            .saturating_mul(3)
            .max(Duration::from_secs(1))
    }
}

impl QuotaSettings {
    /// How long an instance that stopped publishing still counts at its last demand: as long
    /// as its Envoys may enforce the assignments it gave them (`assignment_ttl`), unless an
    /// instance that started since retires it.
    pub fn peer_memory(&self) -> Duration {
        self.assignment_ttl.max(self.peer_horizon())
    }
}

impl Default for QuotaSettings {
    fn default() -> Self {
        Self {
            unmatched: UnmatchedBucket::AllowAll,
            assignment_ttl: Duration::from_secs(15),
            abandon_after: Duration::from_secs(60),
            max_buckets_per_stream: 1_000,
            max_buckets_per_domain: 10_000,
            max_streams: 1_000,
            max_streams_per_connection: 100,
            bucket_keys: BucketKeyBounds::default(),
            shares: ShareSettings::default(),
            push: PushSettings::default(),
            push_interval: Duration::from_secs(1),
            startup_grace: Duration::from_secs(6),
            exchange_interval: Duration::from_secs(1),
        }
    }
}
