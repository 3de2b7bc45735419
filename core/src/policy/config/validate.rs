//! Checks between the fields of one limit, and the [`Quota`] they make: unit and `unlimited`
//! (the reference's rules), then floodgate's algorithm options.

use super::keys::suggest;
use super::limit_fields::LimitFields;
use super::walk::FileWalk;
use crate::arithmetic::algorithm::{Algorithm, Counting, Overflow, Quota, SLIDING_LOG_MAX_LIMIT};
use crate::ground::unit::Unit;

const UNIT_NAMES: [&str; 7] = ["second", "minute", "hour", "day", "week", "month", "year"];

/// The quota of a limit that is not unlimited, or `None` after reporting why there is none.
pub(super) fn quota_of(fields: &LimitFields, path: &str, walk: &mut FileWalk) -> Option<Quota> {
    let unit = unit_of(fields, path, walk);
    let requests_per_unit = requests_of(fields, path, walk);
    let chosen = ChosenAlgorithm::of(fields, walk);
    let mut valid = unit.is_some();
    valid &= burst_fits(fields, path, walk, &chosen);
    valid &= options_fit(fields, path, walk, &chosen, requests_per_unit);
    warn_about_choices_without_effect(fields, path, walk, &chosen, unit);
    let unit = unit.filter(|_| valid)?;
    let quota = build_quota(fields, walk, unit, requests_per_unit, chosen.algorithm);
    super::queue::with_queue(fields, path, walk, quota)
}

/// A limit's algorithm, and how messages say where it comes from when it was not written.
struct ChosenAlgorithm {
    algorithm: Algorithm,
    /// Empty when written, else ` (the default from …)`.
    chosen: String,
}

impl ChosenAlgorithm {
    fn of(fields: &LimitFields, walk: &FileWalk) -> Self {
        match fields.algorithm {
            Some(algorithm) => Self {
                algorithm,
                chosen: String::new(),
            },
            None => Self {
                algorithm: walk.default_algorithm,
                chosen: format!(" (the default from {})", walk.default_algorithm_source),
            },
        }
    }
}

/// `requests_per_unit`, 0 with a warning when absent (as the reference reads it).
fn requests_of(fields: &LimitFields, path: &str, walk: &mut FileWalk) -> u32 {
    match fields.requests_per_unit {
        Some(requests) => requests,
        None => {
            walk.report.warning(
                path,
                format!(
                    "`{}` is not set, so the limit is 0 and every request is over it (as in \
                     envoyproxy/ratelimit): set it, or write `requests_per_unit: 0` to say so",
                    fields.field_name("requests_per_unit")
                ),
            );
            0
        }
    }
}

/// Whether `burst`, if written, fits the algorithm; reports why not.
fn burst_fits(
    fields: &LimitFields,
    path: &str,
    walk: &mut FileWalk,
    chosen: &ChosenAlgorithm,
) -> bool {
    let ChosenAlgorithm { algorithm, chosen } = chosen;
    let algorithm = *algorithm;
    let mut valid = true;
    if let Some(burst) = fields.burst {
        if !algorithm.accepts_burst() {
            walk.report.error(
                path,
                format!(
                    "`{}` only applies to token_bucket and leaky_bucket, but this limit uses \
                     {algorithm}{chosen}: set `algorithm: token_bucket` (or leaky_bucket), or \
                     remove `burst`",
                    fields.field_name("burst")
                ),
            );
            valid = false;
        } else if burst == 0 && algorithm == Algorithm::TokenBucket {
            walk.report.error(
                path,
                format!(
                    "`{}: 0` leaves the token bucket no room, so it would refuse every request: \
                     burst is the bucket size (at least 1; without it, requests_per_unit)",
                    fields.field_name("burst")
                ),
            );
            valid = false;
        }
    }
    valid
}

