//! The decision script: its Lua source (`lua/`, one file per algorithm), which quotas it
//! computes exactly, the arguments a request becomes, how requests share one call (a batch)
//! and the reply it gives back.

use crate::core::arithmetic::algorithm::{Algorithm, Hits, Quota, Snapshot, Tiling};
use crate::core::decision::charging::{Charging, Recording};
use crate::core::decision::plan::Counter;
use crate::core::decision::response::CounterOutcome;
use crate::core::ground::time::Micros;
use crate::core::ground::verdict::Role;
use crate::store::Decided;

/// The whole script: shared helpers, the algorithms, then the request logic that uses them.
pub const SOURCE: &str = concat!(
    include_str!("lua/prelude.lua"),
    "\n",
    include_str!("lua/fixed_window.lua"),
    "\n",
    include_str!("lua/sliding_window.lua"),
    "\n",
    include_str!("lua/sliding_log.lua"),
    "\n",
    include_str!("lua/gcra.lua"),
    "\n",
    include_str!("lua/decide.lua"),
);

/// ARGV values before everything else: how many requests, settings and counter templates
/// the call has (`BATCH_FIELDS` in decide.lua).
const BATCH_FIELDS: usize = 3;

/// ARGV values per settings: global shadow, now, extra TTL, charging (`SETTINGS_FIELDS`).
const SETTINGS_FIELDS: usize = 4;

/// ARGV values per counter template: algorithm, limit, window, capacity, hits kind, hits,
/// role, reserve (`TEMPLATE_FIELDS`).
const TEMPLATE_FIELDS: usize = 8;

/// ARGV values before a request's counters: how many, and its settings (`REQUEST_FIELDS`).
const REQUEST_FIELDS: usize = 2;

/// ARGV values per counter: key index, template, descriptor index (`COUNTER_FIELDS`).
const COUNTER_FIELDS: usize = 3;

/// Reply values per counter (`REPLY_FIELDS` in decide.lua).
const REPLY_FIELDS: usize = 5;

/// Lua numbers are doubles: integers are exact up to 2^53.
const LUA_EXACT_LIMIT: u128 = 1 << 53;

/// The longest window the script computes exactly: 2^51 µs, about 71 years. With Redis time
/// below 2^52 µs (until the year 2112), `now + 2·W` stays below 2^53.
pub const MAX_WINDOW_MICROS: Micros = 1 << 51;

/// The longest time a bucket may take to drain from full (C·W/L µs), for the same reason.
pub const MAX_BUCKET_DRAIN_MICROS: u128 = 1 << 51;

/// How far a test clock may be from the epoch (µs): the bound `MAX_WINDOW_MICROS` assumes.
pub const MAX_TEST_CLOCK_MICROS: Micros = 1 << 52;

/// Why the Redis store cannot decide a quota exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsupportedQuota {
    #[error(
        "a window of {window_seconds} s is longer than the Redis store supports \
         (at most {} s, about 71 years)",
        MAX_WINDOW_MICROS / 1_000_000
    )]
    WindowTooLong { window_seconds: u64 },
    #[error(
        "{algorithm} with capacity {capacity}, {requests_per_unit} per {window_seconds} s is \
         too large for the Redis store: capacity × requests_per_unit (or capacity × the window \
         in µs, if smaller) must stay below 2^53, about 9.0e15 (e.g. up to 94 million tokens a \
         day); lower the burst or the limit"
    )]
    BucketTooLarge {
        algorithm: Algorithm,
        capacity: u64,
        requests_per_unit: u32,
        window_seconds: u64,
    },
    #[error(
        "{algorithm} with capacity {capacity}, {requests_per_unit} per {window_seconds} s takes \
         longer than the Redis store supports to drain (at most about 71 years)"
    )]
    BucketDrainsTooSlowly {
        algorithm: Algorithm,
        capacity: u64,
        requests_per_unit: u32,
        window_seconds: u64,
    },
}

