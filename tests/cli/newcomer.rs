//! What a new user meets first: an empty configuration, `check` pointed at `HOST:PORT`, a
//! mistyped command line, a fatal error, a second instance on busy ports. Each answer must say
//! what happened and what to do, once, with an exit code a script can tell apart.

use std::process::{Command, Output};
use std::time::Duration;

use floodgate_testkit::serve_command;
use floodgate_testkit::{floodgate_bin, free_port, subdir, tempdir, wait_for_port, Floodgate};

/// BSD's `EX_USAGE`, documented for every subcommand.
const EXIT_USAGE: i32 = 64;
/// `check`'s answer for OVER_LIMIT.
const EXIT_OVER_LIMIT: i32 = 2;

const RULES: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1}
";

fn floodgate(args: &[&str]) -> Output {
    Command::new(floodgate_bin())
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate {args:?}: {error}"))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn an_empty_configuration_directory_is_warned_about_and_fails_validation() {
    let dir = tempdir();
    let empty = subdir(dir.path(), "rules");
    let validated = floodgate(&["validate", &empty.display().to_string()]);
    assert_eq!(validated.status.code(), Some(1), "{}", text(&validated));
    let said = text(&validated);
    assert!(
        said.contains("no configuration files there") && said.contains("*.yaml"),
        "{said}"
    );

    let server = Floodgate::start(&empty, &[], &subdir(dir.path(), "serve"));
    let log = server
        .process
        .log_once_it_says("NO RULES LOADED", Duration::from_secs(10));
    assert!(
        log.contains("WARN") && log.contains("NO RULES LOADED") && log.contains("rules"),
        "{log}"
    );
}

#[test]
fn check_takes_host_and_port_without_a_scheme_and_exits_2_when_over_the_limit() {
    let dir = tempdir();
    let server = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    let addr = format!("127.0.0.1:{}", server.grpc_port);
    let ask = || floodgate(&["check", "--addr", &addr, "--domain", "edge", "client=ada"]);
    let first = ask();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert!(text(&first).contains("overall: OK"), "{}", text(&first));
    let second = ask();
    assert_eq!(
        second.status.code(),
        Some(EXIT_OVER_LIMIT),
        "{}",
        text(&second)
    );
    assert!(text(&second).contains("overall: OVER_LIMIT"));
}

#[test]
fn usage_errors_exit_64_not_2_and_say_what_to_fix() {
    let unknown_flag = floodgate(&["check", "--domian", "edge", "client=ada"]);
    assert_eq!(
        unknown_flag.status.code(),
        Some(EXIT_USAGE),
        "{}",
        text(&unknown_flag)
    );
    assert!(text(&unknown_flag).contains("--domian"));

    let bad_descriptor = floodgate(&["check", "--domain", "edge", "=ada"]);
    assert_eq!(
        bad_descriptor.status.code(),
        Some(EXIT_USAGE),
        "{}",
        text(&bad_descriptor)
    );
    assert!(
        text(&bad_descriptor).contains("every entry needs a key"),
        "{}",
        text(&bad_descriptor)
    );

    let port = free_port();
    let foreign_scheme = floodgate(&[
        "check",
        "--addr",
        &format!("grpc://127.0.0.1:{port}"),
        "--domain",
        "edge",
        "client=ada",
    ]);
    assert_eq!(
        foreign_scheme.status.code(),
        Some(EXIT_USAGE),
        "{}",
        text(&foreign_scheme)
    );
    assert!(text(&foreign_scheme).contains("HOST:PORT"));

    let (mut serve, _) = serve_command();
    let no_configuration = serve
        .env_remove("RUNTIME_ROOT")
        .env_remove("RUNTIME_SUBDIRECTORY")
        .env_remove("FLOODGATE_CONFIG")
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate: {error}"));
    assert_eq!(
        no_configuration.status.code(),
        Some(EXIT_USAGE),
        "{}",
        text(&no_configuration)
    );
    assert!(text(&no_configuration).contains("pass --config PATH"));

    // Asking for help is not an error.
    let help = floodgate(&["check", "--help"]);
    assert_eq!(help.status.code(), Some(0), "{}", text(&help));
}

