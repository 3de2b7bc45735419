//! The command line and the parsing of its values (durations, stages, bursts, descriptor
//! templates, the loopback-only target). Every parser returns a message for the user; none
//! panics on input.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Parser};

/// The longest run (warm-up plus stages) accepted unless `--max-time` says otherwise.
const DEFAULT_MAX_TIME: &str = "30m";

#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    about = "Drives Envoy's RateLimitService/ShouldRateLimit over gRPC (loopback targets only)",
    after_help = "Examples:\n  \
        loadgen --addr http://127.0.0.1:8081 --max-rate --concurrency 64 --duration 10s\n  \
        loadgen --addr http://127.0.0.1:8081 --stages 30s:200,1m:1000,30s:0 --concurrency 256\n  \
        loadgen --addr http://127.0.0.1:8081 --rate 2000 --duration 20s --bot-burst 5000:2s:10s"
)]
#[command(group(ArgGroup::new("load").required(true).args(["stages", "rate", "max_rate"])))]
pub struct Args {
    /// The gRPC target, h2c: http://127.0.0.1:PORT or http://localhost:PORT (loopback only).
    #[arg(long, env = "LOADGEN_ADDR", default_value = "http://127.0.0.1:8081")]
    pub addr: String,

    /// Most requests in flight at once (open loop: the cap; closed loop: the workers).
    #[arg(long, env = "LOADGEN_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,

    /// HTTP/2 connections the requests are spread over (Envoy keeps a few per worker).
    #[arg(long, env = "LOADGEN_CONNECTIONS", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub connections: u32,

    /// Length of a `--rate` or `--max-rate` run (e.g. 10s, 1m, 1m30s, 500ms).
    #[arg(long, env = "LOADGEN_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Open loop: ramp the target rate linearly, k6-style, e.g. `30s:200,1m:1000,30s:0`
    /// (each DURATION:RATE ramps from the previous rate, starting at --start-rate).
    #[arg(long, env = "LOADGEN_STAGES", value_parser = parse_stages)]
    pub stages: Option<Stages>,

    /// The rate the first stage ramps from [default: 0].
    #[arg(long, value_parser = parse_rate)]
    pub start_rate: Option<f64>,

    /// Open loop at a constant RATE (req/s) for --duration.
    #[arg(long, env = "LOADGEN_RATE", value_parser = parse_rate)]
    pub rate: Option<f64>,

    /// How open-loop requests are spaced: `even` (exactly the target rate, one every
    /// 1/rate) or `poisson` (independent arrivals at the target rate, as from many callers).
    #[arg(long, env = "LOADGEN_ARRIVALS", value_enum, default_value_t = Arrivals::Even)]
    pub arrivals: Arrivals,

    /// Closed loop at full --concurrency for --duration (peak throughput).
    #[arg(long, env = "LOADGEN_MAX_RATE")]
    pub max_rate: bool,

    /// Distinct values `{key}` is drawn from.
    #[arg(long, env = "LOADGEN_KEYS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub keys: u64,

    /// Draw keys from a Zipf distribution of this exponent instead of uniformly
    /// (`--zipf` alone: exponent 1.0; at most 10,000,000 keys).
    #[arg(long, env = "LOADGEN_ZIPF", num_args = 0..=1, default_missing_value = "1.0", value_parser = parse_zipf)]
    pub zipf: Option<f64>,

    /// The rate-limit domain of every request.
    #[arg(long, env = "LOADGEN_DOMAIN", default_value = "edge")]
    pub domain: String,

    /// One descriptor of each request, as `key=value[,key=value…]`; `{key}` in a value is
    /// replaced by the drawn key. Repeat for several descriptors per request.
    #[arg(long = "descriptor", env = "LOADGEN_DESCRIPTOR", default_value = "generic_key=api,client_id={key}", value_parser = parse_descriptor)]
    pub descriptors: Vec<DescriptorTemplate>,

