//! `heavy_hitters:` on a descriptor: hashed unless it says `raw`, and any other word refused.

use super::*;
use crate::arithmetic::heavy_hitters::HitterValues;

fn with_values(values: &str) -> String {
    format!(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: ip\n\
         \x20   rate_limit: {{unit: minute, requests_per_unit: 10}}\n\
         {values}"
    )
}

#[test]
fn values_are_hashed_unless_the_rule_says_raw() {
    let hashed = loaded(&with_values(""));
    assert_eq!(
        rule_at(&hashed, "d", "d.ip").hitter_values,
        HitterValues::Hashed
    );
    let raw = loaded(&with_values("    heavy_hitters: raw\n"));
    assert_eq!(rule_at(&raw, "d", "d.ip").hitter_values, HitterValues::Raw);
    let message = lines(&errors_of(&with_values("    heavy_hitters: plain\n")));
    assert!(
        message.contains("heavy_hitters must be `hashed`"),
        "{message}"
    );
}