/// Whether the Redis script computes `quota` exactly as the core does. Configuration
/// loaded for `--store redis` should be checked with this, so a quota is refused at load,
/// not at the first request.
pub fn check_quota(quota: &Quota) -> Result<(), UnsupportedQuota> {
    let window = quota.window_micros();
    // Calendar months can be longer than their 30 days a month: up to 31 days each.
    let longest = quota.tiling().longest();
    if window > MAX_WINDOW_MICROS || longest > MAX_WINDOW_MICROS {
        return Err(UnsupportedQuota::WindowTooLong {
            window_seconds: quota
                .window_seconds()
                .max(longest.unsigned_abs() / 1_000_000),
        });
    }
    if matches!(
        quota.algorithm,
        Algorithm::TokenBucket | Algorithm::LeakyBucket
    ) {
        // gcra.lua makes a charge of n ≤ C hits as whole µs and ticks, the ticks being
        // n·(W mod L) < C·min(L, W).
        let ticks_per_micro = u128::from(quota.requests_per_unit);
        let hit_cost = u128::from(window.max(1).unsigned_abs());
        if u128::from(quota.capacity()) * ticks_per_micro.min(hit_cost) >= LUA_EXACT_LIMIT {
            return Err(UnsupportedQuota::BucketTooLarge {
                algorithm: quota.algorithm,
                capacity: quota.capacity(),
                requests_per_unit: quota.requests_per_unit,
                window_seconds: quota.window_seconds(),
            });
        }
        let capacity_ticks = u128::from(quota.capacity()) * hit_cost;
        if ticks_per_micro > 0 && capacity_ticks.div_ceil(ticks_per_micro) > MAX_BUCKET_DRAIN_MICROS
        {
            return Err(UnsupportedQuota::BucketDrainsTooSlowly {
                algorithm: quota.algorithm,
                capacity: quota.capacity(),
                requests_per_unit: quota.requests_per_unit,
                window_seconds: quota.window_seconds(),
            });
        }
    }
    Ok(())
}

/// One script call: its keys and arguments, for one request or a batch of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub keys: Vec<String>,
    pub args: Vec<Arg>,
}

/// One request's part of a call: its distinct keys, its settings and its counters. A call
/// sends each distinct settings and counter template once, however many of its requests use
/// it (decide.lua says why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestArgs {
    pub keys: Vec<String>,
    settings: SettingsArgs,
    counters: Vec<CounterArgs>,
}

/// What a request's counters share: global shadow, now, extra TTL, charging mode.
type SettingsArgs = [Arg; SETTINGS_FIELDS];

/// What a counter asks, whatever its key: algorithm, limit, window, capacity, hits kind, hits,
/// role, reserve.
type TemplateArgs = [Arg; TEMPLATE_FIELDS];

/// One counter of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CounterArgs {
    /// Into the request's own keys, from 1 (Lua arrays start at 1).
    key_index: usize,
    template: TemplateArgs,
    descriptor: usize,
}

impl RequestArgs {
    /// How many counters it has: its reply holds one answer for each.
    pub fn counters(&self) -> usize {
        self.counters.len()
    }
}

/// One ARGV value. Numbers stay numbers until the redis crate writes them into its command
/// buffer: a request would otherwise format and allocate a `String` for each of its 14 or more
/// arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    Text(&'static str),
    Signed(i64),
    Unsigned(u64),
    /// A queueing leaky bucket's capacity, "C delay max_wait" (gcra.lua's `read_capacity`).
    Queued {
        capacity: u64,
        delay: u32,
        max_wait: i64,
    },
}

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text(text) => f.write_str(text),
            Self::Signed(number) => write!(f, "{number}"),
            Self::Unsigned(number) => write!(f, "{number}"),
            Self::Queued {
                capacity,
                delay,
                max_wait,
            } => write!(f, "{capacity} {delay} {max_wait}"),
        }
    }
}

impl redis::ToRedisArgs for Arg {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        match self {
            Self::Text(text) => text.write_redis_args(out),
            Self::Signed(number) => number.write_redis_args(out),
            Self::Unsigned(number) => number.write_redis_args(out),
            Self::Queued { .. } => self.to_string().write_redis_args(out),
        }
    }
}

impl From<usize> for Arg {
    fn from(number: usize) -> Self {
        Self::Unsigned(u64::try_from(number).unwrap_or(u64::MAX))
    }
}

impl From<u32> for Arg {
    fn from(number: u32) -> Self {
        Self::Unsigned(number.into())
    }
}

impl Call {
    /// A call deciding `request` alone.
    pub fn single(request: RequestArgs) -> Self {
        let args = arguments([&request].into_iter());
        Self {
            keys: request.keys,
            args,
        }
    }

    /// A call deciding `requests` one after the other, in this order, each as a call of its
    /// own would at that point (decide.lua).
    pub fn batch<'r>(requests: impl ExactSizeIterator<Item = &'r RequestArgs> + Clone) -> Self {
        let keys_len: usize = requests.clone().map(|request| request.keys.len()).sum();
        let mut keys = Vec::with_capacity(keys_len);
        for request in requests.clone() {
            keys.extend(request.keys.iter().cloned());
        }
        Self {
            keys,
            args: arguments(requests),
        }
    }

    /// `script` with these keys and arguments, ready for `invoke_async` (`EVALSHA`, and
    /// `SCRIPT LOAD` again on `NOSCRIPT`).
    pub fn invocation<'s>(&self, script: &'s redis::Script) -> redis::ScriptInvocation<'s> {
        let mut invocation = script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
        invocation
    }
}