    /// A traffic mix instead of --descriptor: each request is of one class, the classes in
    /// proportion to their weights, as `NAME:WEIGHT:DESCRIPTOR[;DESCRIPTOR…]` (e.g.
    /// `critical:1:pool=shop,priority=critical`). Repeat for each class; the report gives
    /// each class's figures apart.
    #[arg(long = "mix", value_parser = parse_mix_class, conflicts_with = "descriptors")]
    pub mix: Vec<MixClass>,

    /// The request's hits_addend (0: unset, which the server reads as 1).
    #[arg(long, default_value_t = 0)]
    pub hits_addend: u32,

    /// Bots: every EVERY, a burst of DURATION at RATE req/s from --bot-keys keys, e.g.
    /// `5000:2s:10s` (bursts fill the last DURATION of each EVERY). Open loop only.
    #[arg(long, env = "LOADGEN_BOT_BURST", value_parser = parse_bot_burst)]
    pub bot_burst: Option<BotBurst>,

    /// Distinct keys the bots use (values `bot0`, `bot1`, …).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub bot_keys: u64,

    /// Unrecorded warm-up before the measured run, closed loop with one request in flight
    /// per connection (0s: none).
    #[arg(long, env = "LOADGEN_WARMUP", default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// A request still unanswered after this counts as an error.
    #[arg(long, env = "LOADGEN_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Hard cap on requests sent (warm-up, legitimate and bot traffic together).
    #[arg(long, env = "LOADGEN_MAX_REQUESTS", default_value_t = 5_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests: u64,

    /// Refuse plans (warm-up plus stages) longer than this.
    #[arg(long, env = "LOADGEN_MAX_TIME", default_value = DEFAULT_MAX_TIME, value_parser = parse_duration)]
    pub max_time: Duration,

    /// Runtime worker threads of the generator (it shares the machine with the server).
    #[arg(long, env = "LOADGEN_THREADS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,

    /// Also write the figures as JSON here.
    #[arg(long, env = "LOADGEN_JSON")]
    pub json: Option<PathBuf>,

    /// A label copied into the JSON (e.g. the server's name).
    #[arg(long, default_value = "")]
    pub label: String,
}

/// `--arrivals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrivals {
    Even,
    Poisson,
}

impl Arrivals {
    pub fn name(self) -> &'static str {
        match self {
            Self::Even => "even",
            Self::Poisson => "poisson",
        }
    }
}

/// `--stages` (a newtype: clap would read `Option<Vec<_>>` as a repeated flag).
#[derive(Debug, Clone, PartialEq)]
pub struct Stages(pub Vec<StageSpec>);

/// One `DURATION:RATE` of `--stages`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageSpec {
    pub duration: Duration,
    pub target: f64,
}

/// `--bot-burst RATE:DURATION:EVERY`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BotBurst {
    pub rate: f64,
    pub duration: Duration,
    pub every: Duration,
}

/// A piece of a descriptor value: literal text or the drawn key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Key,
}

/// One `--descriptor`: its entries, each a key and a value template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorTemplate {
    pub source: String,
    pub entries: Vec<(String, Vec<Part>)>,
}

impl DescriptorTemplate {
    pub fn uses_key(&self) -> bool {
        self.entries
            .iter()
            .any(|(_, parts)| parts.contains(&Part::Key))
    }
}

/// One `--mix` class: its name, its weight in the mix and the descriptors it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixClass {
    pub source: String,
    pub name: String,
    pub weight: u32,
    pub descriptors: Vec<DescriptorTemplate>,
}

/// Most classes in a mix, and the largest sum of their weights (the length of one round of
/// the deterministic interleaving).
pub const MAX_MIX_CLASSES: usize = 16;
pub const MAX_MIX_WEIGHT: u32 = 10_000;

/// Highest rate a stage, `--rate` or a burst may ask for.
const MAX_RATE: f64 = 10_000_000.0;

