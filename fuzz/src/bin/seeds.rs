//! Writes the seed inputs the fuzz targets start from into `fuzz/corpus/<target>/seed-*`:
//! the YAML fixtures of the repository and of envoyproxy/ratelimit (tests/reference/fixtures),
//! requests in protobuf, JSON and headers shaped on the service targets' rules, and
//! structured random bytes for the arithmetic targets. `cargo run --manifest-path
//! fuzz/Cargo.toml --bin seeds` after changing it; the long runs' corpora are added beside.

use std::path::{Path, PathBuf};

use floodgate::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use floodgate::proto::{RateLimitDescriptor, RateLimitRequest};
use prost::Message as _;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let corpus = root.join("fuzz/corpus");
    config_seeds(&root, &corpus.join("config_loader"));
    grpc_seeds(&corpus.join("grpc_request"));
    http_seeds(&corpus.join("http_endpoints"));
    admin_seeds(&corpus.join("admin_api"));
    random_seeds(&corpus.join("algorithms"), 48, 7);
    random_seeds(&corpus.join("redis_lua"), 32, 11);
}

fn write(dir: &Path, name: &str, data: &[u8]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    let path = dir.join(format!("seed-{name}"));
    std::fs::write(&path, data).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
}

fn yaml_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "yaml") {
            found.push(path);
        }
    }
}

fn config_seeds(root: &Path, dir: &Path) {
    let mut files = Vec::new();
    for under in [
        "config",
        "fuzz/rules.yaml",
        "tests/reference/fixtures",
        "tests/operations/fixtures",
    ] {
        let path = root.join(under);
        if path.is_file() {
            files.push(path);
        } else {
            yaml_files(&path, &mut files);
        }
    }
    files.sort();
    for path in &files {
        let text =
            std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string()
            .replace('/', "_");
        write(dir, &name, &text);
    }
    let read = |name: &str| {
        std::fs::read(root.join("tests/reference/fixtures/config").join(name))
            .unwrap_or_else(|error| panic!("{name}: {error}"))
    };
    // Two files at once: merged (option bit 0), duplicated, and a small --max-rules (bit 2).
    for (flags, first, second, name) in [
        (
            1u8,
            "merge_domain_key1.yaml",
            "merge_domain_key2.yaml",
            "merged",
        ),
        (
            0,
            "merge_domain_key1.yaml",
            "merge_domain_key2.yaml",
            "duplicate-domains",
        ),
        (4, "basic_config.yaml", "wildcard.yaml", "max-rules"),
        (2, "basic_config.yaml", "metadata.yaml", "calendar-months"),
    ] {
        let mut data = vec![flags];
        data.extend(read(first));
        data.push(0);
        data.extend(read(second));
        write(dir, &format!("two-files-{name}"), &data);
    }
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn grpc_seeds(dir: &Path) {
    let request =
        |domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32| RateLimitRequest {
            domain: domain.to_owned(),
            descriptors,
            hits_addend: hits,
        };
    let overridden = RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 7,
            unit: 2,
            unit_multiplier: Some(3),
        }),
        ..descriptor(&[("fixed", "x")])
    };
    let refund = RateLimitDescriptor {
        hits_addend: Some(2),
        is_negative_hits: true,
        ..descriptor(&[("token", "t")])
    };
    let seeds = [
        (
            "fixed",
            request("fuzz", vec![descriptor(&[("fixed", "a")])], 0),
        ),
        (
            "every-algorithm",
            request(
                "fuzz",
                [
                    "fixed", "sliding", "log", "token", "leaky", "shadow", "free", "zero",
                ]
                .iter()
                .map(|key| descriptor(&[(key, "v")]))
                .collect(),
                1,
            ),
        ),
        (
            "nested-replaces",
            request(
                "fuzz",
                vec![
                    descriptor(&[("nested", "a"), ("user", "vip")]),
                    descriptor(&[("zero", "z")]),
                ],
                2,
            ),
        ),
        ("override", request("fuzz", vec![overridden], 0)),
        ("refund", request("fuzz", vec![refund], 0)),
        (
            "edge",
            request(
                "edge",
                vec![
                    descriptor(&[("generic_key", "api"), ("client_id", "c")]),
                    descriptor(&[("remote_address", "10.0.0.1")]),
                ],
                0,
            ),
        ),
        (
            "unknown-domain",
            request("nowhere", vec![descriptor(&[("k", "v")])], 0),
        ),
        (
            "empty-domain",
            request("", vec![descriptor(&[("k", "v")])], 0),
        ),
        ("no-descriptors", request("fuzz", vec![], 0)),
        (
            "big-hits",
            request("fuzz", vec![descriptor(&[("fixed", "a")])], u32::MAX),
        ),
    ];
    for (name, request) in seeds {
        write(dir, name, &request.encode_to_vec());
    }
    write(dir, "not-protobuf", b"\xff\xff\xff\xff\x0f");
}

