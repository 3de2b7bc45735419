//! A domain's `failure_policy:`: read from the top of its file, checked, and exposed on
//! `DomainRules`; merged files of one domain must agree.

use floodgate::core::arithmetic::failure::FailurePolicy;
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};

fn file(name: &str, text: &str) -> SourceFile {
    SourceFile {
        name: name.to_owned(),
        text: text.to_owned(),
    }
}

const DESCRIPTORS: &str =
    "descriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";

#[test]
fn each_policy_is_read_and_absent_means_the_global_default() {
    for policy in FailurePolicy::ALL {
        let text = format!(
            "domain: d\nfailure_policy: {}\n{DESCRIPTORS}",
            policy.name()
        );
        let rules = load(&[file("d.yaml", &text)], &LoadOptions::default())
            .unwrap_or_else(|errors| panic!("{policy}: {errors}"));
        let domain = rules.domain("d").unwrap_or_else(|| panic!("no domain d"));
        assert_eq!(domain.failure_policy, Some(policy));
    }
    let text = format!("domain: d\n{DESCRIPTORS}");
    let rules = load(&[file("d.yaml", &text)], &LoadOptions::default())
        .unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(rules.domain("d").and_then(|d| d.failure_policy), None);
}

#[test]
fn an_unknown_policy_is_an_error_with_a_suggestion() {
    let text = format!("domain: d\nfailure_policy: fail_opne\n{DESCRIPTORS}");
    let errors = match load(&[file("d.yaml", &text)], &LoadOptions::default()) {
        Ok(_) => panic!("an unknown policy loaded"),
        Err(errors) => errors.to_string(),
    };
    assert!(
        errors.contains("unknown failure policy 'fail_opne'"),
        "{errors}"
    );
    assert!(errors.contains("did you mean 'fail_open'"), "{errors}");
}

#[test]
fn merged_files_of_one_domain_must_agree() {
    let options = LoadOptions {
        merge_domains: true,
        ..LoadOptions::default()
    };
    let first = file(
        "a.yaml",
        &format!("domain: d\nfailure_policy: local\n{DESCRIPTORS}"),
    );
    let agreeing = "domain: d\nfailure_policy: local\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let silent = "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    let differing = "domain: d\nfailure_policy: fail_open\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
    for second in [agreeing, silent] {
        let rules = load(&[first.clone(), file("b.yaml", second)], &options)
            .unwrap_or_else(|errors| panic!("{errors}"));
        assert_eq!(
            rules.domain("d").and_then(|d| d.failure_policy),
            Some(FailurePolicy::Local)
        );
    }
    let errors = match load(&[first, file("b.yaml", differing)], &options) {
        Ok(_) => panic!("disagreeing policies loaded"),
        Err(errors) => errors.to_string(),
    };
    assert!(errors.contains("merged files must agree"), "{errors}");
}
