//! What the `ratelimit` door does with its arguments. envoyproxy/ratelimit reads none (its
//! settings are all variables), so manifests written for it may pass anything: Envoy AI
//! Gateway's QuotaPolicy Deployment runs `/bin/ratelimit
//! --quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system`. Started under
//! that name, floodgate still parses its own `serve` flags, and sets every other argument aside
//! to be warned about once and ignored, so that an image swap never stops at the command line.
//!
//! The rule, word by word:
//! - a flag `serve` knows (`--name`, `--name=value`, `-h`) is kept, with the word after it when
//!   the flag takes a value and none came after `=`: a known flag with a bad value is still an
//!   error (exit 64), as at `floodgate serve`;
//! - any other word starting with `-` is ignored (Go's single-dash `-flag=value` included), and
//!   so is the word after it when the flag has no `=` and that word does not start with `-`:
//!   `--foo bar` is read as a flag and its value. The door takes no positional argument, so
//!   nothing is lost either way; reading it so keeps the pair in one warning;
//! - any other word, and every word after `--`, is ignored.
//!
//! `floodgate serve` keeps parsing strictly: an unknown flag there is a usage error.

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::{Arg, CommandFactory};

use crate::cmd::cli::Cli;

/// The door's command line sorted out: what `serve` parses, and what was set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedArguments {
    /// The words `serve` parses, in their order.
    pub kept: Vec<OsString>,
    /// The ignored arguments, each once, in the order first given (a flag with its value as
    /// one text).
    pub ignored: Vec<String>,
}

/// How one word of the command line is taken.
enum Word {
    /// A flag `serve` knows (or a positional it would take), and whether the next word is its
    /// value.
    Known { value_follows: ValueFollows },
    /// A word starting with `-` that `serve` does not know.
    UnknownFlag,
    /// Anything else: a positional argument, which the door does not take.
    Positional,
    /// `--`: every word after it is positional.
    EndOfFlags,
}

/// Whether the word after a known flag is its value.
#[derive(Clone, Copy)]
enum ValueFollows {
    No,
    Always,
    /// An optional value given apart (`--flag value`): the next word, unless it is a flag.
    UnlessAFlag,
}

/// Sorts `args` (the words after the program's name) by `serve`'s own flags.
pub fn sort_out(args: impl IntoIterator<Item = OsString>) -> SortedArguments {
    let flags = ServeFlags::read();
    let mut kept = Vec::new();
    let mut ignored = Ignored::default();
    let mut words = args.into_iter().peekable();
    while let Some(word) = words.next() {
        let text = word.to_string_lossy().into_owned();
        match flags.classify(&text) {
            Word::Known { value_follows } => {
                kept.push(word);
                let take_next = match value_follows {
                    ValueFollows::No => false,
                    ValueFollows::Always => true,
                    ValueFollows::UnlessAFlag => words.peek().is_some_and(|next| !is_flag(next)),
                };
                if let Some(value) = words.next_if(|_| take_next) {
                    kept.push(value);
                }
            }
            Word::UnknownFlag => {
                match words.next_if(|next| !text.contains('=') && !is_flag(next)) {
                    Some(value) => ignored.add(format!("{text} {}", value.to_string_lossy())),
                    None => ignored.add(text),
                }
            }
            Word::Positional => ignored.add(text),
            Word::EndOfFlags => {
                let rest: Vec<String> = words
                    .by_ref()
                    .map(|word| word.to_string_lossy().into_owned())
                    .collect();
                ignored.add(
                    std::iter::once(text)
                        .chain(rest)
                        .collect::<Vec<_>>()
                        .join(" "),
                );
            }
        }
    }
    SortedArguments {
        kept,
        ignored: ignored.in_order,
    }
}

/// A word that starts a flag: `-` followed by something (`-` alone is a positional, stdin's
/// name by convention).
fn is_flag(word: &OsString) -> bool {
    let text = word.to_string_lossy();
    text.len() > 1 && text.starts_with('-')
}

/// Ignored arguments, each kept once.
#[derive(Default)]
struct Ignored {
    seen: BTreeSet<String>,
    in_order: Vec<String>,
}

impl Ignored {
    fn add(&mut self, argument: String) {
        if self.seen.insert(argument.clone()) {
            self.in_order.push(argument);
        }
    }
}

/// `serve`'s flags as clap knows them (`--help` and `-h` included).
struct ServeFlags {
    command: clap::Command,
}

impl ServeFlags {
    fn read() -> Self {
        let mut cli = Cli::command();
        cli.build();
        let command = cli
            .find_subcommand("serve")
            .cloned()
            // `serve` is a variant of `Command`: always there.
            .unwrap_or_else(|| clap::Command::new("serve"));
        Self { command }
    }

