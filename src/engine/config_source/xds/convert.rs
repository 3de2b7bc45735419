//! `RateLimitConfig` resources → the configuration text the loader reads, field for field as
//! the reference's `ConfigXdsProtoToYaml` (`src/config/config_xds.go`) builds its `YamlRoot`:
//! `domain`, and per descriptor `key`, `value`, `rate_limit` (`unit`, `requests_per_unit`,
//! `unlimited`, `name`, `replaces`), `descriptors`, `shadow_mode`, `detailed_metric`,
//! `quota_mode` and `metadata`.
//!
//! The text is JSON, which is YAML: every string quoted, so a value such as `yes` or `0x10`
//! stays the string it was in the proto. Fields at their proto default are left out where the
//! reference's loader treats the default as absent (an empty `value`, a false flag), and an
//! unlimited policy's unset unit and zero count are left out (the reference passes them as
//! `UNKNOWN` and 0, which it ignores on an unlimited rule; floodgate would warn about them).
//! The proto has no field for floodgate's own extensions (algorithms, bursts, priority classes,
//! adaptive limits, failure policies): those are for files only.
//!
//! Each resource is one source named `xds:<resource name>`, so the loader's errors name it.

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{Any, Struct, Value};
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message as _;
use serde_json::{json, Map};

use super::exchange::RATE_LIMIT_CONFIG_TYPE;
use crate::core::policy::config::SourceFile;

/// The prefix of every source name that came over xDS.
pub const SOURCE_PREFIX: &str = "xds:";

/// A resource of a response that is no `RateLimitConfig`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error(
        "xDS resource {position} of {count} has type {type_url:?}, not {RATE_LIMIT_CONFIG_TYPE}: \
         the management server sent a resource floodgate does not subscribe to"
    )]
    WrongType {
        /// 1-based.
        position: usize,
        count: usize,
        type_url: String,
    },
    #[error(
        "xDS resource {position} of {count} ({RATE_LIMIT_CONFIG_TYPE}) cannot be decoded: \
         {problem}; the management server sent bytes that are no RateLimitConfig"
    )]
    Undecodable {
        position: usize,
        count: usize,
        problem: String,
    },
}

/// Every resource of a response, decoded, or every one that could not be.
pub fn decode_all(resources: &[Any]) -> Result<Vec<RateLimitConfig>, Vec<ResourceError>> {
    let count = resources.len();
    let mut configs = Vec::with_capacity(count);
    let mut errors = Vec::new();
    for (index, resource) in resources.iter().enumerate() {
        let position = index + 1;
        if resource.type_url != RATE_LIMIT_CONFIG_TYPE {
            errors.push(ResourceError::WrongType {
                position,
                count,
                type_url: resource.type_url.clone(),
            });
            continue;
        }
        match RateLimitConfig::decode(resource.value.as_slice()) {
            Ok(config) => configs.push(config),
            Err(error) => errors.push(ResourceError::Undecodable {
                position,
                count,
                problem: error.to_string(),
            }),
        }
    }
    if errors.is_empty() {
        Ok(configs)
    } else {
        Err(errors)
    }
}

/// The source a resource loads as.
pub fn to_source(config: &RateLimitConfig) -> SourceFile {
    let mut root = Map::new();
    root.insert("domain".to_owned(), json!(config.domain));
    if !config.descriptors.is_empty() {
        root.insert("descriptors".to_owned(), descriptors(&config.descriptors));
    }
    SourceFile {
        name: source_name(&config.name),
        // `{:#}`: indented, one field a line, so the loader's line numbers mean something.
        text: format!("{:#}", serde_json::Value::Object(root)),
    }
}

/// `xds:<name>` (a resource without a name is `xds:(unnamed)`).
pub fn source_name(resource_name: &str) -> String {
    if resource_name.is_empty() {
        format!("{SOURCE_PREFIX}(unnamed)")
    } else {
        format!("{SOURCE_PREFIX}{resource_name}")
    }
}

fn descriptors(list: &[RateLimitDescriptor]) -> serde_json::Value {
    serde_json::Value::Array(list.iter().map(descriptor).collect())
}

