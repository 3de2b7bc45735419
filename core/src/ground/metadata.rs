//! A rule's `metadata:` as the `google.protobuf.Struct` it becomes on the wire, and the merge of
//! several of them. envoyproxy/ratelimit turns the YAML into a Struct when the file loads
//! (`parseMetadata`); so does floodgate, so that an answer that returns metadata only copies it.
//!
//! The model is protobuf's: null, bool, number (every YAML number becomes an `f64`, as Go's
//! `structpb.NewValue` makes it), string, list, struct. Nested map keys that are not strings are
//! written as Go's `fmt.Sprintf("%v")` writes them (`1`, `true`, `1.5`), as the reference's
//! `convertMap` does; the loader refuses a top-level key that is not a string and any key that
//! is a list or a map (`config::descriptor`).

use std::collections::BTreeMap;

use serde_yaml::value::Tag;
use serde_yaml::{Mapping, Value};

/// Marks an integer beyond 64 bits, which the configuration's parser (`config::parse`) keeps as
/// its digits in text.
pub(crate) const TOO_LARGE_INTEGER_TAG: &str = "!floodgate/too-large-integer";

/// One `google.protobuf.Value`.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    List(Vec<MetadataValue>),
    Struct(MetadataStruct),
}

/// One `google.protobuf.Struct`: fields by name, in name order (as prost keeps them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataStruct {
    pub fields: BTreeMap<String, MetadataValue>,
}

