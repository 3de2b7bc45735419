//! Reading typed fields out of a parsed `serde_yaml::Value` the way the reference's `yaml.v2`
//! reads them into its structs, and describing values in messages.
//!
//! YAML 1.1 leniency (the reference's parser) that serde_yaml's YAML 1.2 does not have:
//! * booleans also written `yes/no/on/off/y/n` in any case;
//! * numbers and booleans in string fields (`value: 123`) are their text;
//! * integers with `_` separators (`1_000`).
//!
//! Every reader returns `Err(found)`, a description of the offending value, for the caller to
//! put in a message that names the field and the fix.

use serde_yaml::{Mapping, Value};

/// The value of `key` in `map`; `None` when absent or `null` (the reference's zero value).
pub(super) fn field<'m>(map: &'m Mapping, key: &str) -> Option<&'m Value> {
    map.get(key).filter(|value| !value.is_null())
}

/// Text of a string field. Integers and booleans count as their text, as in `yaml.v2`.
pub(super) fn text(value: &Value) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Bool(flag) => Ok(flag.to_string()),
        Value::Number(number) if !number.is_f64() => Ok(number.to_string()),
        other => Err(describe(other)),
    }
}

/// A boolean field: `true/false` and YAML 1.1's `yes/no/on/off/y/n`, in any case. Quoted
/// forms are accepted too (the reference would refuse them; nothing is lost by accepting).
pub(super) fn boolean(value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(flag) => Ok(*flag),
        Value::String(text) => match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" | "on" => Ok(true),
            "false" | "no" | "n" | "off" => Ok(false),
            _ => Err(describe(value)),
        },
        other => Err(describe(other)),
    }
}

/// An unsigned 32-bit integer field (`requests_per_unit`, `burst`, `unit_multiplier`).
pub(super) fn whole_number(value: &Value) -> Result<u32, String> {
    match value {
        Value::Number(number) => {
            if let Some(unsigned) = number.as_u64() {
                u32::try_from(unsigned).map_err(|_| format!("{unsigned}, which is too large"))
            } else if let Some(negative) = number.as_i64() {
                Err(format!("{negative}, a negative number"))
            } else {
                Err(describe(value))
            }
        }
        // YAML 1.1 integers with separators, and quoted digits.
        Value::String(text) => digits_to_u32(text).ok_or_else(|| describe(value)),
        other => Err(describe(other)),
    }
}

fn digits_to_u32(text: &str) -> Option<u32> {
    let digits: String = text.chars().filter(|c| *c != '_').collect();
    let well_formed = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit())
        && !text.starts_with('_')
        // YAML 1.1 reads a leading zero as octal (`017` is 15): too surprising to guess.
        && (digits == "0" || !digits.starts_with('0'));
    if well_formed {
        digits.parse().ok()
    } else {
        None
    }
}

/// The message for a field of the wrong type; starts like the reference's `error checking
/// config`.
pub(super) fn wrong_type(field: &str, expected: &str, found: &str, example: &str) -> String {
    format!("error checking config: `{field}` must be {expected}, found {found}: write it like `{example}`")
}

/// The reference's message for a list entry that is not a map, and the fix.
pub(super) fn not_a_map(item: &Value, list: &str, example: &str) -> String {
    format!(
        "config error, yaml file contains list of type other than map: {}: write each entry of \
         `{list}` as a map, like `- {example}`",
        render(item)
    )
}

/// A scalar as text (for keys and values in messages); `None` for lists, maps and tags.
pub(super) fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("null".to_owned()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(number.to_string()),
        Value::String(text) => Some(text.clone()),
        Value::Sequence(_) | Value::Mapping(_) | Value::Tagged(_) => None,
    }
}