/// Whether `unit_multiplier`, `nodelay`, `overflow` and the limit itself fit the algorithm;
/// reports every one that does not.
fn options_fit(
    fields: &LimitFields,
    path: &str,
    walk: &mut FileWalk,
    chosen: &ChosenAlgorithm,
    requests_per_unit: u32,
) -> bool {
    let ChosenAlgorithm { algorithm, chosen } = chosen;
    let algorithm = *algorithm;
    let mut valid = true;
    if fields.unit_multiplier == Some(0) {
        walk.report.error(
            path,
            format!(
                "`{}` must be at least 1: the window is unit × unit_multiplier (unit: second \
                 with unit_multiplier: 30 is a 30-second window)",
                fields.field_name("unit_multiplier")
            ),
        );
        valid = false;
    }
    if fields.nodelay.is_some() && algorithm != Algorithm::LeakyBucket {
        walk.report.error(
            path,
            format!(
                "`{}` only applies to leaky_bucket, but this limit uses {algorithm}{chosen}: set \
                 `algorithm: leaky_bucket`, or remove `nodelay`",
                fields.field_name("nodelay")
            ),
        );
        valid = false;
    }
    if fields.overflow == Some(Overflow::Owe) && !algorithm.counts_in_windows() {
        walk.report.error(
            path,
            format!(
                "`{}: owe` needs a count that can pass the limit, but this limit uses \
                 {algorithm}{chosen}, which holds admitted hits only: set `algorithm: \
                 fixed_window` or `sliding_window`, or remove `overflow`",
                fields.field_name("overflow")
            ),
        );
        valid = false;
    }
    if algorithm == Algorithm::SlidingLog && u64::from(requests_per_unit) > SLIDING_LOG_MAX_LIMIT {
        walk.report.error(
            path,
            format!(
                "a sliding_log limit of {requests_per_unit} per window is above the maximum of \
                 {SLIDING_LOG_MAX_LIMIT}: the log keeps one entry per admitted request, so its \
                 memory grows with the limit; use `algorithm: sliding_window` (constant memory, \
                 nearly the same answers) or a smaller limit"
            ),
        );
        valid = false;
    }

    valid
}

/// Warnings for choices that load but change nothing for this algorithm: `counting: hybrid`
/// on an algorithm counted exactly, calendar months without window edges.
fn warn_about_choices_without_effect(
    fields: &LimitFields,
    path: &str,
    walk: &mut FileWalk,
    chosen: &ChosenAlgorithm,
    unit: Option<Unit>,
) {
    let ChosenAlgorithm { algorithm, chosen } = chosen;
    let algorithm = *algorithm;
    if fields.counting == Some(Counting::Hybrid) && !crate::arithmetic::hybrid::supports(algorithm)
    {
        walk.report.warning(
            path,
            format!(
                "`{}: hybrid` is decided exactly, one Redis call per decision: this limit uses \
                 {algorithm}{chosen}, whose state depends on the order of every hit, so the \
                 instances' counts cannot be added up; only fixed_window and sliding_window are \
                 counted locally (set one of them, or remove `counting`)",
                fields.field_name("counting")
            ),
        );
    }

    if walk.calendar_months && unit == Some(Unit::Month) && !algorithm.counts_in_windows() {
        walk.report.warning(
            path,
            format!(
                "calendar months (--calendar-months, USE_CALENDAR_MONTH_RATE_LIMIT) place the \
                 windows of fixed_window and sliding_window only; this {algorithm}{chosen} has \
                 no window edges and refills over 30 days a month: use `algorithm: \
                 fixed_window` (or sliding_window) to reset on the 1st"
            ),
        );
    }
}

/// The quota of a limit whose fields passed every check.
fn build_quota(
    fields: &LimitFields,
    walk: &FileWalk,
    unit: Unit,
    requests_per_unit: u32,
    algorithm: Algorithm,
) -> Quota {
    let mut quota = Quota::new(requests_per_unit, unit)
        .with_algorithm(algorithm)
        .with_multiplier(fields.unit_multiplier.unwrap_or(1))
        .with_calendar_months(walk.calendar_months);
    if let Some(burst) = fields.burst {
        quota = quota.with_burst(burst);
    }
    // A default (the file's `overflow:`, `--overflow`) reaches only the algorithms that can
    // hold it; `overflow:` written on a bucket or a log was refused above.
    match fields.overflow {
        Some(overflow) => quota = quota.with_overflow(overflow),
        None if algorithm.counts_in_windows() => {
            quota = quota.with_overflow(walk.default_overflow);
        }
        None => {}
    }
    if let Some(counting) = fields.counting {
        quota = quota.with_counting(counting);
    }
    quota
}

