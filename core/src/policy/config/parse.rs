//! YAML text → `serde_yaml::Value`, with the leniencies of the reference's `yaml.v2` that a
//! plain `serde_yaml::from_str` would refuse: a key written twice in one map is last-wins (and
//! remembered, to warn about it), only the first document of a file counts, merge keys (`<<`)
//! are applied. Integers beyond 64 bits become a marked value so that the walk can report them
//! where they are, instead of failing the whole file. With [`YamlStrings::AsWritten`], the
//! reference's string fields hold the text written (`as_written`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, Visitor};
use serde_yaml::value::{Tag, TaggedValue};
use serde_yaml::{Mapping, Value};

use super::as_written::{plain_value, reference_string_field, written_unquoted, PlainText};
use super::yaml_tree::scalar_text;
use super::YamlStrings;
use crate::ground::metadata::TOO_LARGE_INTEGER_TAG;

/// One parsed file.
pub(super) struct Parsed {
    /// The first document; `Value::Null` for an empty file.
    pub(super) root: Value,
    /// YAML paths (`descriptors[0].rate_limit`) of keys written twice in the same map.
    pub(super) duplicate_keys: Vec<DuplicateKey>,
    /// The file holds more documents after the first (ignored, as `yaml.v2` ignores them).
    pub(super) more_documents: bool,
}

pub(super) struct DuplicateKey {
    /// Where the map is (`descriptors[0]`); empty for the top level.
    pub(super) map_path: String,
    pub(super) key: String,
}

/// A YAML syntax error, or a merge key (`<<`) that cannot be applied.
pub(super) struct SyntaxError {
    /// 1-based, when known.
    pub(super) line_column: Option<(usize, usize)>,
    pub(super) message: String,
}

/// Values a file may parse into beyond one per byte of its text. Without aliases every value
/// takes at least a byte; aliases (`*name`) repeat a value without writing it again, and
/// nested ones multiply: a few kilobytes could expand into gigabytes.
const EXTRA_VALUES: usize = 10_000;

/// Flow collections (`[` and `{`) open at once beyond this are refused before parsing: the YAML
/// parser's time grows with the square of that depth (16 000 unclosed `[` took it 5 s, found by
/// the `config_loader` fuzz target), and no rule file comes near it.
const MAX_FLOW_DEPTH: usize = 128;

pub(super) fn parse(text: &str, strings: YamlStrings) -> Result<Parsed, SyntaxError> {
    check_flow_depth(text)?;
    let as_written = strings == YamlStrings::AsWritten;
    let first = parse_document(text, as_written, &[])?;
    // A string field held a number or a boolean, whose text the parsed value lost: once more,
    // reading those scalars as text.
    let mut root = if first.reread.is_empty() {
        first.root
    } else {
        parse_document(text, as_written, &first.reread)?.root
    };
    root.apply_merge().map_err(syntax_error)?;
    Ok(Parsed {
        root,
        duplicate_keys: first.duplicates,
        more_documents: first.more_documents,
    })
}

/// The first document of `text`, before merge keys are applied.
struct Document {
    root: Value,
    duplicates: Vec<DuplicateKey>,
    /// The values (their places in the order parsed) of string fields that held a number or
    /// a boolean, under [`YamlStrings::AsWritten`].
    reread: Vec<usize>,
    more_documents: bool,
}

/// Parses the first document; the values at the places in `as_text` are read as text.
fn parse_document(
    text: &str,
    as_written: bool,
    as_text: &[usize],
) -> Result<Document, SyntaxError> {
    let mut state = ParseState {
        max_values: text.len().saturating_add(EXTRA_VALUES),
        source: text,
        as_written,
        as_text,
        ..ParseState::default()
    };
    let mut documents = serde_yaml::Deserializer::from_str(text);
    // The document iterator repeats a parse error forever: take at most two items, never loop.
    let Some(first) = documents.next() else {
        return Ok(Document {
            root: Value::Null,
            duplicates: Vec::new(),
            reread: Vec::new(),
            more_documents: false,
        });
    };
    let root = ValueSeed::new(&mut state)
        .deserialize(first)
        .map_err(syntax_error)?;
    Ok(Document {
        root,
        duplicates: state.duplicates,
        reread: state.reread,
        more_documents: documents.next().is_some(),
    })
}