impl MetadataStruct {
    /// The Struct a YAML map becomes.
    pub fn from_yaml(mapping: &Mapping) -> Self {
        Self {
            fields: mapping
                .iter()
                .map(|(key, value)| (key_text(key), MetadataValue::from_yaml(value)))
                .collect(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&MetadataValue> {
        self.fields.get(name)
    }

    pub fn insert(&mut self, name: &str, value: MetadataValue) {
        self.fields.insert(name.to_owned(), value);
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Adds `other`'s fields that this one lacks; where both hold a struct under one name, the
    /// two are merged the same way. Any other field already here keeps its value: the first
    /// rule to give a name wins (the reference's `mergeMetadata`).
    pub fn merge_first_wins(&mut self, other: &MetadataStruct) {
        for (name, value) in &other.fields {
            match (self.fields.get_mut(name), value) {
                (Some(MetadataValue::Struct(mine)), MetadataValue::Struct(theirs)) => {
                    mine.merge_first_wins(theirs);
                }
                (Some(_), _) => {}
                (None, _) => {
                    self.fields.insert(name.clone(), value.clone());
                }
            }
        }
    }
}

impl MetadataValue {
    /// The Value a YAML value becomes; a tag (`!name value`) is dropped, its value kept.
    pub fn from_yaml(value: &Value) -> Self {
        match value {
            Value::Null => MetadataValue::Null,
            Value::Bool(flag) => MetadataValue::Bool(*flag),
            Value::Number(number) => MetadataValue::Number(number.as_f64().unwrap_or(f64::NAN)),
            Value::String(text) => MetadataValue::String(text.clone()),
            Value::Sequence(items) => {
                MetadataValue::List(items.iter().map(MetadataValue::from_yaml).collect())
            }
            Value::Mapping(mapping) => MetadataValue::Struct(MetadataStruct::from_yaml(mapping)),
            // Beyond 64 bits: yaml.v2 falls back to a float64.
            Value::Tagged(tagged) if tagged.tag == Tag::new(TOO_LARGE_INTEGER_TAG) => {
                match tagged.value.as_str().and_then(|digits| digits.parse().ok()) {
                    Some(number) => MetadataValue::Number(number),
                    None => MetadataValue::from_yaml(&tagged.value),
                }
            }
            Value::Tagged(tagged) => MetadataValue::from_yaml(&tagged.value),
        }
    }

    /// The text of a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetadataValue::String(text) => Some(text),
            _ => None,
        }
    }

    /// The fields of a struct value.
    pub fn as_struct(&self) -> Option<&MetadataStruct> {
        match self {
            MetadataValue::Struct(inner) => Some(inner),
            _ => None,
        }
    }
}

/// A map key as Go's `%v` writes the value yaml.v2 decoded it to.
fn key_text(key: &Value) -> String {
    match key {
        Value::String(text) => text.clone(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number_text(number),
        Value::Null => "<nil>".to_owned(),
        Value::Tagged(tagged) => key_text(&tagged.value),
        // Refused when the file loads; kept total rather than panicking.
        Value::Sequence(_) | Value::Mapping(_) => serde_yaml::to_string(key)
            .map(|text| text.trim_end().to_owned())
            .unwrap_or_default(),
    }
}

/// Integers as digits; a float as its shortest text, without the `.0` Go leaves out (`%v` of
/// `float64(2)` is `2`).
fn number_text(number: &serde_yaml::Number) -> String {
    if number.is_f64() {
        if let Some(float) = number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 1e21)
        {
            return format!("{float:.0}");
        }
    }
    number.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(yaml: &str) -> MetadataStruct {
        match serde_yaml::from_str::<Value>(yaml) {
            Ok(Value::Mapping(mapping)) => MetadataStruct::from_yaml(&mapping),
            other => panic!("not a map: {other:?}"),
        }
    }

    fn text(value: &str) -> MetadataValue {
        MetadataValue::String(value.to_owned())
    }

    #[test]
    fn yaml_becomes_protobuf_values() {
        let metadata = parsed(
            "name: service_1\ncount: 3\nratio: 0.5\non: true\nnothing: ~\n\
             list: [a, 1]\nnested: {1: one, true: yes, 2.0: two}\n",
        );
        assert_eq!(metadata.get("name"), Some(&text("service_1")));
        assert_eq!(metadata.get("count"), Some(&MetadataValue::Number(3.0)));
        assert_eq!(metadata.get("ratio"), Some(&MetadataValue::Number(0.5)));
        assert_eq!(metadata.get("on"), Some(&MetadataValue::Bool(true)));
        assert_eq!(metadata.get("nothing"), Some(&MetadataValue::Null));
        assert_eq!(
            metadata.get("list"),
            Some(&MetadataValue::List(vec![
                text("a"),
                MetadataValue::Number(1.0)
            ]))
        );
        let nested = metadata
            .get("nested")
            .and_then(MetadataValue::as_struct)
            .unwrap_or_else(|| panic!("nested is a struct: {metadata:?}"));
        assert_eq!(nested.get("1"), Some(&text("one")));
        // YAML 1.2 reads `yes` as a string; the key `true` is written as Go writes a bool.
        assert_eq!(nested.get("true"), Some(&text("yes")));
        assert_eq!(nested.get("2"), Some(&text("two")));
    }

    #[test]
    fn the_first_value_of_a_name_wins() {
        let mut merged = parsed("name: service_1\nonly_first: a\n");
        merged.merge_first_wins(&parsed("name: service_2\nonly_second: b\n"));
        assert_eq!(merged.get("name"), Some(&text("service_1")));
        assert_eq!(merged.get("only_first"), Some(&text("a")));
        assert_eq!(merged.get("only_second"), Some(&text("b")));
    }

    #[test]
    fn structs_under_one_name_merge_inside() {
        let mut merged = parsed("team: {name: payments}\nlevel: {a: 1}\n");
        merged.merge_first_wins(&parsed("team: {name: search, owner: bob}\nlevel: flat\n"));
        assert_eq!(
            merged,
            parsed("team: {name: payments, owner: bob}\nlevel: {a: 1}\n")
        );
        // A struct does not replace a value of another kind either.
        let mut flat = parsed("level: flat\n");
        flat.merge_first_wins(&parsed("level: {a: 1}\n"));
        assert_eq!(flat, parsed("level: flat\n"));
    }
}
