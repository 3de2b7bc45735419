//! The reference's stats as statsd lines, under the names envoyproxy/ratelimit sends them
//! (`ratelimit.service.rate_limit.<key>.<stat>`, `ratelimit.service.config_load_success`,
//! `ratelimit.service.call.should_rate_limit.<err_type>`,
//! `ratelimit_server.ShouldRateLimit.total_requests` and `.response_time`): each flush sends
//! what was counted since the last one, counters as `name:value|c` (only those that moved, as
//! lyft/gostats does) and the response time as `|ms`.
//!
//! They are read from the counters [`super::reference_stats`] keeps for the Prometheus
//! listener, so the decision path counts once, in memory, for both. The key is rebuilt from
//! the series' `domain`, `key1`, `key2`: keys of more than three pieces are sent under their
//! first three, as the Prometheus mapping labels them.
//!
//! The response time is sent once per flush as the mean of the calls since the last, with the
//! sample rate `@1/calls`, so that statsd counts every call.

use std::collections::HashMap;

use prometheus::proto::{Metric, MetricFamily};

const RATE_LIMIT_PREFIX: &str = "ratelimit_service_rate_limit_";
const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

/// How lines are tagged: `EXTRA_TAGS`, as DogStatsD tags or in the name.
#[derive(Debug, Clone, Default)]
pub struct Tagging {
    pub dog: bool,
    pub extra_tags: Vec<(String, String)>,
}

impl Tagging {
    /// `name` with the tags as gostats puts them into it (`.__key=value`), or unchanged for
    /// DogStatsD.
    fn name(&self, name: &str) -> String {
        if self.dog {
            return name.to_owned();
        }
        let mut out = name.to_owned();
        for (key, value) in &self.extra_tags {
            out.push_str(".__");
            out.push_str(key);
            out.push('=');
            out.push_str(value);
        }
        out
    }

    /// The DogStatsD tag section (`|#key:value,…`), empty for plain statsd.
    fn suffix(&self) -> String {
        if !self.dog || self.extra_tags.is_empty() {
            return String::new();
        }
        let tags: Vec<String> = self
            .extra_tags
            .iter()
            .map(|(key, value)| format!("{key}:{value}"))
            .collect();
        format!("|#{}", tags.join(","))
    }
}

/// What was sent up to the last flush, to send only what came after.
#[derive(Debug, Default)]
pub struct Deltas {
    /// Each counter's value (by its statsd name) at the last flush.
    counters: HashMap<String, u64>,
    /// The response time's call count and sum at the last flush.
    response_time: (u64, f64),
}

impl Deltas {
    /// The lines for what `families` (the reference's registry, gathered) counted since the
    /// last call; `milliseconds`: the response time is observed in milliseconds already.
    pub fn lines(
        &mut self,
        families: &[MetricFamily],
        tagging: &Tagging,
        milliseconds: bool,
    ) -> Vec<String> {
        let suffix = tagging.suffix();
        let mut lines = Vec::new();
        for family in families {
            let family_name = family.name();
            for metric in family.get_metric() {
                if family_name == RESPONSE_TIME {
                    if let Some(line) = self.response_time(metric, tagging, milliseconds) {
                        lines.push(format!("{line}{suffix}"));
                    }
                    continue;
                }
                let Some(name) = counter_name(family_name, metric) else {
                    continue;
                };
                let value = counter_value(metric);
                let last = self.counters.insert(name.clone(), value).unwrap_or(0);
                // A series removed and made again starts over from zero.
                let delta = if value >= last { value - last } else { value };
                if delta > 0 {
                    lines.push(format!("{}:{delta}|c{suffix}", tagging.name(&name)));
                }
            }
        }
        lines
    }

    fn response_time(
        &mut self,
        metric: &Metric,
        tagging: &Tagging,
        milliseconds: bool,
    ) -> Option<String> {
        let histogram = metric.get_histogram();
        let (count, sum) = (histogram.get_sample_count(), histogram.get_sample_sum());
        let (last_count, last_sum) = std::mem::replace(&mut self.response_time, (count, sum));
        let calls = count.checked_sub(last_count).filter(|calls| *calls > 0)?;
        let scale = if milliseconds { 1.0 } else { 1000.0 };
        let mean = (sum - last_sum) * scale / calls as f64;
        let name = tagging.name("ratelimit_server.ShouldRateLimit.response_time");
        Some(if calls == 1 {
            format!("{name}:{mean:.3}|ms")
        } else {
            format!("{name}:{mean:.3}|ms|@{}", 1.0 / calls as f64)
        })
    }
}

fn label<'m>(metric: &'m Metric, name: &str) -> &'m str {
    metric
        .get_label()
        .iter()
        .find(|pair| pair.name() == name)
        .map(|pair| pair.value())
        .unwrap_or("")
}

fn counter_value(metric: &Metric) -> u64 {
    // Whole hits: the counters only ever add integers.
    metric.get_counter().get_value().max(0.0) as u64
}

/// The reference's statsd name of one counter series of its Prometheus families.
fn counter_name(family: &str, metric: &Metric) -> Option<String> {
    if let Some(stat) = family.strip_prefix(RATE_LIMIT_PREFIX) {
        let mut name = format!(
            "ratelimit.service.rate_limit.{}.{}",
            label(metric, "domain"),
            label(metric, "key1")
        );
        let key2 = label(metric, "key2");
        if !key2.is_empty() {
            name.push('.');
            name.push_str(key2);
        }
        name.push('.');
        name.push_str(stat);
        return Some(name);
    }
    match family {
        "ratelimit_service_config_load_success" => {
            Some("ratelimit.service.config_load_success".to_owned())
        }
        "ratelimit_service_config_load_error" => {
            Some("ratelimit.service.config_load_error".to_owned())
        }
        "ratelimit_service_should_rate_limit_error" => Some(format!(
            "ratelimit.service.call.should_rate_limit.{}",
            label(metric, "err_type")
        )),
        "ratelimit_service_total_requests" => Some(format!(
            "ratelimit_server.{}.total_requests",
            label(metric, "grpc_method")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::outcome::reference_counts::ReferenceCounts;
    use crate::telemetry::reference_stats::ReferenceStats;

    fn stats() -> ReferenceStats {
        ReferenceStats::new(4, false).unwrap_or_else(|error| panic!("{error}"))
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
        let lines = deltas.lines(&stats.gather(), &tagging, false);
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
        let lines = deltas.lines(&stats.gather(), &tagging, false);
        assert_eq!(
            lines,
            [
                "ratelimit.service.rate_limit.d.k_v.over_limit:2|c",
                "ratelimit.service.rate_limit.d.k_v.total_hits:2|c",
            ]
        );
        assert!(deltas.lines(&stats.gather(), &tagging, false).is_empty());
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
        };
        let dog = Tagging {
            dog: true,
            extra_tags,
        };
        assert_eq!(
            Deltas::default().lines(&stats.gather(), &plain, false),
            ["ratelimit.service.config_load_error.__app=edge.__zone=eu:1|c"]
        );
        assert_eq!(
            Deltas::default().lines(&stats.gather(), &dog, false),
            ["ratelimit.service.config_load_error:1|c|#app:edge,zone:eu"]
        );
    }
}