/// Refuses text whose brackets and braces open deeper than [`MAX_FLOW_DEPTH`], saying where.
/// Counted over the raw text, quotes and comments included: an over-count only matters past
/// 128, which no quoted value of a rule file holds.
fn check_flow_depth(text: &str) -> Result<(), SyntaxError> {
    let mut depth = 0_usize;
    let (mut line, mut column) = (1, 0);
    for character in text.chars() {
        column += 1;
        match character {
            '\n' => (line, column) = (line + 1, 0),
            '[' | '{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(SyntaxError {
                        line_column: Some((line, column)),
                        message: format!(
                            "more than {MAX_FLOW_DEPTH} `[` or `{{` open at once; no rule \
                             needs that, and the YAML parser's time grows with the square of \
                             it: close the lists and maps, or write them as indented blocks"
                        ),
                    });
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn syntax_error(error: serde_yaml::Error) -> SyntaxError {
    SyntaxError {
        line_column: error
            .location()
            .map(|location| (location.line(), location.column())),
        message: error.to_string(),
    }
}

#[derive(Default)]
struct ParseState<'t> {
    /// Map keys and list indexes from the root to the value being read.
    path: Vec<String>,
    duplicates: Vec<DuplicateKey>,
    /// Values read so far, and how many the text may hold ([`EXTRA_VALUES`]).
    values: usize,
    max_values: usize,
    /// The text parsed, which unquoted scalars are lent from.
    source: &'t str,
    /// [`YamlStrings::AsWritten`]: the reference's string fields hold the text written.
    as_written: bool,
    /// Places (in the order values are read) of values to read as text, sorted.
    as_text: &'t [usize],
    /// Places of string fields' values that parsed as a number or a boolean.
    reread: Vec<usize>,
}

impl ParseState<'_> {
    fn path_text(&self) -> String {
        let mut text = String::new();
        for segment in &self.path {
            if !text.is_empty() && !segment.starts_with('[') {
                text.push('.');
            }
            text.push_str(segment);
        }
        text
    }
}

/// Builds a `Value` like serde_yaml's own `Deserialize`, except for the leniencies above.
struct ValueSeed<'s, 't> {
    state: &'s mut ParseState<'t>,
    /// The value of one of the reference's string fields, under [`YamlStrings::AsWritten`].
    string_field: bool,
}

