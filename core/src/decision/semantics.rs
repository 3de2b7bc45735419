//! The answers in which floodgate and envoyproxy/ratelimit differ by default, as one set of
//! choices. `floodgate serve` takes floodgate's ([`Semantics::FLOODGATE`]); the binary started
//! as `ratelimit` takes the reference's ([`Semantics::REFERENCE`]), because that door exists
//! for one promise: swapping the reference's image for floodgate's changes no answer. The shell
//! picks the set by how the process was started (or `--semantics`); each of floodgate's own
//! settings then overrides its one choice, at either door.

use crate::arithmetic::algorithm::{CheckRule, Overflow};
use crate::decision::charging::Charging;
use crate::decision::dynamic_metadata::RuleMetadata;
use crate::decision::error_codes::ErrorCodes;
use crate::decision::headers::{HeaderMode, PlainHeaderNames};
use crate::policy::config::YamlStrings;

/// What envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitHeaders {
    /// floodgate's `ratelimit` headers: the most restrictive descriptor's three, and
    /// `Retry-After` on OVER_LIMIT.
    WithRetryAfter,
    /// The three headers on the reference's choice of descriptor, and nothing more.
    AsTheReference,
}

impl LimitHeaders {
    /// The header mode of the three headers under `names`.
    pub fn mode(self, names: PlainHeaderNames) -> HeaderMode {
        match self {
            LimitHeaders::WithRetryAfter => HeaderMode::RateLimit(names),
            LimitHeaders::AsTheReference => HeaderMode::ReferenceRateLimit(names),
        }
    }

    /// The name the start's log line gives it.
    pub fn name(self) -> &'static str {
        match self {
            LimitHeaders::WithRetryAfter => "three-headers-and-retry-after",
            LimitHeaders::AsTheReference => "the-references-three-headers",
        }
    }
}

/// Which settings turn tracing on, and the spans a call makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Traces {
    /// floodgate's: OTLP/gRPC when `--otlp-endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`) is set,
    /// one server span per call named `ShouldRateLimit`, its store call a child `store.decide`.
    #[default]
    Floodgate,
    /// envoyproxy/ratelimit's: on with `TRACING_ENABLED`, configured by its `TRACING_*`
    /// variables (OTLP over HTTP unless `TRACING_EXPORTER_PROTOCOL=grpc`); a gRPC call is a
    /// server span named after the method, with a `ShouldRateLimit Execution` child and, on
    /// Redis, a `Redis Pipeline Execution` grandchild.
    AsTheReference,
}

/// One process's choices where the two services answer differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Semantics {
    /// Which check-only descriptor (`hits_addend: 0`) a counter admits (`--check-only`).
    pub check_only: CheckRule,
    /// Which counters a request charges (`--charge`).
    pub charging: Charging,
    /// What a charge that does not fit does, for every rule that does not say: rules in files
    /// without `overflow:` (theirs or their domain's), rules pushed over xDS, and Envoy's
    /// per-descriptor `limit` override (`--overflow`).
    pub overflow: Overflow,
    /// What `LIMIT_RESPONSE_HEADERS_ENABLED` writes (`--response-headers` chooses a mode
    /// outright).
    pub limit_headers: LimitHeaders,
    /// The codes of calls that cannot be decided (`--error-codes`).
    pub error_codes: ErrorCodes,
    /// Which passed rules give their `metadata:` in dynamic metadata (`--rule-metadata`).
    pub rule_metadata: RuleMetadata,
    /// How the reference's string fields in rule files read an unquoted number or boolean
    /// (`--yaml-strings`).
    pub yaml_strings: YamlStrings,
    /// Which settings configure traces, and what a call's spans are called (`--traces`).
    pub traces: Traces,
}

