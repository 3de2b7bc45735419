//! A Prometheus instant query (`GET {url}/api/v1/query?query=…`) that must yield one number.
//!
//! The answer is one number or a reason there is none, never an error that stops the
//! controller: a query that fails, times out, returns no series (no traffic yet), several
//! series (not aggregated) or NaN makes the controller hold, and the reason is logged.

use std::time::Duration;

use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::IgnoredAny;

use crate::core::arithmetic::aimd::Reading;

/// The largest answer read: one aggregated sample is a few hundred bytes.
const MAX_BODY_BYTES: usize = 1 << 20;

/// Queries Prometheus servers over plain HTTP/1.1, reusing connections.
#[derive(Clone)]
pub struct Prometheus {
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Default for Prometheus {
    fn default() -> Self {
        Self::new()
    }
}

impl Prometheus {
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// The value of `query` now, within `timeout` (connecting included).
    pub async fn query(&self, base_url: &str, query: &str, timeout: Duration) -> Reading {
        let uri = query_uri(base_url, query)?;
        match tokio::time::timeout(timeout, self.fetch(uri)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "Prometheus at {base_url} did not answer within {timeout:?}"
            )),
        }
    }

    async fn fetch(&self, uri: hyper::Uri) -> Reading {
        let response = self
            .client
            .get(uri)
            .await
            .map_err(|error| format!("cannot query Prometheus: {}", error_chain(&error)))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|error| format!("cannot read Prometheus' answer: {error}"))?
            .to_bytes();
        parse_answer(status.as_u16(), &body)
    }
}

/// `{base}/api/v1/query?query=<query, encoded>`.
fn query_uri(base_url: &str, query: &str) -> Result<hyper::Uri, String> {
    let mut url = url::Url::parse(&format!("{base_url}/api/v1/query"))
        .map_err(|error| format!("bad Prometheus URL {base_url}: {error}"))?;
    url.query_pairs_mut().append_pair("query", query);
    url.as_str()
        .parse()
        .map_err(|error| format!("bad Prometheus URL {base_url}: {error}"))
}

/// The error and its causes (hyper's own message is only "client error (Connect)").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[derive(serde::Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<Series>),
    Scalar(Sample),
    Matrix(IgnoredAny),
    String(IgnoredAny),
}

#[derive(serde::Deserialize)]
struct Series {
    value: Sample,
}

/// `[<unix time>, "<value>"]`: Prometheus writes values as strings (`"NaN"`, `"+Inf"` too).
type Sample = (serde_json::Value, String);

/// The number in an answer to an instant query, or why there is none.
fn parse_answer(status: u16, body: &[u8]) -> Reading {
    let answer: Answer = serde_json::from_slice(body).map_err(|error| {
        let start = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        format!("Prometheus answered HTTP {status} with something that is not its API's JSON ({error}): {start}")
    })?;
    if answer.status != "success" {
        return Err(format!(
            "Prometheus refused the query (HTTP {status}, {}): {}",
            answer.error_type.as_deref().unwrap_or("error"),
            answer.error.as_deref().unwrap_or("no message")
        ));
    }
    let sample = match answer.data {
        Some(Data::Scalar(sample)) => sample,
        Some(Data::Vector(mut series)) => match series.len() {
            0 => {
                return Err(
                    "the query returned no series (no traffic yet, or a wrong metric name)"
                        .to_owned(),
                )
            }
            1 => series.remove(0).value,
            count => {
                return Err(format!(
                    "the query returned {count} series, not one: aggregate them, e.g. with \
                     max(…) or sum(…) by (le) inside histogram_quantile"
                ))
            }
        },
        Some(Data::Matrix(_)) => {
            return Err(
                "the query returned a range vector: drop the [range] selector at its \
                        outside (rate(…[1m]) is fine)"
                    .to_owned(),
            )
        }
        Some(Data::String(_)) | None => {
            return Err("the query returned no number".to_owned());
        }
    };
    let value: f64 = sample
        .1
        .parse()
        .map_err(|_| format!("the query returned '{}', not a number", sample.1))?;
    if value.is_nan() {
        return Err("the query returned NaN (a quantile or ratio over no requests)".to_owned());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(status: u16, body: &str) -> Reading {
        parse_answer(status, body.as_bytes())
    }

    #[test]
    fn one_series_or_a_scalar_is_the_value() {
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.5,"312.5"]}]}}"#;
        assert_eq!(parsed(200, vector), Ok(312.5));
        let scalar =
            r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"0.25"]}}"#;
        assert_eq!(parsed(200, scalar), Ok(0.25));
        let infinite = r#"{"status":"success","data":{"resultType":"scalar","result":[1,"+Inf"]}}"#;
        assert_eq!(parsed(200, infinite), Ok(f64::INFINITY));
    }

    #[test]
    fn no_number_says_why() {
        let cases = [
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                "no series",
            ),
            (
                r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}"#,
                "2 series",
            ),
            (
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#,
                "NaN",
            ),
            (
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                "range vector",
            ),
            (
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
                "bad_data): parse error at char 3",
            ),
            ("<html>proxy error</html>", "HTTP 502"),
        ];
        for (body, expected) in cases {
            let status = if body.starts_with('<') { 502 } else { 200 };
            let Err(reason) = parsed(status, body) else {
                panic!("{body} has no usable number");
            };
            assert!(reason.contains(expected), "{reason}");
        }
    }

    #[test]
    fn the_query_is_encoded_into_the_url() {
        let uri = query_uri(
            "http://prometheus:9090/prom",
            "histogram_quantile(0.95, sum(rate(x{a=\"b c\"}[1m])) by (le))",
        )
        .unwrap_or_else(|error| panic!("{error}"));
        let text = uri.to_string();
        assert!(
            text.starts_with("http://prometheus:9090/prom/api/v1/query?query="),
            "{text}"
        );
        assert!(!text.contains(' ') && !text.contains('"'), "{text}");
    }
}
