//! `floodgate check`: one ShouldRateLimit call to a running server, printed for people.

use crate::cli::CheckArgs;
use crate::proto::rate_limit_descriptor::Entry;
use crate::proto::rate_limit_response::{self, rate_limit::Unit};
use crate::proto::rate_limit_service_client::RateLimitServiceClient;
use crate::proto::{RateLimitDescriptor, RateLimitRequest};

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("descriptor {0:?}: every entry needs a key (write key=value,key=value)")]
    BadDescriptor(String),
    #[error(
        "cannot connect to {addr}: {source} (is floodgate running? pass --addr http://HOST:PORT)"
    )]
    Connect {
        addr: String,
        source: tonic::transport::Error,
    },
    #[error("the server answered {code:?}: {message}")]
    Call { code: tonic::Code, message: String },
}

/// Parses `key=value,key=value`; a bare `key` has an empty value.
pub fn parse_descriptor(text: &str) -> Result<RateLimitDescriptor, CheckError> {
    let mut entries = Vec::new();
    for part in text.split(',') {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        if key.is_empty() {
            return Err(CheckError::BadDescriptor(text.to_owned()));
        }
        entries.push(Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(RateLimitDescriptor {
        entries,
        ..RateLimitDescriptor::default()
    })
}

/// Calls the server and prints the answer; returns whether the request was over its limits.
pub async fn run(args: CheckArgs) -> Result<bool, CheckError> {
    let descriptors = args
        .descriptors
        .iter()
        .map(|text| parse_descriptor(text))
        .collect::<Result<Vec<_>, _>>()?;
    let mut descriptors = descriptors;
    if let Some(hits) = args.hits {
        for descriptor in &mut descriptors {
            descriptor.hits_addend = Some(hits);
        }
    }
    let mut client = RateLimitServiceClient::connect(args.addr.clone())
        .await
        .map_err(|source| CheckError::Connect {
            addr: args.addr.clone(),
            source,
        })?;
    let request = RateLimitRequest {
        domain: args.domain.clone(),
        descriptors,
        hits_addend: 0,
    };
    let response = client
        .should_rate_limit(request)
        .await
        .map_err(|status| CheckError::Call {
            code: status.code(),
            message: status.message().to_owned(),
        })?
        .into_inner();
    for (index, (text, status)) in args.descriptors.iter().zip(&response.statuses).enumerate() {
        println!("descriptor {index} [{text}]: {}", describe_status(status));
    }
    let over_limit = response.overall_code == rate_limit_response::Code::OverLimit as i32;
    println!("overall: {}", if over_limit { "OVER_LIMIT" } else { "OK" });
    for header in &response.response_headers_to_add {
        println!("header {}: {}", header.key, header.value);
    }
    Ok(over_limit)
}

fn describe_status(status: &rate_limit_response::DescriptorStatus) -> String {
    let code = rate_limit_response::Code::try_from(status.code)
        .map(|code| code.as_str_name())
        .unwrap_or("UNKNOWN");
    let Some(limit) = &status.current_limit else {
        return if status.limit_remaining == u32::MAX {
            format!("{code} (unlimited)")
        } else {
            format!("{code} (no limit applies)")
        };
    };
    let unit = Unit::try_from(limit.unit)
        .map(|unit| unit.as_str_name())
        .unwrap_or("UNKNOWN");
    let multiplier = limit
        .unit_multiplier
        .map(|m| format!("{m}×"))
        .unwrap_or_default();
    let name = if limit.name.is_empty() {
        String::new()
    } else {
        format!(" name={}", limit.name)
    };
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |duration| duration.seconds);
    format!(
        "{code} limit {}/{multiplier}{unit}{name}, remaining {}, reset in {reset}s",
        limit.requests_per_unit, status.limit_remaining
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_parse_like_the_cli_says() {
        let parsed = parse_descriptor("generic_key=api,client_id=alice").unwrap_or_default();
        let pairs: Vec<(&str, &str)> = parsed
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(pairs, [("generic_key", "api"), ("client_id", "alice")]);
        let bare = parse_descriptor("remote_address").unwrap_or_default();
        assert_eq!(bare.entries.first().map(|e| e.value.as_str()), Some(""));
        assert!(parse_descriptor("=x").is_err());
        assert!(parse_descriptor("a=1,").is_err());
    }
}
