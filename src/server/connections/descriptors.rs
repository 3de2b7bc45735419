//! The file-descriptor budget of the listeners. Every open connection is a descriptor; when
//! the process runs out, `accept` fails on every listener at once, so a flood on one port
//! (a slowloris on HTTP) would shut out the proxies on another (gRPC). Each listener's
//! `--max-connections` is therefore made to fit, together, in RLIMIT_NOFILE.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors kept for everything that is not a served connection: the listening sockets,
/// Redis connections (up to the pool's 64), the config and certificate watchers, the OTLP
/// exporter, stdio.
pub const RESERVED_DESCRIPTORS: u64 = 128;

/// The smallest bound a listener is given, however low the limit.
const MIN_CONNECTIONS: u32 = 16;

/// Raises the soft RLIMIT_NOFILE to the hard limit (what the Go runtime does at start, so
/// envoyproxy/ratelimit gets it too) and returns the soft limit then in force, `None` if
/// unlimited or unknown.
pub fn raise_descriptor_limit() -> Option<u64> {
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some() && limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(%error, "cannot raise RLIMIT_NOFILE to its hard limit");
        }
    }
    getrlimit(Resource::Nofile).current
}

/// The connections each of `listeners` may hold so that all of them, at their bound, fit in
/// `descriptor_limit` beside the reserve.
pub fn connections_per_listener(
    requested: u32,
    listeners: u32,
    descriptor_limit: Option<u64>,
) -> u32 {
    let Some(limit) = descriptor_limit else {
        return requested;
    };
    let available = limit.saturating_sub(RESERVED_DESCRIPTORS) / u64::from(listeners.max(1));
    let fitted = u32::try_from(available).unwrap_or(u32::MAX);
    requested.min(fitted).max(MIN_CONNECTIONS.min(requested))
}

/// `--max-connections`, fitted to the process's descriptor limit, with a warning when lowered.
pub fn fit_max_connections(requested: u32, listeners: u32) -> u32 {
    let limit = raise_descriptor_limit();
    let fitted = connections_per_listener(requested, listeners, limit);
    if fitted < requested {
        tracing::warn!(
            descriptor_limit = limit,
            listeners,
            max_connections = fitted,
            "RLIMIT_NOFILE leaves room for {fitted} connections per listener, not \
             --max-connections {requested}: raise the limit (ulimit -n, systemd LimitNOFILE=) \
             or lower --max-connections to silence this"
        );
    }
    fitted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_shared_out_below_the_descriptor_limit() {
        assert_eq!(connections_per_listener(4096, 4, Some(1024)), 224);
        assert_eq!(connections_per_listener(100, 4, Some(1024)), 100);
        assert_eq!(connections_per_listener(4096, 3, None), 4096);
        assert_eq!(connections_per_listener(4096, 3, Some(1_048_576)), 4096);
    }

    #[test]
    fn a_tiny_limit_still_leaves_each_listener_a_few_connections() {
        assert_eq!(connections_per_listener(4096, 3, Some(64)), MIN_CONNECTIONS);
        assert_eq!(connections_per_listener(4, 3, Some(64)), 4);
    }
}
