//! Whose counters the Redis store keeps for fixed windows (`--redis-counters`): envoyproxy/
//! ratelimit's (its keys and commands, so its pods and floodgate's count together on one Redis;
//! the default at the `ratelimit` door) or floodgate's own (hashed keys that cannot collide,
//! decided by its scripts; the default of `floodgate serve`). And the reference's variables that
//! come with its keys: `CACHE_KEY_PREFIX`, `EXPIRATION_JITTER_MAX_SECONDS` and `REDIS_PERSECOND*`.

use std::time::Duration;

use crate::cmd::cli::RedisCountersArg;
use crate::cmd::front_door::FrontDoor;
use crate::cmd::reference_env::{go_duration, socket_type_mismatch};
use crate::cmd::setting_values::env_bool;
use crate::core::decision::charging::Charging;
use crate::store::redis::{
    RedisOptions, ReferenceCounters, Topology, DEFAULT_EXPIRATION_JITTER_MAX_SECONDS, MAX_POOL_SIZE,
};

/// The reference's default `REDIS_PERSECOND_URL`.
const DEFAULT_PER_SECOND_URL: &str = "/var/run/nutcracker/ratelimitpersecond.sock";

/// What the Redis store counts fixed windows with, and what to say about it at start.
#[derive(Debug, Default)]
pub struct CounterChoice {
    /// `None`: floodgate's own counters.
    pub reference: Option<ReferenceCounters>,
    /// Said once at start (warnings).
    pub notes: Vec<String>,
}

/// The counters of `--redis-counters` (`flag`), else the door's default: the reference's at
/// the `ratelimit` door when it charges as the reference can (every descriptor, or
/// all-or-refused with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`; its keys are never
/// rolled back, so all or nothing cannot hold with them), else floodgate's. `main` is the main
/// Redis's options (the per-second Redis inherits what the reference's variables do not say).
/// Refused: the reference's counters asked for explicitly under all-or-nothing charging, and a
/// per-second Redis (`REDIS_PERSECOND=true`) that floodgate's counters could not use — never
/// counted somewhere else than asked.
pub fn counter_choice(
    flag: Option<RedisCountersArg>,
    door: FrontDoor,
    charging: Charging,
    main: &RedisOptions,
    env: impl Fn(&str) -> Option<String>,
) -> Result<CounterChoice, String> {
    let per_second = env_bool("REDIS_PERSECOND", &env).map_err(|error| error.to_string())?;
    let wanted = flag.unwrap_or(match door {
        FrontDoor::Reference => RedisCountersArg::Reference,
        FrontDoor::Floodgate => RedisCountersArg::Floodgate,
    });
    let mut choice = CounterChoice::default();
    let chargeable = charging != Charging::AllOrNothing;
    if wanted == RedisCountersArg::Reference && !chargeable {
        if flag.is_some() {
            return Err(format!(
                "--redis-counters reference (FLOODGATE_REDIS_COUNTERS) counts as \
                 envoyproxy/ratelimit does, never rolled back, so it cannot hold with \
                 --charge {charging}; charge as the reference does (--charge every-descriptor \
                 or all-or-refused, or STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false or true) \
                 or keep floodgate's counters (--redis-counters floodgate)"
            ));
        }
        choice.notes.push(format!(
            "fixed windows are counted under floodgate's own Redis keys, not \
             envoyproxy/ratelimit's: its keys are never rolled back, and charging is \
             {charging}; envoyproxy/ratelimit pods on this Redis count apart \
             (--charge every-descriptor or all-or-refused, or \
             STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, shares their counts; --redis-counters \
             floodgate says this choice out loud)"
        ));
    }
    let reference = wanted == RedisCountersArg::Reference && chargeable;
    if !reference {
        if per_second == Some(true) {
            return Err(
                "REDIS_PERSECOND=true: floodgate's own counters live in one Redis, so SECOND \
                 limits would not be counted where asked; use envoyproxy/ratelimit's counters \
                 (--redis-counters reference, charging as the reference does), or unset \
                 REDIS_PERSECOND"
                    .to_owned(),
            );
        }
        return Ok(choice);
    }
    let per_second = match per_second {
        Some(true) => {
            let (options, notes) = per_second_options(main, &env)?;
            choice.notes.extend(notes);
            Some(Box::new(options))
        }
        _ => None,
    };
    choice.reference = Some(ReferenceCounters {
        key_prefix: env("CACHE_KEY_PREFIX").unwrap_or_default(),
        expiration_jitter_max_seconds: expiration_jitter(&env)?,
        per_second,
    });
    Ok(choice)
}

