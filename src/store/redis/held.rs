//! One counter shown or forgotten at an operator's request (`Store::held`, `Store::reset`):
//! the records the scripts write (`lua/prelude.lua`, one file per algorithm) read back into the
//! core's states, and keys unlinked. Plain commands outside the decisions' breaker, one per
//! counter: rare calls, and a counter's keys may live on different nodes of a cluster.

use std::collections::VecDeque;

use super::RedisStore;
use crate::core::arithmetic::algorithm::{Algorithm, State};
use crate::core::decision::plan::Counter;
use crate::core::ground::time::Micros;
use crate::store::{HeldCounter, StoreError};

impl RedisStore {
    /// What Redis holds for each of `counters`.
    pub(super) async fn held_in_redis(
        &self,
        counters: &[Counter],
    ) -> Result<Vec<Option<HeldCounter>>, StoreError> {
        self.refuse_reference_keys()?;
        let mut held = Vec::with_capacity(counters.len());
        for counter in counters {
            let key = self.keys.key_of(counter);
            let state = if counter.quota.algorithm == Algorithm::SlidingLog {
                let fields: Vec<(String, String)> = self
                    .command(redis::cmd("HGETALL").arg(&key), self.timeout)
                    .await?;
                parse_log(&fields)
            } else {
                let record: Option<String> = self
                    .command(redis::cmd("GET").arg(&key), self.timeout)
                    .await?;
                record.as_deref().and_then(parse_record)
            };
            held.push(state);
        }
        Ok(held)
    }

    /// Unlinks the keys of `counters`: how many existed.
    pub(super) async fn reset_in_redis(&self, counters: &[Counter]) -> Result<usize, StoreError> {
        self.refuse_reference_keys()?;
        let mut removed = 0;
        for counter in counters {
            let key = self.keys.key_of(counter);
            let unlinked: i64 = self
                .command(redis::cmd("UNLINK").arg(&key), self.timeout)
                .await?;
            removed += usize::try_from(unlinked).unwrap_or(0);
        }
        Ok(removed)
    }

    /// Under envoyproxy/ratelimit's keys a fixed window may live at a key of the reference's
    /// making, which these calls do not follow.
    fn refuse_reference_keys(&self) -> Result<(), StoreError> {
        match self.reference {
            Some(_) => Err(StoreError::Unsupported {
                backend: "redis",
                reason: "counters under envoyproxy/ratelimit's keys (--redis-counters reference) \
                         cannot be shown or reset one by one; use redis-cli on the reference's key"
                    .to_owned(),
            }),
            None => Ok(()),
        }
    }
}

/// A string record, "<tag> <expires_at> <fields…>" (F, S or G), as the core's state.
fn parse_record(record: &str) -> Option<HeldCounter> {
    let mut words = record.split(' ');
    let tag = words.next()?;
    let numbers: Vec<Micros> = words.map(str::parse).collect::<Result<_, _>>().ok()?;
    let state = match (tag, numbers.as_slice()) {
        ("F", [_, start, count]) => State::FixedWindow {
            window_start: *start,
            count: u64::try_from(*count).ok()?,
        },
        ("S", [_, start, previous, current]) => State::SlidingWindow {
            window_start: *start,
            previous: u32::try_from(*previous).ok()?,
            current: u32::try_from(*current).ok()?,
        },
        ("G", [_, tat, remainder]) => State::Gcra {
            tat: *tat,
            tat_remainder: u32::try_from(*remainder).ok()?,
        },
        _ => return None,
    };
    Some(HeldCounter {
        state,
        expires_at: *numbers.first()?,
    })
}

/// A sliding log's hash (`lua/sliding_log.lua`): `e` its expiry, entries `h`..=`t` as
/// "<time> <count>".
fn parse_log(fields: &[(String, String)]) -> Option<HeldCounter> {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.parse::<i64>().ok())
    };
    let (expires_at, head, tail) = (field("e")?, field("h")?, field("t")?);
    let mut log = VecDeque::new();
    for index in head..=tail {
        let Some((_, entry)) = fields.iter().find(|(key, _)| *key == index.to_string()) else {
            continue;
        };
        let (time, count) = entry.split_once(' ')?;
        log.push_back((time.parse().ok()?, count.parse().ok()?));
    }
    Some(HeldCounter {
        state: State::SlidingLog(Box::new(log)),
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_the_cores_states() {
        let fixed = parse_record("F 2000 1000 7").map(|held| held.state);
        assert_eq!(
            fixed,
            Some(State::FixedWindow {
                window_start: 1000,
                count: 7
            })
        );
        let gcra = parse_record("G 9 -5 3").map(|held| (held.expires_at, held.state));
        assert_eq!(
            gcra,
            Some((
                9,
                State::Gcra {
                    tat: -5,
                    tat_remainder: 3
                }
            ))
        );
        for bad in ["", "F 1 2", "X 1 2 3", "S 1 2 3 x", "F 1 2 -3"] {
            assert_eq!(parse_record(bad), None, "{bad:?}");
        }
        let log: Vec<(String, String)> = [
            ("e", "50"),
            ("h", "2"),
            ("t", "3"),
            ("2", "10 1"),
            ("3", "20 4"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let held = parse_log(&log).map(|held| held.state);
        assert_eq!(
            held,
            Some(State::SlidingLog(Box::new(VecDeque::from([
                (10, 1),
                (20, 4)
            ]))))
        );
    }
}