#[test]
fn a_fatal_error_is_said_once() {
    let dir = tempdir();
    let missing = dir.path().join("no-such-rules.yaml");
    let (mut command, _) = serve_command();
    let output = command
        .arg("--config")
        .arg(&missing)
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate: {error}"));
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = text(&output);
    let mentions = said.matches("no-such-rules.yaml").count();
    assert_eq!(mentions, 1, "the error should appear once:\n{said}");
}

#[test]
fn a_second_instance_on_busy_ports_names_the_listener_and_the_flag() {
    let dir = tempdir();
    let first = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    wait_for_port(first.http_port, Duration::from_secs(10), "floodgate HTTP");
    let output = Command::new(floodgate_bin())
        .arg("serve")
        .arg("--config")
        .arg(dir.path().join("edge.yaml"))
        .arg("--grpc-addr")
        .arg(format!("127.0.0.1:{}", first.grpc_port))
        .arg("--http-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{}", free_port()))
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate: {error}"));
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let said = text(&output);
    assert!(
        said.contains(&format!("127.0.0.1:{}", first.grpc_port))
            && said.contains("gRPC listener")
            && said.contains("--grpc-addr")
            && said.contains("another process"),
        "{said}"
    );
}

#[test]
fn output_into_a_closed_pipe_ends_quietly_as_a_shell_expects() {
    // The reader goes away before floodgate writes (as `| head -1` does after a line).
    let mut child = Command::new(floodgate_bin())
        .arg("validate")
        .arg(floodgate_testkit::repo_file("config"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run floodgate: {error}"));
    drop(child.stdout.take());
    let output = child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("floodgate validate: {error}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // 128 + SIGPIPE, as a shell reports a process its closed pipe stopped.
    assert_eq!(output.status.code(), Some(141), "{stderr}");
}

#[test]
fn a_switch_before_a_path_does_not_take_the_path_as_its_value() {
    let config = floodgate_testkit::repo_file("config");
    let config = config.to_string_lossy();
    for switch in ["--merge-domain-config", "--calendar-months"] {
        let output = floodgate(&["validate", switch, &config]);
        assert!(output.status.success(), "{switch}: {}", text(&output));
        let output = floodgate(&["validate", &format!("{switch}=false"), &config]);
        assert!(output.status.success(), "{switch}=false: {}", text(&output));
    }
}

/// `validate` reads the reference's string fields as the server they are for will, when told:
/// `--yaml-strings as-written` (the `ratelimit` door's reading, yaml.v2's) refuses `09`, which
/// yaml.v2 reads as a decimal number, where floodgate's own reading takes it as the text `09`.
#[test]
fn validate_reads_string_fields_as_yaml_strings_says() {
    let dir = floodgate_testkit::tempdir();
    let config = dir.path().join("zip.yaml");
    std::fs::write(
        &config,
        "domain: shop\n\
         descriptors:\n\
         \x20 - key: zip\n\
         \x20   value: 09\n\
         \x20   rate_limit: {unit: minute, requests_per_unit: 5}\n",
    )
    .unwrap_or_else(|error| panic!("write {}: {error}", config.display()));
    let config = config.display().to_string();
    let resolved = floodgate(&["validate", &config]);
    assert!(resolved.status.success(), "{}", text(&resolved));
    assert!(
        text(&resolved).contains("shop.zip_09"),
        "{}",
        text(&resolved)
    );
    let as_written = floodgate(&["validate", "--yaml-strings", "as-written", &config]);
    let said = text(&as_written);
    assert_eq!(as_written.status.code(), Some(1), "{said}");
    assert!(
        said.contains("zip.yaml") && said.contains("yaml.v2") && said.contains("\"09\""),
        "names the file, the reading and the value: {said}"
    );
}
