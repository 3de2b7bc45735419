//! Generated configurations of realistic shape and any size, and the process memory figures
//! read from `/proc`: what `tests/operations/rules_memory.rs` asserts on and what
//! `examples/rules_memory.rs` (run by `scripts/bench-rules-memory.sh`) reports. Shared by both
//! through this crate, so the benchmark and the test measure the same configurations.
//!
//! Each group of descriptors below holds 8 rules and covers what configurations in the field
//! hold: nested descriptors, exact, key-only and wildcard values, `unlimited`, every unit and
//! algorithm, `rate_limits` (several limits), `name`/`replaces`, and on some groups
//! `shadow_mode`, `detailed_metric`, `metadata` and `priority:` classes. 20 000 rules take
//! about 2 MB of YAML (the issue's figures came from 1.7 MB). Adaptive rules (`adaptive:`) are
//! left out: each starts a controller task, which is not the rule set's memory.

use std::fmt::Write as _;
use std::path::Path;

/// Rules in one group of [`rule_group`].
pub const RULES_PER_GROUP: usize = 8;

/// The entries of one descriptor per rule of group `group`: sent together, they touch each of
/// its [`RULES_PER_GROUP`] rules once.
pub fn group_requests(group: usize) -> Vec<Vec<(String, String)>> {
    let tenant = format!("tenant-{group}");
    let entries = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect::<Vec<_>>()
    };
    vec![
        entries(&[("generic_key", &tenant)]),
        entries(&[("generic_key", &tenant), ("client_id", "some-client")]),
        entries(&[("generic_key", &tenant), ("client_id", "batch-job")]),
        entries(&[
            ("generic_key", &tenant),
            ("path", &format!("/v1/{group}/orders/42")),
        ]),
        entries(&[
            ("generic_key", &tenant),
            ("path", &format!("/v1/{group}/export/2026")),
        ]),
        entries(&[
            ("generic_key", &tenant),
            ("client_id", "some-client"),
            ("remote_address", "10.0.0.1"),
        ]),
        entries(&[(
            "remote_address",
            &format!("10.{}.{}.1", group / 250, group % 250),
        )]),
        entries(&[("header_match", &format!("login-{group}"))]),
    ]
}

/// One group of 8 rules (YAML list items of a `descriptors:` at the top level), about 800
/// bytes: leaves and limits in flow style, as many files write them. `generation` changes every limit,
/// so a file written with the next generation is a real reload.
pub fn rule_group(group: usize, generation: u32) -> String {
    let units = ["second", "minute", "hour", "day"];
    let unit = units[group % units.len()];
    let algorithms = [
        "fixed_window",
        "sliding_window",
        "token_bucket, burst: 20",
        "leaky_bucket, burst: 5",
    ];
    let algorithm = algorithms[group % algorithms.len()];
    let base = 100 + generation * 7 + u32::try_from(group % 1000).unwrap_or(0);
    // Extensions on some groups only, as in real files.
    let mut extras = String::new();
    if group.is_multiple_of(5) {
        extras.push_str("\n        shadow_mode: true");
    }
    if group.is_multiple_of(7) {
        extras.push_str("\n        detailed_metric: true");
    }
    if group.is_multiple_of(16) {
        extras.push_str(
            "\n        priority: {key: class, classes: {critical: 100%, low: 50%}, default: low}",
        );
    }
    let metadata = if group.is_multiple_of(4) {
        format!("\n    metadata: {{team: team-{}}}", group % 50)
    } else {
        String::new()
    };
    format!(
        r#"  - key: generic_key
    value: tenant-{group}
    rate_limit: {{unit: {unit}, requests_per_unit: {tenant_limit}, name: t{group}}}{metadata}
    descriptors:
      - key: client_id
        rate_limit: {{unit: second, requests_per_unit: {base}, algorithm: {algorithm}}}{extras}
        descriptors:
          - {{key: remote_address, rate_limit: {{unit: minute, requests_per_unit: {per_address}, algorithm: sliding_log}}}}
      - {{key: client_id, value: batch-job, rate_limit: {{unlimited: true}}}}
      - key: path
        value: "/v1/{group}/export/*"
        rate_limits:
          - {{unit: minute, unit_multiplier: 5, requests_per_unit: {base}, replaces: [{{name: t{group}}}]}}
          - {{unit: day, requests_per_unit: {daily}}}
      - {{key: path, value: "/v1/{group}/*", share_threshold: true, rate_limit: {{unit: minute, requests_per_unit: {base}}}}}
  - {{key: remote_address, value: "10.{octet_b}.{octet_c}.1", rate_limit: {{unit: hour, requests_per_unit: {base}}}}}
  - {{key: header_match, value: login-{group}, rate_limit: {{unit: minute, requests_per_unit: 5}}}}
"#,
        tenant_limit = base * 10,
        per_address = base / 10 + 1,
        daily = base * 1000,
        octet_b = group / 250,
        octet_c = group % 250,
    )
}

