//! How the values of settings are read: one parser per kind, the same for a flag, floodgate's own
//! variables and envoyproxy/ratelimit's. Booleans are read as Go's `strconv.ParseBool` reads them
//! (the reference's envconfig hands every bool field to it) and the log level as logrus's
//! `ParseLevel` (which the reference's runner calls on `LOG_LEVEL`). A value they refuse stops
//! the start, naming the setting and what it accepts, as it stops the reference: a guess would run
//! with a setting nobody asked for (`yes` read as false turned file watching off unnoticed).

use std::ffi::OsStr;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// Every spelling `strconv.ParseBool` accepts, the true ones first.
pub const GO_BOOLEANS: &str = "1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False";

/// Every level logrus's `ParseLevel` accepts, in any case.
pub const LOGRUS_LEVELS: &str = "trace, debug, info, warn, warning, error, fatal, panic";

/// A setting's value that cannot be used: a usage error (exit 64).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    /// `setting` is the variable, or the flag and its variable.
    #[error(
        "{setting}={value:?} is not a boolean: write one of {GO_BOOLEANS} (Go's \
         strconv.ParseBool, as envoyproxy/ratelimit reads it)"
    )]
    NotABoolean { setting: String, value: String },
    #[error(
        "LOG_LEVEL={value:?} is not a log level: write one of {LOGRUS_LEVELS}, in any case \
         (logrus's levels, as envoyproxy/ratelimit reads them; fatal and panic log errors only)"
    )]
    NotALogLevel { value: String },
    #[error(
        "RUST_LOG={value:?} is not a list of tracing directives ({reason}): write \
         target=level pairs such as floodgate=debug,h2=warn, or unset it and use LOG_LEVEL"
    )]
    NotDirectives { value: String, reason: String },
}

