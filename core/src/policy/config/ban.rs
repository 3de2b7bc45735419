//! `ban:` on a descriptor (floodgate): a key its limits refuse `after` times within `within`
//! is refused outright for `for`, twice as long at each repeat, up to `max`
//! (`core::arithmetic::ban`).
//!
//! ```yaml
//! ban: {after: 20, within: 1m, for: 5m, max: 24h}
//! ```
//!
//! Durations are whole numbers with a unit: `s`, `m`, `h` or `d`. `max` defaults to 24h (or
//! `for`, if longer) and is at most 7d.

use serde_yaml::{Mapping, Value};

use super::keys::floodgate_map;
use super::spec::{DescriptorFlags, RuleSpec};
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, wrong_type};
use crate::arithmetic::ban::{BanPolicy, MAX_BAN};
use crate::ground::time::{Micros, MICROS_PER_SECOND};

const BAN_KEYS: [&str; 4] = ["after", "within", "for", "max"];

const EXAMPLE: &str = "ban: {after: 20, within: 1m, for: 5m, max: 24h}";

const DEFAULT_MAX: Micros = 24 * 3_600 * MICROS_PER_SECOND;

/// Reads `ban:` of one descriptor whose limits are `rule`.
pub(super) fn read_ban(
    descriptor: &Mapping,
    rule: Option<&RuleSpec>,
    flags: DescriptorFlags,
    path: &str,
    walk: &mut FileWalk,
) -> Option<BanPolicy> {
    let value = field(descriptor, "ban")?;
    let map = floodgate_map(value, "ban", &BAN_KEYS, EXAMPLE, path, &mut walk.report)?;
    let after = read_after(map, path, walk);
    let within = read_duration(map, "within", path, walk, true);
    let ban_for = read_duration(map, "for", path, walk, true);
    let max = read_duration(map, "max", path, walk, false);
    let banned_rule = check_rule(rule, flags, path, walk);
    let (after, within, ban_for) = (after?, within??, ban_for??);
    let max = match max {
        Some(max) => max?,
        None => DEFAULT_MAX.max(ban_for).min(MAX_BAN),
    };
    if ban_for > max {
        walk.report.error(
            path,
            "ban.max is shorter than ban.for: bans start at `for` and double up to `max`; \
             raise max, or shorten for",
        );
        return None;
    }
    banned_rule.then_some(BanPolicy {
        after,
        within,
        ban_for,
        max,
    })
}

fn read_after(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<u32> {
    match walk.number(map, "after", "ban.after", path) {
        Some(after) if (1..=1_000_000).contains(&after) => Some(after),
        Some(after) => {
            walk.report.error(
                path,
                format!(
                    "ban.after must be 1 to 1000000 refusals, not {after}: how many refusals \
                     within `within` start a ban, e.g. {EXAMPLE}"
                ),
            );
            None
        }
        None if field(map, "after").is_none() => {
            walk.report.error(
                path,
                format!("ban.after is missing: how many refusals start a ban, e.g. {EXAMPLE}"),
            );
            None
        }
        None => None,
    }
}

/// `name`'s duration: `None` when absent (reported if `required`), `Some(None)` when wrong
/// (reported).
fn read_duration(
    map: &Mapping,
    name: &str,
    path: &str,
    walk: &mut FileWalk,
    required: bool,
) -> Option<Option<Micros>> {
    let Some(value) = field(map, name) else {
        if required {
            walk.report.error(
                path,
                format!("ban.{name} is missing: give a duration such as 1m, e.g. {EXAMPLE}"),
            );
            return Some(None);
        }
        return None;
    };
    let parsed = match value {
        Value::String(text) => parse_duration(text),
        _ => None,
    };
    let fits = parsed.filter(|micros| (MICROS_PER_SECOND..=MAX_BAN).contains(micros));
    if fits.is_none() {
        let message = wrong_type(
            &format!("ban.{name}"),
            "a whole number of s, m, h or d, from 1s to 7d",
            &describe(value),
            EXAMPLE,
        );
        walk.report.error(path, message);
    }
    Some(fits)
}

/// `30s`, `10m`, `2h`, `1d` as µs.
fn parse_duration(text: &str) -> Option<Micros> {
    let text = text.trim();
    let unit_at = text.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = text.split_at(unit_at);
    let seconds: i64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    let amount: i64 = digits.parse().ok()?;
    amount.checked_mul(seconds)?.checked_mul(MICROS_PER_SECOND)
}

/// A ban refuses what the descriptor's limits refuse: it needs limits that can refuse.
fn check_rule(
    rule: Option<&RuleSpec>,
    flags: DescriptorFlags,
    path: &str,
    walk: &mut FileWalk,
) -> bool {
    let problem = match rule {
        None => {
            "`ban` needs a limit on the same descriptor: a ban starts after its \
                 `rate_limit` refuses; add one, or move `ban` to the descriptor that has it"
        }
        Some(rule) if rule.unlimited => "`ban` on an unlimited rule would never start: remove it",
        Some(rule) if rule.concurrency.is_some() => {
            "`ban` cannot be used with `concurrency`: put it on a rate limit"
        }
        Some(_) if flags.shadow_mode => {
            "`ban` on a shadow_mode rule would never refuse: remove one of them"
        }
        Some(_) => return true,
    };
    walk.report.error(path, problem);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_whole_numbers_and_a_unit() {
        assert_eq!(parse_duration("90s"), Some(90 * MICROS_PER_SECOND));
        assert_eq!(parse_duration("2h"), Some(7_200 * MICROS_PER_SECOND));
        assert_eq!(parse_duration("1d"), Some(86_400 * MICROS_PER_SECOND));
        for bad in ["", "5", "1.5m", "m", "10w", "-1s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