    fn classify(&self, word: &str) -> Word {
        if word == "--" {
            return Word::EndOfFlags;
        }
        if let Some(long) = word.strip_prefix("--") {
            let (name, inline_value) = match long.split_once('=') {
                Some((name, _)) => (name, true),
                None => (long, false),
            };
            return self.known(|arg| arg_has_long(arg, name), inline_value);
        }
        if let Some(short) = word.strip_prefix('-').and_then(|rest| rest.chars().next()) {
            // `-xVALUE` or `-x=VALUE` carries its value in the word.
            let inline_value = word.chars().count() > 2;
            return self.known(|arg| arg_has_short(arg, short), inline_value);
        }
        if self.command.get_positionals().next().is_some() {
            // Were `serve` ever to take positionals, they would be its to parse.
            return Word::Known {
                value_follows: ValueFollows::No,
            };
        }
        Word::Positional
    }

    /// The word of the flag `matches` finds, `inline_value` when its value is in the word.
    fn known(&self, matches: impl Fn(&Arg) -> bool, inline_value: bool) -> Word {
        let Some(arg) = self.command.get_arguments().find(|arg| matches(arg)) else {
            return Word::UnknownFlag;
        };
        let value_follows = if inline_value || !arg.get_action().takes_values() {
            ValueFollows::No
        } else if arg.is_require_equals_set() {
            // `--shadow-mode` alone is on; its value only ever comes after `=`.
            ValueFollows::No
        } else if arg
            .get_num_args()
            .is_some_and(|range| range.min_values() == 0)
        {
            ValueFollows::UnlessAFlag
        } else {
            ValueFollows::Always
        };
        Word::Known { value_follows }
    }
}

fn arg_has_long(arg: &Arg, name: &str) -> bool {
    arg.get_long() == Some(name)
        || arg
            .get_all_aliases()
            .is_some_and(|aliases| aliases.contains(&name))
}

fn arg_has_short(arg: &Arg, short: char) -> bool {
    arg.get_short() == Some(short)
        || arg
            .get_all_short_aliases()
            .is_some_and(|aliases| aliases.contains(&short))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(words: &[&str]) -> (Vec<String>, Vec<String>) {
        let out = sort_out(words.iter().map(OsString::from));
        let kept = out
            .kept
            .iter()
            .map(|word| word.to_string_lossy().into_owned())
            .collect();
        (kept, out.ignored)
    }

    #[test]
    fn ai_gateways_argument_is_ignored_and_known_flags_are_kept() {
        let (kept, ignored) = sorted(&[
            "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system",
            "--store",
            "memory",
            "--shadow-mode",
            "--config=/etc/rules",
        ]);
        assert_eq!(
            kept,
            ["--store", "memory", "--shadow-mode", "--config=/etc/rules"]
        );
        assert_eq!(
            ignored,
            ["--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"]
        );
    }

    #[test]
    fn an_unknown_flag_takes_the_next_word_as_its_value_unless_it_is_a_flag() {
        let (kept, ignored) = sorted(&["--foo", "bar", "--verbose", "--store", "redis"]);
        assert_eq!(kept, ["--store", "redis"]);
        assert_eq!(ignored, ["--foo bar", "--verbose"]);
        // Go's single dash.
        let (kept, ignored) = sorted(&["-log", "debug", "-v"]);
        assert!(kept.is_empty(), "{kept:?}");
        assert_eq!(ignored, ["-log debug", "-v"]);
        // A value after `=` is the flag's: the next word is a word of its own.
        let (_, ignored) = sorted(&["--addr=somewhere", "extra", "-log=debug", "more"]);
        assert_eq!(ignored, ["--addr=somewhere", "extra", "-log=debug", "more"]);
    }

    #[test]
    fn positional_words_and_everything_after_the_double_dash_are_ignored_once_each() {
        let (kept, ignored) = sorted(&[
            "serve", "extra", "serve", "--x", "--x", "--", "--store", "memory",
        ]);
        assert!(kept.is_empty(), "{kept:?}");
        assert_eq!(ignored, ["serve", "extra", "--x", "-- --store memory"]);
        // `-` alone is a positional (stdin's name), and a value of an unknown flag.
        assert_eq!(sorted(&["-"]).1, ["-"]);
        assert_eq!(sorted(&["--input", "-"]).1, ["--input -"]);
    }

    #[test]
    fn a_known_flags_value_is_kept_even_when_it_is_bad_for_serve_to_refuse() {
        let (kept, ignored) = sorted(&["--store", "etcd", "--grpc-reflection=maybe"]);
        assert_eq!(kept, ["--store", "etcd", "--grpc-reflection=maybe"]);
        assert!(ignored.is_empty(), "{ignored:?}");
        // A switch takes its value only after `=`: the word after it is not its value.
        let (kept, ignored) = sorted(&["--shadow-mode", "false"]);
        assert_eq!(kept, ["--shadow-mode"]);
        assert_eq!(ignored, ["false"]);
        // Help is serve's own.
        assert_eq!(sorted(&["-h"]).0, ["-h"]);
        assert_eq!(sorted(&["--help"]).0, ["--help"]);
    }
}
