//! Rate-limit response headers for the proxy to return (`--response-headers`). The most
//! restrictive descriptor drives them: an over-limit one if any, else the one with the least
//! remaining (the first on ties, as Envoy chooses); envoyproxy/ratelimit's own three headers
//! (`LIMIT_RESPONSE_HEADERS_ENABLED` at its door) follow its own choice ([`reference_choice`]).
//! Shadowed statuses are left out: shadow mode must not change what clients see.
//!
//! A request refused in a priority class (`core::arithmetic::priority`) also gets, whatever the mode:
//!
//!   x-floodgate-priority: low;reason=reserved;reserved-for="normal critical"
//!   Retry-After: 3                      (added here only when the mode adds none)
//!
//! an RFC 9651 item: the refused class (a token), `reason=reserved` when the shared capacity
//! still had room for the hit but it is kept for the classes above (`reserved-for`, smallest
//! share first; absent for a class with the largest share), `reason=full` when it had none.
//! Retry-After is when the hit fits above the class's reserve.
//!
//! A concurrency rule's refusal (full, its class over its share, or shed) is described by its
//! in-flight limit (`response::InFlightLimit`), never as a rate, and gets `Retry-After` in every
//! mode, `none` included: no proxy can work it out, since the status has no `current_limit`.
//! Each mode shows it as:
//!
//!   ratelimit   RateLimit-Limit: 4, RateLimit-Remaining: 0, RateLimit-Reset: 7
//!   draft03     X-RateLimit-Limit: 4 (the expiring limit; draft-03's quota policies are time
//!               windows, so only the rate limits are listed after it), -Remaining: 0, -Reset: 7
//!   ietf        RateLimit-Policy: "slow_backend_in_flight";q=4;qu="concurrent-requests"
//!               RateLimit: "slow_backend_in_flight";r=0;t=7
//!
//! with 4 the leases the class may hold and 7 the seconds until the earliest lease expires
//! (until a slot may free). An admitted lease shows nothing: its slot frees when some request
//! ends, not at a time a client could pace itself on.

use smallvec::SmallVec;

use crate::decision::status::{Code, DescriptorStatus};
use crate::ground::time::ceil_seconds;

/// The names of the three headers of [`HeaderMode::RateLimit`]: envoyproxy/ratelimit's, or the
/// ones its `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER` and `LIMIT_RESET_HEADER` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainHeaderNames {
    pub limit: &'static str,
    pub remaining: &'static str,
    pub reset: &'static str,
}

impl PlainHeaderNames {
    /// envoyproxy/ratelimit's defaults.
    pub const REFERENCE: PlainHeaderNames = PlainHeaderNames {
        limit: "RateLimit-Limit",
        remaining: "RateLimit-Remaining",
        reset: "RateLimit-Reset",
    };
    /// The first three of Envoy's DRAFT_VERSION_03 headers.
    const DRAFT03: PlainHeaderNames = PlainHeaderNames {
        limit: "X-RateLimit-Limit",
        remaining: "X-RateLimit-Remaining",
        reset: "X-RateLimit-Reset",
    };
}

