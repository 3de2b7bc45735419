//! envoyproxy/ratelimit's statsd settings (`USE_STATSD`, `STATSD_HOST`, `STATSD_PORT`,
//! lyft/gostats' `STATSD_PROTOCOL`, `EXTRA_TAGS`, `USE_DOG_STATSD` and its mogrifiers,
//! `STATS_FLUSH_INTERVAL`),
//! read as the reference reads them.

use std::time::Duration;

use super::mogrifiers::Mogrifiers;

/// How the lines travel (lyft/gostats' `STATSD_PROTOCOL`, `tcp` by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    /// `tcp` or `udp`, any case, as gostats takes them.
    pub fn parse(text: &str) -> Result<Self, StatsdSettingError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            _ => Err(StatsdSettingError::Protocol(text.to_owned())),
        }
    }
}

/// A statsd setting that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatsdSettingError {
    #[error("STATSD_PROTOCOL must be tcp or udp, not {0:?}")]
    Protocol(String),
    #[error("EXTRA_TAGS must be key:value pairs separated by commas; {0:?} is not one")]
    ExtraTag(String),
}

/// Where and how the reference's stats are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsdOptions {
    pub host: String,
    pub port: u16,
    pub protocol: Protocol,
    /// DogStatsD: tags as `|#key:value` (`USE_DOG_STATSD`); plain statsd carries them in the
    /// name (`.__key=value`), as gostats does.
    pub dog: bool,
    /// `EXTRA_TAGS`, sorted by key as gostats serializes them.
    pub extra_tags: Vec<(String, String)>,
    /// `USE_DOG_STATSD_MOGRIFIERS` (DogStatsD only).
    pub mogrifiers: Mogrifiers,
    pub flush_interval: Duration,
}

/// `EXTRA_TAGS` as envconfig reads a map: `key:value` pairs separated by commas, empty for none.
pub fn parse_extra_tags(text: &str) -> Result<Vec<(String, String)>, StatsdSettingError> {
    let mut tags = std::collections::BTreeMap::new();
    for pair in text.split(',').filter(|pair| !pair.trim().is_empty()) {
        let Some((key, value)) = pair.split_once(':') else {
            return Err(StatsdSettingError::ExtraTag(pair.to_owned()));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(StatsdSettingError::ExtraTag(pair.to_owned()));
        }
        // A key given twice: the later value, as a Go map fills.
        tags.insert(key.to_owned(), value.trim().to_owned());
    }
    Ok(tags.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_tags_are_pairs_sorted_by_key() {
        assert_eq!(parse_extra_tags(""), Ok(Vec::new()));
        assert_eq!(
            parse_extra_tags("zone:eu-1, app:edge"),
            Ok(vec![
                ("app".to_owned(), "edge".to_owned()),
                ("zone".to_owned(), "eu-1".to_owned())
            ])
        );
        assert!(parse_extra_tags("novalue").is_err());
        assert!(parse_extra_tags(":v").is_err());
    }

    #[test]
    fn the_protocol_is_tcp_or_udp() {
        assert_eq!(Protocol::parse("UDP"), Ok(Protocol::Udp));
        assert_eq!(Protocol::parse("tcp"), Ok(Protocol::Tcp));
        assert!(Protocol::parse("quic").is_err());
    }
}
