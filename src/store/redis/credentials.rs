//! Credentials in Redis URLs and `--redis-auth` values: added to a connection's settings, kept
//! out of what is shown (URLs redacted) and scrubbed from the messages passed on. Shared by
//! every way of reaching Redis (one server, sentinels, cluster seeds).

use redis::ConnectionInfo;

/// The password of `auth` (`password` or `user:password`), and the whole, to scrub.
pub(super) fn auth_secrets(auth: &str) -> Vec<String> {
    let mut secrets = vec![auth.to_owned()];
    if let Some((_, password)) = auth.split_once(':') {
        secrets.push(password.to_owned());
    }
    secrets
}

/// `info` with the credentials of `auth` (`password` or `user:password`, as
/// envoyproxy/ratelimit's `REDIS_AUTH`) unless it has a password already.
pub(super) fn with_auth(info: ConnectionInfo, auth: Option<&str>) -> ConnectionInfo {
    let Some(auth) = auth.filter(|auth| !auth.is_empty()) else {
        return info;
    };
    if info.redis_settings().password().is_some() {
        return info;
    }
    let settings = info.redis_settings().clone();
    let settings = match auth.split_once(':') {
        Some((user, password)) => settings.set_username(user).set_password(password),
        None => settings.set_password(auth),
    };
    info.set_redis_settings(settings)
}

/// Query parameters of a Redis URL that hold credentials (`unix:///socket?user=…&pass=…`).
const CREDENTIAL_PARAMETERS: [&str; 3] = ["user", "pass", "password"];

/// `url` with any user and password (in the authority or the query) replaced by `***`.
pub(super) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL at all: nothing in it can be shown safely.
        return "(not a URL)".to_owned();
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority_end = before_query.find(['/', '#']).unwrap_or(before_query.len());
    let mut redacted = match before_query[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***{}", &before_query[at..]),
        None => format!("{scheme}://{before_query}"),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if CREDENTIAL_PARAMETERS.contains(&name) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&pairs.join("&"));
    }
    redacted
}

/// The credentials in `url` (raw and percent-decoded), to scrub from messages.
pub(super) fn url_secrets(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![url.to_owned()];
    };
    let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut secrets = Vec::new();
    let authority_end = before_query.find(['/', '#']).unwrap_or(before_query.len());
    if let Some(at) = before_query[..authority_end].rfind('@') {
        let user_info = &before_query[..at];
        secrets.push(user_info.to_owned());
        if let Some((_, password)) = user_info.split_once(':') {
            secrets.push(password.to_owned());
            secrets.push(percent_decode(password));
        }
    }
    for pair in query.split('&') {
        if let Some((name, value)) = pair.split_once('=') {
            if CREDENTIAL_PARAMETERS.contains(&name) {
                secrets.push(value.to_owned());
                secrets.push(percent_decode(value));
            }
        }
    }
    secrets.retain(|secret| !secret.is_empty());
    secrets
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        let escaped = (byte == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(value) => {
                decoded.push(value);
                index += 3;
            }
            None => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// `message` with every secret replaced by `***`.
pub(super) fn scrub(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|secret| !secret.is_empty())
        .fold(message.to_owned(), |message, secret| {
            message.replace(secret.as_str(), "***")
        })
}

#[cfg(test)]
mod tests {
    use redis::IntoConnectionInfo;

    use super::*;

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_url("redis://user:p%40ss@cache:6380/2"),
            "redis://***@cache:6380/2"
        );
        assert_eq!(redact_url("redis://:secret@cache"), "redis://***@cache");
        assert_eq!(redact_url("redis://cache:6379/0"), "redis://cache:6379/0");
        assert_eq!(
            redact_url("redis://a@b@cache/1?x=y@z"),
            "redis://***@cache/1?x=y@z"
        );
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=2&user=u&pass=hunter22"),
            "unix:///run/redis.sock?db=2&user=***&pass=***"
        );
        assert_eq!(redact_url("secret-without-scheme"), "(not a URL)");
    }

    #[test]
    fn auth_fills_in_missing_credentials_only() {
        let info = |url: &str| url.into_connection_info().expect("a valid URL");
        let with = with_auth(info("redis://cache"), Some("alice:pa:ss"));
        assert_eq!(with.redis_settings().username(), Some("alice"));
        assert_eq!(with.redis_settings().password(), Some("pa:ss"));
        let with = with_auth(info("unix:///run/redis.sock"), Some("secret"));
        assert_eq!(with.redis_settings().username(), None);
        assert_eq!(with.redis_settings().password(), Some("secret"));
        let with = with_auth(info("redis://:own@cache"), Some("other"));
        assert_eq!(with.redis_settings().password(), Some("own"));
    }

    #[test]
    fn secrets_are_scrubbed_raw_and_decoded() {
        let secrets = url_secrets("redis://user:p%40ss@cache:6380/2");
        let message = scrub("auth p@ss failed for user:p%40ss", &secrets);
        assert!(
            !message.contains("p@ss") && !message.contains("p%40ss"),
            "{message}"
        );
        assert!(url_secrets("redis://cache").is_empty());
        let secrets = url_secrets("unix:///s?db=1&pass=hunter22");
        assert_eq!(scrub("bad hunter22", &secrets), "bad ***");
    }
}
