//! How envoyproxy/ratelimit's YAML reader, `gopkg.in/yaml.v2` v2.4.0, resolves an unquoted
//! scalar (its `resolve.go`), as far as the reference's string fields care.
//!
//! yaml.v2 decodes any resolved scalar into a Go `string` field as the text written
//! (`decode.go`, `scalar`: "if resolved != nil { out.SetString(n.value) }"), so `value: on`,
//! `value: True` and `value: 0x10` are `on`, `True` and `0x10`, and null (`~`, `null`, empty)
//! is the empty string. Before that, its `validateYamlKeys` (src/config/config_impl.go) refuses
//! the file, "error checking config", when any value outside `metadata` is neither a string,
//! an `int`, a bool nor null: a scalar yaml.v2 resolves to a float or to a `uint64` (an integer
//! past 2^63 − 1).

/// What yaml.v2 makes of an unquoted scalar, for a string field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PlainScalar {
    /// Null: the field is the empty string, as when it is absent.
    Null,
    /// A string, a bool, an `int` or a timestamp: the field is the text as written.
    AsWritten,
    /// A float: the reference refuses the file.
    Float,
    /// An integer past `i64::MAX` (a `uint64`): the reference refuses the file.
    Unsigned,
}

/// yaml.v2's `resolve("", text)` for an unquoted scalar, reduced to [`PlainScalar`].
pub(super) fn resolve_plain(text: &str) -> PlainScalar {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return PlainScalar::Null,
        ".nan" | ".NaN" | ".NAN" | ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF"
        | "-.inf" | "-.Inf" | "-.INF" => return PlainScalar::Float,
        _ => {}
    }
    // The first character is the hint: only a digit or a sign leads to a number, a dot to a
    // float; the words of its table (`yes`, `on`, …) are bools, whose text is kept.
    match text.as_bytes().first() {
        Some(b'.') if go_parse_float(text).is_some() => PlainScalar::Float,
        Some(b'0'..=b'9' | b'+' | b'-') => resolve_number(&text.replace('_', "")),
        _ => PlainScalar::AsWritten,
    }
}

/// The digit-or-sign branch: `strconv.ParseInt(plain, 0, 64)`, then `ParseUint`, then a float
/// of YAML's form (`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`); the `0b` branch
/// after them reads nothing Go's base 0 has not already read.
fn resolve_number(plain: &str) -> PlainScalar {
    if go_parse_int(plain).is_some() {
        return PlainScalar::AsWritten;
    }
    if go_parse_uint(plain).is_some() {
        return PlainScalar::Unsigned;
    }
    if yaml_style_float(plain) && go_parse_float(plain).is_some() {
        return PlainScalar::Float;
    }
    PlainScalar::AsWritten
}

/// `strconv.ParseInt(text, 0, 64)`: a sign, then [`go_parse_uint`] within `i64`.
fn go_parse_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = go_parse_uint(digits)?;
    if negative {
        0_i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// `strconv.ParseUint(text, 0, 64)`: no sign; `0x`, `0o`, `0b` (either case) or a leading `0`
/// (octal) choose the base; every remaining character must be a digit of it, and the value must
/// fit 64 bits. (yaml.v2 has removed every `_` before.)
fn go_parse_uint(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let (base, digits) = match bytes {
        [] => return None,
        [b'0', prefix, _, ..] if prefix.eq_ignore_ascii_case(&b'x') => (16, &bytes[2..]),
        [b'0', prefix, _, ..] if prefix.eq_ignore_ascii_case(&b'o') => (8, &bytes[2..]),
        [b'0', prefix, _, ..] if prefix.eq_ignore_ascii_case(&b'b') => (2, &bytes[2..]),
        [b'0', rest @ ..] => (8, rest),
        _ => (10, bytes),
    };
    digits.iter().try_fold(0_u64, |value, byte| {
        let digit = char::from(*byte).to_digit(base)?;
        value
            .checked_mul(u64::from(base))?
            .checked_add(u64::from(digit))
    })
}

/// yaml.v2's `yamlStyleFloat`.
fn yaml_style_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", fraction)) => !fraction.is_empty() && digits(fraction),
        Some((whole, fraction)) => digits(whole) && digits(fraction),
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|exponent| {
        let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        !exponent.is_empty() && digits(exponent)
    });
    mantissa_ok && exponent_ok
}

/// `strconv.ParseFloat(text, 64)` on the decimal forms that reach it: Go refuses a value beyond
/// the largest float (a range error), which Rust reads as infinity.
fn go_parse_float(text: &str) -> Option<f64> {
    let decimal = text
        .bytes()
        .all(|byte| byte.is_ascii_digit() || matches!(byte, b'.' | b'e' | b'E' | b'+' | b'-'));
    let value: f64 = text.parse().ok().filter(|_| decimal)?;
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PlainScalar::{AsWritten, Float, Null, Unsigned};

    #[test]
    fn null_words_and_the_empty_scalar_are_null() {
        for text in ["", "~", "null", "Null", "NULL"] {
            assert_eq!(resolve_plain(text), Null, "{text:?}");
        }
        assert_eq!(resolve_plain("nULL"), AsWritten);
    }

    #[test]
    fn bools_ints_and_strings_keep_their_text() {
        for text in [
            "on",
            "On",
            "ON",
            "yes",
            "y",
            "N",
            "off",
            "True",
            "FALSE",
            "0x10",
            "0X1f",
            "0o17",
            "017",
            "0b101",
            "-0b101",
            "+5",
            "-5",
            "1_000",
            "0",
            "-0",
            "00",
            "9223372036854775807",
            "-9223372036854775808",
            "2001-12-14",
            "0x",
            "0b",
            "1.2.3",
            "1e",
            "e5",
            "_1",
            "api",
            "0xg",
            "1:30",
            "1e400",
            "+",
            "-",
        ] {
            assert_eq!(resolve_plain(text), AsWritten, "{text:?}");
        }
    }

    #[test]
    fn floats_are_refused_leading_zero_decimals_with_8_or_9_among_them() {
        for text in [
            "1.5",
            ".5",
            "5.",
            "-1.5e3",
            "1e3",
            "1E+3",
            "09",
            "08",
            "0189",
            "-09",
            "1_0.5",
            ".inf",
            "-.Inf",
            ".NaN",
            "99999999999999999999",
            "-9223372036854775809",
        ] {
            assert_eq!(resolve_plain(text), Float, "{text:?}");
        }
    }

    #[test]
    fn integers_past_i64_are_unsigned_and_refused() {
        for text in [
            "9223372036854775808",
            "18446744073709551615",
            "0xFFFFFFFFFFFFFFFF",
            "1_8446744073709551615",
        ] {
            assert_eq!(resolve_plain(text), Unsigned, "{text:?}");
        }
        // One past 64 bits is a float (ParseUint fails, the float form matches).
        assert_eq!(resolve_plain("18446744073709551616"), Float);
        // In hex it is neither: the float form does not match, so it is a string.
        assert_eq!(resolve_plain("0x10000000000000000"), AsWritten);
    }
}