/// What a value is, for "found …" in messages: `'abc'`, `the number 1.5`, `a list`.
pub(super) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".to_owned(),
        Value::Bool(flag) => format!("the boolean {flag}"),
        Value::Number(number) if number.is_f64() => format!("the decimal number {number}"),
        Value::Number(number) => format!("the number {number}"),
        Value::String(text) => format!("'{text}'"),
        Value::Sequence(_) => format!("a list ({})", render(value)),
        Value::Mapping(_) => format!("a map ({})", render(value)),
        Value::Tagged(tagged)
            if tagged.tag
                == serde_yaml::value::Tag::new(crate::ground::metadata::TOO_LARGE_INTEGER_TAG) =>
        {
            format!("the integer {}, which is too large", render(&tagged.value))
        }
        Value::Tagged(tagged) => super::as_written::refused_description(&tagged.tag, &tagged.value)
            .unwrap_or_else(|| format!("a value tagged {}", tagged.tag)),
    }
}

/// A short one-line rendering of any value, in YAML flow style, cut after ~60 characters.
pub(super) fn render(value: &Value) -> String {
    const LIMIT: usize = 60;
    let mut out = String::new();
    render_into(value, &mut out, LIMIT);
    if out.chars().count() > LIMIT {
        let cut: String = out.chars().take(LIMIT).collect();
        return format!("{cut}…");
    }
    out
}

fn render_into(value: &Value, out: &mut String, limit: usize) {
    if out.len() > limit {
        return;
    }
    match value {
        Value::Sequence(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                render_into(item, out, limit);
            }
            out.push(']');
        }
        Value::Mapping(map) => {
            out.push('{');
            for (index, (key, item)) in map.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                render_into(key, out, limit);
                out.push_str(": ");
                render_into(item, out, limit);
            }
            out.push('}');
        }
        Value::Tagged(tagged) => {
            out.push_str(&tagged.tag.to_string());
            out.push(' ');
            render_into(&tagged.value, out, limit);
        }
        scalar => out.push_str(&scalar_text(scalar).unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::config::parse::parse_value;

    fn value(yaml: &str) -> Value {
        parse_value(yaml).unwrap_or(Value::Null)
    }

    #[test]
    fn yaml_1_1_booleans_in_any_case() {
        for yes in [
            "yes", "Yes", "YES", "on", "On", "y", "Y", "true", "True", "TRUE",
        ] {
            assert_eq!(boolean(&value(yes)), Ok(true), "{yes}");
        }
        for no in ["no", "No", "off", "OFF", "n", "N", "false", "False"] {
            assert_eq!(boolean(&value(no)), Ok(false), "{no}");
        }
        assert!(boolean(&value("1")).is_err());
        assert!(boolean(&value("maybe")).is_err());
    }

    #[test]
    fn numbers_and_booleans_are_text_in_string_fields() {
        assert_eq!(text(&value("123")), Ok("123".to_owned()));
        assert_eq!(text(&value("-5")), Ok("-5".to_owned()));
        assert_eq!(text(&value("007")), Ok("007".to_owned()));
        assert_eq!(text(&value("true")), Ok("true".to_owned()));
        assert_eq!(text(&value("yes")), Ok("yes".to_owned()));
        assert!(text(&value("1.5")).is_err());
        assert!(text(&value("[a]")).is_err());
    }

    #[test]
    fn whole_numbers_in_range_only() {
        assert_eq!(whole_number(&value("0")), Ok(0));
        assert_eq!(whole_number(&value("4294967295")), Ok(u32::MAX));
        assert_eq!(whole_number(&value("1_000")), Ok(1000));
        assert_eq!(whole_number(&value("'20'")), Ok(20));
        assert_eq!(whole_number(&value("0x10")), Ok(16));
        for bad in [
            "4294967296",
            "-1",
            "1.5",
            "1e3",
            "017",
            "abc",
            "_1",
            "true",
            "18446744073709551616",
        ] {
            assert!(whole_number(&value(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn descriptions_say_what_was_found() {
        assert_eq!(describe(&value("1.5")), "the decimal number 1.5");
        assert_eq!(describe(&value("[a, 1]")), "a list ([a, 1])");
        assert_eq!(
            describe(&value("99999999999999999999")),
            "the integer 99999999999999999999, which is too large"
        );
        let long = format!("[{}]", ["abcdefghij"; 10].join(", "));
        assert!(render(&value(&long)).ends_with('…'));
    }
}