/// The files of a configuration with at least `rules` rules (a multiple of
/// [`RULES_PER_GROUP`]), spread over `domains` domains of one file each: `(file name, text)`.
/// Group `g` is in domain `g % domains`, named `bench-<index>`.
pub fn generated_files(rules: usize, domains: usize, generation: u32) -> Vec<(String, String)> {
    let domains = domains.max(1);
    let groups = rules.div_ceil(RULES_PER_GROUP);
    let mut texts: Vec<String> = (0..domains)
        // The generation line makes every generation a change, also without rules.
        .map(|domain| format!("# generation {generation}\ndomain: bench-{domain}\ndescriptors:\n"))
        .collect();
    for group in 0..groups {
        if let Some(text) = texts.get_mut(group % domains) {
            text.push_str(&rule_group(group, generation));
        }
    }
    texts
        .into_iter()
        .enumerate()
        .map(|(domain, text)| (format!("bench-{domain}.yaml"), text))
        .collect()
}

/// Writes the configuration of [`generated_files`] into `dir`, each file replaced atomically
/// (written aside, then renamed over the old one), and returns its total size in bytes.
pub fn write_generated(dir: &Path, rules: usize, domains: usize, generation: u32) -> usize {
    let mut total = 0;
    for (name, text) in generated_files(rules, domains, generation) {
        let path = dir.join(&name);
        let aside = dir.join(format!(".{name}.tmp"));
        std::fs::write(&aside, &text)
            .unwrap_or_else(|error| panic!("write {}: {error}", aside.display()));
        std::fs::rename(&aside, &path)
            .unwrap_or_else(|error| panic!("rename to {}: {error}", path.display()));
        total += text.len();
    }
    total
}

/// Requests that reach every rule of [`generated_files`] (`rules`, `domains`) once: each
/// group's descriptors, packed `per_request` to a request of their domain.
pub fn traffic(
    rules: usize,
    domains: usize,
    per_request: usize,
) -> Vec<floodgate::proto::RateLimitRequest> {
    let domains = domains.max(1);
    let mut by_domain: Vec<Vec<floodgate::proto::RateLimitDescriptor>> = vec![Vec::new(); domains];
    for group in 0..rules.div_ceil(RULES_PER_GROUP) {
        let Some(descriptors) = by_domain.get_mut(group % domains) else {
            continue;
        };
        for entries in group_requests(group) {
            descriptors.push(floodgate::proto::RateLimitDescriptor {
                entries: entries
                    .into_iter()
                    .map(
                        |(key, value)| floodgate::proto::rate_limit_descriptor::Entry {
                            key,
                            value,
                        },
                    )
                    .collect(),
                ..Default::default()
            });
        }
    }
    let mut requests = Vec::new();
    for (domain, descriptors) in by_domain.into_iter().enumerate() {
        for chunk in descriptors.chunks(per_request.max(1)) {
            requests.push(floodgate::proto::RateLimitRequest {
                domain: format!("bench-{domain}"),
                descriptors: chunk.to_vec(),
                hits_addend: 0,
            });
        }
    }
    requests
}

/// How many reloads a floodgate log reports: `(swapped in, rejected)`.
pub fn reloads_logged(log: &str) -> (usize, usize) {
    (
        log.matches("configuration reloaded").count(),
        log.matches("configuration reload rejected").count()
            + log.matches("configuration reload failed").count(),
    )
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`), or `None` when it cannot be read.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|line| line.split(':').next() == Some(field))?;
    let mut words = line.split_whitespace();
    words.next();
    words.next()?.parse().ok()
}

/// Resets the process's peak RSS (`VmHWM`) to its RSS now (writing 5 to `clear_refs`), so
/// that the next reading is the peak of what happens after this call. False when the kernel
/// refused it.
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// `text` with a line per `(label, KiB)`, for failure messages.
pub fn describe_kib(readings: &[(&str, u64)]) -> String {
    let mut text = String::new();
    for (label, kib) in readings {
        let _ = writeln!(text, "  {label}: {kib} KiB");
    }
    text
}