impl Semantics {
    /// floodgate's own: a check stands for one more hit, a refused request charges nothing,
    /// a refused charge is not counted, `Retry-After` comes with the headers, errors say
    /// what failed, every passed rule gives its metadata, rule files are read as YAML 1.2, and
    /// traces are OpenTelemetry's `OTEL_*` settings and floodgate's span names.
    pub const FLOODGATE: Semantics = Semantics {
        check_only: CheckRule::OneMoreFits,
        charging: Charging::AllOrNothing,
        overflow: Overflow::Refuse,
        limit_headers: LimitHeaders::WithRetryAfter,
        error_codes: ErrorCodes::Distinct,
        rule_metadata: RuleMetadata::Always,
        yaml_strings: YamlStrings::Resolved,
        traces: Traces::Floodgate,
    };

    /// envoyproxy/ratelimit's: a check passes while the count is within the limit, every
    /// descriptor is incremented whatever the verdict (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
    /// unset, so a charge past the limit is counted), the three headers and nothing more,
    /// every error is gRPC UNKNOWN, a limit rebuilt for its stats key (`detailed_metric`,
    /// `value_to_metric`) gives no metadata, a string field holds the text written, as its
    /// yaml.v2 decodes it, and traces follow its `TRACING_*` settings and span names.
    pub const REFERENCE: Semantics = Semantics {
        check_only: CheckRule::WithinLimit,
        charging: Charging::EveryDescriptor,
        overflow: Overflow::Refuse,
        limit_headers: LimitHeaders::AsTheReference,
        error_codes: ErrorCodes::Unknown,
        rule_metadata: RuleMetadata::AsTheReference,
        yaml_strings: YamlStrings::AsWritten,
        traces: Traces::AsTheReference,
    };

    /// These choices with envoyproxy/ratelimit's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
    /// set, counted as the reference counts it. `false` (its default): every descriptor is
    /// charged by its own verdict, its refused hits counted. `true`: the reference first reads
    /// every counter, and if any descriptor would go over, increments those descriptors only —
    /// a rejected request charges its refused hits and nothing else.
    pub fn with_stop_increment_when_over_limit(self, stop: bool) -> Semantics {
        let charging = if stop {
            Charging::AllOrRefused
        } else {
            Charging::EveryDescriptor
        };
        Semantics { charging, ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_sets_differ_in_every_choice_but_the_overflow_every_descriptor_records() {
        let floodgate = Semantics::FLOODGATE;
        let reference = Semantics::REFERENCE;
        assert_ne!(floodgate.check_only, reference.check_only);
        assert_ne!(floodgate.charging, reference.charging);
        assert_ne!(floodgate.limit_headers, reference.limit_headers);
        assert_ne!(floodgate.error_codes, reference.error_codes);
        assert_ne!(floodgate.rule_metadata, reference.rule_metadata);
        assert_ne!(floodgate.yaml_strings, reference.yaml_strings);
        assert_ne!(floodgate.traces, reference.traces);
        // Every-descriptor charging counts a refused charge of a window already.
        assert_eq!(reference.overflow, Overflow::Refuse);
    }

    #[test]
    fn the_reference_stop_variable_picks_the_charging_it_counts_by_and_nothing_else() {
        for base in [Semantics::FLOODGATE, Semantics::REFERENCE] {
            let stopped = base.with_stop_increment_when_over_limit(true);
            assert_eq!(stopped.charging, Charging::AllOrRefused);
            let counted = base.with_stop_increment_when_over_limit(false);
            assert_eq!(counted.charging, Charging::EveryDescriptor);
            for changed in [stopped, counted] {
                assert_eq!(
                    Semantics {
                        charging: base.charging,
                        ..changed
                    },
                    base
                );
            }
        }
    }

    #[test]
    fn the_reference_headers_are_its_three_and_floodgates_add_retry_after() {
        let names = PlainHeaderNames::REFERENCE;
        assert_eq!(
            LimitHeaders::AsTheReference.mode(names),
            HeaderMode::ReferenceRateLimit(names)
        );
        assert_eq!(
            LimitHeaders::WithRetryAfter.mode(names),
            HeaderMode::RateLimit(names)
        );
    }
}
