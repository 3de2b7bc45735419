//! The flags of Limitador's limits: the limits file, where Limitador's HTTP API listens, and
//! the bounds of every reservation (limitador 0.14's `ReservationLimits`).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::core::arithmetic::held_window::HoldBounds;

#[derive(Debug, Clone, clap::Args)]
pub struct LimitadorArgs {
    /// Limitador's limits file (a YAML list of `namespace`, `max_value`, `seconds`, CEL
    /// `conditions` and `variables`, `name`), loaded unchanged and reloaded when it changes;
    /// served on the gRPC port as kuadrant.service.ratelimit.v1 and, for a domain that is one
    /// of its namespaces, as Envoy's RLS (docs/migrating-from-limitador.md). Alone, without
    /// --config, it is the whole configuration, as for Limitador.
    #[arg(long, env = "FLOODGATE_LIMITADOR_LIMITS")]
    pub limitador_limits: Option<PathBuf>,
    /// Where Limitador's HTTP API (`POST /check`, `/report`, `/check_and_report`, `GET
    /// /counters/{namespace}`, `/limits/{namespace}`) listens [default: not served].
    #[arg(
        long,
        env = "FLOODGATE_LIMITADOR_HTTP_ADDR",
        requires = "limitador_limits"
    )]
    pub limitador_http_addr: Option<SocketAddr>,
    /// The largest share of a limit one reservation may hold (0.0 to 1.0).
    #[arg(long, env = "FLOODGATE_MAX_RESERVATION_FRACTION", default_value_t = 1.0, value_parser = parse_fraction)]
    pub max_reservation_fraction: f64,
    /// The longest a reservation may be held, in seconds.
    #[arg(long, env = "FLOODGATE_MAX_RESERVATION_TTL_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_reservation_ttl_seconds: u64,
}

impl LimitadorArgs {
    pub fn hold_bounds(&self) -> HoldBounds {
        HoldBounds {
            max_fraction: self.max_reservation_fraction,
            max_ttl: self.max_reservation_ttl_seconds.saturating_mul(1_000_000),
        }
    }
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(fraction) if (0.0..=1.0).contains(&fraction) => Ok(fraction),
        _ => Err(format!(
            "{text:?} is not a fraction from 0.0 to 1.0 (the share of a limit one \
             reservation may hold)"
        )),
    }
}
