//! The reference's stats as statsd lines, under the names envoyproxy/ratelimit sends them
//! (`ratelimit.service.rate_limit.<key>.<stat>`, `ratelimit.service.config_load_success`,
//! `ratelimit.service.call.should_rate_limit.<err_type>`,
//! `ratelimit_server.ShouldRateLimit.total_requests` and `.response_time`): each flush sends
//! what was counted since the last one, counters as `name:value|c` (only those that moved, as
//! lyft/gostats does) and the response time as `|ms`.
//!
//! They are read from the counters [`crate::telemetry::reference::stats`] keeps under these
//! names for both sinks, so the decision path counts once, in memory; statsd gets every name
//! whole, whatever the Prometheus mapping makes of it.
//!
//! The response time is sent once per flush as the mean of the calls since the last, with the
//! sample rate `@1/calls`, so that statsd counts every call.

use std::collections::HashMap;

use super::mogrifiers::Mogrifiers;
use crate::telemetry::reference::stats::StatsdSnapshot;

const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// How lines are tagged: `EXTRA_TAGS`, as DogStatsD tags or in the name; for DogStatsD the
/// mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`) may turn a name into another name and tags.
#[derive(Debug, Clone, Default)]
pub struct Tagging {
    pub dog: bool,
    pub extra_tags: Vec<(String, String)>,
    pub mogrifiers: Mogrifiers,
}

impl Tagging {
    /// One line: `name` and `body` (`3|c`, `2.500|ms`), tagged. Plain statsd carries the tags in
    /// the name as gostats puts them there (`.__key=value`); DogStatsD sends the name (as the
    /// first matching mogrifier makes it) and the tags after `|#`, `EXTRA_TAGS` first, as the
    /// reference's DogStatsD sink orders them.
    fn line(&self, name: &str, body: &str) -> String {
        if !self.dog {
            let mut out = name.to_owned();
            for (key, value) in &self.extra_tags {
                out.push_str(".__");
                out.push_str(key);
                out.push('=');
                out.push_str(value);
            }
            return format!("{out}:{body}");
        }
        let mut tags: Vec<String> = self
            .extra_tags
            .iter()
            .map(|(key, value)| format!("{key}:{value}"))
            .collect();
        let name = match self.mogrifiers.mogrify(name) {
            Some((mogrified, more)) => {
                tags.extend(more);
                mogrified
            }
            None => name.to_owned(),
        };
        if tags.is_empty() {
            format!("{name}:{body}")
        } else {
            format!("{name}:{body}|#{}", tags.join(","))
        }
    }
}

/// What was sent up to the last flush, to send only what came after.
#[derive(Debug, Default)]
pub struct Deltas {
    /// Each counter's value (by its statsd name) at the last flush.
    counters: HashMap<Box<str>, u64>,
    /// The response time's call count and sum (milliseconds) at the last flush.
    response_time: (u64, f64),
}

impl Deltas {
    /// The lines for what `snapshot` (the reference's stats now) counted since the last call.
    pub fn lines(&mut self, snapshot: &StatsdSnapshot, tagging: &Tagging) -> Vec<String> {
        let mut lines = Vec::new();
        let mut seen = HashMap::with_capacity(snapshot.counters.len());
        for (name, value) in &snapshot.counters {
            let last = self.counters.get(name).copied().unwrap_or(0);
            // A series removed and made again starts over from zero.
            let delta = if *value >= last { value - last } else { *value };
            if delta > 0 {
                lines.push(tagging.line(name, &format!("{delta}|c")));
            }
            seen.insert(name.clone(), *value);
        }
        // Names gone (their rule removed) are forgotten, so a key made again starts from zero.
        self.counters = seen;
        if let Some(line) = self.response_time(snapshot, tagging) {
            lines.push(line);
        }
        lines
    }

