//! Between Envoy's RLS v3 messages and the core's request and response.

use crate::core::decision::response::Response;
use crate::core::decision::status::{Code, DescriptorStatus};
use crate::core::ground::metadata::{MetadataStruct, MetadataValue};
use crate::core::ground::time::ceil_seconds;
use crate::core::ground::unit::Unit;
use crate::core::policy::request::Entry;
use crate::core::policy::request::{Descriptor, LimitOverride, Request};
use crate::server::proto::rate_limit_response::{self, rate_limit::Unit as WireUnit};
use crate::server::proto::{
    HeaderValue, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit,
};

pub fn request_from_wire(wire: RateLimitRequest) -> Request {
    Request {
        domain: wire.domain,
        descriptors: wire
            .descriptors
            .into_iter()
            .map(descriptor_from_wire)
            .collect(),
        hits_addend: wire.hits_addend,
    }
}

fn descriptor_from_wire(wire: RateLimitDescriptor) -> Descriptor {
    Descriptor {
        entries: wire
            .entries
            .into_iter()
            .map(|entry| Entry {
                key: entry.key,
                value: entry.value,
            })
            .collect(),
        limit_override: wire.limit.map(|limit| LimitOverride {
            requests_per_unit: limit.requests_per_unit,
            unit: override_unit(limit.unit),
            unit_multiplier: limit.unit_multiplier,
        }),
        hits_addend: wire.hits_addend,
        is_negative_hits: wire.is_negative_hits,
    }
}

/// `envoy.type.v3.RateLimitUnit` has no WEEK; UNKNOWN and unassigned numbers give `None`.
fn override_unit(number: i32) -> Option<Unit> {
    match RateLimitUnit::try_from(number).ok()? {
        RateLimitUnit::Unknown => None,
        RateLimitUnit::Second => Some(Unit::Second),
        RateLimitUnit::Minute => Some(Unit::Minute),
        RateLimitUnit::Hour => Some(Unit::Hour),
        RateLimitUnit::Day => Some(Unit::Day),
        RateLimitUnit::Month => Some(Unit::Month),
        RateLimitUnit::Year => Some(Unit::Year),
    }
}

fn wire_unit(unit: Unit) -> WireUnit {
    match unit {
        Unit::Second => WireUnit::Second,
        Unit::Minute => WireUnit::Minute,
        Unit::Hour => WireUnit::Hour,
        Unit::Day => WireUnit::Day,
        Unit::Week => WireUnit::Week,
        Unit::Month => WireUnit::Month,
        Unit::Year => WireUnit::Year,
    }
}

fn wire_code(code: Code) -> rate_limit_response::Code {
    match code {
        Code::Ok => rate_limit_response::Code::Ok,
        Code::OverLimit => rate_limit_response::Code::OverLimit,
    }
}

pub fn response_to_wire(response: Response) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: wire_code(response.overall_code) as i32,
        statuses: response.statuses.into_iter().map(status_to_wire).collect(),
        response_headers_to_add: response
            .response_headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key,
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        dynamic_metadata: response
            .dynamic_metadata
            .map(|metadata| struct_to_wire(*metadata)),
        ..RateLimitResponse::default()
    }
}

fn struct_to_wire(metadata: MetadataStruct) -> prost_types::Struct {
    prost_types::Struct {
        fields: metadata
            .fields
            .into_iter()
            .map(|(name, value)| (name, value_to_wire(value)))
            .collect(),
    }
}

fn value_to_wire(value: MetadataValue) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match value {
        MetadataValue::Null => Kind::NullValue(prost_types::NullValue::NullValue as i32),
        MetadataValue::Bool(flag) => Kind::BoolValue(flag),
        MetadataValue::Number(number) => Kind::NumberValue(number),
        MetadataValue::String(text) => Kind::StringValue(text),
        MetadataValue::List(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(value_to_wire).collect(),
        }),
        MetadataValue::Struct(inner) => Kind::StructValue(struct_to_wire(inner)),
    };
    prost_types::Value { kind: Some(kind) }
}

fn status_to_wire(status: DescriptorStatus) -> rate_limit_response::DescriptorStatus {
    rate_limit_response::DescriptorStatus {
        code: wire_code(status.code) as i32,
        current_limit: status
            .current_limit
            .map(|limit| rate_limit_response::RateLimit {
                name: limit.name.unwrap_or_default(),
                requests_per_unit: limit.requests_per_unit,
                unit: wire_unit(limit.unit) as i32,
                unit_multiplier: (limit.unit_multiplier > 1).then_some(limit.unit_multiplier),
            }),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status
            .duration_until_reset
            .map(|span| prost_types::Duration {
                seconds: ceil_seconds(span),
                nanos: 0,
            }),
        quota: None,
    }
}