/// The ARGV of a call deciding `requests` in order: the counts, each distinct settings and
/// template once, in order of first use, then each request pointing at them. A request of one
/// counter (most are) is one value, which needs the number of settings: they are gathered
/// first.
fn arguments<'r>(requests: impl ExactSizeIterator<Item = &'r RequestArgs> + Clone) -> Vec<Arg> {
    let count = requests.len();
    let mut settings: Vec<&SettingsArgs> = Vec::new();
    let mut templates: Vec<&TemplateArgs> = Vec::new();
    let settings_indexes: Vec<usize> = requests
        .clone()
        .map(|request| position_or_push(&mut settings, &request.settings))
        .collect();
    let counters: usize = requests.clone().map(RequestArgs::counters).sum();
    let mut tail: Vec<Arg> = Vec::with_capacity(REQUEST_FIELDS * count + COUNTER_FIELDS * counters);
    for (request, settings_index) in requests.zip(settings_indexes) {
        if let [counter] = request.counters.as_slice() {
            let template = position_or_push(&mut templates, &counter.template);
            tail.push(lone_request_code(template, settings_index, settings.len()));
            continue;
        }
        tail.push(request.counters().into());
        tail.push(settings_index.into());
        for counter in &request.counters {
            tail.extend([
                Arg::from(counter.key_index),
                Arg::from(position_or_push(&mut templates, &counter.template)),
                Arg::from(counter.descriptor),
            ]);
        }
    }
    let mut args = Vec::with_capacity(
        BATCH_FIELDS
            + SETTINGS_FIELDS * settings.len()
            + TEMPLATE_FIELDS * templates.len()
            + tail.len(),
    );
    args.extend([
        Arg::from(count),
        Arg::from(settings.len()),
        Arg::from(templates.len()),
    ]);
    for entry in settings {
        args.extend_from_slice(entry);
    }
    for template in templates {
        args.extend_from_slice(template);
    }
    args.extend(tail);
    args
}

/// A request of one counter as one ARGV value, −((template − 1) · settings count + settings):
/// negative, so decide.lua tells it from a counter count. Its key is the request's one key and
/// its descriptor the first. (Each ARGV value costs Redis about as much as a counter's
/// arithmetic; the five of the general form cost a batch about 5 % of its decisions.)
fn lone_request_code(template: usize, settings: usize, settings_count: usize) -> Arg {
    let code = (template - 1)
        .saturating_mul(settings_count)
        .saturating_add(settings);
    Arg::Signed(-i64::try_from(code).unwrap_or(i64::MAX))
}

/// Where `item` is in `table`, counted from 1, after adding it at the end if it is new. A
/// linear search: a call's requests mostly share a few entries.
fn position_or_push<'a, T: PartialEq>(table: &mut Vec<&'a T>, item: &'a T) -> usize {
    match table.iter().position(|known| *known == item) {
        Some(index) => index + 1,
        None => {
            table.push(item);
            table.len()
        }
    }
}

/// A request as decide.lua reads it back from a call's ARGV (tests).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SentRequest {
    pub settings: Vec<Arg>,
    /// Per counter: its key index, its template's values, its descriptor index.
    pub counters: Vec<(usize, Vec<Arg>, usize)>,
}

#[cfg(test)]
impl Call {
    /// The requests of this call, read back from its ARGV as decide.lua reads them.
    pub(super) fn sent_requests(&self) -> Vec<SentRequest> {
        let index = |at: usize| match self.args.get(at) {
            Some(Arg::Unsigned(number)) => usize::try_from(*number).expect("a small index"),
            other => panic!(
                "expected a count or an index at ARGV[{}], got {other:?}",
                at + 1
            ),
        };
        let fields = |table: usize, entry: usize, width: usize| {
            let from = table + (entry - 1) * width;
            self.args[from..from + width].to_vec()
        };
        let settings_at = BATCH_FIELDS;
        let templates_at = settings_at + SETTINGS_FIELDS * index(1);
        let mut at = templates_at + TEMPLATE_FIELDS * index(2);
        let mut requests = Vec::new();
        let settings_count = index(1);
        for _ in 0..index(0) {
            if let Some(Arg::Signed(head)) = self.args.get(at) {
                let code = usize::try_from(-head).expect("a lone request's code") - 1;
                let settings = fields(settings_at, code % settings_count + 1, SETTINGS_FIELDS);
                let template = fields(templates_at, code / settings_count + 1, TEMPLATE_FIELDS);
                requests.push(SentRequest {
                    settings,
                    counters: vec![(1, template, 0)],
                });
                at += 1;
                continue;
            }
            let counter_count = index(at);
            let settings = fields(settings_at, index(at + 1), SETTINGS_FIELDS);
            at += REQUEST_FIELDS;
            let mut counters = Vec::new();
            for _ in 0..counter_count {
                let template = fields(templates_at, index(at + 1), TEMPLATE_FIELDS);
                counters.push((index(at), template, index(at + 2)));
                at += COUNTER_FIELDS;
            }
            requests.push(SentRequest { settings, counters });
        }
        assert_eq!(at, self.args.len(), "ARGV left over after the last request");
        requests
    }
}

