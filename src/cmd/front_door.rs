//! The two names the binary answers to. `floodgate` keeps its own defaults (the memory store);
//! `ratelimit` (Envoy Gateway, Istio's sample and existing manifests run `/bin/ratelimit`) is
//! envoyproxy/ratelimit's front door: no subcommand, and its defaults. Both choose the store
//! with one precedence: `--store` (or `FLOODGATE_STORE`), else `BACKEND_TYPE` (which defaults to
//! redis when started as `ratelimit`, as in the reference), else Redis when `REDIS_URL` is in the
//! environment, else memory.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::cmd::cli::StoreKind;
use crate::cmd::door_arguments;

/// How the process was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontDoor {
    /// As `floodgate`: subcommands, floodgate's defaults.
    Floodgate,
    /// As `ratelimit`, envoyproxy/ratelimit's binary: it serves, with the reference's defaults.
    Reference,
}

impl FrontDoor {
    /// The door of a process whose `argv[0]` is `program` (any directory).
    pub fn of(program: Option<&OsStr>) -> Self {
        let name = program.and_then(|program| Path::new(program).file_name());
        if name.is_some_and(|name| name == "ratelimit") {
            FrontDoor::Reference
        } else {
            FrontDoor::Floodgate
        }
    }

    /// The log level when neither `LOG_LEVEL` nor `RUST_LOG` says: the reference's default
    /// (`WARN`) started as `ratelimit`, floodgate's (info) otherwise.
    pub fn default_log_level(self) -> tracing_subscriber::filter::LevelFilter {
        match self {
            FrontDoor::Floodgate => tracing_subscriber::filter::LevelFilter::INFO,
            FrontDoor::Reference => tracing_subscriber::filter::LevelFilter::WARN,
        }
    }

    /// The command line floodgate parses: the reference's binary takes no subcommand, so
    /// `ratelimit ARGS…` is `floodgate serve ARGS…` (its flags, and every variable, still
    /// apply), less the arguments `serve` does not know, which the reference would have ignored
    /// (`door_arguments`): those are returned to be warned about once logging is set up.
    pub fn command_line(self, args: Vec<OsString>) -> CommandLine {
        match self {
            FrontDoor::Floodgate => CommandLine {
                line: args,
                ignored: Vec::new(),
            },
            FrontDoor::Reference => {
                let mut rest = args.into_iter();
                let mut line = vec![rest.next().unwrap_or_else(|| "ratelimit".into())];
                line.push("serve".into());
                let sorted = door_arguments::sort_out(rest);
                line.extend(sorted.kept);
                CommandLine {
                    line,
                    ignored: sorted.ignored,
                }
            }
        }
    }
}

/// What clap parses, and the arguments the `ratelimit` door set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    pub line: Vec<OsString>,
    pub ignored: Vec<String>,
}

impl CommandLine {
    /// One warning per ignored argument: said, never fatal, as the reference ignores them.
    pub fn warn_ignored(&self) {
        for argument in &self.ignored {
            tracing::warn!(
                "argument `{argument}` ignored: started as ratelimit, floodgate ignores what \
                 is not one of its own `serve` flags, as envoyproxy/ratelimit ignores its \
                 arguments (`floodgate serve --help` lists them)"
            );
        }
    }
}

/// The store to run, and why (logged at start: a store chosen by the environment must not
/// surprise anyone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreChoice {
    pub kind: StoreKind,
    pub reason: &'static str,
}

