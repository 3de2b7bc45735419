//! Proto3 JSON ("protojson") for `RateLimitRequest` and `RateLimitResponse`, as Go's `protojson`
//! reads and writes them for envoyproxy/ratelimit's `/json` endpoint:
//!
//! * in: lowerCamelCase and the original field names are both accepted (`hitsAddend`,
//!   `hits_addend`; both at once is a duplicate); unknown fields are an error; `null` is the
//!   default value; integers may be numbers (also `1.0`, `1e2`) or strings (`"7"`); enums are
//!   names or numbers; `UInt32Value`/`UInt64Value` are bare numbers;
//! * out: lowerCamelCase, zero values omitted (a set wrapper or message is written even when
//!   zero), enums by name, `Duration` as `"58s"`, `Timestamp` as RFC 3339, bytes in base64.
//!
//! Written out by hand rather than generated: the messages are small and fixed, and this keeps
//! the mapping, and its error messages, in one readable place.

use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::core::ground::calendar::date_time_text;
use crate::server::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use crate::server::proto::rate_limit_response::{self, rate_limit::Unit as ResponseUnit};
use crate::server::proto::{
    HeaderValue, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit,
};

/// A body that is not a `RateLimitRequest` in proto3 JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error(
        "empty body: send a RateLimitRequest as JSON, like \
         {{\"domain\":\"edge\",\"descriptors\":[{{\"entries\":[{{\"key\":\"k\",\"value\":\"v\"}}]}}]}}"
    )]
    Empty,
    #[error("invalid RateLimitRequest JSON: {0}")]
    Invalid(#[from] serde_json::Error),
}

/// Parses a request body.
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, JsonError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(JsonError::Empty);
    }
    let Message(parsed): Message<RequestJson> = serde_json::from_slice(body)?;
    Ok(parsed.into_wire())
}

/// Writes a response body.
pub fn response_to_json(response: &RateLimitResponse) -> String {
    let json = ResponseJson::of(response);
    // Serializing these plain structs cannot fail (no maps with non-string keys, no NaN numbers
    // outside `serde_json::Value`); an empty object is still a valid answer if it ever did.
    serde_json::to_string(&json).unwrap_or_else(|_| "{}".to_owned())
}

// ---- in ----------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestJson {
    domain: Option<String>,
    descriptors: Option<Vec<Message<DescriptorJson>>>,
    #[serde(rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<Uint32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorJson {
    entries: Option<Vec<Message<EntryJson>>>,
    limit: Option<Message<OverrideJson>>,
    #[serde(rename = "hitsAddend", alias = "hits_addend")]
    hits_addend: Option<Uint64>,
    #[serde(rename = "isNegativeHits", alias = "is_negative_hits")]
    is_negative_hits: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryJson {
    key: Option<String>,
    value: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OverrideJson {
    #[serde(rename = "requestsPerUnit", alias = "requests_per_unit")]
    requests_per_unit: Option<Uint32>,
    unit: Option<UnitJson>,
    #[serde(rename = "unitMultiplier", alias = "unit_multiplier")]
    unit_multiplier: Option<Uint32>,
}

impl RequestJson {
    fn into_wire(self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.unwrap_or_default(),
            descriptors: self
                .descriptors
                .unwrap_or_default()
                .into_iter()
                .map(|Message(descriptor)| descriptor.into_wire())
                .collect(),
            hits_addend: self.hits_addend.map_or(0, |hits| hits.0),
        }
    }
}

impl DescriptorJson {
    fn into_wire(self) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: self
                .entries
                .unwrap_or_default()
                .into_iter()
                .map(|Message(entry)| Entry {
                    key: entry.key.unwrap_or_default(),
                    value: entry.value.unwrap_or_default(),
                })
                .collect(),
            limit: self.limit.map(|Message(limit)| RateLimitOverride {
                requests_per_unit: limit.requests_per_unit.map_or(0, |n| n.0),
                unit: limit.unit.map_or(0, |unit| unit.0),
                unit_multiplier: limit.unit_multiplier.map(|n| n.0),
            }),
            hits_addend: self.hits_addend.map(|hits| hits.0),
            is_negative_hits: self.is_negative_hits.unwrap_or(false),
        }
    }
}