/// Go's `strconv.ParseBool`: exactly these spellings, nothing trimmed.
pub fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The boolean variable `variable` through `env`: `None` when it is not set. Set but empty is
/// refused, as the reference refuses it: envconfig (v1.4.0) passes the empty text on to
/// `strconv.ParseBool`, which fails, and the reference does not start. Empty is not the default.
pub fn env_bool(
    variable: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<bool>, SettingError> {
    let Some(value) = env(variable) else {
        return Ok(None);
    };
    go_bool(&value)
        .map(Some)
        .ok_or_else(|| SettingError::NotABoolean {
            setting: variable.to_owned(),
            value,
        })
}

/// The value parser of every boolean flag ([`go_bool`]): a flag given on the command line and the
/// variable behind it read alike, and an error that names both.
#[derive(Debug, Clone, Copy)]
pub struct GoBool;

impl clap::builder::TypedValueParser for GoBool {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<bool, clap::Error> {
        let text = value.to_string_lossy();
        go_bool(&text).ok_or_else(|| {
            let error = SettingError::NotABoolean {
                setting: arg.map_or_else(|| "the value".to_owned(), flag_and_variable),
                value: text.into_owned(),
            };
            clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{error}\n"))
                .with_cmd(cmd)
        })
    }
}

/// `--flag (VARIABLE)`, or `--flag` for a flag no variable sets.
fn flag_and_variable(arg: &clap::Arg) -> String {
    let flag = arg
        .get_long()
        .map_or_else(|| arg.get_id().to_string(), |long| format!("--{long}"));
    match arg.get_env() {
        Some(variable) => format!("{flag} ({})", variable.to_string_lossy()),
        None => flag,
    }
}

/// logrus's `ParseLevel` (ASCII case ignored, nothing trimmed) as tracing's level. fatal and
/// panic, logrus's levels below error, have no counterpart in tracing: they are error, the
/// nearest level that still logs failures.
pub fn logrus_level(text: &str) -> Option<LevelFilter> {
    match text.to_ascii_lowercase().as_str() {
        "trace" => Some(LevelFilter::TRACE),
        "debug" => Some(LevelFilter::DEBUG),
        "info" => Some(LevelFilter::INFO),
        "warn" | "warning" => Some(LevelFilter::WARN),
        "error" | "fatal" | "panic" => Some(LevelFilter::ERROR),
        _ => None,
    }
}

/// What is logged: `RUST_LOG`'s tracing directives when set (floodgate's own, to see one
/// library's or module's lines), else `LOG_LEVEL` read as the reference reads it, else
/// `default` (the front door's). An empty `LOG_LEVEL` is refused, as logrus refuses it.
pub fn log_filter(
    default: LevelFilter,
    env: impl Fn(&str) -> Option<String>,
) -> Result<EnvFilter, SettingError> {
    if let Some(directives) = env("RUST_LOG").filter(|value| !value.trim().is_empty()) {
        return EnvFilter::try_new(&directives).map_err(|error| SettingError::NotDirectives {
            reason: error.to_string(),
            value: directives,
        });
    }
    let level = match env("LOG_LEVEL") {
        Some(value) => logrus_level(&value).ok_or(SettingError::NotALogLevel { value })?,
        None => default,
    };
    Ok(EnvFilter::builder()
        .with_default_directive(level.into())
        .parse_lossy(""))
}

#[cfg(test)]
mod tests {
    use clap::builder::TypedValueParser as _;

    use super::*;

    const TRUE: [&str; 6] = ["1", "t", "T", "TRUE", "true", "True"];
    const FALSE: [&str; 6] = ["0", "f", "F", "FALSE", "false", "False"];
    /// What other readers of booleans take (clap's falsey and boolish parsers, YAML 1.1) and Go
    /// refuses.
    const REFUSED: [&str; 12] = [
        "", "yes", "no", "on", "off", "y", "n", "tRUE", "FaLsE", " true", "true ", "2",
    ];

    fn set<'a>(name: &'a str, value: &'a str) -> impl Fn(&str) -> Option<String> + 'a {
        move |asked| (asked == name).then(|| value.to_owned())
    }

    /// What a refused value is told, or nothing when it was taken.
    fn refusal<T>(result: Result<T, SettingError>) -> String {
        result
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn booleans_are_the_spellings_of_go_strconv_parse_bool_and_nothing_else() {
        for text in TRUE {
            assert_eq!(go_bool(text), Some(true), "{text:?}");
            assert_eq!(env_bool("X", set("X", text)), Ok(Some(true)), "{text:?}");
        }
        for text in FALSE {
            assert_eq!(go_bool(text), Some(false), "{text:?}");
            assert_eq!(env_bool("X", set("X", text)), Ok(Some(false)), "{text:?}");
        }
        for text in REFUSED {
            assert_eq!(go_bool(text), None, "{text:?}");
            let error = refusal(env_bool(
                "RUNTIME_WATCH_ROOT",
                set("RUNTIME_WATCH_ROOT", text),
            ));
            assert!(
                error.starts_with("RUNTIME_WATCH_ROOT=") && error.contains(GO_BOOLEANS),
                "{text:?}: {error}"
            );
        }
        assert_eq!(env_bool("X", |_| None), Ok(None));
    }

    #[test]
    fn the_flag_parser_names_the_flag_and_its_variable() {
        let arg = clap::Arg::new("use_prometheus")
            .long("use-prometheus")
            .env("USE_PROMETHEUS");
        let cmd = clap::Command::new("floodgate").arg(arg.clone());
        let parse = |text: &str| GoBool.parse_ref(&cmd, Some(&arg), OsStr::new(text));
        for text in TRUE {
            assert!(matches!(parse(text), Ok(true)), "{text:?}");
        }
        for text in FALSE {
            assert!(matches!(parse(text), Ok(false)), "{text:?}");
        }
        let error = parse("on").err().map(|error| error.to_string());
        let error = error.unwrap_or_default();
        assert!(
            error.contains("--use-prometheus (USE_PROMETHEUS)=\"on\"")
                && error.contains(GO_BOOLEANS),
            "{error}"
        );
    }

    /// Table-driven over the command line itself, so that a boolean flag added later cannot
    /// keep clap's own parser (which takes only true and false, or yes, on, off…).
    #[test]
    fn every_boolean_flag_with_a_variable_takes_go_spellings_and_names_its_variable() {
        use clap::CommandFactory as _;
        let mut checked = Vec::new();
        for command in crate::cmd::cli::Cli::command().get_subcommands() {
            for arg in command.get_arguments() {
                let (Some(variable), Some(long)) = (arg.get_env(), arg.get_long()) else {
                    continue;
                };
                if arg.get_value_parser().type_id() != std::any::TypeId::of::<bool>() {
                    continue;
                }
                // What the subcommand requires besides: `check` asks a server without it.
                let required = (command.get_name() == "check").then_some("--health");
                let parse = |text: &str| {
                    let line = [command.get_name(), &format!("--{long}={text}")]
                        .map(str::to_owned)
                        .into_iter()
                        .chain(required.map(str::to_owned));
                    command.clone().try_get_matches_from(line)
                };
                for (texts, expected) in [(TRUE, true), (FALSE, false)] {
                    for text in texts {
                        let matches = parse(text).unwrap_or_else(|error| panic!("{error}"));
                        assert_eq!(
                            matches.get_one::<bool>(arg.get_id().as_str()),
                            Some(&expected),
                            "--{long}={text}"
                        );
                    }
                }
                let variable = variable.to_string_lossy();
                for text in ["yes", "on", "no", "", "TrUe"] {
                    let error = parse(text).err().map(|error| error.to_string());
                    let error = error.unwrap_or_default();
                    assert!(
                        error.contains(&format!("--{long} ({variable})="))
                            && error.contains(GO_BOOLEANS),
                        "--{long}={text}: {error}"
                    );
                }
                checked.push(variable.into_owned());
            }
        }
        for variable in [
            "SHADOW_MODE",
            "MERGE_DOMAIN_CONFIG",
            "USE_STATSD",
            "XDS_CLIENT_BACKOFF_JITTER",
            "FLOODGATE_GRPC_REFLECTION",
            "FLOODGATE_RESPONSE_DYNAMIC_METADATA",
        ] {
            assert!(
                checked.iter().any(|name| name == variable),
                "{variable}: {checked:?}"
            );
        }
    }

    #[test]
    fn log_levels_are_logrus_levels_in_any_case() {
        for (texts, level) in [
            (&["trace", "TRACE", "Trace"][..], LevelFilter::TRACE),
            (&["debug", "DEBUG", "Debug"], LevelFilter::DEBUG),
            (&["info", "INFO", "Info"], LevelFilter::INFO),
            (
                &["warn", "WARN", "warning", "Warning", "WARNING"],
                LevelFilter::WARN,
            ),
            (&["error", "ERROR", "Error"], LevelFilter::ERROR),
            (&["fatal", "FATAL", "panic", "Panic"], LevelFilter::ERROR),
        ] {
            for text in texts {
                assert_eq!(logrus_level(text), Some(level), "{text:?}");
            }
        }
        for text in [
            "",
            "warnings",
            " info",
            "err",
            "off",
            "floodgate=debug",
            "5",
        ] {
            assert_eq!(logrus_level(text), None, "{text:?}");
        }
    }

    #[test]
    fn log_level_names_the_variable_and_what_it_accepts_and_unset_is_the_default() {
        let filter = |default, env: &dyn Fn(&str) -> Option<String>| {
            log_filter(default, env).map(|filter| filter.max_level_hint())
        };
        assert_eq!(
            filter(LevelFilter::WARN, &|_| None),
            Ok(Some(LevelFilter::WARN))
        );
        assert_eq!(
            filter(LevelFilter::INFO, &|_| None),
            Ok(Some(LevelFilter::INFO))
        );
        assert_eq!(
            filter(LevelFilter::INFO, &set("LOG_LEVEL", "warning")),
            Ok(Some(LevelFilter::WARN))
        );
        assert_eq!(
            filter(LevelFilter::WARN, &set("LOG_LEVEL", "Fatal")),
            Ok(Some(LevelFilter::ERROR))
        );
        for text in ["", "verbose", "floodgate=debug"] {
            let error = refusal(filter(LevelFilter::WARN, &set("LOG_LEVEL", text)));
            assert!(
                error.starts_with("LOG_LEVEL=") && error.contains(LOGRUS_LEVELS),
                "{text:?}: {error}"
            );
        }
        assert_eq!(
            filter(LevelFilter::WARN, &set("RUST_LOG", "floodgate=debug")),
            Ok(Some(LevelFilter::DEBUG))
        );
        assert!(
            filter(LevelFilter::INFO, &set("RUST_LOG", "floodgate=loud"))
                .is_err_and(|error| error.to_string().starts_with("RUST_LOG="))
        );
    }
}
