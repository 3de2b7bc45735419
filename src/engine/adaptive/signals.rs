//! Pushed signals: the last value POSTed to `/v1/signals/{name}` and when it came.
//!
//! Only names that an adaptive rule of the live configuration reads are accepted (the
//! supervisor keeps that list), so a typo in a pusher's URL is refused loudly instead of
//! feeding nothing, and the table cannot grow with whatever is posted.
//!
//! With the Redis store a push is also written to Redis (`shared::write_signal`), where the
//! instance that steps reads it: a value pushed to any instance steers the shared limit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use crate::core::arithmetic::aimd::Reading;

#[derive(Debug, Default)]
pub struct PushedSignals {
    inner: RwLock<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// The names adaptive rules read now, each with how long a value stays fresh (2 intervals
    /// of the slowest rule reading it).
    known: HashMap<String, Duration>,
    values: HashMap<String, (f64, Instant)>,
}

/// Why a push was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PushError {
    #[error(
        "no adaptive rule reads the signal '{name}': the configured pushed signals are: {known}"
    )]
    Unknown { name: String, known: String },
    #[error("a signal value must be a finite number of at least 0, not {value}")]
    BadValue { value: f64 },
}

impl PushedSignals {
    /// Records `value` for `name`, received now; returns how long it stays fresh.
    pub fn push(&self, name: &str, value: f64) -> Result<Duration, PushError> {
        if !value.is_finite() || value < 0.0 {
            return Err(PushError::BadValue { value });
        }
        let mut table = self.inner.write();
        let Some(max_age) = table.known.get(name).copied() else {
            let mut known: Vec<&str> = table.known.keys().map(String::as_str).collect();
            known.sort_unstable();
            let known = if known.is_empty() {
                "(none)".to_owned()
            } else {
                known.join(", ")
            };
            return Err(PushError::Unknown {
                name: name.to_owned(),
                known,
            });
        };
        table
            .values
            .insert(name.to_owned(), (value, Instant::now()));
        Ok(max_age)
    }

    /// The last value of `name`, unless it is older than `max_age`.
    pub fn read(&self, name: &str, max_age: Duration) -> Reading {
        let table = self.inner.read();
        let Some((value, received)) = table.values.get(name) else {
            return Err(format!("nothing was pushed to /v1/signals/{name} yet"));
        };
        let age = received.elapsed();
        if age > max_age {
            return Err(format!(
                "the last push to /v1/signals/{name} is {}s old, older than 2 intervals ({}s)",
                age.as_secs(),
                max_age.as_secs()
            ));
        }
        Ok(*value)
    }

    /// The names adaptive rules read now, with how long a value stays fresh; values of names
    /// no longer read are forgotten.
    pub fn set_known(&self, names: HashMap<String, Duration>) {
        let mut table = self.inner.write();
        table.values.retain(|name, _| names.contains_key(name));
        table.known = names;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals(names: &[&str]) -> PushedSignals {
        let signals = PushedSignals::default();
        let fresh = Duration::from_secs(30);
        signals.set_known(
            names
                .iter()
                .map(|name| ((*name).to_owned(), fresh))
                .collect(),
        );
        signals
    }

    #[test]
    fn a_pushed_value_is_read_back_while_fresh() {
        let signals = signals(&["p95"]);
        assert!(signals.read("p95", Duration::from_secs(30)).is_err());
        assert_eq!(signals.push("p95", 120.5), Ok(Duration::from_secs(30)));
        assert_eq!(signals.read("p95", Duration::from_secs(30)), Ok(120.5));
        let Err(stale) = signals.read("p95", Duration::ZERO) else {
            panic!("a value older than the maximum age is stale");
        };
        assert!(stale.contains("older than 2 intervals"), "{stale}");
    }

    #[test]
    fn unknown_names_and_odd_values_are_refused() {
        let signals = signals(&["b", "a"]);
        let Err(PushError::Unknown { known, .. }) = signals.push("c", 1.0) else {
            panic!("c is read by no rule");
        };
        assert_eq!(known, "a, b");
        for value in [f64::NAN, f64::INFINITY, -1.0] {
            assert!(matches!(
                signals.push("a", value),
                Err(PushError::BadValue { .. })
            ));
        }
    }

    #[test]
    fn names_no_longer_read_are_forgotten() {
        let signals = signals(&["a"]);
        assert!(signals.push("a", 1.0).is_ok());
        signals.set_known(HashMap::new());
        signals.set_known([("a".to_owned(), Duration::from_secs(30))].into());
        assert!(signals.read("a", Duration::from_secs(30)).is_err());
    }
}