/// A message: a JSON object only (a derived `Deserialize` would also take an array of the field
/// values), whose keys must be distinct (a derived one, or `serde_json::Map`, keeps the last).
struct Message<T>(T);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Message<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = deserializer.deserialize_map(ObjectVisitor)?;
        T::deserialize(serde_json::Value::Object(fields))
            .map(Message)
            .map_err(de::Error::custom)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = serde_json::Map<String, serde_json::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        let mut fields = serde_json::Map::new();
        while let Some((key, value)) = access.next_entry::<String, serde_json::Value>()? {
            if fields.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
            fields.insert(key, value);
        }
        Ok(fields)
    }
}

/// A `uint32`: a JSON number or a string holding one.
struct Uint32(u32);
/// A `uint64` (or `UInt64Value`): a JSON number or a string holding one.
struct Uint64(u64);

impl<'de> Deserialize<'de> for Uint32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = deserializer.deserialize_any(UintVisitor {
            max: u64::from(u32::MAX),
            name: "uint32",
        })?;
        u32::try_from(value)
            .map(Uint32)
            .map_err(|_| de::Error::custom("uint32 out of range"))
    }
}

impl<'de> Deserialize<'de> for Uint64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UintVisitor {
                max: u64::MAX,
                name: "uint64",
            })
            .map(Uint64)
    }
}

struct UintVisitor {
    max: u64,
    name: &'static str,
}

impl UintVisitor {
    fn checked<E: de::Error>(&self, value: u64) -> Result<u64, E> {
        if value <= self.max {
            Ok(value)
        } else {
            Err(E::custom(format!(
                "{value} is out of range for {} (0 to {})",
                self.name, self.max
            )))
        }
    }

    fn integral_float<E: de::Error>(&self, value: f64) -> Result<u64, E> {
        // An integral float (`1.0`, `1e2`) is an integer in protojson; 2^64 as f64 is exact.
        if value.is_finite()
            && value >= 0.0
            && value.fract() == 0.0
            && value < 18_446_744_073_709_551_616.0
        {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            self.checked(value as u64)
        } else {
            Err(E::custom(format!(
                "{value} is not a whole number from 0 to {} ({})",
                self.max, self.name
            )))
        }
    }
}

impl Visitor<'_> for UintVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {} (a whole number from 0 to {}, or a string holding one)",
            self.name, self.max
        )
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
        self.checked(value)
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
        match u64::try_from(value) {
            Ok(value) => self.checked(value),
            Err(_) => Err(E::custom(format!(
                "{value} is negative; {} must be from 0 to {}",
                self.name, self.max
            ))),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<u64, E> {
        self.integral_float(value)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
        if let Ok(value) = text.parse::<u64>() {
            return self.checked(value);
        }
        match text.parse::<f64>() {
            Ok(value) if !text.trim().is_empty() && text.trim() == text => {
                self.integral_float(value)
            }
            _ => Err(E::custom(format!(
                "{text:?} is not a {} (a whole number from 0 to {})",
                self.name, self.max
            ))),
        }
    }
}

/// `envoy.type.v3.RateLimitUnit`: a name or a number (proto3 enums are open: an unassigned
/// number is kept, and the limiter refuses it with a message).
struct UnitJson(i32);

impl<'de> Deserialize<'de> for UnitJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UnitVisitor).map(UnitJson)
    }
}

struct UnitVisitor;

impl UnitVisitor {
    fn names() -> String {
        [
            "UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR",
        ]
        .join(", ")
    }
}

