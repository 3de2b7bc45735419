//! Health of a real process: grpc.health.v1 (`ratelimit` readiness, `""` liveness), HTTP `/healthcheck`,
//! `floodgate check --health`, NOT_SERVING while draining after SIGTERM, reflection.

use std::process::Command;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit as common;
use floodgate_testkit::ops::{self, descriptor, request, Server};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

const RULES: &str =
    "domain: h\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n";

fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let file = temp.path().join("rules.yaml");
    std::fs::write(&file, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let file = file.display().to_string();
    let mut args = vec!["--config", file.as_str()];
    args.extend_from_slice(extra);
    let server = ops::start(&args, &[], temp.path());
    (temp, server)
}

fn grpc_health(server: &Server, service: &str) -> Option<ServingStatus> {
    ops::runtime().block_on(async {
        let channel = tonic::transport::Channel::from_shared(server.grpc_url())
            .ok()?
            .connect()
            .await
            .ok()?;
        let mut client = HealthClient::new(channel);
        let response = client
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .ok()?;
        ServingStatus::try_from(response.into_inner().status).ok()
    })
}

fn healthcheck(server: &Server) -> Option<(u16, String)> {
    common::http::get(server.http_port, "/healthcheck", &[])
        .ok()
        .map(|response| (response.status, response.body))
}

