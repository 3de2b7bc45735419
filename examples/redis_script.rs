//! Prints what the Redis store sends for one fixed-window counter, so `redis-benchmark` can
//! run the same script (`scripts/bench-redis.sh`):
//!
//! ```text
//! redis_script source            # the Lua script (for SCRIPT LOAD)
//! redis_script call LIMIT [ALGORITHM]   # numkeys, keys and arguments, one per line
//! ```
//!
//! The call is for rule `edge.generic_key_api` of LIMIT per minute, one hit, on Redis time,
//! counted by ALGORITHM (a rule's `algorithm:` name; `fixed_window` when left out); the key is
//! the one the store uses for `client_id=bench`.

use std::process::ExitCode;

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota, Share};
use floodgate::core::decision::key::counter_key;
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::rules::MatchedLevel;
use floodgate::store::redis::{script_call, KeyLayout, DEFAULT_PREFIX, SCRIPT_SOURCE};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["source"] => {
            print!("{SCRIPT_SOURCE}");
            ExitCode::SUCCESS
        }
        ["call", limit] => call(limit, "fixed_window"),
        ["call", limit, algorithm] => call(limit, algorithm),
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: redis_script source | redis_script call LIMIT [ALGORITHM]\n\
         LIMIT: a whole number above 0; ALGORITHM: one of {}",
        Algorithm::ALL.map(Algorithm::name).join(", ")
    );
    ExitCode::from(2)
}

fn call(limit: &str, algorithm: &str) -> ExitCode {
    match (limit.parse::<u32>(), Algorithm::parse(algorithm)) {
        (Ok(limit), Some(algorithm)) if limit > 0 => print_call(limit, algorithm),
        _ => usage(),
    }
}

fn print_call(limit: u32, algorithm: Algorithm) -> ExitCode {
    let layout = match KeyLayout::new(DEFAULT_PREFIX) {
        Ok(layout) => layout,
        Err(error) => {
            eprintln!("redis_script: {error}");
            return ExitCode::FAILURE;
        }
    };
    let quota = Quota::new(limit, Unit::Minute).with_algorithm(algorithm);
    let entries = [Entry::new("client_id", "bench")];
    let levels = [MatchedLevel::Exact];
    let identity = counter_key(
        "edge",
        "edge.generic_key_api.client_id",
        0,
        &quota,
        &entries,
        &levels,
    );
    let counter = Counter {
        descriptor: 0,
        key: identity,
        quota,
        hits: Hits::Charge(1),
        role: Role::Enforced,
        share: Share::FULL,
    };
    let call = script_call(&[counter], false, &layout);
    println!("{}", call.keys.len());
    for key in &call.keys {
        println!("{key}");
    }
    for arg in &call.args {
        println!("{arg}");
    }
    ExitCode::SUCCESS
}
