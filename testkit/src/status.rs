//! The status page's JSON (`/status.json` on the debug port), read and searched.

use serde_json::Value;

use crate::http;

/// `/status.json` of the floodgate whose debug port is `debug_port`, parsed.
pub fn status_json(debug_port: u16) -> Value {
    let answer = http::get(debug_port, "/status.json", &[])
        .unwrap_or_else(|error| panic!("/status.json: {error}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    serde_json::from_str(&answer.body).unwrap_or_else(|error| panic!("{error}: {}", answer.body))
}

/// The entry of rule `path` in `status`.
pub fn rule<'a>(status: &'a Value, path: &str) -> &'a Value {
    status["rules"]
        .as_array()
        .and_then(|rules| rules.iter().find(|rule| rule["rule"] == path))
        .unwrap_or_else(|| panic!("no rule {path} in {status}"))
}
