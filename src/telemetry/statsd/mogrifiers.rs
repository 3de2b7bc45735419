//! envoyproxy/ratelimit's DogStatsD mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`): each turns a stat
//! name its regex matches into another name and tags, so Datadog sees
//! `ratelimit.service.rate_limit.over_limit` tagged `domain:edge,descriptor:…` instead of one
//! metric per key. Read as the reference's `src/godogstats/mogrifier_map.go` reads them: a
//! comma-separated list of mogrifier names, and for each `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`
//! (a regex, searched anywhere in the name), `_NAME` and `_TAGS` (`key:value,…`), where `$0`,
//! `$1`, … are the match and its groups. The first mogrifier that matches applies; a name none
//! matches is sent as it is.

use regex::Regex;

/// The environment prefix of each mogrifier's variables.
const PREFIX: &str = "DOG_STATSD_MOGRIFIER";

/// A mogrifier that cannot be used: the start is refused, as the reference refuses it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MogrifierError {
    #[error(
        "USE_DOG_STATSD_MOGRIFIERS names {name}, but {PREFIX}_{name}_PATTERN is not set: give \
         the regex its stat names must match"
    )]
    NoPattern { name: String },
    #[error("{PREFIX}_{name}_PATTERN is not a valid regex ({message}): {pattern:?}")]
    BadPattern {
        name: String,
        pattern: String,
        message: String,
    },
    #[error(
        "USE_DOG_STATSD_MOGRIFIERS names {name}, but {PREFIX}_{name}_NAME is not set: give the \
         stat name to send, e.g. ratelimit.service.rate_limit.$3"
    )]
    NoName { name: String },
    #[error(
        "{PREFIX}_{name}_TAGS must be key:value pairs separated by commas, each with a key and a \
         value; {pair:?} is not one"
    )]
    BadTag { name: String, pair: String },
}

#[derive(Debug, Clone)]
struct Mogrifier {
    pattern: Regex,
    name: String,
    tags: Vec<(String, String)>,
}

/// The mogrifiers in the order `USE_DOG_STATSD_MOGRIFIERS` lists them.
#[derive(Debug, Clone, Default)]
pub struct Mogrifiers(Vec<Mogrifier>);

impl PartialEq for Mogrifiers {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(mine, theirs)| {
                mine.pattern.as_str() == theirs.pattern.as_str()
                    && mine.name == theirs.name
                    && mine.tags == theirs.tags
            })
    }
}

impl Eq for Mogrifiers {}

