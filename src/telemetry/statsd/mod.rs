//! envoyproxy/ratelimit's stats sent to statsd or DogStatsD (`USE_STATSD`, `USE_DOG_STATSD`):
//! the settings ([`options`], [`mogrifiers`]), the lines of each flush ([`lines`]) and the task
//! that sends them ([`sink`]). The stats themselves are kept in `telemetry::reference`.

pub(crate) mod lines;
pub(crate) mod mogrifiers;
pub(crate) mod options;
pub(crate) mod sink;