impl Visitor<'_> for UnitVisitor {
    type Value = i32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a RateLimitUnit name ({}) or number", Self::names())
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<i32, E> {
        RateLimitUnit::from_str_name(name)
            .map(|unit| unit as i32)
            .ok_or_else(|| {
                E::custom(format!(
                    "unknown RateLimitUnit {name:?}: use one of {}",
                    Self::names()
                ))
            })
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<i32, E> {
        i32::try_from(value).map_err(|_| E::custom(format!("enum number {value} is out of range")))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<i32, E> {
        i32::try_from(value).map_err(|_| E::custom(format!("enum number {value} is out of range")))
    }
}

// ---- out ---------------------------------------------------------------------------------

/// An enum value: its name, or its number when the number has no name.
#[derive(Serialize)]
#[serde(untagged)]
enum EnumJson {
    Name(&'static str),
    Number(i32),
}

/// Zero (the first value) is omitted, as for every proto3 scalar.
fn code_json(number: i32) -> Option<EnumJson> {
    (number != 0).then(|| match rate_limit_response::Code::try_from(number) {
        Ok(code) => EnumJson::Name(code.as_str_name()),
        Err(_) => EnumJson::Number(number),
    })
}

fn unit_json(number: i32) -> Option<EnumJson> {
    (number != 0).then(|| match ResponseUnit::try_from(number) {
        Ok(unit) => EnumJson::Name(unit.as_str_name()),
        Err(_) => EnumJson::Number(number),
    })
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    overall_code: Option<EnumJson>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<StatusJson<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<HeaderJson<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    request_headers_to_add: Vec<HeaderJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dynamic_metadata: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota: Option<QuotaJson<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<EnumJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<LimitJson<'a>>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    quota: Option<QuotaJson<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LimitJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    unit: Option<EnumJson>,
    /// A `UInt32Value`: written whenever set, even 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    unit_multiplier: Option<u32>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeaderJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    key: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    value: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_value: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QuotaJson<'a> {
    #[serde(skip_serializing_if = "is_zero")]
    requests: u32,
    /// A oneof member: written whenever set.
    #[serde(skip_serializing_if = "Option::is_none")]
    valid_until: Option<String>,
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
}

impl<'a> ResponseJson<'a> {
    fn of(response: &'a RateLimitResponse) -> Self {
        Self {
            overall_code: code_json(response.overall_code),
            statuses: response.statuses.iter().map(StatusJson::of).collect(),
            response_headers_to_add: response
                .response_headers_to_add
                .iter()
                .map(HeaderJson::of)
                .collect(),
            request_headers_to_add: response
                .request_headers_to_add
                .iter()
                .map(HeaderJson::of)
                .collect(),
            raw_body: (!response.raw_body.is_empty()).then(|| base64(&response.raw_body)),
            dynamic_metadata: response.dynamic_metadata.as_ref().map(struct_json),
            quota: response.quota.as_ref().map(QuotaJson::of),
        }
    }
}

impl<'a> StatusJson<'a> {
    fn of(status: &'a rate_limit_response::DescriptorStatus) -> Self {
        Self {
            code: code_json(status.code),
            current_limit: status.current_limit.as_ref().map(|limit| LimitJson {
                name: &limit.name,
                requests_per_unit: limit.requests_per_unit,
                unit: unit_json(limit.unit),
                unit_multiplier: limit.unit_multiplier,
            }),
            limit_remaining: status.limit_remaining,
            duration_until_reset: status
                .duration_until_reset
                .as_ref()
                .map(|span| duration_text(span.seconds, span.nanos)),
            quota: status.quota.as_ref().map(QuotaJson::of),
        }
    }
}

impl<'a> HeaderJson<'a> {
    fn of(header: &'a HeaderValue) -> Self {
        Self {
            key: &header.key,
            value: &header.value,
            raw_value: (!header.raw_value.is_empty()).then(|| base64(&header.raw_value)),
        }
    }
}

impl<'a> QuotaJson<'a> {
    fn of(quota: &'a rate_limit_response::Quota) -> Self {
        use rate_limit_response::quota::ExpirationSpecifier;
        Self {
            requests: quota.requests,
            valid_until: quota.expiration_specifier.as_ref().map(|expiration| {
                let ExpirationSpecifier::ValidUntil(at) = expiration;
                timestamp_text(at.seconds, at.nanos)
            }),
            id: &quota.id,
        }
    }
}

/// `google.protobuf.Struct` → a JSON object. A NaN or infinite number, which protojson refuses
/// to write, and a `Value` with no kind become `null`.
fn struct_json(fields: &prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        fields
            .fields
            .iter()
            .map(|(key, value)| (key.clone(), value_json(value)))
            .collect(),
    )
}

fn value_json(value: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(number)) => number_json(*number),
        Some(Kind::StringValue(text)) => serde_json::Value::String(text.clone()),
        Some(Kind::BoolValue(flag)) => serde_json::Value::Bool(*flag),
        Some(Kind::StructValue(inner)) => struct_json(inner),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.iter().map(value_json).collect())
        }
    }
}

/// A `NumberValue`: a whole number as digits (`3`, as Go's protojson writes it, where serde
/// would write `3.0`), any other as the shortest decimal; NaN and infinities as null.
fn number_json(number: f64) -> serde_json::Value {
    /// Beyond 2^53 not every whole number is a double: leave those to the float form.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if number.fract() == 0.0 && number.abs() <= EXACT {
        #[allow(clippy::cast_possible_truncation)]
        return serde_json::Value::from(number as i64);
    }
    serde_json::Number::from_f64(number).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// Nine fractional digits trimmed to 0, 3, 6 or 9, as protojson writes them.
