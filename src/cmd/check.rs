//! `floodgate check`: one ShouldRateLimit call to a running server, printed for people; or,
//! with `--health`, one grpc.health.v1 Check; or, with `--explain`, how the rules read locally
//! match the descriptors (no server asked).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::cmd::cli::{CheckArgs, ClientTlsArgs};
use crate::cmd::config_location::{location, LocationError};
use crate::core::policy::config::load;
use crate::core::policy::request::Entry as RuleEntry;
use crate::engine::config_source::read_sources;
use crate::server::proto::rate_limit_descriptor::Entry;
use crate::server::proto::rate_limit_response::{self, rate_limit::Unit};
use crate::server::proto::rate_limit_service_client::RateLimitServiceClient;
use crate::server::proto::{RateLimitDescriptor, RateLimitRequest};

/// The exit code of an OVER_LIMIT answer (a script can tell it from a failure, 1, and from a
/// usage error, [`EXIT_USAGE`](crate::cmd::EXIT_USAGE)).
pub const EXIT_OVER_LIMIT: u8 = 2;

/// How long `check` waits to connect and for an answer (a health check must not hang).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("descriptor {0:?}: every entry needs a key (write key=value,key=value)")]
    BadDescriptor(String),
    #[error("{0}")]
    Usage(String),
    #[error(
        "cannot connect to {addr}: {source} (is floodgate running there? its gRPC port is \
         8081 unless --grpc-addr moved it; pass --addr HOST:PORT)"
    )]
    Connect {
        addr: String,
        source: tonic::transport::Error,
    },
    #[error("cannot read {}: {source}", path.display())]
    ReadTlsFile {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the server answered {code:?}: {message}")]
    Call { code: tonic::Code, message: String },
    #[error("cannot read the configuration: {0}")]
    Source(#[from] crate::engine::config_source::SourceError),
    #[error("the configuration has errors:\n{0}")]
    Config(#[from] crate::core::policy::config::ConfigErrors),
    #[error(transparent)]
    Location(#[from] LocationError),
}

impl CheckError {
    /// Whether the command line was wrong (rather than the server, the network or the files).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            CheckError::BadDescriptor(_) | CheckError::Usage(_) | CheckError::Location(_)
        )
    }
}

impl From<tonic::Status> for CheckError {
    fn from(status: tonic::Status) -> Self {
        CheckError::Call {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// What a check found; `main` turns it into the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The request would pass, the server is serving, or the explanation was printed.
    Ok,
    OverLimit,
    NotServing,
}

/// Parses `key=value,key=value`; a bare `key` has an empty value.
pub fn parse_descriptor(text: &str) -> Result<RateLimitDescriptor, CheckError> {
    let mut entries = Vec::new();
    for part in text.split(',') {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        if key.is_empty() {
            return Err(CheckError::BadDescriptor(text.to_owned()));
        }
        entries.push(Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(RateLimitDescriptor {
        entries,
        ..RateLimitDescriptor::default()
    })
}

pub async fn run(args: CheckArgs) -> Result<CheckOutcome, CheckError> {
    if args.health {
        return health(&args).await;
    }
    if args.explain {
        return explain(&args);
    }
    ask(&args).await
}

/// Calls the server and prints the answer.
async fn ask(args: &CheckArgs) -> Result<CheckOutcome, CheckError> {
    let domain = args.domain.clone().unwrap_or_default();
    let mut descriptors = args
        .descriptors
        .iter()
        .map(|text| parse_descriptor(text))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(hits) = args.hits {
        for descriptor in &mut descriptors {
            descriptor.hits_addend = Some(hits);
        }
    }
    let mut client = RateLimitServiceClient::new(connect(args).await?);
    let request = RateLimitRequest {
        domain,
        descriptors,
        hits_addend: 0,
    };
    let response = client.should_rate_limit(request).await?.into_inner();
    for (index, (text, status)) in args.descriptors.iter().zip(&response.statuses).enumerate() {
        crate::cmd::output::print_line(format_args!(
            "descriptor {index} [{text}]: {}",
            describe_status(status)
        ));
    }
    let over_limit = response.overall_code == rate_limit_response::Code::OverLimit as i32;
    crate::cmd::output::print_line(format_args!(
        "overall: {}",
        if over_limit { "OVER_LIMIT" } else { "OK" }
    ));
    for header in &response.response_headers_to_add {
        crate::cmd::output::print_line(format_args!("header {}: {}", header.key, header.value));
    }
    Ok(if over_limit {
        CheckOutcome::OverLimit
    } else {
        CheckOutcome::Ok
    })
}

/// One grpc.health.v1 Check; prints the status.
async fn health(args: &CheckArgs) -> Result<CheckOutcome, CheckError> {
    let mut client = HealthClient::new(connect(args).await?);
    let response = client
        .check(HealthCheckRequest {
            service: args.health_service.clone(),
        })
        .await?
        .into_inner();
    let status = ServingStatus::try_from(response.status).unwrap_or(ServingStatus::Unknown);
    crate::cmd::output::print_line(format_args!("{}", status.as_str_name()));
    Ok(if status == ServingStatus::Serving {
        CheckOutcome::Ok
    } else {
        CheckOutcome::NotServing
    })
}

/// Loads the rules locally and prints how each descriptor matches them.
fn explain(args: &CheckArgs) -> Result<CheckOutcome, CheckError> {
    let location = location(&args.config)?;
    let options = args.config.load_options();
    let sources = read_sources(&location, args.config.limits.max_config_bytes)?;
    let rules = load(&sources, &options)?;
    let descriptors = args
        .descriptors
        .iter()
        .map(|text| {
            parse_descriptor(text).map(|descriptor| {
                descriptor
                    .entries
                    .into_iter()
                    .map(|entry| RuleEntry::new(entry.key, entry.value))
                    .collect::<Vec<_>>()
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let domain = args.domain.as_deref().unwrap_or_default();
    crate::cmd::output::print_line(format_args!(
        "explained offline from the rules in {} (no server was asked: a running floodgate \
         answers from the rules it has loaded, which may be another version)",
        crate::engine::config_source::location_path(&location).display()
    ));
    let explanation = crate::core::decision::explain::explain(&rules, domain, &descriptors);
    crate::cmd::output::print(format_args!(
        "{}",
        crate::cmd::explain_text::render(&explanation)
    ));
    Ok(CheckOutcome::Ok)
}

/// A channel to `--addr`, over TLS when it is `https://…`.
async fn connect(args: &CheckArgs) -> Result<Channel, CheckError> {
    let connect_error = |source| CheckError::Connect {
        addr: args.addr.clone(),
        source,
    };
    let addr = with_scheme(&args.addr)?;
    let mut endpoint = Endpoint::from_shared(addr.clone())
        .map_err(connect_error)?
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    if addr.starts_with("https://") {
        endpoint = endpoint
            .tls_config(client_tls(&args.tls)?)
            .map_err(connect_error)?;
    } else if args.tls.tls_ca.is_some() || args.tls.tls_cert.is_some() {
        return Err(CheckError::Usage(
            "TLS options need an https:// address: pass --addr https://HOST:PORT".to_owned(),
        ));
    }
    endpoint.connect().await.map_err(connect_error)
}

/// `--addr` as a URI: `HOST:PORT` alone means plain `http://HOST:PORT` (as grpcurl and
/// Envoy's cluster addresses are written); `http://` and `https://` are kept; any other
/// scheme is a usage error.
fn with_scheme(addr: &str) -> Result<String, CheckError> {
    match addr.split_once("://") {
        None => Ok(format!("http://{addr}")),
        Some(("http" | "https", _)) => Ok(addr.to_owned()),
        Some((scheme, _)) => Err(CheckError::Usage(format!(
            "--addr {addr}: the scheme {scheme}:// is not one floodgate speaks; \
             write HOST:PORT, http://HOST:PORT or https://HOST:PORT"
        ))),
    }
}

fn client_tls(tls: &ClientTlsArgs) -> Result<ClientTlsConfig, CheckError> {
    let Some(ca) = &tls.tls_ca else {
        return Err(CheckError::Usage(
            "an https:// address needs --tls-ca FILE (the CA that signed the server's \
             certificate)"
                .to_owned(),
        ));
    };
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
    if let (Some(cert), Some(key)) = (&tls.tls_cert, &tls.tls_key) {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &tls.tls_server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

fn read(path: &Path) -> Result<Vec<u8>, CheckError> {
    std::fs::read(path).map_err(|source| CheckError::ReadTlsFile {
        path: path.to_path_buf(),
        source,
    })
}

fn describe_status(status: &rate_limit_response::DescriptorStatus) -> String {
    let code = rate_limit_response::Code::try_from(status.code)
        .map(|code| code.as_str_name())
        .unwrap_or("UNKNOWN");
    let Some(limit) = &status.current_limit else {
        return if status.limit_remaining == u32::MAX {
            format!("{code} (unlimited)")
        } else {
            format!("{code} (no limit applies)")
        };
    };
    let unit = Unit::try_from(limit.unit)
        .map(|unit| unit.as_str_name())
        .unwrap_or("UNKNOWN");
    let multiplier = limit
        .unit_multiplier
        .map(|m| format!("{m}×"))
        .unwrap_or_default();
    let name = if limit.name.is_empty() {
        String::new()
    } else {
        format!(" name={}", limit.name)
    };
    let reset = status
        .duration_until_reset
        .as_ref()
        .map_or(0, |duration| duration.seconds);
    format!(
        "{code} limit {}/{multiplier}{unit}{name}, remaining {}, reset in {reset}s",
        limit.requests_per_unit, status.limit_remaining
    )
}

/// `floodgate check`: the exit code says the answer (0 OK, 2 OVER_LIMIT, 1 not serving or an
/// error).
pub async fn main(args: CheckArgs) -> ExitCode {
    match run(args).await {
        Ok(CheckOutcome::Ok) => ExitCode::SUCCESS,
        Ok(CheckOutcome::OverLimit) => ExitCode::from(EXIT_OVER_LIMIT),
        Ok(CheckOutcome::NotServing) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("floodgate check: {error}");
            if error.is_usage() {
                ExitCode::from(crate::cmd::EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_without_a_scheme_is_plain_http_and_a_foreign_scheme_is_a_usage_error() {
        assert_eq!(
            with_scheme("127.0.0.1:8081").ok().as_deref(),
            Some("http://127.0.0.1:8081")
        );
        assert_eq!(
            with_scheme("localhost:9").ok().as_deref(),
            Some("http://localhost:9")
        );
        assert_eq!(
            with_scheme("https://rl:8081").ok().as_deref(),
            Some("https://rl:8081")
        );
        let foreign = with_scheme("grpc://rl:8081");
        assert!(
            matches!(&foreign, Err(error) if error.is_usage()),
            "{foreign:?}"
        );
    }

    #[test]
    fn descriptors_parse_like_the_cli_says() {
        let parsed = parse_descriptor("generic_key=api,client_id=alice").unwrap_or_default();
        let pairs: Vec<(&str, &str)> = parsed
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        assert_eq!(pairs, [("generic_key", "api"), ("client_id", "alice")]);
        let bare = parse_descriptor("remote_address").unwrap_or_default();
        assert_eq!(bare.entries.first().map(|e| e.value.as_str()), Some(""));
        assert!(parse_descriptor("=x").is_err());
        assert!(parse_descriptor("a=1,").is_err());
    }
}