fn http_seeds(dir: &Path) {
    let json = [
        (
            "json-ok",
            r#"{"domain": "fuzz", "descriptors": [{"entries": [{"key": "fixed", "value": "a"}]}]}"#,
        ),
        (
            "json-hits",
            r#"{"domain": "fuzz", "hits_addend": "2", "descriptors": [{"entries": [{"key": "token", "value": "a"}]}, {"entries": [{"key": "sliding", "value": "b"}]}]}"#,
        ),
        (
            "json-override",
            r#"{"domain": "fuzz", "descriptors": [{"entries": [{"key": "log", "value": "o"}], "limit": {"requests_per_unit": 7, "unit": 3}}]}"#,
        ),
        (
            "json-camel",
            r#"{"domain": "edge", "hitsAddend": 1, "descriptors": [{"entries": [{"key": "remote_address", "value": "1.2.3.4"}], "hitsAddend": 3, "isNegativeHits": false}]}"#,
        ),
        (
            "json-unit-name",
            r#"{"domain": "fuzz", "descriptors": [{"entries": [{"key": "zero", "value": "z"}], "limit": {"requestsPerUnit": 1, "unit": "HOUR", "unitMultiplier": 2}}]}"#,
        ),
        ("json-empty-domain", r#"{"domain": "", "descriptors": []}"#),
        ("json-not-object", "[1, 2, 3]"),
    ];
    for (name, body) in json {
        let mut data = vec![0u8];
        data.extend_from_slice(body.as_bytes());
        write(dir, name, &data);
    }
    let headers = [
        ("check-headers", 1u8, "x-ratelimit-domain: fuzz\nx-ratelimit-descriptor: fixed=a\nx-ratelimit-descriptor: nested=a,user=bob\nx-ratelimit-hits: 2\n"),
        ("check-no-domain", 1, "x-ratelimit-descriptor: fixed=a\n"),
        ("check-bad-entry", 1, "x-ratelimit-domain: fuzz\nx-ratelimit-descriptor: fixed\n"),
        ("check-profile-api", 3, "api\nx-api-key: k1\nx-cost: 3\n"),
        ("check-profile-client", 3, "by_client\nx-client: c\n"),
        ("check-profile-unknown", 3, "nope\n"),
    ];
    for (name, selector, text) in headers {
        let mut data = vec![selector];
        data.extend_from_slice(text.as_bytes());
        write(dir, name, &data);
    }
}

fn admin_seeds(dir: &Path) {
    let requests: [(&str, &[(u8, &str)]); 6] = [
        (
            "create-list-delete",
            &[
                (
                    0,
                    r#"{"domain": "fuzz", "rule": "fuzz.fixed", "requests_per_unit": 5, "ttl": "15m", "reason": "incident 42"}"#,
                ),
                (1, ""),
                (2, "1"),
                (1, ""),
            ],
        ),
        (
            "by-descriptor",
            &[
                (
                    0,
                    r#"{"domain": "fuzz", "descriptor": [{"key": "nested", "value": "a"}, {"key": "user", "value": "x"}], "requests_per_unit": 0, "unit": "minute", "ttl": 600, "reason": "r"}"#,
                ),
                (1, ""),
            ],
        ),
        (
            "bad-fields",
            &[
                (
                    0,
                    r#"{"domain": "fuzz", "rule": "fuzz.nope", "requests_per_unit": -1, "ttl": "25h", "reason": ""}"#,
                ),
                (0, r#"{"domain": 3}"#),
                (0, "not json"),
            ],
        ),
        (
            "signals",
            &[
                (3, "\n312.5"),
                (3, "\n{\"value\": 0.25}"),
                (3, "unknown_signal\n7"),
                (3, "\n-1"),
            ],
        ),
        ("delete-unknown", &[(2, "no-such-id"), (2, "")]),
        (
            "adaptive-rule",
            &[
                (
                    0,
                    r#"{"domain": "fuzz", "rule": "fuzz.client", "requests_per_unit": 15, "ttl": "90s", "reason": "adaptive"}"#,
                ),
                (1, ""),
            ],
        ),
    ];
    for (name, parts) in requests {
        let mut data = Vec::new();
        for (index, (selector, body)) in parts.iter().enumerate() {
            if index > 0 {
                data.push(0);
            }
            data.push(*selector);
            data.extend_from_slice(body.as_bytes());
        }
        write(dir, name, &data);
    }
}

/// `count` inputs of pseudo-random bytes (xorshift from `seed`), 16 to 400 bytes long.
fn random_seeds(dir: &Path, count: usize, seed: u64) {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for index in 0..count {
        let length = 16 + (next() % 385) as usize;
        let data: Vec<u8> = (0..length).map(|_| next() as u8).collect();
        write(dir, &format!("random-{index:02}"), &data);
    }
}