/// Where "now" comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// Redis `TIME`, so instances with skewed clocks agree.
    RedisTime,
    /// A test clock's instant, and how long (ms) keys outlive their state, because Redis
    /// expires them on its own clock.
    Given { now: Micros, extra_ttl_ms: u64 },
}

/// How the script settles a request (`core::decision::charging`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settling {
    pub charging: Charging,
    /// `--shadow-mode`: the request is never over.
    pub global_shadow: bool,
}

/// Builds the call for `counters` alone; `key_of` gives a counter's Redis key.
pub fn build_call(
    counters: &[Counter],
    settling: Settling,
    now: Now,
    key_of: impl Fn(&Counter) -> String,
) -> Call {
    Call::single(build_request(counters, settling, now, key_of))
}

/// Builds the part of a call that decides `counters`, alone or in a batch; `key_of` gives a
/// counter's Redis key.
pub fn build_request(
    counters: &[Counter],
    settling: Settling,
    now: Now,
    key_of: impl Fn(&Counter) -> String,
) -> RequestArgs {
    // Repeated identities share one key (and one read); order of first mention.
    let mut identities: Vec<&Counter> = Vec::new();
    let mut key_indexes = Vec::with_capacity(counters.len());
    for counter in counters {
        let index = match identities.iter().position(|known| known.key == counter.key) {
            Some(index) => index,
            None => {
                identities.push(counter);
                identities.len() - 1
            }
        };
        key_indexes.push(index + 1); // Lua arrays start at 1.
    }

    let (now_arg, extra_ttl_ms) = match now {
        Now::RedisTime => (Arg::Text(""), 0),
        Now::Given { now, extra_ttl_ms } => (Arg::Signed(now), extra_ttl_ms),
    };
    let settings = [
        Arg::Text(if settling.global_shadow { "1" } else { "0" }),
        now_arg,
        Arg::Unsigned(extra_ttl_ms),
        Arg::Text(settling.charging.name()),
    ];
    let counter_args = counters
        .iter()
        .zip(key_indexes)
        .map(|(counter, key_index)| {
            let quota = &counter.quota;
            let (hits_kind, hits) = match counter.hits {
                // Recorded past its verdict (core::decision::charging::recording): the core decides.
                Hits::Charge(n) => match settling.charging.recording(counter) {
                    Recording::Never => ("charge", n),
                    Recording::Always => ("record", n),
                    Recording::WhenRefused => ("record-refused", n),
                },
                Hits::CheckOnly(rule) => ("check", rule.asked()),
                Hits::Refund(n) => ("refund", n),
            };
            CounterArgs {
                key_index,
                template: [
                    Arg::Text(algorithm_name(quota.algorithm)),
                    quota.requests_per_unit.into(),
                    Arg::Signed(window_arg(quota)),
                    capacity_arg(quota),
                    Arg::Text(hits_kind),
                    Arg::Unsigned(hits),
                    Arg::Text(role_name(counter.role)),
                    // Computed here, from the quota in force, so both stores use the same
                    // integer.
                    Arg::Unsigned(quota.reserve(counter.share)),
                ],
                descriptor: counter.descriptor,
            }
        })
        .collect();
    RequestArgs {
        keys: identities.into_iter().map(key_of).collect(),
        settings,
        counters: counter_args,
    }
}

/// The window W the script is given: its length in µs (≥ 1), or, for calendar months, minus
/// their number (`window_span` in prelude.lua tells them apart by the sign). Calendar months
/// are computed in the script because "now" may be Redis `TIME`, read only there.
pub(super) fn window_arg(quota: &Quota) -> i64 {
    match quota.tiling() {
        Tiling::CalendarMonths { months } => -i64::from(months),
        Tiling::Epoch { .. } => quota.window_micros(),
    }
}

/// The capacity C the script is given, with the queue of a leaky bucket that queues.
fn capacity_arg(quota: &Quota) -> Arg {
    match quota.queue {
        Some(queue) => Arg::Queued {
            capacity: quota.capacity(),
            delay: queue.delay,
            max_wait: queue.max_wait,
        },
        None => Arg::Unsigned(quota.capacity()),
    }
}

