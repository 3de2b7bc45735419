//! `concurrency:` on a descriptor (floodgate): a limit on requests in flight, counted as leases
//! (`core::arithmetic::lease`), in place of the descriptor's `rate_limit`.
//!
//! ```yaml
//! concurrency:
//!   max_in_flight: 10                   # leases held at once
//!   lease: request_id                   # the entry whose value is the lease id
//!   release: {key: phase, value: done}  # the entry only the stream-end call sends
//!   ttl: 30s                            # a lease not released frees itself after this
//!   name: backend_in_flight             # optional, as `rate_limit.name`
//! ```
//!
//! The lease and release entries (and a priority class entry) follow the descriptor's own
//! entries and are not levels of the tree: they find the rule of the entries before them, and
//! the counter's identity leaves them out, so every lease of the rule shares one counter.

use serde_yaml::Mapping;

use super::keys::floodgate_map;
use super::spec::{DescriptorSpec, RuleSpec};
use super::walk::FileWalk;
use super::yaml_tree::{describe, field, text, wrong_type};
use crate::arithmetic::lease::{Concurrency, ReleaseMarker, MAX_IN_FLIGHT, MAX_LEASE_TTL};
use crate::ground::time::Micros;

const CONCURRENCY_KEYS: [&str; 6] = [
    "max_in_flight",
    "lease",
    "release",
    "ttl",
    "name",
    "shed_above",
];
const RELEASE_KEYS: [&str; 2] = ["key", "value"];

const EXAMPLE: &str = "concurrency: {max_in_flight: 10, lease: request_id, release: {key: \
                       phase, value: done}, ttl: 30s}";

/// Reads `concurrency:` of one descriptor: the rule it makes, with `rule` (its `rate_limit`,
/// already read) and `children` to check against. `None` when absent or wrong (reported).
pub(super) fn read_concurrency(
    descriptor: &Mapping,
    rule: Option<&RuleSpec>,
    children: &[DescriptorSpec],
    path: &str,
    walk: &mut FileWalk,
) -> Option<RuleSpec> {
    let value = field(descriptor, "concurrency")?;
    let map = floodgate_map(
        value,
        "concurrency",
        &CONCURRENCY_KEYS,
        EXAMPLE,
        path,
        &mut walk.report,
    )?;
    if rule.is_some() {
        walk.report.error(
            path,
            "a descriptor has either `rate_limit` (or `rate_limits`) or `concurrency`, not \
             both: a concurrency rule counts requests in flight, not per unit of time; put the \
             rate limit on a descriptor of its own (Envoy can send both)",
        );
        return None;
    }
    let max_in_flight = max_in_flight(map, path, walk);
    let lease_key = entry_key(map, "lease", "lease: request_id", path, walk);
    let release = release_marker(map, path, walk);
    let lease_ttl = ttl(map, path, walk);
    let name = walk.text(
        map,
        "name",
        "concurrency.name",
        path,
        "name: backend_in_flight",
    );
    let (max_in_flight, lease_key, release, lease_ttl) =
        (max_in_flight?, lease_key?, release?, lease_ttl?);
    let shed_above = shed_above(map, max_in_flight, path, walk)?;
    if lease_key == release.key {
        walk.report.error(
            path,
            format!(
                "`concurrency.lease` and `concurrency.release.key` are both `{lease_key}`: the \
                 release call sends both entries, so give them different keys"
            ),
        );
        return None;
    }
    for key in [&lease_key, &release.key] {
        if children.iter().any(|child| child.key == *key) {
            walk.report.error(
                path,
                format!(
                    "`{key}` is read by `concurrency` and is also the key of a nested \
                     descriptor here: the lease and release entries follow the descriptor's \
                     own and are not levels of the tree; give them other keys"
                ),
            );
            return None;
        }
    }
    Some(RuleSpec {
        name,
        replaces: Vec::new(),
        unlimited: false,
        limits: Vec::new(),
        concurrency: Some(Concurrency {
            max_in_flight,
            lease_ttl,
            lease_key,
            release,
            shed_above,
        }),
    })
}

/// `shed_above`: absent (`Some(None)`), or from 1 to `max_in_flight − 1`; `None` when wrong
/// (reported).
fn shed_above(
    map: &Mapping,
    max_in_flight: u32,
    path: &str,
    walk: &mut FileWalk,
) -> Option<Option<u32>> {
    let shown = "concurrency.shed_above";
    if field(map, "shed_above").is_none() {
        return Some(None);
    }
    let soft = walk.number(map, "shed_above", shown, path)?;
    if soft == 0 || soft >= max_in_flight {
        walk.report.error(
            path,
            format!(
                "`{shown}` is {soft}: it must be from 1 to {} (below `max_in_flight`, \
                 {max_in_flight}): past it new leases are shed with probability, and \
                 `max_in_flight` stays the hard bound",
                max_in_flight.saturating_sub(1)
            ),
        );
        return None;
    }
    Some(Some(soft))
}

