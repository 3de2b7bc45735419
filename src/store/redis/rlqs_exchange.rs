//! RLQS across floodgates that share a Redis (`engine::rlqs::exchange`): one `EVALSHA` of
//! `lua/rlqs_exchange.lua` per domain publishes this instance's demand on each of the
//! domain's buckets and reads back every other instance's. The keys carry the domain's hash
//! tag, so each call touches one slot: single server, Sentinel and Cluster alike.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use redis::Script;

use super::errors::unavailable;
use super::RedisStore;
use crate::core::decision::key::quota_bucket_key;
use crate::store::{DemandItem, ExchangeTerms, RlqsPeers, StoreError};

fn exchange_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/rlqs_exchange.lua")))
}

impl RlqsPeers for RedisStore {
    async fn exchange_demands(
        &self,
        instance: u64,
        items: &[DemandItem<'_>],
        terms: ExchangeTerms,
    ) -> Result<Vec<Vec<Option<f64>>>, StoreError> {
        let mut peers = vec![Vec::new(); items.len()];
        let mut domains: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (index, item) in items.iter().enumerate() {
            domains.entry(item.domain).or_default().push(index);
        }
        for indexes in domains.into_values() {
            let mut invocation = exchange_script().prepare_invoke();
            for &index in &indexes {
                let item = &items[index];
                invocation.key(
                    self.keys
                        .domain_key_for(&quota_bucket_key(item.domain, item.bucket)),
                );
            }
            invocation
                .arg(instance)
                .arg(millis(terms.horizon))
                .arg(millis(terms.memory))
                .arg(if terms.retire { "1" } else { "0" });
            for &index in &indexes {
                invocation.arg(
                    items[index]
                        .demand
                        .map_or_else(String::new, |d| format!("{d:.3}")),
                );
            }
            let reply: Vec<String> = self.run(&invocation, terms.deadline).await?;
            let parsed = parse_reply(&reply, indexes.len()).map_err(unavailable)?;
            for (index, found) in indexes.into_iter().zip(parsed) {
                peers[index] = found;
            }
        }
        Ok(peers)
    }
}

/// A duration as the script reads it: whole milliseconds, at least 1.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Per key: a count, then that many demands ('' for an unmeasured one).
fn parse_reply(reply: &[String], keys: usize) -> Result<Vec<Vec<Option<f64>>>, String> {
    let mut values = reply.iter();
    let mut parsed = Vec::with_capacity(keys);
    for key in 0..keys {
        let count: usize = values
            .next()
            .and_then(|count| count.parse().ok())
            .ok_or_else(|| format!("the RLQS exchange script answered no count for key {key}"))?;
        let mut demands = Vec::with_capacity(count);
        for _ in 0..count {
            let text = values.next().ok_or_else(|| {
                format!("the RLQS exchange script answered too few demands for key {key}")
            })?;
            demands.push(if text.is_empty() {
                None
            } else {
                Some(text.parse::<f64>().map_err(|error| {
                    format!("the RLQS exchange script answered demand {text:?}: {error}")
                })?)
            });
        }
        parsed.push(demands);
    }
    if values.next().is_some() {
        return Err("the RLQS exchange script answered more values than its keys".to_owned());
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_read_key_by_key_and_a_malformed_one_is_an_error() {
        let reply: Vec<String> = ["2", "10.500", "", "0", "1", "3"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(
            parse_reply(&reply, 3),
            Ok(vec![vec![Some(10.5), None], vec![], vec![Some(3.0)]])
        );
        assert!(parse_reply(&reply, 4).is_err());
        assert!(parse_reply(&reply, 2).is_err());
        assert!(parse_reply(&["1".to_owned(), "x".to_owned()], 1).is_err());
    }
}
