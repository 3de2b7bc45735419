//! `ban:` on a descriptor: what loads (with the default `max`), and each error naming the
//! field and how to fix it.

use super::*;
use crate::arithmetic::ban::BanPolicy;
use crate::ground::time::MICROS_PER_SECOND;

fn with_ban(ban: &str, extra: &str) -> String {
    format!(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: ip\n\
         \x20   rate_limit: {{unit: minute, requests_per_unit: 10}}\n\
         \x20   ban: {ban}\n\
         {extra}"
    )
}

#[test]
fn a_ban_loads_with_its_durations_and_max_defaults_to_a_day() {
    let rules = loaded(&with_ban("{after: 5, within: 1m, for: 10m}", ""));
    let rule = rule_at(&rules, "d", "d.ip");
    assert_eq!(
        rule.ban,
        Some(BanPolicy {
            after: 5,
            within: 60 * MICROS_PER_SECOND,
            ban_for: 600 * MICROS_PER_SECOND,
            max: 86_400 * MICROS_PER_SECOND,
        })
    );
    let rules = loaded(&with_ban("{after: 1, within: 30s, for: 2d, max: 7d}", ""));
    let ban = rule_at(&rules, "d", "d.ip").ban;
    assert_eq!(ban.map(|ban| ban.max), Some(7 * 86_400 * MICROS_PER_SECOND));
}

#[test]
fn bad_ban_settings_are_refused_saying_what_to_write() {
    let cases = [
        ("{within: 1m, for: 10m}", "ban.after is missing"),
        (
            "{after: 0, within: 1m, for: 10m}",
            "ban.after must be 1 to 1000000",
        ),
        ("{after: 5, for: 10m}", "ban.within is missing"),
        ("{after: 5, within: 1m}", "ban.for is missing"),
        (
            "{after: 5, within: 90, for: 10m}",
            "a whole number of s, m, h or d",
        ),
        ("{after: 5, within: 1m, for: 8d}", "from 1s to 7d"),
        (
            "{after: 5, within: 1m, for: 2h, max: 1h}",
            "ban.max is shorter than ban.for",
        ),
        ("{after: 5, within: 1m, for: 1m, forever: true}", "forever"),
        ("yes", "ban"),
    ];
    for (ban, expected) in cases {
        let message = lines(&errors_of(&with_ban(ban, "")));
        assert!(message.contains(expected), "{ban}: {message}");
    }
}

#[test]
fn a_ban_needs_a_limit_that_can_refuse() {
    let unlimited = "domain: d\n\
                     descriptors:\n\
                     \x20 - key: ip\n\
                     \x20   rate_limit: {unlimited: true}\n\
                     \x20   ban: {after: 5, within: 1m, for: 10m}\n";
    assert!(lines(&errors_of(unlimited)).contains("unlimited rule would never start"));
    let bare = "domain: d\n\
                descriptors:\n\
                \x20 - key: ip\n\
                \x20   ban: {after: 5, within: 1m, for: 10m}\n";
    assert!(lines(&errors_of(bare)).contains("`ban` needs a limit on the same descriptor"));
    let shadow = with_ban(
        "{after: 5, within: 1m, for: 10m}",
        "    shadow_mode: true\n",
    );
    assert!(lines(&errors_of(&shadow)).contains("shadow_mode rule would never refuse"));
}