fn max_in_flight(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<u32> {
    let shown = "concurrency.max_in_flight";
    let Some(max) = walk.number(map, "max_in_flight", shown, path) else {
        if field(map, "max_in_flight").is_none() {
            walk.report.error(
                path,
                format!(
                    "`{shown}` is missing: how many requests may be in flight at once, \
                         like `max_in_flight: 10`"
                ),
            );
        }
        return None;
    };
    if max == 0 || max > MAX_IN_FLIGHT {
        walk.report.error(
            path,
            format!(
                "`{shown}` is {max}: it must be from 1 to {MAX_IN_FLIGHT} (every lease is \
                 stored; for more in flight, split the traffic over several descriptors)"
            ),
        );
        return None;
    }
    Some(max)
}

/// A descriptor entry key named by `name` (`lease`, `release.key`).
fn entry_key(
    map: &Mapping,
    name: &str,
    example: &str,
    path: &str,
    walk: &mut FileWalk,
) -> Option<String> {
    let shown = format!("concurrency.{name}");
    let key = walk.text(map, name, &shown, path, example);
    match key {
        Some(key) if !key.is_empty() => Some(key),
        Some(_) | None => {
            if key.is_some() || field(map, name).is_none() {
                walk.report.error(
                    path,
                    format!(
                        "`{shown}` is missing: name the descriptor entry that carries the \
                         lease id, like `{example}` (Envoy: a request_headers action on \
                         x-request-id with that descriptor_key)"
                    ),
                );
            }
            None
        }
    }
}

fn release_marker(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<ReleaseMarker> {
    let example = "release: {key: phase, value: done}";
    let Some(value) = field(map, "release") else {
        walk.report.error(
            path,
            format!(
                "`concurrency.release` is missing: name the entry only the stream-end call \
                 sends, like `{example}` (Envoy: a generic_key with that descriptor_key and \
                 value in the rate limit with `apply_on_stream_done: true`)"
            ),
        );
        return None;
    };
    let map = floodgate_map(
        value,
        "concurrency.release",
        &RELEASE_KEYS,
        example,
        path,
        &mut walk.report,
    )?;
    let key = walk.text(map, "key", "concurrency.release.key", path, example);
    let marker = walk.text(map, "value", "concurrency.release.value", path, example);
    match (key, marker) {
        (Some(key), Some(value)) if !key.is_empty() && !value.is_empty() => {
            Some(ReleaseMarker { key, value })
        }
        _ => {
            walk.report.error(
                path,
                format!(
                    "`concurrency.release` needs a `key` and a `value`, both not empty, like \
                     `{example}`"
                ),
            );
            None
        }
    }
}

fn ttl(map: &Mapping, path: &str, walk: &mut FileWalk) -> Option<Micros> {
    let example = "ttl: 30s";
    let Some(value) = field(map, "ttl") else {
        walk.report.error(
            path,
            format!(
                "`concurrency.ttl` is missing: how long a lease lives if its release never \
                 comes (a crashed proxy), longer than the slowest request, like `{example}`"
            ),
        );
        return None;
    };
    let parsed = text(value).ok().and_then(|text| parse_ttl(&text));
    match parsed {
        Some(ttl) if (1..=MAX_LEASE_TTL).contains(&ttl) => Some(ttl),
        Some(_) => {
            walk.report.error(
                path,
                "`concurrency.ttl` must be above 0 and at most 24h: a lease older than a day \
                 is a leak, not a request",
            );
            None
        }
        None => {
            let message = wrong_type(
                "concurrency.ttl",
                "a duration with its unit (ms, s, m or h)",
                &describe(value),
                example,
            );
            walk.report.error(path, message);
            None
        }
    }
}

/// `500ms`, `30s`, `5m`, `1h` as µs: a whole number and a unit.
fn parse_ttl(text: &str) -> Option<Micros> {
    let text = text.trim();
    let (number, micros_per_unit) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1_000)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1_000_000)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60_000_000)
    } else if let Some(number) = text.strip_suffix('h') {
        (number, 3_600_000_000)
    } else {
        return None;
    };
    let number = number.trim();
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    number
        .parse::<Micros>()
        .ok()
        .and_then(|n| n.checked_mul(micros_per_unit))
}