/// The Lua implementation that decides `algorithm` (token and leaky buckets are both GCRA;
/// the capacity argument tells them apart).
fn algorithm_name(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::FixedWindow => "fixed_window",
        Algorithm::SlidingWindow => "sliding_window",
        Algorithm::SlidingLog => "sliding_log",
        Algorithm::TokenBucket | Algorithm::LeakyBucket => "gcra",
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Enforced => "enforced",
        Role::Quota => "quota",
        Role::Shadow => "shadow",
    }
}

/// A reply that is not what the script returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadReply {
    #[error("the decision script returned {got} numbers for {counters} counters")]
    WrongLength { got: usize, counters: usize },
    #[error("the decision script returned {value} where {what} was expected")]
    OutOfRange { what: &'static str, value: i64 },
    #[error("the decision script returned {got} numbers for a batch that needs {expected}")]
    WrongBatchLength { got: usize, expected: usize },
}

/// Reply values of a request of `counters` counters.
fn reply_len(counters: usize) -> usize {
    1 + REPLY_FIELDS * counters
}

/// Reads the reply of a batch whose requests have `counters[i]` counters each, in order.
pub fn parse_replies(
    reply: &[i64],
    counters: impl Iterator<Item = usize> + Clone,
) -> Result<Vec<Decided>, BadReply> {
    let expected = counters.clone().map(reply_len).sum();
    if reply.len() != expected {
        return Err(BadReply::WrongBatchLength {
            got: reply.len(),
            expected,
        });
    }
    let mut rest = reply;
    counters
        .map(|count| {
            let (own, after) =
                rest.split_at_checked(reply_len(count))
                    .ok_or(BadReply::WrongBatchLength {
                        got: reply.len(),
                        expected,
                    })?;
            rest = after;
            parse_reply(own, count)
        })
        .collect()
}

/// Reads the script's reply for `counters` counters.
pub fn parse_reply(reply: &[i64], counters: usize) -> Result<Decided, BadReply> {
    let wrong_length = || BadReply::WrongLength {
        got: reply.len(),
        counters,
    };
    let (&over_limit, per_counter) = reply.split_first().ok_or_else(wrong_length)?;
    if reply.len() != reply_len(counters) {
        return Err(wrong_length());
    }
    let outcomes = per_counter
        .chunks_exact(REPLY_FIELDS)
        .map(|fields| {
            let admitted = flag(fields[0], "admitted (0 or 1)")?;
            // An admitted counter answers its wait where a refused one answers its retry.
            // A wait counts only for a charge kept, as `core::decision::charging::outcome`.
            let later = non_negative(fields[3], "retry_after or wait (≥ 0)")?;
            let charged = flag(fields[4], "charged (0 or 1)")?;
            Ok(CounterOutcome {
                admitted,
                snapshot: Snapshot {
                    remaining: u64::try_from(fields[1]).map_err(|_| BadReply::OutOfRange {
                        what: "remaining (≥ 0)",
                        value: fields[1],
                    })?,
                    reset_after: non_negative(fields[2], "reset_after (≥ 0)")?,
                },
                retry_after: if admitted { 0 } else { later },
                charged,
                withheld: false,
                wait: if admitted && charged { later } else { 0 },
            })
        })
        .collect::<Result<Vec<_>, BadReply>>()?;
    Ok(Decided {
        outcomes,
        over_limit: flag(over_limit, "over_limit (0 or 1)")?,
    })
}

fn flag(value: i64, what: &'static str) -> Result<bool, BadReply> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(BadReply::OutOfRange { what, value }),
    }
}

