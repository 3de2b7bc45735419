//! The reference's string fields read as its YAML reader reads them ([`YamlStrings::AsWritten`]):
//! where YAML 1.2 resolves an unquoted scalar to a number or a boolean, envoyproxy/ratelimit's
//! yaml.v2 keeps the text as written (`yaml_v2`).
//!
//! The parsed value of a number or a boolean no longer has its text (`0x10` is 16), so a file
//! with one in a string field is parsed a second time, reading those scalars, and only those,
//! as text (`parse`). A scalar that parsed as a string already is its text; it only needs to be
//! known unquoted, for yaml.v2 refuses some unquoted texts YAML 1.2 takes for strings (`09`).
//!
//! [`YamlStrings::AsWritten`]: super::YamlStrings::AsWritten

use std::fmt;

use serde::de::{self, Visitor};
use serde_yaml::value::{Tag, TaggedValue};
use serde_yaml::Value;

use super::yaml_v2::{resolve_plain, PlainScalar};

/// Marks a string field's unquoted text yaml.v2 reads as a float; the value is the text.
pub(crate) const YAML_V2_FLOAT_TAG: &str = "!floodgate/yaml-v2-float";
/// Marks a string field's unquoted text yaml.v2 reads as an integer past `i64::MAX`.
pub(crate) const YAML_V2_UNSIGNED_TAG: &str = "!floodgate/yaml-v2-unsigned";

/// Whether `key`, in the map at `path` (map keys and `[index]`es from the top), is one of the
/// string fields the reference decodes a file into: `YamlRoot.Domain`, `YamlDescriptor.Key` and
/// `.Value` (at any depth of `descriptors`), `YamlRateLimit.Unit` and `.Name`, and the `name`
/// of each of its `replaces`.
pub(super) fn reference_string_field(path: &[String], key: &str) -> bool {
    let is_index = |segment: &String| segment.starts_with('[');
    let mut rest = path;
    let mut depth = 0;
    while let [list, index, tail @ ..] = rest {
        if list != "descriptors" || !is_index(index) {
            break;
        }
        rest = tail;
        depth += 1;
    }
    match (depth, rest) {
        (0, []) => key == "domain",
        (0, _) => false,
        (_, []) => key == "key" || key == "value",
        (_, [rate_limit]) if rate_limit == "rate_limit" => key == "unit" || key == "name",
        (_, [rate_limit, replaces, index])
            if rate_limit == "rate_limit" && replaces == "replaces" && is_index(index) =>
        {
            key == "name"
        }
        _ => false,
    }
}

/// Whether `scalar`, borrowed from `source`, was written without quotes. The parser lends a
/// quoted scalar's text from between its quotes, and an unquoted scalar never starts right
/// after a quote and ends right before the same one (it would hold them).
pub(super) fn written_unquoted(source: &str, scalar: &str) -> bool {
    let Some(start) = scalar.as_ptr().addr().checked_sub(source.as_ptr().addr()) else {
        return false;
    };
    let bytes = source.as_bytes();
    let end = start.saturating_add(scalar.len());
    if end > bytes.len() {
        return false;
    }
    let before = start.checked_sub(1).and_then(|at| bytes.get(at));
    let quoted = matches!(before, Some(b'"' | b'\'')) && before == bytes.get(end);
    !quoted
}

/// The field's value for unquoted `text`: the text, null, or a mark the field's reader refuses.
pub(super) fn plain_value(text: &str) -> Value {
    let refused = |tag: &str| {
        Value::Tagged(Box::new(TaggedValue {
            tag: Tag::new(tag),
            value: Value::String(text.to_owned()),
        }))
    };
    match resolve_plain(text) {
        PlainScalar::Null => Value::Null,
        PlainScalar::AsWritten => Value::String(text.to_owned()),
        PlainScalar::Float => refused(YAML_V2_FLOAT_TAG),
        PlainScalar::Unsigned => refused(YAML_V2_UNSIGNED_TAG),
    }
}

/// The refused text of a marked value, and why yaml.v2 refuses it; `None` for any other tag.
pub(super) fn refused_description(tag: &Tag, value: &Value) -> Option<String> {
    let number = if *tag == Tag::new(YAML_V2_FLOAT_TAG) {
        "a decimal number"
    } else if *tag == Tag::new(YAML_V2_UNSIGNED_TAG) {
        "an integer past 9223372036854775807"
    } else {
        return None;
    };
    let text = value.as_str().unwrap_or_default();
    Some(format!(
        "{text} unquoted, which envoyproxy/ratelimit's YAML reader (yaml.v2) takes for {number} \
         and refuses (quote it: \"{text}\")"
    ))
}

/// Reads one scalar as the text written (the second parse).
pub(super) struct PlainText;

impl<'de> Visitor<'de> for PlainText {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a scalar")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Value, E> {
        Ok(plain_value(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(segments: &[&str]) -> Vec<String> {
        segments
            .iter()
            .map(|segment| (*segment).to_owned())
            .collect()
    }

    #[test]
    fn the_string_fields_are_the_references_structs() {
        assert!(reference_string_field(&[], "domain"));
        assert!(!reference_string_field(&[], "key"));
        let descriptor = path(&["descriptors", "[0]"]);
        assert!(reference_string_field(&descriptor, "key"));
        assert!(reference_string_field(&descriptor, "value"));
        assert!(!reference_string_field(&descriptor, "domain"));
        let nested = path(&["descriptors", "[2]", "descriptors", "[0]"]);
        assert!(reference_string_field(&nested, "value"));
        let limit = path(&["descriptors", "[0]", "rate_limit"]);
        assert!(reference_string_field(&limit, "unit"));
        assert!(reference_string_field(&limit, "name"));
        assert!(!reference_string_field(&limit, "requests_per_unit"));
        let replaces = path(&["descriptors", "[0]", "rate_limit", "replaces", "[1]"]);
        assert!(reference_string_field(&replaces, "name"));
        let metadata = path(&["descriptors", "[0]", "metadata"]);
        assert!(!reference_string_field(&metadata, "value"));
        assert!(!reference_string_field(&path(&["other", "[0]"]), "key"));
    }

    #[test]
    fn a_quoted_scalar_is_told_from_an_unquoted_one_by_where_it_is_lent_from() {
        let source = "a: 09\nb: \"09\"\nc: '09'\nd: x\"09";
        let at = |from: usize| &source[from..from + 2];
        assert!(written_unquoted(source, at(3)));
        assert!(!written_unquoted(source, at(10)));
        assert!(!written_unquoted(source, at(18)));
        assert!(
            written_unquoted(source, at(source.len() - 2)),
            "one quote only"
        );
        let elsewhere = String::from("09");
        assert!(
            !written_unquoted(source, &elsewhere),
            "not lent from the source"
        );
    }

    #[test]
    fn unquoted_text_is_kept_nulled_or_marked_refused() {
        assert_eq!(plain_value("0x10"), Value::String("0x10".to_owned()));
        assert_eq!(plain_value("~"), Value::Null);
        let Value::Tagged(marked) = plain_value("1.5") else {
            panic!("a float is marked");
        };
        let described = refused_description(&marked.tag, &marked.value);
        assert!(
            described
                .as_deref()
                .is_some_and(|text| text.contains("\"1.5\"")),
            "{described:?}"
        );
    }
}