fn fraction_text(nanos: u32) -> String {
    if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    }
}

/// `google.protobuf.Duration`: `"58s"`, `"1.500s"`, `"-0.250s"`.
fn duration_text(seconds: i64, nanos: i32) -> String {
    let negative = seconds < 0 || nanos < 0;
    let sign = if negative { "-" } else { "" };
    format!(
        "{sign}{}{}s",
        seconds.unsigned_abs(),
        fraction_text(nanos.unsigned_abs())
    )
}

/// `google.protobuf.Timestamp`: RFC 3339 in UTC, `"2026-05-23T10:00:20.021Z"`.
fn timestamp_text(seconds: i64, nanos: i32) -> String {
    format!(
        "{}{}Z",
        date_time_text(seconds),
        fraction_text(u32::try_from(nanos).unwrap_or(0))
    )
}

/// Standard base64 with padding, as protojson writes `bytes`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let group = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for position in 0..4 {
            if position <= chunk.len() {
                let index = (group >> (18 - 6 * position)) & 0x3f;
                text.push(char::from(ALPHABET[index as usize]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RateLimitRequest, String> {
        request_from_json(text.as_bytes()).map_err(|error| error.to_string())
    }

    #[test]
    fn camel_case_and_proto_names_are_both_accepted() {
        let camel = parse(
            r#"{"domain":"edge","hitsAddend":3,"descriptors":[{"entries":[{"key":"k","value":"v"}],
                "hitsAddend":"5","isNegativeHits":true,
                "limit":{"requestsPerUnit":7,"unit":"MINUTE","unitMultiplier":2}}]}"#,
        );
        let snake = parse(
            r#"{"domain":"edge","hits_addend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],
                "hits_addend":5,"is_negative_hits":true,
                "limit":{"requests_per_unit":7.0,"unit":2,"unit_multiplier":"2"}}]}"#,
        );
        assert!(camel.is_ok(), "{camel:?}");
        assert_eq!(camel, snake);
        let Ok(request) = camel else { return };
        assert_eq!(request.hits_addend, 3);
        let descriptor = &request.descriptors[0];
        assert_eq!(descriptor.hits_addend, Some(5));
        assert!(descriptor.is_negative_hits);
        assert_eq!(
            descriptor.limit,
            Some(RateLimitOverride {
                requests_per_unit: 7,
                unit: RateLimitUnit::Minute as i32,
                unit_multiplier: Some(2),
            })
        );
    }

    #[test]
    fn nulls_and_missing_fields_are_defaults() {
        let request =
            parse(r#"{"domain":null,"descriptors":[{"entries":[{"key":"k"}],"hitsAddend":null}]}"#);
        let Ok(request) = request else {
            panic!("{request:?}");
        };
        assert_eq!(request.domain, "");
        assert_eq!(request.descriptors[0].entries[0].value, "");
        assert_eq!(request.descriptors[0].hits_addend, None);
        assert_eq!(parse("{}"), Ok(RateLimitRequest::default()));
    }

    #[test]
    fn bad_bodies_are_named() {
        let cases = [
            ("", "empty body"),
            ("  \n", "empty body"),
            ("{", "EOF"),
            ("[]", "invalid type"),
            (r#"["edge", [], 1]"#, "expected a JSON object"),
            (r#"{"descriptors":[["x"]]}"#, "expected a JSON object"),
            (r#"{"domain":"a","domain":"b"}"#, "duplicate field `domain`"),
            (r#"{"domian":"x"}"#, "unknown field `domian`"),
            (
                r#"{"descriptors":[{"entries":[{"key":"k","extra":1}]}]}"#,
                "unknown field `extra`",
            ),
            (r#"{"hitsAddend":1,"hits_addend":2}"#, "duplicate field"),
            (r#"{"hitsAddend":-1}"#, "negative"),
            (r#"{"hitsAddend":4294967296}"#, "out of range"),
            (r#"{"hitsAddend":1.5}"#, "not a whole number"),
            (r#"{"hitsAddend":"x"}"#, "is not a uint32"),
            (r#"{"hitsAddend":true}"#, "invalid type"),
            (r#"{"domain":5}"#, "invalid type"),
            (
                r#"{"descriptors":[{"isNegativeHits":"true"}]}"#,
                "invalid type",
            ),
            (
                r#"{"descriptors":[{"limit":{"unit":"WEEK"}}]}"#,
                "unknown RateLimitUnit",
            ),
            (r#"{"descriptors":[null]}"#, "invalid type"),
        ];
        for (body, expected) in cases {
            match parse(body) {
                Ok(request) => panic!("{body:?} parsed as {request:?}"),
                Err(message) => assert!(message.contains(expected), "{body:?}: {message}"),
            }
        }
    }

    #[test]
    fn an_unassigned_unit_number_is_kept_for_the_limiter_to_refuse() {
        let request = parse(r#"{"descriptors":[{"limit":{"unit":9}}]}"#);
        assert!(matches!(request, Ok(r) if r.descriptors[0].limit.map(|l| l.unit) == Some(9)));
    }

    #[test]
    fn responses_omit_zero_values_and_name_enums() {
        let response = RateLimitResponse {
            overall_code: rate_limit_response::Code::OverLimit as i32,
            statuses: vec![
                rate_limit_response::DescriptorStatus {
                    code: rate_limit_response::Code::OverLimit as i32,
                    current_limit: Some(rate_limit_response::RateLimit {
                        name: String::new(),
                        requests_per_unit: 1,
                        unit: ResponseUnit::Minute as i32,
                        unit_multiplier: None,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(prost_types::Duration {
                        seconds: 58,
                        nanos: 0,
                    }),
                    quota: None,
                },
                rate_limit_response::DescriptorStatus {
                    code: rate_limit_response::Code::Ok as i32,
                    current_limit: Some(rate_limit_response::RateLimit {
                        name: "weekly".to_owned(),
                        requests_per_unit: 2,
                        unit: ResponseUnit::Week as i32,
                        unit_multiplier: Some(3),
                    }),
                    limit_remaining: 1,
                    duration_until_reset: None,
                    quota: None,
                },
                rate_limit_response::DescriptorStatus::default(),
            ],
            response_headers_to_add: vec![HeaderValue {
                key: "Retry-After".to_owned(),
                value: "58".to_owned(),
                raw_value: Vec::new(),
            }],
            ..RateLimitResponse::default()
        };
        let json: serde_json::Value =
            serde_json::from_str(&response_to_json(&response)).unwrap_or_default();
        let expected = serde_json::json!({
            "overallCode": "OVER_LIMIT",
            "statuses": [
                {"code": "OVER_LIMIT", "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"},
                 "durationUntilReset": "58s"},
                {"code": "OK", "currentLimit": {"name": "weekly", "requestsPerUnit": 2,
                 "unit": "WEEK", "unitMultiplier": 3}, "limitRemaining": 1},
                {}
            ],
            "responseHeadersToAdd": [{"key": "Retry-After", "value": "58"}]
        });
        assert_eq!(json, expected);
        assert_eq!(response_to_json(&RateLimitResponse::default()), "{}");
    }

    #[test]
    fn well_known_types_as_protojson_writes_them() {
        assert_eq!(duration_text(58, 0), "58s");
        assert_eq!(duration_text(0, 0), "0s");
        assert_eq!(duration_text(1, 500_000_000), "1.500s");
        assert_eq!(duration_text(1, 1_000), "1.000001s");
        assert_eq!(duration_text(0, 1), "0.000000001s");
        assert_eq!(duration_text(-1, -250_000_000), "-1.250s");
        assert_eq!(duration_text(0, -250_000_000), "-0.250s");
        assert_eq!(timestamp_text(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(
            timestamp_text(1_779_530_420, 21_000_000),
            "2026-05-23T10:00:20.021Z"
        );
        assert_eq!(timestamp_text(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(timestamp_text(-1, 0), "1969-12-31T23:59:59Z");
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn struct_metadata_becomes_an_object() {
        use prost_types::value::Kind;
        let mut fields = std::collections::BTreeMap::new();
        fields.insert(
            "hits".to_owned(),
            prost_types::Value {
                kind: Some(Kind::NumberValue(2.0)),
            },
        );
        fields.insert(
            "bad".to_owned(),
            prost_types::Value {
                kind: Some(Kind::NumberValue(f64::NAN)),
            },
        );
        fields.insert(
            "ratio".to_owned(),
            prost_types::Value {
                kind: Some(Kind::NumberValue(0.5)),
            },
        );
        let json = struct_json(&prost_types::Struct { fields });
        assert_eq!(
            json.to_string(),
            r#"{"bad":null,"hits":2,"ratio":0.5}"#,
            "a whole number is written without a fraction, as Go's protojson does"
        );
    }
}