fn non_negative(value: i64, what: &'static str) -> Result<Micros, BadReply> {
    if value < 0 {
        return Err(BadReply::OutOfRange { what, value });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::arithmetic::algorithm::Share;
    use crate::core::ground::unit::Unit;

    /// The arguments as redis-cli would type them.
    fn texts(args: &[Arg]) -> Vec<String> {
        args.iter().map(ToString::to_string).collect()
    }

    fn counter(descriptor: usize, key: &[u8], quota: Quota, hits: Hits, role: Role) -> Counter {
        Counter {
            descriptor,
            key: key.to_vec(),
            quota,
            hits,
            role,
            share: Share::FULL,
        }
    }

    #[test]
    fn repeated_identities_share_a_key_in_order_of_first_mention() {
        let quota = Quota::new(5, Unit::Minute).with_algorithm(Algorithm::LeakyBucket);
        let counters = [
            counter(0, b"b", quota.clone(), Hits::Charge(2), Role::Enforced),
            counter(1, b"a", quota.clone(), Hits::PEEK, Role::Quota),
            counter(2, b"b", quota.clone(), Hits::Refund(3), Role::Shadow),
        ];
        let settling = Settling {
            charging: Charging::EveryDescriptor,
            global_shadow: true,
        };
        let call = build_call(&counters, settling, Now::RedisTime, |counter| {
            String::from_utf8_lossy(&counter.key).into_owned()
        });
        assert_eq!(call.keys, ["b", "a"]);
        let expected: Vec<&str> = vec![
            "1", // one request,
            "1", // one settings,
            "3", // three templates
            "1",
            "",
            "0",
            "every-descriptor", // the settings
            "gcra",
            "5",
            "60000000",
            "1",
            "charge",
            "2",
            "enforced",
            "0", // template 1
            "gcra",
            "5",
            "60000000",
            "1",
            "check",
            "1", // one more hit must fit
            "quota",
            "0", // template 2
            "gcra",
            "5",
            "60000000",
            "1",
            "refund",
            "3",
            "shadow",
            "0", // template 3
            "3",
            "1", // the request: 3 counters, settings 1
            "1",
            "1",
            "0", // key 1, template 1, descriptor 0
            "2",
            "2",
            "1",
            "1",
            "3",
            "2",
        ];
        assert_eq!(texts(&call.args), expected);
    }

    #[test]
    fn a_priority_class_passes_its_reserve_from_the_quota_in_force() {
        let half = Share::from_millionths(500_000).unwrap_or(Share::FULL);
        let mut low = counter(
            0,
            b"k",
            Quota::new(7, Unit::Second),
            Hits::Charge(1),
            Role::Enforced,
        );
        low.share = half;
        let call = build_call(&[low.clone()], Settling::default(), Now::RedisTime, |_| {
            "k".to_owned()
        });
        let reserve = |call: &Call| texts(&call.sent_requests()[0].counters[0].1)[7].clone();
        // floor(7 × 50 %) = 3 usable, 4 reserved.
        assert_eq!(reserve(&call), "4");
        low.quota.requests_per_unit = 100;
        let call = build_call(&[low], Settling::default(), Now::RedisTime, |_| {
            "k".to_owned()
        });
        assert_eq!(reserve(&call), "50");
    }

    #[test]
    fn a_given_now_is_passed_with_its_extra_ttl() {
        let counters = [counter(
            0,
            b"k",
            Quota::new(1, Unit::Second),
            Hits::Charge(1),
            Role::Enforced,
        )];
        let now = Now::Given {
            now: -5,
            extra_ttl_ms: 600_000,
        };
        let call = build_call(&counters, Settling::default(), now, |_| "key".to_owned());
        assert_eq!(
            &texts(&call.args)[..7],
            ["1", "1", "1", "0", "-5", "600000", "all-or-nothing"]
        );
    }

    #[test]
    fn replies_are_read_and_checked() {
        let decided = parse_reply(&[1, 0, 0, 5, 7, 1, 1, 3, 9, 0, 0], 2).expect("a valid reply");
        assert!(decided.over_limit);
        assert_eq!(
            decided.outcomes[0],
            CounterOutcome {
                admitted: false,
                snapshot: Snapshot {
                    remaining: 0,
                    reset_after: 5
                },
                retry_after: 7,
                charged: true,
                withheld: false,
                wait: 0,
            }
        );
        assert!(decided.outcomes[1].admitted && !decided.outcomes[1].charged);
        assert_eq!(
            parse_reply(&[0, 1], 1),
            Err(BadReply::WrongLength {
                got: 2,
                counters: 1
            })
        );
        assert_eq!(
            parse_reply(&[], 0),
            Err(BadReply::WrongLength {
                got: 0,
                counters: 0
            })
        );
        assert!(matches!(
            parse_reply(&[2], 0),
            Err(BadReply::OutOfRange { value: 2, .. })
        ));
        assert!(matches!(
            parse_reply(&[0, 1, -1, 0, 0, 0], 1),
            Err(BadReply::OutOfRange { value: -1, .. })
        ));
        assert!(matches!(
            parse_reply(&[0, 1, 0, 0, 0, 2], 1),
            Err(BadReply::OutOfRange { value: 2, .. })
        ));
    }

    #[test]
    fn a_batch_puts_requests_after_one_another_behind_their_count() {
        let quota = Quota::new(5, Unit::Minute);
        let one = |key: &[u8], hits| {
            let counters = [counter(0, key, quota.clone(), hits, Role::Enforced)];
            build_request(&counters, Settling::default(), Now::RedisTime, |counter| {
                String::from_utf8_lossy(&counter.key).into_owned()
            })
        };
        let (first, second, third) = (
            one(b"a", Hits::Charge(1)),
            one(b"a", Hits::PEEK),
            one(b"b", Hits::Charge(1)),
        );
        let batch = Call::batch([&first, &second, &third].into_iter());
        // Each request numbers its own keys from 1: the script finds them from its count.
        assert_eq!(batch.keys, ["a", "a", "b"]);
        // The settings, and the template of the first and third, are sent once.
        let expected = [
            "3",
            "1",
            "2",
            "0",
            "",
            "0",
            "all-or-nothing", // counts, settings
            "fixed_window",
            "5",
            "60000000",
            "5",
            "charge",
            "1",
            "enforced",
            "0", // template 1
            "fixed_window",
            "5",
            "60000000",
            "5",
            "check",
            "1", // one more hit must fit
            "enforced",
            "0", // template 2
            // Each request has one counter: one value, −((template − 1) · 1 + settings 1).
            "-1", // first: template 1
            "-2", // second: template 2
            "-1", // third: template 1 again
        ];
        assert_eq!(texts(&batch.args), expected);
        // What each request sends is what it sends alone.
        let alone = |request: &RequestArgs| Call::single(request.clone()).sent_requests();
        assert_eq!(
            batch.sent_requests(),
            [alone(&first), alone(&second), alone(&third)].concat()
        );
        assert_eq!(
            Call::single(first.clone()),
            Call::batch([&first].into_iter())
        );
    }

    #[test]
    fn a_lone_counter_is_one_value_naming_its_template_and_settings() {
        let quota = Quota::new(5, Unit::Minute);
        let request = |hits, global_shadow, counters: usize| {
            let counters: Vec<Counter> = (0..counters)
                .map(|descriptor| counter(descriptor, b"k", quota.clone(), hits, Role::Enforced))
                .collect();
            let settling = Settling {
                global_shadow,
                ..Settling::default()
            };
            build_request(&counters, settling, Now::RedisTime, |counter| {
                String::from_utf8_lossy(&counter.key).into_owned()
            })
        };
        let requests = [
            request(Hits::Charge(1), false, 1), // template 1, settings 1
            request(Hits::Charge(1), true, 1),  // template 1, settings 2
            request(Hits::PEEK, true, 1),       // template 2, settings 2
            request(Hits::PEEK, false, 2),      // two counters: the general form
            request(Hits::PEEK, false, 1),      // template 2, settings 1
        ];
        let batch = Call::batch(requests.iter());
        let tail: Vec<String> =
            texts(&batch.args)[BATCH_FIELDS + 2 * SETTINGS_FIELDS + 2 * TEMPLATE_FIELDS..].to_vec();
        assert_eq!(
            tail,
            ["-1", "-2", "-4", "2", "1", "1", "2", "0", "1", "2", "1", "-3"],
            "codes are −((template − 1) · 2 settings + settings)"
        );
        let alone = |request: &RequestArgs| Call::single(request.clone()).sent_requests();
        assert_eq!(
            batch.sent_requests(),
            requests.iter().map(alone).collect::<Vec<_>>().concat()
        );
    }

    #[test]
    fn a_batch_reply_is_split_by_request() {
        let reply = [0, 1, 4, 9, 0, 1, 1, 0, 0, 5, 7, 0, 1, 2, 3, 0, 1];
        let decided = parse_replies(&reply, [1, 2].into_iter()).expect("a valid reply");
        assert_eq!(decided.len(), 2);
        assert!(!decided[0].over_limit && decided[1].over_limit);
        assert_eq!(decided[0].outcomes[0].snapshot.remaining, 4);
        assert_eq!(decided[1].outcomes[1].snapshot.remaining, 2);
        assert_eq!(
            parse_replies(&reply[1..], [1, 2].into_iter()),
            Err(BadReply::WrongBatchLength {
                got: 16,
                expected: 17
            })
        );
    }

    #[test]
    fn windows_up_to_the_bound_are_accepted() {
        // 2^51 µs = 2 251 799 813.685 s: 2 251 799 813 s fits, one more second does not.
        let at_bound = Quota::new(1, Unit::Second).with_multiplier(2_251_799_813);
        assert_eq!(check_quota(&at_bound), Ok(()));
        let beyond = Quota::new(1, Unit::Second).with_multiplier(2_251_799_814);
        assert!(matches!(
            check_quota(&beyond),
            Err(UnsupportedQuota::WindowTooLong { .. })
        ));
        // A multiplier large enough to saturate window_micros is refused too.
        let huge = Quota::new(1, Unit::Year).with_multiplier(u32::MAX);
        assert!(check_quota(&huge).is_err());
        // The sliding log and windows do not care about capacity.
        let big_limit = Quota::new(u32::MAX, Unit::Year).with_algorithm(Algorithm::SlidingWindow);
        assert_eq!(check_quota(&big_limit), Ok(()));
    }

    #[test]
    fn calendar_months_are_passed_as_a_negative_window() {
        let monthly = |algorithm| {
            Quota::new(9, Unit::Month)
                .with_algorithm(algorithm)
                .with_multiplier(3)
                .with_calendar_months(true)
        };
        let window_of = |quota: Quota| {
            let counters = [counter(0, b"k", quota, Hits::Charge(1), Role::Enforced)];
            let call = build_call(&counters, Settling::default(), Now::RedisTime, |_| {
                "k".to_owned()
            });
            texts(&call.sent_requests()[0].counters[0].1)[2].clone()
        };
        assert_eq!(window_of(monthly(Algorithm::FixedWindow)), "-3");
        assert_eq!(window_of(monthly(Algorithm::SlidingWindow)), "-3");
        // Buckets keep 30-day months, calendar months or not.
        assert_eq!(
            window_of(monthly(Algorithm::TokenBucket)),
            (3 * 2_592_000_000_000_i64).to_string()
        );
        // 2^51 µs holds 840 months of 31 days; the 841st could pass it.
        let months = |n| monthly(Algorithm::FixedWindow).with_multiplier(n);
        assert_eq!(check_quota(&months(840)), Ok(()));
        assert!(matches!(
            check_quota(&months(841)),
            Err(UnsupportedQuota::WindowTooLong { .. })
        ));
        assert!(check_quota(&months(u32::MAX)).is_err());
    }

    #[test]
    fn buckets_up_to_the_bound_are_accepted() {
        // 2^53 = 9 007 199 254 740 992: C·min(L, W) must stay below it.
        let daily = |limit, burst| {
            Quota::new(limit, Unit::Day)
                .with_algorithm(Algorithm::TokenBucket)
                .with_burst(burst)
        };
        // A million tokens a day: C·W ≈ 8.6e16 (past 2^53), C·L = 1e12.
        assert_eq!(check_quota(&daily(1_000_000, 1_000_000)), Ok(()));
        // 94 906 265² < 2^53 < 94 906 266².
        assert_eq!(check_quota(&daily(94_906_265, 94_906_265)), Ok(()));
        assert!(matches!(
            check_quota(&daily(94_906_266, 94_906_266)),
            Err(UnsupportedQuota::BucketTooLarge {
                capacity: 94_906_266,
                requests_per_unit: 94_906_266,
                ..
            })
        ));
        // Per second W = 1e6 µs is the smaller: any limit and burst (C ≤ 2^32 < 2^53 / 1e6).
        let per_second = Quota::new(u32::MAX, Unit::Second)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(u32::MAX);
        assert_eq!(check_quota(&per_second), Ok(()));
        // A leaky bucket's capacity is burst + 1.
        let leaky = |burst| {
            Quota::new(94_906_265, Unit::Day)
                .with_algorithm(Algorithm::LeakyBucket)
                .with_burst(burst)
        };
        // 94 906 266 × 94 906 265 < 2^53 ≤ 94 906 267 × 94 906 265.
        assert_eq!(check_quota(&leaky(94_906_265)), Ok(()));
        assert!(check_quota(&leaky(94_906_266)).is_err());
        // Exactly representable but draining for longer than 2^51 µs.
        let slow = Quota::new(1, Unit::Year)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(200);
        assert!(matches!(
            check_quota(&slow),
            Err(UnsupportedQuota::BucketDrainsTooSlowly { .. })
        ));
        // Closed buckets (L = 0 or C = 0) never fit anything and are fine.
        let closed = Quota::new(0, Unit::Day).with_algorithm(Algorithm::TokenBucket);
        assert_eq!(check_quota(&closed), Ok(()));
    }

    #[test]
    fn the_script_has_every_part() {
        for part in [
            "local function evaluate_counter",
            "local function define_fixed_window()",
            "local function define_sliding_window()",
            "local function define_sliding_log()",
            "local function define_gcra()",
            "local COUNTER_FIELDS = 3",
        ] {
            assert!(SOURCE.contains(part), "missing {part}");
        }
        for (name, value) in [
            ("BATCH_FIELDS", BATCH_FIELDS),
            ("SETTINGS_FIELDS", SETTINGS_FIELDS),
            ("TEMPLATE_FIELDS", TEMPLATE_FIELDS),
            ("REQUEST_FIELDS", REQUEST_FIELDS),
            ("COUNTER_FIELDS", COUNTER_FIELDS),
            ("REPLY_FIELDS", REPLY_FIELDS),
        ] {
            assert!(
                SOURCE.contains(&format!("local {name} = {value}")),
                "decide.lua's {name} is not {value}"
            );
        }
    }
}
