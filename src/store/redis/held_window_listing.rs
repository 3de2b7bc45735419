//! Limitador's `GET /counters/{namespace}` under Redis: the namespace's counters are found with
//! `SCAN … MATCH <their key stem>:* COUNT`, a page at a time (never `KEYS`, which would stop
//! Redis for the whole keyspace), and each page read by `lua/held_window_list.lua`, which keeps
//! the counters whose window still runs, as the memory store lists them. Every key of one
//! namespace carries its hash tag, so on a cluster they all live on the master of that slot,
//! and the pages are asked of it alone.

use std::sync::OnceLock;

use redis::Script;

use super::errors::unavailable;
use super::script::Now;
use super::RedisStore;
use crate::store::held_windows::LiveCounter;
use crate::store::StoreError;

/// Keys Redis looks at per `SCAN` page: a page costs Redis about as much as one small command,
/// and a namespace's listing costs (keyspace / COUNT) round trips.
const SCAN_COUNT: usize = 512;

fn list_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        Script::new(concat!(
            include_str!("lua/clock.lua"),
            "\n",
            include_str!("lua/held_window_list.lua")
        ))
    })
}

/// `text` as a `SCAN MATCH` pattern that matches only itself (the key prefix may hold `*`, `?`,
/// `[` or `\`).
fn glob_literal(text: &str) -> String {
    let mut literal = String::with_capacity(text.len() + 4);
    for character in text.chars() {
        if matches!(character, '*' | '?' | '[' | ']' | '\\') {
            literal.push('\\');
        }
        literal.push(character);
    }
    literal
}

/// A `SCAN` page as Redis answers it: the next cursor (0: done) and the keys.
pub(super) type ScanPage = (u64, Vec<String>);

impl RedisStore {
    /// The live Limitador-format counters whose key text starts with `prefix` (a namespace's
    /// `["<namespace>",`), each page of the scan behind the call timeout.
    pub(super) async fn list_held_windows(
        &self,
        prefix: &str,
    ) -> Result<Vec<LiveCounter>, StoreError> {
        // Any counter key of the namespace: its stem (up to the counter's digest) is every
        // one's, and its hash slot theirs.
        let probe = self.held_window_key(prefix);
        let stem = probe
            .rsplit_once(':')
            .map_or(probe.as_str(), |(stem, _)| stem);
        let pattern = format!("{}:*", glob_literal(stem));
        let mut listed = Vec::new();
        let mut cursor = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys) = self.link.scan_page(&scan, &probe, self.timeout).await?;
            listed.extend(self.live_among(&keys, prefix).await?);
            if next == 0 {
                return Ok(listed);
            }
            cursor = next;
        }
    }

    /// The live counters among `keys` whose key text starts with `prefix` (two namespaces may
    /// share a sanitized hash tag; the text tells them apart).
    async fn live_among(
        &self,
        keys: &[String],
        prefix: &str,
    ) -> Result<Vec<LiveCounter>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = list_script().prepare_invoke();
        for key in keys {
            invocation.key(key.as_str());
        }
        match self.now()? {
            Now::RedisTime => invocation.arg("time").arg(0),
            Now::Given { now, extra_ttl_ms } => invocation.arg(now).arg(extra_ttl_ms),
        };
        let reply: Vec<(String, i64, i64)> = self.run(&invocation, self.timeout).await?;
        reply
            .into_iter()
            .filter(|(key, _, _)| key.starts_with(prefix))
            .map(|(key, value, ttl)| {
                let unsigned = |field: i64| {
                    u64::try_from(field).map_err(|_| {
                        unavailable(format!(
                            "the held-window listing answered {field} for counter {key}"
                        ))
                    })
                };
                Ok(LiveCounter {
                    value: unsigned(value)?,
                    ttl: unsigned(ttl)?,
                    key,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_s_glob_characters_match_only_themselves() {
        assert_eq!(glob_literal("fg*[x]?\\{ns}"), "fg\\*\\[x\\]\\?\\\\{ns}");
        assert_eq!(glob_literal("floodgate:{ns}:ab12"), "floodgate:{ns}:ab12");
    }
}