impl Default for PlainHeaderNames {
    fn default() -> Self {
        PlainHeaderNames::REFERENCE
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderMode {
    /// No headers (envoyproxy/ratelimit's default; Envoy can compute its own).
    #[default]
    None,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (or the names given) of the
    /// most restrictive descriptor, and `Retry-After` (`--response-headers ratelimit`).
    RateLimit(PlainHeaderNames),
    /// The same three headers, written as envoyproxy/ratelimit's
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` writes them: on its choice of descriptor
    /// ([`reference_choice`]), and nothing more.
    ReferenceRateLimit(PlainHeaderNames),
    /// `X-RateLimit-Limit/-Remaining/-Reset` in draft-03 form, as Envoy's DRAFT_VERSION_03.
    Draft03,
    /// The IETF httpapi draft (-08 and later): `RateLimit-Policy` and `RateLimit`.
    Ietf,
}

impl HeaderMode {
    pub fn parse(text: &str) -> Option<HeaderMode> {
        match text.to_ascii_lowercase().as_str() {
            "none" => Some(HeaderMode::None),
            "ratelimit" => Some(HeaderMode::RateLimit(PlainHeaderNames::REFERENCE)),
            "draft03" => Some(HeaderMode::Draft03),
            "ietf" => Some(HeaderMode::Ietf),
            _ => None,
        }
    }
}

/// The headers for `statuses`; `Retry-After` (whole seconds, ≥ 1) when any is over its limit,
/// in the modes that write it.
pub fn response_headers(mode: HeaderMode, statuses: &[DescriptorStatus]) -> Vec<(String, String)> {
    let visible = visible(statuses);
    let mut headers = match mode {
        HeaderMode::ReferenceRateLimit(names) => {
            reference_choice(statuses).map_or_else(Vec::new, |chosen| plain_headers(names, chosen))
        }
        _ if !writes_headers(mode, statuses) => return Vec::new(),
        _ => {
            let Some(driving) = most_restrictive(&visible) else {
                return Vec::new();
            };
            match mode {
                HeaderMode::RateLimit(names) => plain_headers(names, driving),
                HeaderMode::Draft03 => draft03_headers(driving, &visible),
                HeaderMode::Ietf => ietf_headers(driving, &visible),
                HeaderMode::None | HeaderMode::ReferenceRateLimit(_) => Vec::new(),
            }
        }
    };
    if writes_retry_after(mode, statuses) {
        if let Some(retry_after) = retry_after_seconds(&visible) {
            headers.push(("Retry-After".to_owned(), retry_after.to_string()));
        }
    }
    headers
}

/// Whether [`response_headers`] writes any header of floodgate's modes, Retry-After included:
/// every mode but `none`, and `none` too for a concurrency rule's refusal (see the module docs).
fn writes_headers(mode: HeaderMode, statuses: &[DescriptorStatus]) -> bool {
    mode != HeaderMode::None || statuses.iter().any(is_lease_refusal)
}

/// Whether [`response_headers`] writes Retry-After when a status is over: floodgate's modes
/// do; `none` and the reference's three headers only for a concurrency rule's refusal, which
/// no proxy can work out.
fn writes_retry_after(mode: HeaderMode, statuses: &[DescriptorStatus]) -> bool {
    match mode {
        HeaderMode::None | HeaderMode::ReferenceRateLimit(_) => {
            statuses.iter().any(is_lease_refusal)
        }
        HeaderMode::RateLimit(_) | HeaderMode::Draft03 | HeaderMode::Ietf => true,
    }
}

/// The descriptor envoyproxy/ratelimit's headers describe (its `shouldRateLimitWorker`): among
/// those with a limit, the one with the least remaining, the first on ties; but a descriptor
/// over its limit and not in quota mode is taken whatever it remains, the last such. A rule in
/// shadow mode is left out, as in every mode: shadow mode must not change what clients see.
pub fn reference_choice(statuses: &[DescriptorStatus]) -> Option<&DescriptorStatus> {
    let mut chosen = None;
    let mut least = u32::MAX;
    for status in statuses
        .iter()
        .filter(|status| status.current_limit.is_some() && !status.shadowed)
    {
        if status.limit_remaining < least {
            chosen = Some(status);
            least = status.limit_remaining;
        }
        if status.code == Code::OverLimit && !status.quota {
            chosen = Some(status);
            least = 0;
        }
    }
    chosen
}

/// The statuses the headers describe: those with a limit, a concurrency rule's only when it
/// refuses; never a shadowed one.
/// On the stack for the usual few descriptors: every answer asks, most write no header.
fn visible(statuses: &[DescriptorStatus]) -> SmallVec<[&DescriptorStatus; 4]> {
    statuses
        .iter()
        .filter(|status| {
            !status.shadowed && (status.current_limit.is_some() || is_lease_refusal(status))
        })
        .collect()
}

fn is_lease_refusal(status: &DescriptorStatus) -> bool {
    status.in_flight_limit.is_some() && status.code == Code::OverLimit && !status.shadowed
}

/// The header naming a refused priority class and why.
pub const PRIORITY_HEADER: &str = "x-floodgate-priority";

/// Why a priority class was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The shared capacity had room for the hit, kept for the classes above this one.
    Reserved,
    /// The shared capacity had no room for the hit.
    Full,
    /// A concurrency rule had a slot, but past its `shed_above` the lease did not survive
    /// probabilistic shedding (`core::arithmetic::shed`).
    Shed,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::Reserved => "reserved",
            Refused::Full => "full",
            Refused::Shed => "shed",
        }
    }
}

/// A descriptor refused in its priority class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassRefusal<'a> {
    pub class: &'a str,
    pub reason: Refused,
    /// The classes with a larger share, smallest first.
    pub reserved_for: Vec<&'a str>,
}

/// The headers of a request refused in a priority class: [`PRIORITY_HEADER`], and Retry-After
/// when `mode` adds none (see the module docs).
pub fn priority_headers(
    mode: HeaderMode,
    statuses: &[DescriptorStatus],
    refusal: &ClassRefusal<'_>,
) -> Vec<(String, String)> {
    // Class names are tokens (the loader allows letters, digits, `_`, `-`, `.`).
    let mut value = format!("{};reason={}", refusal.class, refusal.reason.label());
    if !refusal.reserved_for.is_empty() {
        value.push_str(";reserved-for=");
        value.push_str(&sf_string(&refusal.reserved_for.join(" ")));
    }
    let mut headers = vec![(PRIORITY_HEADER.to_owned(), value)];
    if !writes_retry_after(mode, statuses) {
        if let Some(retry_after) = retry_after_seconds(&visible(statuses)) {
            headers.push(("Retry-After".to_owned(), retry_after.to_string()));
        }
    }
    headers
}

fn most_restrictive<'a>(visible: &[&'a DescriptorStatus]) -> Option<&'a DescriptorStatus> {
    visible
        .iter()
        .find(|status| status.code == Code::OverLimit)
        .or_else(|| visible.iter().min_by_key(|status| status.limit_remaining))
        .copied()
}

fn retry_after_seconds(visible: &[&DescriptorStatus]) -> Option<i64> {
    visible
        .iter()
        .filter(|status| status.code == Code::OverLimit)
        .map(|status| ceil_seconds(status.duration_until_reset.unwrap_or(0)).max(1))
        .max()
}

fn reset_seconds(status: &DescriptorStatus) -> i64 {
    ceil_seconds(status.duration_until_reset.unwrap_or(0))
}

/// A rate limit's requests per window, or the leases a concurrency rule's class may hold.
fn limit_of(status: &DescriptorStatus) -> u32 {
    match (&status.current_limit, &status.in_flight_limit) {
        (Some(limit), _) => limit.requests_per_unit,
        (None, Some(limit)) => limit.max_in_flight,
        (None, None) => 0,
    }
}

fn plain_headers(names: PlainHeaderNames, driving: &DescriptorStatus) -> Vec<(String, String)> {
    vec![
        (names.limit.to_owned(), limit_of(driving).to_string()),
        (
            names.remaining.to_owned(),
            driving.limit_remaining.to_string(),
        ),
        (names.reset.to_owned(), reset_seconds(driving).to_string()),
    ]
}

fn draft03_headers(
    driving: &DescriptorStatus,
    visible: &[&DescriptorStatus],
) -> Vec<(String, String)> {
    let mut limit = limit_of(driving).to_string();
    // A quota policy is a time window: a concurrency rule has none to list.
    for rate in visible
        .iter()
        .filter_map(|status| status.current_limit.as_ref())
    {
        limit.push_str(&format!(
            ", {};w={}",
            rate.requests_per_unit,
            rate.window_seconds()
        ));
        if let Some(name) = rate.name.as_deref() {
            limit.push_str(&format!(";name={}", sf_string(name)));
        }
    }
    let mut headers = plain_headers(PlainHeaderNames::DRAFT03, driving);
    if let Some(first) = headers.first_mut() {
        first.1 = limit;
    }
    headers
}

fn ietf_headers(
    driving: &DescriptorStatus,
    visible: &[&DescriptorStatus],
) -> Vec<(String, String)> {
    let policies: Vec<String> = visible.iter().map(|status| ietf_policy(status)).collect();
    let state = format!(
        "{};r={};t={}",
        sf_string(&policy_name(driving)),
        driving.limit_remaining,
        reset_seconds(driving)
    );
    vec![
        ("RateLimit-Policy".to_owned(), policies.join(", ")),
        ("RateLimit".to_owned(), state),
    ]
}

/// A rate limit's quota per window, or a concurrency rule's in the draft's own quota unit.
fn ietf_policy(status: &DescriptorStatus) -> String {
    let name = sf_string(&policy_name(status));
    match &status.current_limit {
        Some(rate) => format!(
            "{name};q={};w={}",
            rate.requests_per_unit,
            rate.window_seconds()
        ),
        None => format!("{name};q={};qu=\"concurrent-requests\"", limit_of(status)),
    }
}

fn policy_name(status: &DescriptorStatus) -> String {
    let configured = match (&status.current_limit, &status.in_flight_limit) {
        (Some(limit), _) => limit.name.clone(),
        (None, Some(limit)) => limit.name.clone(),
        (None, None) => None,
    };
    configured
        .or_else(|| status.rule_path.clone())
        .unwrap_or_else(|| "default".to_owned())
}

/// An RFC 9651 sf-string: printable ASCII with `"` and `\` escaped; anything else becomes `?`.
fn sf_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            ' '..='~' => quoted.push(c),
            _ => quoted.push('?'),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::status::CurrentLimit;
    use crate::ground::unit::Unit;

    fn status(
        limit: u32,
        unit: Unit,
        remaining: u32,
        reset_ms: i64,
        code: Code,
    ) -> DescriptorStatus {
        DescriptorStatus {
            code,
            current_limit: Some(CurrentLimit {
                requests_per_unit: limit,
                unit,
                unit_multiplier: 1,
                name: None,
            }),
            in_flight_limit: None,
            limit_remaining: remaining,
            duration_until_reset: Some(reset_ms * 1000),
            rule_path: Some("edge.client_id".to_owned()),
            shadowed: false,
            quota: false,
        }
    }

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn reference_headers_follow_the_least_remaining() {
        let statuses = [
            status(10, Unit::Minute, 7, 41_100, Code::Ok),
            status(20, Unit::Minute, 1, 52_000, Code::Ok),
        ];
        let headers = response_headers(
            HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
            &statuses,
        );
        assert_eq!(header(&headers, "RateLimit-Limit"), Some("20"));
        assert_eq!(header(&headers, "RateLimit-Remaining"), Some("1"));
        assert_eq!(header(&headers, "RateLimit-Reset"), Some("52"));
        assert_eq!(header(&headers, "Retry-After"), None);
    }

    #[test]
    fn draft03_lists_every_policy_like_envoy() {
        let mut named = status(20, Unit::Hour, 3, 1_000, Code::Ok);
        if let Some(limit) = named.current_limit.as_mut() {
            limit.name = Some("hourly".to_owned());
        }
        let statuses = [status(10, Unit::Second, 0, 400, Code::OverLimit), named];
        let headers = response_headers(HeaderMode::Draft03, &statuses);
        assert_eq!(
            header(&headers, "X-RateLimit-Limit"),
            Some("10, 10;w=1, 20;w=3600;name=\"hourly\"")
        );
        assert_eq!(header(&headers, "X-RateLimit-Remaining"), Some("0"));
        assert_eq!(header(&headers, "X-RateLimit-Reset"), Some("1"));
        assert_eq!(header(&headers, "Retry-After"), Some("1"));
    }

    #[test]
    fn ietf_structured_fields() {
        let statuses = [status(100, Unit::Minute, 50, 30_000, Code::Ok)];
        let headers = response_headers(HeaderMode::Ietf, &statuses);
        assert_eq!(
            header(&headers, "RateLimit-Policy"),
            Some("\"edge.client_id\";q=100;w=60")
        );
        assert_eq!(
            header(&headers, "RateLimit"),
            Some("\"edge.client_id\";r=50;t=30")
        );
    }

    /// `headers` as the three plain values: limit, remaining, reset.
    fn three(headers: &[(String, String)]) -> [Option<&str>; 3] {
        let names = PlainHeaderNames::REFERENCE;
        [names.limit, names.remaining, names.reset].map(|name| header(headers, name))
    }

    #[test]
    fn the_reference_headers_describe_the_reference_choice_and_add_nothing() {
        let reference = HeaderMode::ReferenceRateLimit(PlainHeaderNames::REFERENCE);
        // Its clock-2222 case: 10 per minute, over: 10, 0, 58.
        let over = [status(10, Unit::Minute, 0, 58_000, Code::OverLimit)];
        let headers = response_headers(reference, &over);
        assert_eq!(three(&headers), [Some("10"), Some("0"), Some("58")]);
        assert_eq!(headers.len(), 3, "no Retry-After: {headers:?}");
        // Two over: the last wins (floodgate's ratelimit mode takes the first).
        let both_over = [
            status(10, Unit::Minute, 0, 58_000, Code::OverLimit),
            status(20, Unit::Hour, 0, 3_000_000, Code::OverLimit),
        ];
        assert_eq!(
            three(&response_headers(reference, &both_over))[0],
            Some("20")
        );
        assert_eq!(
            three(&response_headers(
                HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
                &both_over
            ))[0],
            Some("10")
        );
        // A quota descriptor over is taken only as the least remaining, the first on ties:
        // here the OK one before it, also at 0.
        let mut quota_over = status(30, Unit::Hour, 0, 3_000_000, Code::OverLimit);
        quota_over.quota = true;
        let statuses = [status(5, Unit::Second, 0, 1_000, Code::Ok), quota_over];
        assert_eq!(three(&response_headers(reference, &statuses))[0], Some("5"));
        // None with a limit: no header at all.
        let mut shadowed = status(5, Unit::Second, 0, 1_000, Code::Ok);
        shadowed.shadowed = true;
        assert!(response_headers(reference, &[shadowed]).is_empty());
    }

    #[test]
    fn no_limits_no_headers_and_shadow_is_invisible() {
        assert!(response_headers(HeaderMode::Ietf, &[]).is_empty());
        let mut shadowed = status(5, Unit::Second, 0, 1_000, Code::Ok);
        shadowed.shadowed = true;
        assert!(response_headers(
            HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
            &[shadowed]
        )
        .is_empty());
    }

    #[test]
    fn retry_after_is_the_longest_wait_and_never_zero() {
        let statuses = [
            status(1, Unit::Second, 0, 10, Code::OverLimit),
            status(1, Unit::Minute, 0, 42_000, Code::OverLimit),
        ];
        let headers = response_headers(HeaderMode::Ietf, &statuses);
        assert_eq!(header(&headers, "Retry-After"), Some("42"));
        let quick = [status(1, Unit::Second, 0, 0, Code::OverLimit)];
        assert_eq!(
            header(
                &response_headers(HeaderMode::RateLimit(PlainHeaderNames::REFERENCE), &quick),
                "Retry-After"
            ),
            Some("1")
        );
    }

    #[test]
    fn a_refused_class_names_itself_why_and_whom_the_rest_is_for() {
        let statuses = [status(50, Unit::Second, 0, 2_300, Code::OverLimit)];
        let low = ClassRefusal {
            class: "low",
            reason: Refused::Reserved,
            reserved_for: vec!["normal", "critical"],
        };
        let headers = priority_headers(HeaderMode::None, &statuses, &low);
        assert_eq!(
            header(&headers, PRIORITY_HEADER),
            Some("low;reason=reserved;reserved-for=\"normal critical\"")
        );
        assert_eq!(header(&headers, "Retry-After"), Some("3"));
        let critical = ClassRefusal {
            class: "critical",
            reason: Refused::Full,
            reserved_for: Vec::new(),
        };
        let headers = priority_headers(HeaderMode::Ietf, &statuses, &critical);
        assert_eq!(
            header(&headers, PRIORITY_HEADER),
            Some("critical;reason=full")
        );
        assert_eq!(
            header(&headers, "Retry-After"),
            None,
            "the ietf headers carry it already"
        );
    }

    #[test]
    fn a_concurrency_refusal_is_an_in_flight_quota_never_a_window() {
        let refused = DescriptorStatus {
            code: Code::OverLimit,
            current_limit: None,
            in_flight_limit: Some(crate::decision::status::InFlightLimit {
                max_in_flight: 4,
                name: None,
            }),
            limit_remaining: 0,
            duration_until_reset: Some(2_500_000),
            rule_path: Some("backend.backend_slow".to_owned()),
            shadowed: false,
            quota: false,
        };
        let statuses = [refused, status(10, Unit::Second, 3, 400, Code::Ok)];
        let draft03 = response_headers(HeaderMode::Draft03, &statuses);
        assert_eq!(header(&draft03, "X-RateLimit-Limit"), Some("4, 10;w=1"));
        assert_eq!(header(&draft03, "X-RateLimit-Reset"), Some("3"));
        let ietf = response_headers(HeaderMode::Ietf, &statuses);
        assert_eq!(
            header(&ietf, "RateLimit-Policy"),
            Some(
                "\"backend.backend_slow\";q=4;qu=\"concurrent-requests\", \
                 \"edge.client_id\";q=10;w=1"
            )
        );
        assert_eq!(header(&ietf, "Retry-After"), Some("3"));
        let mut admitted = statuses[0].clone();
        admitted.code = Code::Ok;
        assert!(
            response_headers(HeaderMode::None, &[admitted.clone()]).is_empty(),
            "an admitted lease has nothing to pace on"
        );
        assert_eq!(
            header(
                &response_headers(HeaderMode::Ietf, &[admitted]),
                "RateLimit-Policy"
            ),
            None
        );
    }

    #[test]
    fn sf_strings_are_escaped() {
        assert_eq!(sf_string("a\"b\\c é"), "\"a\\\"b\\\\c ?\"");
    }
}
