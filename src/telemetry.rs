//! Logging: `LOG_LEVEL` (as envoyproxy/ratelimit; `RUST_LOG` directives also work) and
//! `LOG_FORMAT=json|text`.

use tracing_subscriber::EnvFilter;

pub fn init_logging() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| std::env::var("LOG_LEVEL").ok())
        .map(|level| level.to_ascii_lowercase())
        .unwrap_or_else(|| "info".to_owned());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