/// `EXPIRATION_JITTER_MAX_SECONDS` (300 by default; 0 or less: no jitter, as the reference
/// adds it only when positive).
fn expiration_jitter(env: &impl Fn(&str) -> Option<String>) -> Result<u64, String> {
    let Some(text) = env("EXPIRATION_JITTER_MAX_SECONDS").filter(|text| !text.trim().is_empty())
    else {
        return Ok(DEFAULT_EXPIRATION_JITTER_MAX_SECONDS);
    };
    let seconds: i64 = text.trim().parse().map_err(|_| {
        format!(
            "EXPIRATION_JITTER_MAX_SECONDS={text:?} is not a whole number of seconds (the \
             reference's default is {DEFAULT_EXPIRATION_JITTER_MAX_SECONDS})"
        )
    })?;
    Ok(u64::try_from(seconds).unwrap_or(0))
}

/// The per-second Redis, as the reference's `REDIS_PERSECOND_*` variables describe it; what
/// they leave unsaid (TLS files, deadlines of connecting, batching) is the main Redis's.
fn per_second_options(
    main: &RedisOptions,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(RedisOptions, Vec<String>), String> {
    let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let mut options = main.clone();
    options.reference_counters = None;
    options.test_clock = None;
    options.url = set("REDIS_PERSECOND_URL").unwrap_or_else(|| DEFAULT_PER_SECOND_URL.to_owned());
    options.auth = set("REDIS_PERSECOND_AUTH");
    options.sentinel_auth = set("REDIS_PERSECOND_SENTINEL_AUTH");
    options.topology =
        match set("REDIS_PERSECOND_TYPE").map(|kind| kind.trim().to_ascii_lowercase()) {
            None => Topology::Single,
            Some(kind) => match kind.as_str() {
                "single" => Topology::Single,
                "sentinel" => Topology::Sentinel,
                "cluster" => Topology::Cluster,
                _ => {
                    return Err(format!(
                        "REDIS_PERSECOND_TYPE={kind:?}: use single, sentinel or cluster, as for \
                     REDIS_TYPE"
                    ))
                }
            },
        };
    if let Some(size) = set("REDIS_PERSECOND_POOL_SIZE") {
        options.pool_size = size
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|size| (1..=MAX_POOL_SIZE).contains(size))
            .ok_or_else(|| {
                format!(
                    "REDIS_PERSECOND_POOL_SIZE={size:?}: expected a number of sockets from 1 to \
                     {MAX_POOL_SIZE}"
                )
            })?;
    }
    options.tls.enabled = env_bool("REDIS_PERSECOND_TLS", env)
        .map_err(|error| error.to_string())?
        .unwrap_or(false);
    if let Some(text) = set("REDIS_PERSECOND_TIMEOUT") {
        options.timeout = go_duration(text.trim())
            .filter(|timeout| !timeout.is_zero())
            .ok_or_else(|| {
                format!(
                    "REDIS_PERSECOND_TIMEOUT={text:?} is not a positive duration: write it as \
                     envoyproxy/ratelimit does (10s, 500ms)"
                )
            })?;
    }
    options.timeout = options.timeout.max(Duration::from_millis(1));
    let notes = socket_type_mismatch("REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_URL", env)
        .into_iter()
        .collect();
    Ok((options, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The choice with `pairs` as the environment.
    fn choose(
        flag: Option<RedisCountersArg>,
        door: FrontDoor,
        charging: Charging,
        pairs: &[(&str, &str)],
    ) -> Result<CounterChoice, String> {
        let env = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, v)| v.to_string())
        };
        counter_choice(flag, door, charging, &RedisOptions::default(), env)
    }

    #[test]
    fn the_ratelimit_door_shares_the_references_counters() {
        let every = Charging::EveryDescriptor;
        let at_door = choose(None, FrontDoor::Reference, every, &[]).unwrap_or_default();
        let counters = at_door
            .reference
            .unwrap_or_else(|| panic!("floodgate's counters"));
        assert_eq!(counters.key_prefix, "");
        assert_eq!(counters.expiration_jitter_max_seconds, 300);
        assert!(counters.per_second.is_none());
        let served = choose(None, FrontDoor::Floodgate, every, &[]).unwrap_or_default();
        assert!(served.reference.is_none());
        let opted_in = choose(
            Some(RedisCountersArg::Reference),
            FrontDoor::Floodgate,
            every,
            &[],
        );
        assert!(opted_in.is_ok_and(|choice| choice.reference.is_some()));
        let opted_out = choose(
            Some(RedisCountersArg::Floodgate),
            FrontDoor::Reference,
            every,
            &[],
        );
        assert!(opted_out.is_ok_and(|choice| choice.reference.is_none()));
    }

    #[test]
    fn the_references_variables_shape_its_keys() {
        let pairs = [
            ("CACHE_KEY_PREFIX", "team-a:"),
            ("EXPIRATION_JITTER_MAX_SECONDS", "0"),
        ];
        let choice = choose(
            None,
            FrontDoor::Reference,
            Charging::EveryDescriptor,
            &pairs,
        );
        let counters = choice.ok().and_then(|choice| choice.reference);
        assert_eq!(
            counters.map(|c| (c.key_prefix, c.expiration_jitter_max_seconds)),
            Some(("team-a:".to_owned(), 0))
        );
        let bad = [("EXPIRATION_JITTER_MAX_SECONDS", "5m")];
        let refused = choose(None, FrontDoor::Reference, Charging::EveryDescriptor, &bad);
        assert!(refused.is_err_and(|error| error.contains("EXPIRATION_JITTER_MAX_SECONDS")));
    }

    #[test]
    fn all_or_refused_shares_the_references_counters_too() {
        let stop = Charging::AllOrRefused;
        let pairs = [
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", "p:6380"),
        ];
        let choice = choose(None, FrontDoor::Reference, stop, &pairs).unwrap_or_default();
        assert!(choice.notes.is_empty(), "{:?}", choice.notes);
        let per_second = choice.reference.and_then(|counters| counters.per_second);
        assert_eq!(
            per_second.map(|options| options.url),
            Some("p:6380".to_owned())
        );
        let asked = choose(
            Some(RedisCountersArg::Reference),
            FrontDoor::Floodgate,
            stop,
            &[],
        );
        assert!(asked.is_ok_and(|choice| choice.reference.is_some()));
    }

    #[test]
    fn all_or_nothing_keeps_floodgates_counters_and_says_so() {
        let all = Charging::AllOrNothing;
        let choice = choose(None, FrontDoor::Reference, all, &[]).unwrap_or_default();
        assert!(choice.reference.is_none());
        assert!(choice.notes.iter().any(|note| note.contains("count apart")));
        let asked = choose(
            Some(RedisCountersArg::Reference),
            FrontDoor::Reference,
            all,
            &[],
        );
        assert!(asked.is_err_and(|error| error.contains("--charge all-or-nothing")));
    }

    #[test]
    fn a_per_second_redis_is_used_or_refused() {
        let pairs = [
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_URL", "per-second:6380"),
            ("REDIS_PERSECOND_AUTH", "secret"),
            ("REDIS_PERSECOND_POOL_SIZE", "4"),
            ("REDIS_PERSECOND_TIMEOUT", "50ms"),
        ];
        let every = Charging::EveryDescriptor;
        let choice = choose(None, FrontDoor::Reference, every, &pairs).unwrap_or_default();
        let per_second = choice
            .reference
            .and_then(|counters| counters.per_second)
            .unwrap_or_else(|| panic!("no per-second Redis"));
        assert_eq!(per_second.url, "per-second:6380");
        assert_eq!(per_second.auth.as_deref(), Some("secret"));
        assert_eq!(per_second.pool_size, 4);
        assert_eq!(per_second.timeout, Duration::from_millis(50));
        assert_eq!(per_second.topology, Topology::Single);
        for refused in [
            choose(None, FrontDoor::Floodgate, every, &pairs),
            choose(None, FrontDoor::Reference, Charging::AllOrNothing, &pairs),
        ] {
            assert!(refused.is_err_and(|error| error.contains("REDIS_PERSECOND=true")));
        }
        let off = [("REDIS_PERSECOND", "false"), ("REDIS_PERSECOND_URL", "x:1")];
        assert!(choose(None, FrontDoor::Floodgate, every, &off).is_ok());
        let bad_type = [("REDIS_PERSECOND", "1"), ("REDIS_PERSECOND_TYPE", "ring")];
        assert!(choose(None, FrontDoor::Reference, every, &bad_type)
            .is_err_and(|error| error.contains("REDIS_PERSECOND_TYPE")));
    }
}