/// A duration: `1h`, `2m`, `10s`, `250ms`, `1.5s`, combinations like `1m30s`, or a bare
/// number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration (expected e.g. 10s, 1m, 500ms)".to_owned());
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return seconds_to_duration(seconds, text);
    }
    let mut total = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("`{text}`: a number needs a unit (h, m, s or ms)"))?;
        if number_len == 0 {
            return Err(format!(
                "`{text}` is not a duration (expected e.g. 10s, 1m30s, 500ms)"
            ));
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("`{text}`: `{}` is not a number", &rest[..number_len]))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" | "min" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            unit => {
                return Err(format!(
                    "`{text}`: unknown unit `{unit}` (use h, m, s or ms)"
                ))
            }
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    seconds_to_duration(total, text)
}

fn seconds_to_duration(seconds: f64, text: &str) -> Result<Duration, String> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!(
            "`{text}`: a duration is a finite, non-negative time"
        ));
    }
    if seconds > 7.0 * 24.0 * 3600.0 {
        return Err(format!("`{text}`: longer than a week"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A rate in requests per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a rate (requests per second, e.g. 1000)"))?;
    if !rate.is_finite() || !(0.0..=MAX_RATE).contains(&rate) {
        return Err(format!(
            "`{text}`: a rate is between 0 and {MAX_RATE} requests per second"
        ));
    }
    Ok(rate)
}

fn parse_zipf(text: &str) -> Result<f64, String> {
    let exponent: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a Zipf exponent (e.g. 1.0)"))?;
    if !exponent.is_finite() || exponent <= 0.0 || exponent > 10.0 {
        return Err(format!(
            "`{text}`: the Zipf exponent is above 0 and at most 10"
        ));
    }
    Ok(exponent)
}

/// `30s:200,1m:1000,30s:0`.
pub fn parse_stages(text: &str) -> Result<Stages, String> {
    let mut stages = Vec::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!(
                "`{text}`: an empty stage (expected DURATION:RATE,… e.g. 30s:200,1m:1000)"
            ));
        }
        let (duration, rate) = item
            .split_once(':')
            .ok_or_else(|| format!("stage `{item}` is not DURATION:RATE (e.g. 30s:200)"))?;
        let duration = parse_duration(duration).map_err(|e| format!("stage `{item}`: {e}"))?;
        if duration.is_zero() {
            return Err(format!(
                "stage `{item}` lasts 0s (use --start-rate to begin above 0)"
            ));
        }
        let target = parse_rate(rate).map_err(|e| format!("stage `{item}`: {e}"))?;
        stages.push(StageSpec { duration, target });
    }
    if stages.len() > 1000 {
        return Err("more than 1000 stages".to_owned());
    }
    Ok(Stages(stages))
}

/// `5000:2s:10s`.
pub fn parse_bot_burst(text: &str) -> Result<BotBurst, String> {
    let parts: Vec<&str> = text.split(':').map(str::trim).collect();
    let [rate, duration, every] = parts.as_slice() else {
        return Err(format!(
            "`{text}` is not RATE:DURATION:EVERY (e.g. 5000:2s:10s)"
        ));
    };
    let burst = BotBurst {
        rate: parse_rate(rate).map_err(|e| format!("bot burst rate: {e}"))?,
        duration: parse_duration(duration).map_err(|e| format!("bot burst duration: {e}"))?,
        every: parse_duration(every).map_err(|e| format!("bot burst period: {e}"))?,
    };
    if burst.duration.is_zero() || burst.every.is_zero() {
        return Err(format!(
            "`{text}`: a burst and its period last more than 0s"
        ));
    }
    if burst.duration > burst.every {
        return Err(format!(
            "`{text}`: a burst cannot last longer than its period"
        ));
    }
    Ok(burst)
}