fn descriptor(descriptor: &RateLimitDescriptor) -> serde_json::Value {
    let mut map = Map::new();
    map.insert("key".to_owned(), json!(descriptor.key));
    if !descriptor.value.is_empty() {
        map.insert("value".to_owned(), json!(descriptor.value));
    }
    if let Some(policy) = &descriptor.rate_limit {
        map.insert("rate_limit".to_owned(), rate_limit(policy));
    }
    if !descriptor.descriptors.is_empty() {
        map.insert(
            "descriptors".to_owned(),
            descriptors(&descriptor.descriptors),
        );
    }
    for (name, set) in [
        ("shadow_mode", descriptor.shadow_mode),
        ("detailed_metric", descriptor.detailed_metric),
        ("quota_mode", descriptor.quota_mode),
    ] {
        if set {
            map.insert(name.to_owned(), json!(true));
        }
    }
    if let Some(metadata) = &descriptor.metadata {
        map.insert("metadata".to_owned(), structure(metadata));
    }
    serde_json::Value::Object(map)
}

fn rate_limit(policy: &RateLimitPolicy) -> serde_json::Value {
    let mut map = Map::new();
    // The reference writes the enum's name (`pb.Unit.String()`); a number the enum does not
    // know stays a number, which the loader refuses as a unit as the reference does.
    let unit = match RateLimitUnit::try_from(policy.unit) {
        Ok(unit) => unit.as_str_name().to_owned(),
        Err(_) => policy.unit.to_string(),
    };
    let unit_unset = policy.unit == RateLimitUnit::Unknown as i32;
    if policy.unlimited {
        map.insert("unlimited".to_owned(), json!(true));
        if !unit_unset {
            map.insert("unit".to_owned(), json!(unit));
        }
        if policy.requests_per_unit != 0 {
            map.insert(
                "requests_per_unit".to_owned(),
                json!(policy.requests_per_unit),
            );
        }
    } else {
        map.insert("unit".to_owned(), json!(unit));
        map.insert(
            "requests_per_unit".to_owned(),
            json!(policy.requests_per_unit),
        );
    }
    if !policy.name.is_empty() {
        map.insert("name".to_owned(), json!(policy.name));
    }
    if !policy.replaces.is_empty() {
        let replaces = policy
            .replaces
            .iter()
            .map(|replace| json!({ "name": replace.name }))
            .collect();
        map.insert("replaces".to_owned(), serde_json::Value::Array(replaces));
    }
    serde_json::Value::Object(map)
}

/// `structpb.Struct.AsMap()`: keys sorted, so the same resource always makes the same text.
fn structure(value: &Struct) -> serde_json::Value {
    let mut fields: Vec<(&String, &Value)> = value.fields.iter().collect();
    fields.sort_by(|left, right| left.0.cmp(right.0));
    serde_json::Value::Object(
        fields
            .into_iter()
            .map(|(key, value)| (key.clone(), dynamic(value)))
            .collect(),
    )
}