impl<'s, 't> ValueSeed<'s, 't> {
    fn new(state: &'s mut ParseState<'t>) -> Self {
        Self {
            state,
            string_field: false,
        }
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        let place = self.state.values;
        self.state.values += 1;
        if self.state.values > self.state.max_values {
            return Err(de::Error::custom(format!(
                "the YAML expands to more than {} values through aliases (`*name`), more than \
                 a file of its size can hold: write the repeated parts out, or repeat them less",
                self.state.max_values
            )));
        }
        if self.state.as_text.binary_search(&place).is_ok() {
            return deserializer.deserialize_str(PlainText);
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<Value, E> {
        Ok(match i64::try_from(value) {
            Ok(small) => Value::Number(small.into()),
            Err(_) => too_large_integer(value.to_string()),
        })
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<Value, E> {
        Ok(match u64::try_from(value) {
            Ok(small) => Value::Number(small.into()),
            Err(_) => too_large_integer(value.to_string()),
        })
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_borrowed_str<E: de::Error>(self, value: &'de str) -> Result<Value, E> {
        // yaml.v2 resolves some unquoted texts YAML 1.2 keeps as strings (`09`, `1_0.5`).
        if self.string_field && written_unquoted(self.state.source, value) {
            return Ok(plain_value(value));
        }
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut sequence = Vec::new();
        loop {
            self.state.path.push(format!("[{}]", sequence.len()));
            let item = items.next_element_seed(ValueSeed::new(&mut *self.state));
            self.state.path.pop();
            match item? {
                Some(item) => sequence.push(item),
                None => return Ok(Value::Sequence(sequence)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut mapping = Mapping::new();
        while let Some(key) = entries.next_key_seed(ValueSeed::new(&mut *self.state))? {
            let key_text = scalar_text(&key).unwrap_or_else(|| "<complex key>".to_owned());
            let string_field =
                self.state.as_written && reference_string_field(&self.state.path, &key_text);
            self.state.path.push(key_text.clone());
            let place = self.state.values;
            let value = entries.next_value_seed(ValueSeed {
                state: &mut *self.state,
                string_field,
            });
            self.state.path.pop();
            let value = value?;
            if string_field && matches!(value, Value::Bool(_) | Value::Number(_)) {
                self.state.reread.push(place);
            }
            if mapping.insert(key, value).is_some() {
                let map_path = self.state.path_text();
                self.state.duplicates.push(DuplicateKey {
                    map_path,
                    key: key_text,
                });
            }
        }
        Ok(Value::Mapping(mapping))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        // A value with a custom tag (`!foo 1`): kept as tagged, the walk refuses it by type.
        let (tag, contents) = data.variant::<String>()?;
        if tag.is_empty() {
            return Err(de::Error::custom("empty YAML tag is not allowed"));
        }
        let value = de::VariantAccess::newtype_variant_seed(contents, self)?;
        Ok(Value::Tagged(Box::new(TaggedValue {
            tag: Tag::new(tag),
            value,
        })))
    }
}

fn too_large_integer(text: String) -> Value {
    Value::Tagged(Box::new(TaggedValue {
        tag: Tag::new(TOO_LARGE_INTEGER_TAG),
        value: Value::String(text),
    }))
}

/// The root value of `text`, or `None` if it does not parse (for tests).
#[cfg(test)]
pub(super) fn parse_value(text: &str) -> Option<Value> {
    parse(text, YamlStrings::Resolved)
        .ok()
        .map(|parsed| parsed.root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_last_wins_and_remembered_with_their_place() {
        let Ok(parsed) = parse(
            "a: 1\nb:\n  - c: 1\n    c: 2\na: 3\n",
            YamlStrings::Resolved,
        ) else {
            panic!("should parse");
        };
        assert_eq!(parsed.root["a"], Value::from(3));
        assert_eq!(parsed.root["b"][0]["c"], Value::from(2));
        let places: Vec<(String, String)> = parsed
            .duplicate_keys
            .iter()
            .map(|d| (d.map_path.clone(), d.key.clone()))
            .collect();
        assert_eq!(
            places,
            vec![
                ("b[0]".to_owned(), "c".to_owned()),
                (String::new(), "a".to_owned())
            ]
        );
    }

    #[test]
    fn an_empty_file_is_null() {
        assert_eq!(parse_value(""), Some(Value::Null));
        assert_eq!(parse_value("# nothing\n"), Some(Value::Null));
    }

    #[test]
    fn only_the_first_document_counts() {
        let Ok(parsed) = parse("a: 1\n---\nb: [\n", YamlStrings::Resolved) else {
            panic!("the first document is fine");
        };
        assert_eq!(parsed.root["a"], Value::from(1));
        assert!(parsed.more_documents);
    }

    #[test]
    fn syntax_errors_have_a_line_and_column() {
        let Err(error) = parse("a: [1\nb: 2", YamlStrings::Resolved) else {
            panic!("should not parse");
        };
        assert_eq!(error.line_column, Some((2, 2)));
    }

    #[test]
    fn merge_keys_are_applied() {
        let Some(root) =
            parse_value("base: &b {unit: second}\nx:\n  <<: *b\n  requests_per_unit: 1\n")
        else {
            panic!("should parse");
        };
        assert_eq!(root["x"]["unit"], Value::from("second"));
    }

    #[test]
    fn huge_integers_are_marked_not_fatal() {
        let Some(root) = parse_value("a: 18446744073709551616\nb: -9223372036854775809\n") else {
            panic!("should parse");
        };
        for key in ["a", "b"] {
            let Value::Tagged(tagged) = &root[key] else {
                panic!("{key} should be marked");
            };
            assert_eq!(tagged.tag, Tag::new(TOO_LARGE_INTEGER_TAG));
        }
    }

    #[test]
    fn aliases_that_multiply_are_refused() {
        let mut text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n".to_owned();
        for level in 1..8 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        let Err(error) = parse(&text, YamlStrings::Resolved) else {
            panic!("10^8 values from {} bytes should be refused", text.len());
        };
        assert!(error.message.contains("aliases"), "{}", error.message);
        // Aliases that repeat a little are fine.
        assert!(parse(
            "base: &b {unit: second}\nx: *b\ny: *b\n",
            YamlStrings::Resolved
        )
        .is_ok());
    }

    #[test]
    fn custom_tags_are_kept() {
        let Some(root) = parse_value("a: !foo 1\n") else {
            panic!("should parse");
        };
        assert!(matches!(root["a"], Value::Tagged(_)));
    }
}