/// The store by the one precedence; `env` reads a variable (the process's environment). Started
/// as `ratelimit`, `BACKEND_TYPE` defaults to `redis` as in the reference.
/// An unknown `BACKEND_TYPE` is a usage error: guessing would run another store than asked.
pub fn choose_store(
    flag: Option<StoreKind>,
    door: FrontDoor,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StoreChoice, String> {
    if let Some(kind) = flag {
        return Ok(StoreChoice {
            kind,
            reason: "--store (or FLOODGATE_STORE)",
        });
    }
    let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let backend = match (set("BACKEND_TYPE"), door) {
        (Some(backend), _) => Some((backend, "BACKEND_TYPE")),
        // The reference's own default.
        (None, FrontDoor::Reference) => Some((
            "redis".to_owned(),
            "envoyproxy/ratelimit's default (started as ratelimit: BACKEND_TYPE=redis)",
        )),
        (None, FrontDoor::Floodgate) => None,
    };
    if let Some((backend, reason)) = backend {
        return match backend.trim().to_ascii_lowercase().as_str() {
            "redis" => Ok(StoreChoice {
                kind: StoreKind::Redis,
                reason,
            }),
            "memory" => Ok(StoreChoice {
                kind: StoreKind::Memory,
                reason,
            }),
            "memcache" => Err("BACKEND_TYPE=memcache: floodgate has no Memcached store; \
                               use BACKEND_TYPE=redis with REDIS_URL, or --store memory for \
                               one instance"
                .to_owned()),
            other => Err(format!(
                "BACKEND_TYPE={other}: not a store floodgate knows; use redis or memory \
                 (or --store)"
            )),
        };
    }
    Ok(if set("REDIS_URL").is_some() {
        StoreChoice {
            kind: StoreKind::Redis,
            reason: "REDIS_URL is set (envoyproxy/ratelimit's BACKEND_TYPE defaults to redis); \
                     pass --store memory for counters in this process",
        }
    } else {
        StoreChoice {
            kind: StoreKind::Memory,
            reason: "the default",
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment of `pairs` (name, value).
    pub(crate) fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    fn kind(flag: Option<StoreKind>, door: FrontDoor, pairs: &[(&str, &str)]) -> StoreKind {
        match choose_store(flag, door, env(pairs)) {
            Ok(choice) => choice.kind,
            Err(error) => panic!("{error}"),
        }
    }

    #[test]
    fn the_flag_wins_then_backend_type_then_redis_url_then_the_door() {
        use FrontDoor::{Floodgate, Reference};
        use StoreKind::{Memory, Redis};
        let everything = [("BACKEND_TYPE", "redis"), ("REDIS_URL", "r:6379")];
        assert_eq!(kind(Some(Memory), Reference, &everything), Memory);
        assert_eq!(
            kind(
                None,
                Floodgate,
                &[("BACKEND_TYPE", "memory"), ("REDIS_URL", "r:6379")]
            ),
            Memory
        );
        assert_eq!(kind(None, Floodgate, &[("BACKEND_TYPE", "Redis")]), Redis);
        assert_eq!(kind(None, Floodgate, &[("REDIS_URL", "r:6379")]), Redis);
        assert_eq!(kind(None, Floodgate, &[("REDIS_URL", " ")]), Memory);
        assert_eq!(kind(None, Floodgate, &[]), Memory);
        assert_eq!(kind(None, Reference, &[]), Redis);
        assert_eq!(kind(None, Reference, &[("BACKEND_TYPE", "memory")]), Memory);
        let why = choose_store(None, Reference, env(&[("REDIS_URL", "r:6379")]));
        assert!(matches!(why, Ok(choice) if choice.reason.contains("started as ratelimit")));
    }

    #[test]
    fn a_backend_floodgate_does_not_have_is_refused_with_what_to_use() {
        let memcache = choose_store(
            None,
            FrontDoor::Reference,
            env(&[("BACKEND_TYPE", "memcache")]),
        );
        assert!(
            matches!(&memcache, Err(error) if error.contains("BACKEND_TYPE=redis")),
            "{memcache:?}"
        );
        assert!(
            choose_store(None, FrontDoor::Floodgate, env(&[("BACKEND_TYPE", "etcd")])).is_err()
        );
    }

    #[test]
    fn started_as_ratelimit_it_serves_without_a_subcommand() {
        assert_eq!(
            FrontDoor::of(Some(OsStr::new("/bin/ratelimit"))),
            FrontDoor::Reference
        );
        assert_eq!(
            FrontDoor::of(Some(OsStr::new("ratelimit"))),
            FrontDoor::Reference
        );
        assert_eq!(
            FrontDoor::of(Some(OsStr::new("/usr/local/bin/floodgate"))),
            FrontDoor::Floodgate
        );
        assert_eq!(FrontDoor::of(None), FrontDoor::Floodgate);
        let reference = FrontDoor::Reference.command_line(vec![
            "/bin/ratelimit".into(),
            "--shadow-mode".into(),
            "--quotaRateLimitServiceAddr=somewhere".into(),
        ]);
        assert_eq!(reference.line, ["/bin/ratelimit", "serve", "--shadow-mode"]);
        assert_eq!(reference.ignored, ["--quotaRateLimitServiceAddr=somewhere"]);
        let floodgate = FrontDoor::Floodgate.command_line(vec![
            "floodgate".into(),
            "validate".into(),
            "--unknown".into(),
        ]);
        assert_eq!(floodgate.line, ["floodgate", "validate", "--unknown"]);
        assert!(floodgate.ignored.is_empty(), "strict: clap refuses it");
    }
}
