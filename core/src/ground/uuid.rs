//! A random UUID's text: version 4, hyphenated, lowercase (RFC 9562), as Go's `uuid.NewRandom()`
//! and Rust's `uuid::Uuid::new_v4()` write it. The caller brings the randomness; this only
//! stamps the version and variant and spells the bytes.

/// `random` as a version-4 UUID: `xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`.
pub fn version_4(mut random: [u8; 16]) -> String {
    random[6] = (random[6] & 0x0f) | 0x40;
    random[8] = (random[8] & 0x3f) | 0x80;
    let hex: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_and_variant_are_stamped_on_the_random_bytes() {
        assert_eq!(
            version_4([0xff; 16]),
            "ffffffff-ffff-4fff-bfff-ffffffffffff"
        );
        assert_eq!(version_4([0; 16]), "00000000-0000-4000-8000-000000000000");
    }
}