fn unit_of(fields: &LimitFields, path: &str, walk: &mut FileWalk) -> Option<Unit> {
    let written = fields.unit.as_deref().unwrap_or("");
    if let Some(unit) = Unit::parse(written) {
        return Some(unit);
    }
    let place = if fields.shown == "rate_limit" {
        String::new()
    } else {
        format!(" in `{}`", fields.shown)
    };
    let hint = if written.is_empty() {
        "add `unit:` with one of".to_owned()
    } else {
        match closest_unit(written) {
            Some(unit) => format!("did you mean '{unit}'? Use one of"),
            None => "use one of".to_owned(),
        }
    };
    walk.report.error(
        path,
        format!(
            "invalid rate limit unit '{written}'{place}: {hint} {} (any case), or \
             `unlimited: true` for a rule without a limit",
            UNIT_NAMES.join(", ")
        ),
    );
    None
}

/// `seconds` → second, `hr` → hour, `minte` → minute.
fn closest_unit(written: &str) -> Option<&'static str> {
    let lower = written.trim().to_ascii_lowercase();
    let abbreviation = match lower.as_str() {
        "s" | "sec" | "secs" => Some("second"),
        "m" | "min" | "mins" => Some("minute"),
        "h" | "hr" | "hrs" | "hourly" => Some("hour"),
        "d" | "daily" => Some("day"),
        "w" | "wk" | "weekly" => Some("week"),
        "mo" | "mon" | "monthly" => Some("month"),
        "y" | "yr" | "yearly" | "annual" => Some("year"),
        _ => None,
    };
    abbreviation
        .or_else(|| suggest(lower.trim_end_matches('s'), &UNIT_NAMES))
        .or_else(|| suggest(&lower, &UNIT_NAMES))
}

/// What the reference checks on an unlimited limit, and floodgate's options that mean nothing
/// there.
pub(super) fn check_unlimited(fields: &LimitFields, path: &str, walk: &mut FileWalk) {
    match fields.unit.as_deref() {
        Some(unit) if Unit::parse(unit).is_some() => walk.report.error(
            path,
            "should not specify rate limit unit when unlimited: remove `unit` (an unlimited \
             rule counts nothing), or remove `unlimited: true`",
        ),
        // The reference accepts and ignores a unit it does not know on an unlimited rule.
        Some(unit) if !unit.is_empty() => walk.report.warning(
            path,
            format!("unit '{unit}' is ignored because the rule is unlimited: remove it"),
        ),
        _ => {}
    }
    if fields.requests_per_unit.is_some() {
        walk.report.warning(
            path,
            "`requests_per_unit` is ignored because the rule is unlimited: remove it",
        );
    }
    let options = [
        ("algorithm", fields.algorithm.is_some()),
        ("burst", fields.burst.is_some()),
        ("unit_multiplier", fields.unit_multiplier.is_some()),
        ("nodelay", fields.nodelay.is_some()),
        ("queue", fields.queue.is_some()),
        ("delay", fields.delay.is_some()),
        ("max_wait_ms", fields.max_wait_ms.is_some()),
        ("overflow", fields.overflow.is_some()),
        ("counting", fields.counting.is_some()),
    ];
    for (option, written) in options {
        if written {
            walk.report.error(
                path,
                format!("`{option}` has no effect on an unlimited rule: remove it"),
            );
        }
    }
}

/// The reference's `replaces` checks that need the rule's own name (empty entries were
/// reported while reading them).
pub(super) fn check_replaces(
    name: Option<&str>,
    replaces: Option<&[String]>,
    path: &str,
    walk: &mut FileWalk,
) {
    let (Some(name), Some(replaces)) = (name, replaces) else {
        return;
    };
    if replaces.iter().any(|replaced| replaced == name) {
        walk.report.error(
            path,
            format!(
                "replaces should not contain name of same descriptor: remove '{name}' from \
                 `replaces` (a rule cannot replace itself)"
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::closest_unit;

    #[test]
    fn unit_suggestions() {
        assert_eq!(closest_unit("seconds"), Some("second"));
        assert_eq!(closest_unit("Minutes"), Some("minute"));
        assert_eq!(closest_unit("hr"), Some("hour"));
        assert_eq!(closest_unit("minte"), Some("minute"));
        assert_eq!(closest_unit("days"), Some("day"));
        assert_eq!(closest_unit("fortnight"), None);
    }
}