/// `generic_key=api,client_id={key}`; a bare `key` has an empty value.
pub fn parse_descriptor(text: &str) -> Result<DescriptorTemplate, String> {
    let mut entries = Vec::new();
    for item in text.split(',') {
        let (key, value) = item.split_once('=').unwrap_or((item, ""));
        let key = key.trim();
        if key.is_empty() {
            return Err(format!(
                "descriptor `{text}`: an entry without a key (expected key=value[,key=value…])"
            ));
        }
        let mut parts = Vec::new();
        let mut rest = value;
        while let Some(at) = rest.find("{key}") {
            if at > 0 {
                parts.push(Part::Text(rest[..at].to_owned()));
            }
            parts.push(Part::Key);
            rest = &rest[at + "{key}".len()..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        entries.push((key.to_owned(), parts));
    }
    if entries.len() > 32 {
        return Err(format!("descriptor `{text}`: more than 32 entries"));
    }
    Ok(DescriptorTemplate {
        source: text.to_owned(),
        entries,
    })
}

/// `critical:1:pool=shop,priority=critical` (descriptors separated by `;`).
pub fn parse_mix_class(text: &str) -> Result<MixClass, String> {
    let expected = "expected NAME:WEIGHT:DESCRIPTOR[;DESCRIPTOR…], e.g. \
        critical:1:pool=shop,priority=critical";
    let mut parts = text.splitn(3, ':');
    let (Some(name), Some(weight), Some(descriptors)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("--mix `{text}`: {expected}"));
    };
    let name = name.trim();
    let well_formed = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !well_formed {
        return Err(format!(
            "--mix `{text}`: the class name `{name}` must be 1 to 32 letters, digits, '_', '-' \
             or '.'"
        ));
    }
    let weight = match weight.trim().parse::<u32>() {
        Ok(weight) if (1..=MAX_MIX_WEIGHT).contains(&weight) => weight,
        _ => {
            return Err(format!(
                "--mix `{text}`: the weight `{weight}` must be a whole number from 1 to \
                 {MAX_MIX_WEIGHT}"
            ))
        }
    };
    let descriptors = descriptors
        .split(';')
        .map(|descriptor| parse_descriptor(descriptor).map_err(|e| format!("--mix `{text}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(MixClass {
        source: text.to_owned(),
        name: name.to_owned(),
        weight,
        descriptors,
    })
}

/// What clap cannot check one class at a time: distinct names, bounded count and weights.
pub fn check_mix(mix: &[MixClass]) -> Result<(), String> {
    if mix.len() > MAX_MIX_CLASSES {
        return Err(format!(
            "--mix: {} classes, at most {MAX_MIX_CLASSES}",
            mix.len()
        ));
    }
    for (index, class) in mix.iter().enumerate() {
        if mix[..index].iter().any(|other| other.name == class.name) {
            return Err(format!(
                "--mix: the class `{}` is given twice; give each class once, with its weight",
                class.name
            ));
        }
    }
    let total: u32 = mix.iter().map(|class| class.weight).sum();
    if total > MAX_MIX_WEIGHT {
        return Err(format!(
            "--mix: the weights add up to {total}, at most {MAX_MIX_WEIGHT}; divide them by a \
             common factor"
        ));
    }
    Ok(())
}

/// The one address loadgen connects to: a loopback IP literal and a port. `localhost` is
/// taken as 127.0.0.1 (not resolved), so nothing but loopback can ever be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub ip: IpAddr,
    pub port: u16,
}

impl Target {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    pub fn uri(&self) -> String {
        match self.ip {
            IpAddr::V4(ip) => format!("http://{ip}:{}", self.port),
            IpAddr::V6(ip) => format!("http://[{ip}]:{}", self.port),
        }
    }
}

/// Accepts `http://127.0.0.1:PORT`, `http://localhost:PORT`, `http://[::1]:PORT` (any
/// 127.0.0.0/8 address too), with or without `http://`; refuses everything else.
pub fn parse_target(text: &str) -> Result<Target, String> {
    const LOOPBACK_ONLY: &str = "this machine may only send load to loopback \
        (127.0.0.1, localhost or [::1])";
    let trimmed = text.trim();
    let rest = match trimmed.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(format!(
                "--addr `{text}`: TLS is not supported; use http:// (gRPC over h2c)"
            ))
        }
        Some((scheme, _)) => {
            return Err(format!(
                "--addr `{text}`: unknown scheme `{scheme}`; use http://HOST:PORT"
            ))
        }
        None => trimmed,
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains(['/', '?', '#', '@']) {
        return Err(format!(
            "--addr `{text}`: expected http://HOST:PORT with nothing after the port"
        ));
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| format!("--addr `{text}`: unclosed `[`"))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| format!("--addr `{text}`: a port is required (e.g. [::1]:8081)"))?;
        (host, port)
    } else {
        authority
            .rsplit_once(':')
            .ok_or_else(|| format!("--addr `{text}`: a port is required (e.g. 127.0.0.1:8081)"))?
    };
    let port: u16 = match port.parse() {
        Ok(port) if port != 0 => port,
        _ => return Err(format!("--addr `{text}`: `{port}` is not a port (1-65535)")),
    };
    let ip = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::from([127, 0, 0, 1])
    } else {
        host.parse::<IpAddr>().map_err(|_| {
            format!("--addr `{text}`: refused: `{host}` is not loopback; {LOOPBACK_ONLY}")
        })?
    };
    let loopback = match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    };
    if !loopback {
        return Err(format!(
            "--addr `{text}`: refused: {ip} is not loopback; {LOOPBACK_ONLY}"
        ));
    }
    Ok(Target { ip, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "s", "10x", "-1s", "1..2s", "10 s", "NaN", "inf"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stages() {
        let Stages(stages) = parse_stages("30s:200, 1m:1000,30s:0").unwrap();
        assert_eq!(stages.len(), 3);
        assert_eq!(stages[1].duration, Duration::from_secs(60));
        assert_eq!(stages[1].target, 1000.0);
        for bad in [
            "", "30s", "30s:", "0s:100", "30s:-1", "30s:x", "30s:100,", "x:1",
        ] {
            assert!(parse_stages(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bot_bursts() {
        let burst = parse_bot_burst("5000:2s:10s").unwrap();
        assert_eq!(burst.rate, 5000.0);
        assert_eq!(burst.duration, Duration::from_secs(2));
        assert_eq!(burst.every, Duration::from_secs(10));
        for bad in [
            "5000:2s",
            "5000:20s:10s",
            "5000:0s:10s",
            "x:2s:10s",
            "1:2:3:4",
        ] {
            assert!(parse_bot_burst(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn descriptors() {
        let d = parse_descriptor("generic_key=api,client_id=c-{key}-x,flag").unwrap();
        assert_eq!(
            d.entries,
            vec![
                ("generic_key".to_owned(), vec![Part::Text("api".to_owned())]),
                (
                    "client_id".to_owned(),
                    vec![
                        Part::Text("c-".to_owned()),
                        Part::Key,
                        Part::Text("-x".to_owned())
                    ]
                ),
                ("flag".to_owned(), vec![]),
            ]
        );
        assert!(d.uses_key());
        assert!(!parse_descriptor("a=b").unwrap().uses_key());
        assert!(parse_descriptor("=b").is_err());
        assert!(parse_descriptor("a=b,").is_err());
    }

    #[test]
    fn mix_classes() {
        let class = parse_mix_class("critical:2:pool=shop,priority=critical;user={key}").unwrap();
        assert_eq!((class.name.as_str(), class.weight), ("critical", 2));
        assert_eq!(class.descriptors.len(), 2);
        assert_eq!(class.descriptors[0].entries[1].0, "priority");
        assert!(class.descriptors[1].uses_key());
        // A value may hold ':' (only the first two separate the fields).
        let class = parse_mix_class("v6:1:remote_address=::1").unwrap();
        assert_eq!(
            class.descriptors[0].entries[0].1,
            vec![Part::Text("::1".to_owned())]
        );
        for bad in [
            "critical",
            "critical:1",
            ":1:a=b",
            "cri tical:1:a=b",
            "critical:0:a=b",
            "critical:x:a=b",
            "critical:10001:a=b",
            "critical:1:=b",
            "critical:1:a=b;",
        ] {
            assert!(parse_mix_class(bad).is_err(), "{bad}");
        }
        let class = |text: &str| parse_mix_class(text).unwrap();
        assert!(check_mix(&[class("a:1:k=v"), class("b:2:k=w")]).is_ok());
        assert!(check_mix(&[class("a:1:k=v"), class("a:2:k=w")]).is_err());
        assert!(check_mix(&[class("a:6000:k=v"), class("b:6000:k=w")]).is_err());
    }

    #[test]
    fn command_lines() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let parse = |line: &str| Args::try_parse_from(line.split_whitespace());
        let args = parse("loadgen --stages 30s:200,1m:1000,30s:0 --bot-burst 5000:2s:10s").unwrap();
        assert_eq!(args.stages.map(|s| s.0.len()), Some(3));
        assert_eq!(args.bot_burst.map(|b| b.rate), Some(5000.0));
        assert_eq!(args.descriptors.len(), 1);
        assert!(args.descriptors[0].uses_key());
        let args =
            parse("loadgen --max-rate --zipf --descriptor a=b --descriptor c={key}").unwrap();
        assert!(args.max_rate);
        assert_eq!(args.zipf, Some(1.0));
        assert_eq!(args.descriptors.len(), 2);
        let args = parse("loadgen --rate 100 --mix a:1:k=a --mix b:2:k=b").unwrap();
        assert_eq!(args.mix.len(), 2);
        assert!(
            parse("loadgen --rate 100 --mix a:1:k=a --descriptor k=c").is_err(),
            "--mix replaces --descriptor"
        );
        let args = parse("loadgen --rate 100 --zipf 1.2 --duration 1m").unwrap();
        assert_eq!(args.rate, Some(100.0));
        assert_eq!(args.zipf, Some(1.2));
        assert_eq!(args.duration, Duration::from_secs(60));
        for bad in [
            "loadgen",
            "loadgen --rate 10 --max-rate",
            "loadgen --max-rate --stages 1s:1",
            "loadgen --max-rate --concurrency 0",
            "loadgen --max-rate --duration 1x",
            "loadgen --max-rate --keys 0",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn targets() {
        let ok = |text: &str| parse_target(text).map(|t| t.uri());
        assert_eq!(
            ok("http://127.0.0.1:8081"),
            Ok("http://127.0.0.1:8081".to_owned())
        );
        assert_eq!(
            ok("http://localhost:8081/"),
            Ok("http://127.0.0.1:8081".to_owned())
        );
        assert_eq!(ok("LOCALHOST:9"), Ok("http://127.0.0.1:9".to_owned()));
        assert_eq!(
            ok("http://127.9.9.9:80"),
            Ok("http://127.9.9.9:80".to_owned())
        );
        assert_eq!(ok("http://[::1]:8081"), Ok("http://[::1]:8081".to_owned()));
        for refused in [
            "http://10.0.0.1:8081",
            "http://192.168.1.2:8081",
            "http://8.8.8.8:53",
            "http://example.com:80",
            "http://localhost.example.com:80",
            "http://[::ffff:10.0.0.1]:80",
            "http://0.0.0.0:8081",
            "https://127.0.0.1:8081",
            "grpc://127.0.0.1:8081",
            "http://127.0.0.1",
            "http://127.0.0.1:0",
            "http://127.0.0.1:8081/path",
            "http://user@127.0.0.1:8081",
            "",
        ] {
            assert!(parse_target(refused).is_err(), "{refused}");
        }
        let message = parse_target("http://10.1.2.3:8081").unwrap_err();
        assert!(message.contains("loopback"), "{message}");
    }
}
