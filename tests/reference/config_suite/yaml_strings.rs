//! The reference reads its YAML with yaml.v2, which decodes an unquoted number or boolean into
//! a string field as the text written: `value: True` is `True`, `value: 0x10` is `0x10`.
//! Started as `ratelimit` floodgate reads the rules so; `floodgate serve` reads them as YAML 1.2
//! resolves them (`true`, `16`), unless `--yaml-strings` says.

use floodgate::proto::RateLimitResponse;

use crate::serving::{Door, Served, MEMORY};

const RULES: &str = "
domain: yaml
descriptors:
  - key: flag
    value: True
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: code
    value: 0x10
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: switch
    value: on
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// Whether a rule limits each of `values` of its key (`flag`, `code`, `switch`, in order).
fn limited(served: &mut Served, values: [&str; 3]) -> [bool; 3] {
    let answer: RateLimitResponse = served.answer(
        "yaml",
        &[
            &[("flag", values[0])],
            &[("code", values[1])],
            &[("switch", values[2])],
        ],
    );
    let mut limited = [false; 3];
    for (slot, status) in limited.iter_mut().zip(&answer.statuses) {
        *slot = status.current_limit.is_some();
    }
    limited
}

#[test]
fn started_as_ratelimit_string_fields_hold_the_text_written_as_yaml_v2_decodes_them() {
    let mut door = Served::start_at(Door::Ratelimit, Some(RULES), MEMORY, &[]);
    assert_eq!(limited(&mut door, ["True", "0x10", "on"]), [true; 3]);
    assert_eq!(limited(&mut door, ["true", "16", "true"]), [false; 3]);

    let mut serve = Served::start_at(Door::Serve, Some(RULES), MEMORY, &[]);
    assert_eq!(limited(&mut serve, ["true", "16", "on"]), [true; 3]);
    assert_eq!(limited(&mut serve, ["True", "0x10", "true"]), [false; 3]);

    let resolved = [MEMORY, &["--yaml-strings", "resolved"]].concat();
    let mut told = Served::start_at(Door::Ratelimit, Some(RULES), &resolved, &[]);
    assert_eq!(limited(&mut told, ["true", "16", "on"]), [true; 3]);
}
