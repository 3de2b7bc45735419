//! Which answers the process gives where floodgate and envoyproxy/ratelimit differ
//! (`core::decision::semantics`): the set the door picks — the reference's when started as `ratelimit`,
//! floodgate's as `floodgate serve` — or `--semantics`; then the reference's
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` when set; then each of floodgate's own settings,
//! which win at either door.

use super::cli::ServeArgs;
use super::front_door::FrontDoor;
use super::semantics_args::{
    CheckRuleArg, ErrorCodesArg, OverflowArg, RuleMetadataArg, SemanticsArg, TracesArg,
    YamlStringsArg,
};
use super::setting_values::env_bool;
use crate::core::arithmetic::algorithm::{CheckRule, Overflow};
use crate::core::decision::charging::Charging;
use crate::core::decision::dynamic_metadata::RuleMetadata;
use crate::core::decision::error_codes::ErrorCodes;
use crate::core::decision::semantics::{Semantics, Traces};
use crate::core::policy::config::YamlStrings;

impl From<YamlStringsArg> for YamlStrings {
    fn from(strings: YamlStringsArg) -> Self {
        match strings {
            YamlStringsArg::Resolved => YamlStrings::Resolved,
            YamlStringsArg::AsWritten => YamlStrings::AsWritten,
        }
    }
}

/// The set a door answers with when nothing says otherwise.
pub fn door_semantics(door: FrontDoor) -> Semantics {
    match door {
        FrontDoor::Floodgate => Semantics::FLOODGATE,
        FrontDoor::Reference => Semantics::REFERENCE,
    }
}

/// Which traces the process exports: `--traces`, else the set `--semantics` or the door picks.
/// Needed before the rest ([`semantics`]), when logging and tracing are set up.
pub fn traces(args: &ServeArgs, door: FrontDoor) -> Traces {
    let flags = &args.semantics;
    match (flags.traces, flags.semantics) {
        (Some(TracesArg::Floodgate), _) => Traces::Floodgate,
        (Some(TracesArg::Reference), _) => Traces::AsTheReference,
        (None, Some(SemanticsArg::Floodgate)) => Semantics::FLOODGATE.traces,
        (None, Some(SemanticsArg::Reference)) => Semantics::REFERENCE.traces,
        (None, None) => door_semantics(door).traces,
    }
}

/// The process's answers: `args` and the environment (`env`) over the door's set.
pub fn semantics(
    args: &ServeArgs,
    door: FrontDoor,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Semantics, String> {
    let flags = &args.semantics;
    let mut chosen = match flags.semantics {
        Some(SemanticsArg::Floodgate) => Semantics::FLOODGATE,
        Some(SemanticsArg::Reference) => Semantics::REFERENCE,
        None => door_semantics(door),
    };
    match env_bool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", env) {
        Ok(Some(stop)) => chosen = chosen.with_stop_increment_when_over_limit(stop),
        Ok(None) => {}
        Err(error) => {
            return Err(format!(
                "{error}; or use --charge all-or-nothing|every-descriptor"
            ))
        }
    }
    if let Some(charge) = args.charge {
        chosen.charging = Charging::from(charge);
    }
    if let Some(check) = flags.check_only {
        chosen.check_only = match check {
            CheckRuleArg::OneMoreFits => CheckRule::OneMoreFits,
            CheckRuleArg::WithinLimit => CheckRule::WithinLimit,
        };
    }
    if let Some(overflow) = flags.overflow {
        chosen.overflow = match overflow {
            OverflowArg::Refuse => Overflow::Refuse,
            OverflowArg::Owe => Overflow::Owe,
        };
    }
    if let Some(codes) = flags.error_codes {
        chosen.error_codes = match codes {
            ErrorCodesArg::Distinct => ErrorCodes::Distinct,
            ErrorCodesArg::Unknown => ErrorCodes::Unknown,
        };
    }
    if let Some(metadata) = flags.rule_metadata {
        chosen.rule_metadata = match metadata {
            RuleMetadataArg::Always => RuleMetadata::Always,
            RuleMetadataArg::Reference => RuleMetadata::AsTheReference,
        };
    }
    if let Some(strings) = flags.yaml_strings {
        chosen.yaml_strings = strings.into();
    }
    chosen.traces = traces(args, door);
    Ok(chosen)
}

/// One line at start saying which answers the process gives.
pub fn log(semantics: &Semantics, door: FrontDoor) {
    let set = if door_semantics(door) == Semantics::REFERENCE {
        "envoyproxy/ratelimit's (started as ratelimit)"
    } else {
        "floodgate's"
    };
    tracing::info!(
        check_only = %semantics.check_only,
        charge = %semantics.charging,
        overflow = %semantics.overflow,
        limit_headers = semantics.limit_headers.name(),
        error_codes = %semantics.error_codes,
        rule_metadata = ?semantics.rule_metadata,
        yaml_strings = ?semantics.yaml_strings,
        traces = ?semantics.traces,
        "answers where floodgate and envoyproxy/ratelimit differ: {set} unless a flag says \
         (--semantics, --check-only, --charge, --overflow, --response-headers, --error-codes, \
         --rule-metadata, --yaml-strings, --traces)"
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::cli::{Cli, Command};
    use crate::core::decision::semantics::LimitHeaders;

    /// `floodgate serve` with `flags`, parsed; panics on a line clap refuses.
    pub(crate) fn serve_args(flags: &[&str]) -> ServeArgs {
        let line = ["floodgate", "serve"].iter().chain(flags).copied();
        match Cli::try_parse_from(line) {
            Ok(Cli {
                command: Command::Serve(args),
                ..
            }) => *args,
            other => panic!("{other:?}"),
        }
    }

    fn stop(value: &'static str) -> impl Fn(&str) -> Option<String> {
        move |name: &str| {
            (name == "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT").then(|| value.to_owned())
        }
    }

    fn chosen(flags: &[&str], door: FrontDoor, env: impl Fn(&str) -> Option<String>) -> Semantics {
        match semantics(&serve_args(flags), door, env) {
            Ok(semantics) => semantics,
            Err(error) => panic!("{error}"),
        }
    }

    #[test]
    fn each_door_answers_with_its_own_set_unless_told() {
        assert_eq!(
            chosen(&[], FrontDoor::Floodgate, |_| None),
            Semantics::FLOODGATE
        );
        assert_eq!(
            chosen(&[], FrontDoor::Reference, |_| None),
            Semantics::REFERENCE
        );
        assert_eq!(
            chosen(&["--semantics=floodgate"], FrontDoor::Reference, |_| None),
            Semantics::FLOODGATE
        );
        assert_eq!(
            chosen(&["--semantics=reference"], FrontDoor::Floodgate, |_| None),
            Semantics::REFERENCE
        );
    }

    #[test]
    fn floodgates_own_flags_win_at_either_door() {
        let flags = [
            "--charge=all-or-nothing",
            "--check-only=one-more-fits",
            "--overflow=owe",
            "--error-codes=distinct",
            "--rule-metadata=always",
            "--yaml-strings=resolved",
            "--traces=floodgate",
        ];
        let own = chosen(&flags, FrontDoor::Reference, stop("false"));
        assert_eq!(own.rule_metadata, RuleMetadata::Always);
        assert_eq!(own.yaml_strings, YamlStrings::Resolved);
        assert_eq!(own.traces, Traces::Floodgate);
        assert_eq!(own.charging, Charging::AllOrNothing);
        assert_eq!(own.check_only, CheckRule::OneMoreFits);
        assert_eq!(own.overflow, Overflow::Owe);
        assert_eq!(own.error_codes, ErrorCodes::Distinct);
        // The flags that have none of their own leave the set's choice.
        assert_eq!(own.limit_headers, LimitHeaders::AsTheReference);
        let reference = chosen(
            &["--charge=every-descriptor", "--check-only=within-limit"],
            FrontDoor::Floodgate,
            |_| None,
        );
        assert_eq!(reference.charging, Charging::EveryDescriptor);
        assert_eq!(reference.check_only, CheckRule::WithinLimit);
        assert_eq!(reference.error_codes, ErrorCodes::Distinct);
        let metadata = chosen(&["--rule-metadata=reference"], FrontDoor::Floodgate, |_| {
            None
        });
        assert_eq!(metadata.rule_metadata, RuleMetadata::AsTheReference);
        assert_eq!(metadata.check_only, Semantics::FLOODGATE.check_only);
        let strings = chosen(&["--yaml-strings=as-written"], FrontDoor::Floodgate, |_| {
            None
        });
        assert_eq!(strings.yaml_strings, YamlStrings::AsWritten);
        let traces = chosen(&["--traces=reference"], FrontDoor::Floodgate, |_| None);
        assert_eq!(traces.traces, Traces::AsTheReference);
    }

    #[test]
    fn the_reference_stop_variable_charges_as_the_reference_counts_at_either_door() {
        for door in [FrontDoor::Floodgate, FrontDoor::Reference] {
            for value in ["false", "False", "0", "f"] {
                let counted = chosen(&[], door, stop(value));
                assert_eq!(counted.charging, Charging::EveryDescriptor, "{value}");
                assert_eq!(counted.overflow, Overflow::Refuse, "{value}");
            }
            for value in ["true", "TRUE", "1", "t"] {
                let stopped = chosen(&[], door, stop(value));
                assert_eq!(stopped.charging, Charging::AllOrRefused, "{value}");
                assert_eq!(stopped.overflow, Overflow::Refuse, "{value}");
            }
            let flag = chosen(&["--charge=all-or-nothing"], door, stop("true"));
            assert_eq!(flag.charging, Charging::AllOrNothing);
        }
        for value in ["yes", "", " t "] {
            let refused = semantics(&serve_args(&[]), FrontDoor::Reference, stop(value));
            assert!(
                refused.as_ref().is_err_and(|message| message
                    .starts_with("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=")
                    && message.contains("--charge")),
                "{refused:?}"
            );
        }
    }
}
