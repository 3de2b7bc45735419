//! `--limitador-limits`: `floodgate validate` checks Limitador's limits file alone and names the
//! limit and the expression of a CEL error; `floodgate serve` refuses to start on such a file,
//! and serves a good one alone, without `--config`, as Limitador starts on its file.

use std::process::{Command, Output};
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::rls::{call, connect, request};
use floodgate_testkit::{floodgate_bin, runtime, serve_command, tempdir, wait_for_port, Running};

const GOOD: &str = "- namespace: api\n  max_value: 2\n  seconds: 60\n  name: per-user\n  \
                    conditions:\n  - \"descriptors[0].method == 'GET'\"\n  variables:\n  \
                    - descriptors[0].user\n";
const BAD: &str = "- namespace: api\n  max_value: 2\n  seconds: 60\n  name: per-user\n  \
                   conditions:\n  - \"descriptors[0].method ==\"\n  variables: []\n";

fn validate(path: &std::path::Path) -> Output {
    Command::new(floodgate_bin())
        .args(["validate", "--limitador-limits"])
        .arg(path)
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate validate: {error}"))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn validate_checks_limitadors_limits_file_alone() {
    let dir = tempdir();
    let good = dir.path().join("good.yaml");
    let bad = dir.path().join("bad.yaml");
    for (path, text) in [(&good, GOOD), (&bad, BAD)] {
        std::fs::write(path, text).unwrap_or_else(|error| panic!("write: {error}"));
    }
    let accepted = validate(&good);
    assert_eq!(accepted.status.code(), Some(0), "{}", text(&accepted));
    assert!(text(&accepted).contains("Limitador limits ok, 1 limits"));
    let refused = validate(&bad);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let said = text(&refused);
    assert!(said.contains("limit per-user"), "{said}");
    assert!(said.contains("`descriptors[0].method ==`"), "{said}");
}

#[test]
fn serve_refuses_to_start_on_a_limits_file_that_does_not_compile() {
    let dir = tempdir();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, BAD).unwrap_or_else(|error| panic!("write: {error}"));
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let (mut command, _ports) = serve_command();
    command
        .arg("--config")
        .arg(&rules)
        .arg("--limitador-limits")
        .arg(&bad);
    let mut running = Running::spawn("floodgate", &mut command, dir.path());
    let log = running.log_of_a_refused_start(Duration::from_secs(20));
    assert!(log.contains("limit per-user"), "{log}");
    assert!(log.contains("is not valid CEL"), "{log}");
}

#[test]
fn serve_answers_from_limitadors_limits_alone_without_a_config() {
    let dir = tempdir();
    let good = dir.path().join("limits.yaml");
    std::fs::write(&good, GOOD).unwrap_or_else(|error| panic!("write: {error}"));
    let (mut command, (grpc, _, _)) = serve_command();
    command.arg("--limitador-limits").arg(&good);
    let mut running = Running::spawn("floodgate", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(20), "floodgate's gRPC port");
    let codes = runtime().block_on(async {
        let mut client = connect(&format!("http://127.0.0.1:{grpc}")).await;
        let mut codes = Vec::new();
        for domain in ["api", "api", "api", "elsewhere"] {
            let asked = request(domain, &[&[("method", "GET"), ("user", "ann")]]);
            let answer = call(&mut client, asked)
                .await
                .unwrap_or_else(|status| panic!("{domain}: {status}"));
            codes.push(Code::try_from(answer.overall_code));
        }
        codes
    });
    assert_eq!(
        codes,
        [
            Ok(Code::Ok),
            Ok(Code::Ok),
            Ok(Code::OverLimit),
            Ok(Code::Ok)
        ],
        "{}",
        running.log_text()
    );
    assert!(running.terminate(Duration::from_secs(10)).is_some());
}
