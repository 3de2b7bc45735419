//! The flags of `serve` that choose between floodgate's answers and envoyproxy/ratelimit's
//! (`--semantics` and one flag per difference), as clap reads them; what they mean is
//! `semantics_settings`.

use clap::{Args, ValueEnum};

/// `--semantics`: a whole set of answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SemanticsArg {
    /// floodgate's: a check stands for one more hit, a refused request charges nothing, errors
    /// tell a bad request from a failed store.
    Floodgate,
    /// envoyproxy/ratelimit's, answer for answer.
    Reference,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckRuleArg {
    /// A check passes when one more hit would fit.
    OneMoreFits,
    /// A check passes while the count is within the limit (envoyproxy/ratelimit's).
    WithinLimit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OverflowArg {
    /// A charge that does not fit is refused and, unless the charging mode records it, not
    /// counted.
    Refuse,
    /// It is counted anyway, past the limit.
    Owe,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ErrorCodesArg {
    /// INVALID_ARGUMENT, UNAVAILABLE (HTTP 400 with the reason, 503).
    Distinct,
    /// gRPC UNKNOWN for every error, /json `400 Bad Request` (envoyproxy/ratelimit's).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuleMetadataArg {
    /// Every passed rule gives its `metadata:`.
    Always,
    /// Not a rule whose limit envoyproxy/ratelimit rebuilds for its stats key
    /// (`detailed_metric` at a descriptor with nothing below, or a `value_to_metric` key the
    /// request's values change): the reference's rebuilt limit has no metadata.
    Reference,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum YamlStringsArg {
    /// As YAML 1.2 resolves them: `0x10` is `16`, `True` is `true`.
    Resolved,
    /// As written, as envoyproxy/ratelimit's yaml.v2 decodes them (`0x10`, `True`); what it
    /// reads as a decimal number (`09`, `1.5`) or an integer past 2^63 − 1 is refused, as there.
    AsWritten,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TracesArg {
    /// floodgate's: OTLP/gRPC to --otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT), a
    /// `ShouldRateLimit` span per call.
    Floodgate,
    /// envoyproxy/ratelimit's: TRACING_ENABLED and the other TRACING_* variables, its span
    /// names.
    Reference,
}

/// The flags of `core::decision::semantics` that have no other home.
#[derive(Debug, Args)]
pub struct SemanticsArgs {
    /// The answers where floodgate and envoyproxy/ratelimit differ, as a set: floodgate or
    /// reference [default: reference when started as `ratelimit`, else floodgate]. The flags
    /// below, --charge and --response-headers override one choice each.
    #[arg(long, env = "FLOODGATE_SEMANTICS", value_enum)]
    pub semantics: Option<SemanticsArg>,
    /// Which check-only descriptor (`hits_addend: 0`) a counter admits: one-more-fits or
    /// within-limit [default: by --semantics].
    #[arg(long, env = "FLOODGATE_CHECK_ONLY", value_enum)]
    pub check_only: Option<CheckRuleArg>,
    /// What a charge that does not fit does, for every limit that does not say — in files
    /// without `overflow:` (theirs or their domain's), pushed over xDS, or sent by Envoy as a
    /// per-descriptor `limit`: refuse, or owe (counted past the limit, even when another
    /// descriptor refuses the request). Fixed and sliding windows only [default: refuse].
    #[arg(long, env = "FLOODGATE_OVERFLOW", value_enum)]
    pub overflow: Option<OverflowArg>,
    /// The codes of calls that cannot be decided: distinct or unknown [default: by
    /// --semantics].
    #[arg(long, env = "FLOODGATE_ERROR_CODES", value_enum)]
    pub error_codes: Option<ErrorCodesArg>,
    /// Which passed rules give their `metadata:` in dynamic metadata: always or reference
    /// [default: by --semantics].
    #[arg(long, env = "FLOODGATE_RULE_METADATA", value_enum)]
    pub rule_metadata: Option<RuleMetadataArg>,
    /// How the reference's string fields in rule files (`domain`, `key`, `value`, `unit`,
    /// `name`) read an unquoted number or boolean: resolved or as-written [default: by
    /// --semantics].
    #[arg(long, env = "FLOODGATE_YAML_STRINGS", value_enum)]
    pub yaml_strings: Option<YamlStringsArg>,
    /// Which settings turn traces on and what a call's spans are called: floodgate (the
    /// --otlp-endpoint flags, OTEL_*) or reference (TRACING_*) [default: by --semantics].
    #[arg(long, env = "FLOODGATE_TRACES", value_enum)]
    pub traces: Option<TracesArg>,
}