    fn response_time(&mut self, snapshot: &StatsdSnapshot, tagging: &Tagging) -> Option<String> {
        let (count, sum) = (
            snapshot.response_time_calls,
            snapshot.response_time_milliseconds,
        );
        let (last_count, last_sum) = std::mem::replace(&mut self.response_time, (count, sum));
        let calls = count.checked_sub(last_count).filter(|calls| *calls > 0)?;
        let mean = (sum - last_sum) / calls as f64;
        let body = if calls == 1 {
            format!("{mean:.3}|ms")
        } else {
            format!("{mean:.3}|ms|@{}", 1.0 / calls as f64)
        };
        Some(tagging.line(RESPONSE_TIME, &body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::decision::outcome::reference_counts::ReferenceCounts;
    use crate::telemetry::reference::mapping::MetricMapper;
    use crate::telemetry::reference::stats::ReferenceStats;

    fn stats() -> ReferenceStats {
        ReferenceStats::new(4, MetricMapper::reference_default(false))
            .unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn each_flush_sends_what_moved_since_the_last_under_the_reference_names() {
        let stats = stats();
        stats.config_loaded(true);
        stats.grpc_call(0.002);
        stats.grpc_call(0.004);
        stats.add_for_test(
            "d.k_v",
            &ReferenceCounts {
                total_hits: 3,
                within_limit: 3,
                ..ReferenceCounts::default()
            },
        );
        let mut deltas = Deltas::default();
        let tagging = Tagging::default();
        let lines = deltas.lines(&stats.statsd_snapshot(), &tagging);
        for line in [
            "ratelimit.service.config_load_success:1|c",
            "ratelimit_server.ShouldRateLimit.total_requests:2|c",
            "ratelimit_server.ShouldRateLimit.response_time:3.000|ms|@0.5",
            "ratelimit.service.rate_limit.d.k_v.total_hits:3|c",
            "ratelimit.service.rate_limit.d.k_v.within_limit:3|c",
        ] {
            assert!(lines.iter().any(|sent| sent == line), "{line} in {lines:?}");
        }
        assert!(
            !lines.iter().any(|line| line.contains("over_limit")),
            "{lines:?}"
        );

        stats.add_for_test(
            "d.k_v",
            &ReferenceCounts {
                total_hits: 2,
                over_limit: 2,
                ..ReferenceCounts::default()
            },
        );
        let mut lines = deltas.lines(&stats.statsd_snapshot(), &tagging);
        lines.sort();
        assert_eq!(
            lines,
            [
                "ratelimit.service.rate_limit.d.k_v.over_limit:2|c",
                "ratelimit.service.rate_limit.d.k_v.total_hits:2|c",
            ]
        );
        assert!(deltas.lines(&stats.statsd_snapshot(), &tagging).is_empty());
    }

    #[test]
    fn dogstatsd_mogrifiers_turn_the_key_into_tags_after_the_extra_tags() {
        let stats = stats();
        stats.add_for_test(
            "edge.user_bob",
            &ReferenceCounts {
                total_hits: 2,
                ..ReferenceCounts::default()
            },
        );
        let variables = [
            (
                "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
                r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
            ),
            (
                "DOG_STATSD_MOGRIFIER_HITS_NAME",
                "ratelimit.service.rate_limit.$3",
            ),
            ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
        ];
        let lookup = |name: &str| {
            variables
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        let mogrifiers =
            Mogrifiers::from_env("HITS", lookup).unwrap_or_else(|error| panic!("{error}"));
        let dog = Tagging {
            dog: true,
            extra_tags: vec![("app".to_owned(), "edge".to_owned())],
            mogrifiers,
        };
        assert_eq!(
            Deltas::default().lines(&stats.statsd_snapshot(), &dog),
            ["ratelimit.service.rate_limit.total_hits:2|c|#app:edge,domain:edge,descriptor:user_bob"]
        );
    }

    #[test]
    fn extra_tags_go_into_the_name_or_after_a_hash_for_dogstatsd() {
        let stats = stats();
        stats.config_loaded(false);
        let extra_tags = vec![
            ("app".to_owned(), "edge".to_owned()),
            ("zone".to_owned(), "eu".to_owned()),
        ];
        let plain = Tagging {
            dog: false,
            extra_tags: extra_tags.clone(),
            mogrifiers: Mogrifiers::default(),
        };
        let dog = Tagging {
            dog: true,
            extra_tags,
            mogrifiers: Mogrifiers::default(),
        };
        assert_eq!(
            Deltas::default().lines(&stats.statsd_snapshot(), &plain),
            ["ratelimit.service.config_load_error.__app=edge.__zone=eu:1|c"]
        );
        assert_eq!(
            Deltas::default().lines(&stats.statsd_snapshot(), &dog),
            ["ratelimit.service.config_load_error:1|c|#app:edge,zone:eu"]
        );
    }
}