/// `floodgate check --health --addr URL`: exit code and output.
fn check_health(url: &str) -> (Option<i32>, String) {
    let output = Command::new(common::floodgate_bin())
        .args(["check", "--health", "--addr", url])
        .env_remove("FLOODGATE_CONFIG")
        .output()
        .unwrap_or_else(|error| panic!("run floodgate check: {error}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

fn rate_limit_call_succeeds(server: &Server) -> bool {
    ops::runtime().block_on(async {
        let Ok(mut client) = RateLimitServiceClient::connect(server.grpc_url()).await else {
            return false;
        };
        client
            .should_rate_limit(request("h", vec![descriptor(&[("k", "v")], None)]))
            .await
            .is_ok()
    })
}

#[test]
fn serving_until_sigterm_then_not_serving_while_draining() {
    let (_temp, mut server) = start(&["--drain-seconds", "2"]);
    ops::wait_for(Duration::from_secs(5), "serving", || {
        healthcheck(&server) == Some((200, "OK".to_owned()))
    });
    for service in ["", "ratelimit"] {
        assert_eq!(
            grpc_health(&server, service),
            Some(ServingStatus::Serving),
            "{service:?}"
        );
    }
    let (code, output) = check_health(&server.grpc_url());
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("SERVING"), "{output}");

    server.send_signal("TERM");
    let signalled = Instant::now();
    ops::wait_for(Duration::from_secs(1), "NOT_SERVING after SIGTERM", || {
        healthcheck(&server).is_some_and(|(status, _)| status == 500)
    });
    // The gRPC status mirrors the same flag from a task of its own: give it the same second.
    ops::wait_for(Duration::from_secs(1), "gRPC ratelimit NOT_SERVING", || {
        grpc_health(&server, "ratelimit") == Some(ServingStatus::NotServing)
    });
    // The server as a whole is alive (liveness), as in envoyproxy/ratelimit.
    assert_eq!(grpc_health(&server, ""), Some(ServingStatus::Serving));
    let (code, output) = check_health(&server.grpc_url());
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("NOT_SERVING"), "{output}");
    // Draining: still answering while load balancers catch up.
    assert!(rate_limit_call_succeeds(&server));

    let status = server.process.terminate(Duration::from_secs(10));
    let stopped_after = signalled.elapsed();
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
    assert!(
        stopped_after >= Duration::from_millis(1800),
        "stopped {stopped_after:?} after SIGTERM, before the drain ended"
    );
    let log = server.process.log_text();
    assert!(log.contains("draining"), "{log}");
    assert!(log.contains("floodgate stopped"), "{log}");
}

#[test]
fn without_a_drain_sigterm_stops_at_once() {
    let (_temp, mut server) = start(&[]);
    let started = Instant::now();
    let status = server.process.terminate(Duration::from_secs(5));
    assert!(status.is_some_and(|status| status.success()), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn check_health_fails_when_nothing_listens() {
    let url = format!("http://127.0.0.1:{}", common::free_port());
    let started = Instant::now();
    let (code, output) = check_health(&url);
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("cannot connect"), "{output}");
    assert!(started.elapsed() < Duration::from_secs(8));
}

/// The answer of grpc.reflection.v1 to one `question`, or the status of the call.
fn reflection_answer(
    server: &Server,
    question: MessageRequest,
) -> Result<Option<MessageResponse>, tonic::Status> {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    ops::runtime().block_on(async {
        let channel = tonic::transport::Channel::from_shared(server.grpc_url())
            .unwrap_or_else(|error| panic!("url: {error}"))
            .connect()
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let ask = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(question),
        };
        let mut answers = ServerReflectionClient::new(channel)
            .server_reflection_info(tokio_stream::iter([ask]))
            .await?
            .into_inner();
        let answer = answers.message().await?;
        Ok(answer.and_then(|answer| answer.message_response))
    })
}

/// The services reflection lists, or the status of the call.
fn reflected_services(server: &Server) -> Result<Vec<String>, tonic::Status> {
    match reflection_answer(server, MessageRequest::ListServices(String::new()))? {
        Some(MessageResponse::ListServicesResponse(list)) => Ok(list
            .service
            .into_iter()
            .map(|service| service.name)
            .collect::<Vec<_>>()),
        other => panic!("expected a service list, got {other:?}"),
    }
}

#[test]
fn reflection_lists_the_services() {
    let (_temp, server) = start(&[]);
    let services =
        reflected_services(&server).unwrap_or_else(|status| panic!("reflection: {status:?}"));
    for expected in [
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
        "envoy.service.auth.v3.Authorization",
        "grpc.health.v1.Health",
    ] {
        assert!(services.iter().any(|name| name == expected), "{services:?}");
    }
}

/// The files reflection gives for one question: the file declaring a symbol
/// (`FileContainingSymbol`) or a file by name (`FileByFilename`), as grpcurl asks them.
fn reflected_files(
    server: &Server,
    question: MessageRequest,
) -> Vec<prost_types::FileDescriptorProto> {
    use prost::Message as _;

    let asked = format!("{question:?}");
    let answer = reflection_answer(server, question)
        .unwrap_or_else(|status| panic!("reflection: {status:?}"));
    match answer {
        Some(MessageResponse::FileDescriptorResponse(files)) => files
            .file_descriptor_proto
            .iter()
            .map(|bytes| {
                prost_types::FileDescriptorProto::decode(bytes.as_slice()).unwrap_or_else(|error| {
                    panic!("{asked}: a file that is no descriptor: {error}")
                })
            })
            .collect(),
        other => panic!("expected the files of {asked}, got {other:?}"),
    }
}

#[test]
fn reflection_describes_ext_authz_and_rlqs_with_every_import() {
    let (_temp, server) = start(&[]);
    for (symbol, file, method) in [
        (
            "envoy.service.auth.v3.Authorization",
            "envoy/service/auth/v3/external_auth.proto",
            "Check",
        ),
        (
            "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
            "envoy/service/rate_limit_quota/v3/rlqs.proto",
            "StreamRateLimitQuotas",
        ),
    ] {
        let files = reflected_files(
            &server,
            MessageRequest::FileContainingSymbol(symbol.to_owned()),
        );
        let names: Vec<&str> = files.iter().map(|file| file.name()).collect();
        let declaring = files
            .iter()
            .find(|candidate| candidate.name() == file)
            .unwrap_or_else(|| panic!("{symbol}: no {file} in {names:?}"));
        assert!(
            declaring.service.iter().any(|service| service
                .method
                .iter()
                .any(|candidate| candidate.name() == method)),
            "{file} has no method {method}"
        );
        // grpcurl then asks for every import by name, to build the messages.
        let mut pending: Vec<String> = declaring.dependency.clone();
        let mut seen: Vec<String> = vec![file.to_owned()];
        while let Some(import) = pending.pop() {
            if seen.contains(&import) {
                continue;
            }
            let found = reflected_files(&server, MessageRequest::FileByFilename(import.clone()));
            let Some(imported) = found.iter().find(|candidate| candidate.name() == import) else {
                panic!("{symbol}: reflection has no {import}");
            };
            pending.extend(imported.dependency.iter().cloned());
            seen.push(import);
        }
    }
}

#[test]
fn reflection_can_be_left_out() {
    let (_temp, server) = start(&["--grpc-reflection=false"]);
    match reflected_services(&server) {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}"),
        Ok(services) => panic!("--grpc-reflection=false still lists {services:?}"),
    }
}