impl Mogrifiers {
    /// The mogrifiers `list` names (`USE_DOG_STATSD_MOGRIFIERS`), their variables read through
    /// `lookup`.
    pub fn from_env(
        list: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, MogrifierError> {
        let mut mogrifiers = Vec::new();
        for name in list
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            let variable = |part: &str| {
                lookup(&format!("{PREFIX}_{name}_{part}")).filter(|value| !value.is_empty())
            };
            let pattern = variable("PATTERN").ok_or_else(|| MogrifierError::NoPattern {
                name: name.to_owned(),
            })?;
            let pattern = Regex::new(&pattern).map_err(|error| MogrifierError::BadPattern {
                name: name.to_owned(),
                pattern: pattern.clone(),
                message: error.to_string(),
            })?;
            let metric = variable("NAME").ok_or_else(|| MogrifierError::NoName {
                name: name.to_owned(),
            })?;
            let tags = parse_tags(name, &variable("TAGS").unwrap_or_default())?;
            mogrifiers.push(Mogrifier {
                pattern,
                name: metric,
                tags,
            });
        }
        Ok(Self(mogrifiers))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name to send and the tags (`key:value`) of the first mogrifier matching `name`;
    /// `None`: send it as it is.
    pub fn mogrify(&self, name: &str) -> Option<(String, Vec<String>)> {
        self.0.iter().find_map(|mogrifier| {
            let captures = mogrifier.pattern.captures(name)?;
            let groups: Vec<&str> = captures
                .iter()
                .map(|group| group.map_or("", |found| found.as_str()))
                .collect();
            let tags = mogrifier
                .tags
                .iter()
                .map(|(key, value)| format!("{key}:{}", substitute(value, &groups)))
                .collect();
            Some((substitute(&mogrifier.name, &groups), tags))
        })
    }
}

/// `TAGS` as envconfig reads a map: `key:value` pairs separated by commas (the value may hold
/// more colons).
fn parse_tags(name: &str, text: &str) -> Result<Vec<(String, String)>, MogrifierError> {
    let mut tags = Vec::new();
    for pair in text.split(',').filter(|pair| !pair.trim().is_empty()) {
        let bad = || MogrifierError::BadTag {
            name: name.to_owned(),
            pair: pair.to_owned(),
        };
        let (key, value) = pair.split_once(':').ok_or_else(bad)?;
        if key.trim().is_empty() || value.trim().is_empty() {
            return Err(bad());
        }
        tags.push((key.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(tags)
}

/// `template` with each `$<digits>` replaced by that group; a group the match does not have
/// leaves the placeholder, as the reference's `makePatternHandler` does.
fn substitute(template: &str, groups: &[&str]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let group = after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|index| groups.get(index));
        match group {
            Some(group) => out.push_str(group),
            None => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// The reference README's two examples, DOMAIN then HITS.
    fn readme() -> Mogrifiers {
        Mogrifiers::from_env(
            "DOMAIN,HITS",
            env(&[
                (
                    "DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN",
                    r"^some\.original\.metric\.(.*)$",
                ),
                ("DOG_STATSD_MOGRIFIER_DOMAIN_NAME", "some.original.metric"),
                ("DOG_STATSD_MOGRIFIER_DOMAIN_TAGS", "domain:$1"),
                (
                    "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
                    r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
                ),
                (
                    "DOG_STATSD_MOGRIFIER_HITS_NAME",
                    "ratelimit.service.rate_limit.$3",
                ),
                ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
            ]),
        )
        .unwrap_or_else(|error| panic!("{error}"))
    }

    #[test]
    fn the_readme_examples_turn_names_into_tags() {
        let mogrifiers = readme();
        assert_eq!(
            mogrifiers.mogrify("some.original.metric.edge"),
            Some((
                "some.original.metric".to_owned(),
                vec!["domain:edge".to_owned()]
            ))
        );
        assert_eq!(
            mogrifiers.mogrify("ratelimit.service.rate_limit.edge.user_bob.path.over_limit"),
            Some((
                "ratelimit.service.rate_limit.over_limit".to_owned(),
                vec![
                    "domain:edge".to_owned(),
                    "descriptor:user_bob.path".to_owned()
                ]
            ))
        );
        assert_eq!(
            mogrifiers.mogrify("ratelimit.service.config_load_success"),
            None
        );
    }

    #[test]
    fn placeholders_past_the_groups_stay() {
        assert_eq!(substitute("a.$1.$9.$", &["whole", "x"]), "a.x.$9.$");
        assert_eq!(substitute("$0-$10", &["m"]), "m-$10");
    }

    #[test]
    fn a_mogrifier_without_what_it_needs_is_refused_by_name() {
        let refused = |pairs: &[(&str, &str)]| Mogrifiers::from_env("M", env(pairs)).err();
        assert_eq!(
            refused(&[]),
            Some(MogrifierError::NoPattern {
                name: "M".to_owned()
            })
        );
        assert_eq!(
            refused(&[("DOG_STATSD_MOGRIFIER_M_PATTERN", "x")]),
            Some(MogrifierError::NoName {
                name: "M".to_owned()
            })
        );
        assert!(matches!(
            refused(&[("DOG_STATSD_MOGRIFIER_M_PATTERN", "(")]),
            Some(MogrifierError::BadPattern { .. })
        ));
        assert!(matches!(
            refused(&[
                ("DOG_STATSD_MOGRIFIER_M_PATTERN", "x"),
                ("DOG_STATSD_MOGRIFIER_M_NAME", "y"),
                ("DOG_STATSD_MOGRIFIER_M_TAGS", "novalue"),
            ]),
            Some(MogrifierError::BadTag { .. })
        ));
        assert_eq!(
            Mogrifiers::from_env(" , ", env(&[])),
            Ok(Mogrifiers::default())
        );
    }
}