fn dynamic(value: &Value) -> serde_json::Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(number)) => json!(number),
        Some(Kind::StringValue(text)) => json!(text),
        Some(Kind::BoolValue(flag)) => json!(flag),
        Some(Kind::StructValue(inner)) => structure(inner),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.iter().map(dynamic).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use envoy_types::pb::google::protobuf::ListValue;
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    use super::*;
    use crate::core::policy::config::{load, LoadOptions};

    fn policy(unit: RateLimitUnit, requests_per_unit: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit,
            ..RateLimitPolicy::default()
        })
    }

    fn leaf(key: &str, value: &str, rate_limit: Option<RateLimitPolicy>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.to_owned(),
            value: value.to_owned(),
            rate_limit,
            ..RateLimitDescriptor::default()
        }
    }

    fn any(config: &RateLimitConfig) -> Any {
        Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: config.encode_to_vec(),
        }
    }

    /// The reference's `testDeeperLimitsXdsConfigUpdate`, dumped as its test expects.
    #[test]
    fn the_references_deeper_limits_load_as_it_dumps_them() {
        let foo = RateLimitConfig {
            name: "foo".to_owned(),
            domain: "foo".to_owned(),
            descriptors: vec![
                RateLimitDescriptor {
                    descriptors: vec![
                        leaf(
                            "k2",
                            "",
                            Some(RateLimitPolicy {
                                unlimited: true,
                                ..RateLimitPolicy::default()
                            }),
                        ),
                        leaf("k2", "v2", policy(RateLimitUnit::Hour, 15)),
                    ],
                    ..leaf("k1", "v1", policy(RateLimitUnit::Minute, 10))
                },
                RateLimitDescriptor {
                    descriptors: vec![RateLimitDescriptor {
                        shadow_mode: true,
                        quota_mode: true,
                        ..leaf("j2", "v2", policy(RateLimitUnit::Day, 15))
                    }],
                    ..leaf(
                        "j1",
                        "v2",
                        Some(RateLimitPolicy {
                            unlimited: true,
                            ..RateLimitPolicy::default()
                        }),
                    )
                },
            ],
        };
        let bar = RateLimitConfig {
            name: "bar".to_owned(),
            domain: "bar".to_owned(),
            descriptors: vec![leaf("k1", "v1", policy(RateLimitUnit::Minute, 100))],
        };
        let configs =
            decode_all(&[any(&foo), any(&bar)]).unwrap_or_else(|errors| panic!("{errors:?}"));
        let sources: Vec<SourceFile> = configs.iter().map(to_source).collect();
        assert_eq!(sources[0].name, "xds:foo");
        let rules = load(&sources, &LoadOptions::default())
            .unwrap_or_else(|errors| panic!("{errors}\n{}", sources[0].text));
        assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
        let mut dumped: Vec<String> = rules
            .all_rules()
            .map(|rule| {
                format!(
                    "{} from {}",
                    crate::core::policy::describe::rule_summary(rule),
                    rule.source
                )
            })
            .collect();
        dumped.sort();
        let text = dumped.join("\n");
        for expected in [
            "foo.k1_v1",
            "foo.k1_v1.k2_v2",
            "foo.j1_v2.j2_v2",
            "bar.k1_v1",
            "from xds:bar",
        ] {
            assert!(text.contains(expected), "{expected} missing:\n{text}");
        }
    }

    #[test]
    fn strings_stay_strings_and_metadata_is_kept() {
        let mut fields = HashMap::new();
        fields.insert(
            "team".to_owned(),
            Value {
                kind: Some(Kind::StringValue("yes".to_owned())),
            },
        );
        fields.insert(
            "levels".to_owned(),
            Value {
                kind: Some(Kind::ListValue(ListValue {
                    values: vec![Value {
                        kind: Some(Kind::NumberValue(2.0)),
                    }],
                })),
            },
        );
        let config = RateLimitConfig {
            name: "edge".to_owned(),
            domain: "edge".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                metadata: Some(Struct { fields }),
                detailed_metric: true,
                ..leaf(
                    "on",
                    "0x10",
                    Some(RateLimitPolicy {
                        name: "base".to_owned(),
                        replaces: vec![RateLimitReplace {
                            name: "other".to_owned(),
                        }],
                        ..policy(RateLimitUnit::Second, 5).unwrap_or_default()
                    }),
                )
            }],
        };
        let source = to_source(&config);
        let parsed: serde_json::Value =
            serde_json::from_str(&source.text).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            parsed,
            json!({
                "domain": "edge",
                "descriptors": [{
                    "key": "on",
                    "value": "0x10",
                    "rate_limit": {
                        "unit": "SECOND",
                        "requests_per_unit": 5,
                        "name": "base",
                        "replaces": [{"name": "other"}]
                    },
                    "detailed_metric": true,
                    "metadata": {"levels": [2.0], "team": "yes"}
                }]
            })
        );
    }

    #[test]
    fn problems_are_the_loaders_and_name_the_resource() {
        let no_unit = RateLimitConfig {
            name: "edge-policy".to_owned(),
            domain: "edge".to_owned(),
            descriptors: vec![leaf("k", "", policy(RateLimitUnit::Unknown, 5))],
        };
        let errors = match load(&[to_source(&no_unit)], &LoadOptions::default()) {
            Err(errors) => errors.to_string(),
            Ok(_) => panic!("a limit without a unit loaded"),
        };
        assert!(
            errors.starts_with("xds:edge-policy: edge.k: invalid rate limit unit 'UNKNOWN'"),
            "{errors}"
        );
        let unknown_unit = RateLimitConfig {
            descriptors: vec![leaf(
                "k",
                "",
                Some(RateLimitPolicy {
                    unit: 42,
                    ..RateLimitPolicy::default()
                }),
            )],
            ..no_unit
        };
        assert!(to_source(&unknown_unit).text.contains("\"unit\": \"42\""));
        assert_eq!(source_name(""), "xds:(unnamed)");
    }

    #[test]
    fn bad_resources_are_each_named_by_position() {
        let good = any(&RateLimitConfig::default());
        let garbage = Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: vec![0xff, 0xff, 0xff],
        };
        let stranger = Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".to_owned(),
            value: Vec::new(),
        };
        let errors = decode_all(&[good, garbage, stranger])
            .err()
            .unwrap_or_default();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text[0].starts_with("xDS resource 2 of 3 ("), "{}", text[0]);
        assert!(
            text[1].contains(
                "resource 3 of 3 has type \"type.googleapis.com/envoy.config.cluster.v3.Cluster\""
            ),
            "{}",
            text[1]
        );
    }
}
