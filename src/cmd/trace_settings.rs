//! Which traces the process exports (`core::decision::semantics::Traces`): floodgate's own settings
//! (`--otlp-endpoint`, `OTEL_*`), or envoyproxy/ratelimit's `TRACING_*` variables, read as its
//! `src/settings/settings.go` reads them and applied as its `src/trace/trace.go` does:
//! `TRACING_ENABLED` (off by default), `TRACING_EXPORTER_PROTOCOL` (`http`, its default, or
//! `grpc`), the resource's `service.name` (`TRACING_SERVICE_NAME`, `RateLimit`),
//! `service.namespace` and `service.instance.id` (a random UUID when not given), and a
//! parent-based sampler of `TRACING_SAMPLING_RATE` (1). Where and how to send is OpenTelemetry
//! Go's `OTEL_EXPORTER_OTLP_*` settings, as its exporters read them: the endpoint, TLS (with the
//! system's roots, or `OTEL_EXPORTER_OTLP_CERTIFICATE` and the client certificate variables),
//! gzip; `OTEL_EXPORTER_OTLP_PROTOCOL` is not read (the exporter sends protobuf whatever it says).

use super::cli::TelemetryArgs;
use super::setting_values::env_bool;
use crate::core::decision::semantics::Traces;
use crate::telemetry::{OtlpExport, OtlpTlsFiles, TraceOptions, TracedService};

/// The traces to export, and a remark for the log once it is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSetup {
    pub options: TraceOptions,
    pub note: Option<String>,
}

/// The traces `traces` says, from `telemetry`'s flags and the environment (`env`).
pub fn trace_setup(
    traces: Traces,
    telemetry: &TelemetryArgs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<TraceSetup, String> {
    match traces {
        Traces::Floodgate => {
            let on = matches!(env_bool("TRACING_ENABLED", &env), Ok(Some(true)));
            Ok(TraceSetup {
                options: telemetry.trace_options(),
                note: on.then(|| {
                    "TRACING_ENABLED is read started as ratelimit (or with --traces \
                     reference); as floodgate serve, traces are exported when \
                     --otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) is set"
                        .to_owned()
                }),
            })
        }
        Traces::AsTheReference => reference_setup(telemetry, &env),
    }
}

fn reference_setup(
    telemetry: &TelemetryArgs,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<TraceSetup, String> {
    let enabled = env_bool("TRACING_ENABLED", env).map_err(|error| error.to_string())?;
    let mut options = TraceOptions {
        export: None,
        sample_ratio: 1.0,
        service: reference_service(env),
        tls: OtlpTlsFiles::from_env(env),
    };
    if enabled != Some(true) {
        let endpoint_set = telemetry.otlp_endpoint.is_some()
            || otel(env, "ENDPOINT").is_some()
            || otel(env, "TRACES_ENDPOINT").is_some();
        let note = endpoint_set.then(|| {
            "an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or --otlp-endpoint) but \
             TRACING_ENABLED is not true: started as ratelimit, traces follow \
             envoyproxy/ratelimit's TRACING_* settings and stay off; set TRACING_ENABLED=true, \
             or --traces floodgate"
                .to_owned()
        });
        return Ok(TraceSetup { options, note });
    }
    options.sample_ratio = sampling_rate(env)?;
    options.export = Some(reference_export(protocol(env)?, env)?);
    Ok(TraceSetup {
        options,
        note: None,
    })
}

/// `TRACING_EXPORTER_PROTOCOL`'s transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http,
    Grpc,
}

fn protocol(env: &impl Fn(&str) -> Option<String>) -> Result<Protocol, String> {
    match env("TRACING_EXPORTER_PROTOCOL").as_deref() {
        None | Some("http" | "") => Ok(Protocol::Http),
        Some("grpc") => Ok(Protocol::Grpc),
        Some(other) => Err(format!(
            "TRACING_EXPORTER_PROTOCOL={other:?}: envoyproxy/ratelimit exports over `http` (its \
             default) or `grpc` and exits on anything else; set one of them"
        )),
    }
}

/// `TRACING_SAMPLING_RATE` (default 1): at 1 or above every trace, at 0 or below none, as Go's
/// `TraceIDRatioBased`.
fn sampling_rate(env: &impl Fn(&str) -> Option<String>) -> Result<f64, String> {
    let Some(text) = env("TRACING_SAMPLING_RATE") else {
        return Ok(1.0);
    };
    match text.parse::<f64>() {
        Ok(rate) if !rate.is_nan() => Ok(rate.clamp(0.0, 1.0)),
        _ => Err(format!(
            "TRACING_SAMPLING_RATE={text:?} is not a number, which envoyproxy/ratelimit refuses \
             to start on: give the share of traces to record, e.g. 0.1"
        )),
    }
}

/// The reference's resource: `TRACING_SERVICE_NAME` (`RateLimit`), `TRACING_SERVICE_NAMESPACE`
/// (`""`, set all the same) and `TRACING_SERVICE_INSTANCE_ID` (a random UUID when empty).
fn reference_service(env: &impl Fn(&str) -> Option<String>) -> TracedService {
    let instance = env("TRACING_SERVICE_INSTANCE_ID").filter(|id| !id.is_empty());
    TracedService {
        name: env("TRACING_SERVICE_NAME").unwrap_or_else(|| "RateLimit".to_owned()),
        namespace: Some(env("TRACING_SERVICE_NAMESPACE").unwrap_or_default()),
        instance_id: Some(instance.unwrap_or_else(random_uuid)),
    }
}

/// A random (version 4) UUID, as the reference's `uuid.NewRandom()`.
fn random_uuid() -> String {
    crate::core::ground::uuid::version_4(rand::random())
}

/// `OTEL_EXPORTER_OTLP_<key>`, trimmed; empty counts as unset (OpenTelemetry Go's reader).
fn otel(env: &impl Fn(&str) -> Option<String>, key: &str) -> Option<(String, String)> {
    let name = format!("OTEL_EXPORTER_OTLP_{key}");
    let value = env(&name)?.trim().to_owned();
    (!value.is_empty()).then_some((name, value))
}

/// Where OpenTelemetry Go's exporter of `protocol` sends: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
/// (for HTTP its path as written), else `OTEL_EXPORTER_OTLP_ENDPOINT` (for HTTP with
/// `/v1/traces` after its path), else `localhost:4318` (HTTP) or `localhost:4317` (gRPC); over
/// TLS unless the URL says `http://` or `OTEL_EXPORTER_OTLP_[TRACES_]INSECURE` is `true`.
/// `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL` is not read: OpenTelemetry Go's OTLP/HTTP exporter
/// sends protobuf even when it says `http/json`, and `TRACING_EXPORTER_PROTOCOL` picks gRPC.
fn reference_export(
    protocol: Protocol,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<OtlpExport, String> {
    let default_port = match protocol {
        Protocol::Http => 4318,
        Protocol::Grpc => 4317,
    };
    let mut target = Target {
        origin: format!("localhost:{default_port}"),
        path: "/v1/traces".to_owned(),
        secure: true,
    };
    if let Some((name, value)) = otel(env, "ENDPOINT") {
        target = Target::from_url(&name, &value, |path| {
            format!("{}/v1/traces", path.trim_end_matches('/'))
        })?;
    }
    if let Some((name, value)) = otel(env, "TRACES_ENDPOINT") {
        target = Target::from_url(&name, &value, str::to_owned)?;
    }
    for key in ["INSECURE", "TRACES_INSECURE"] {
        if let Some((_, value)) = otel(env, key) {
            target.secure = !value.eq_ignore_ascii_case("true");
        }
    }
    let scheme = if target.secure { "https" } else { "http" };
    Ok(match protocol {
        Protocol::Http => OtlpExport::Http(format!("{scheme}://{}{}", target.origin, target.path)),
        Protocol::Grpc => OtlpExport::Grpc(format!("{scheme}://{}", target.origin)),
    })
}

/// A collector as an endpoint variable gives it.
struct Target {
    /// `host:port`.
    origin: String,
    /// The URL path spans are posted to (OTLP/HTTP).
    path: String,
    secure: bool,
}

impl Target {
    /// The collector of URL `value`, given as variable `name`; `path` makes the URL path.
    fn from_url(name: &str, value: &str, path: impl Fn(&str) -> String) -> Result<Target, String> {
        let refused = |why: &str| {
            format!(
                "{name}={value:?} {why}: give the collector's URL, e.g. \
                 http://otel-collector:4318"
            )
        };
        let url = url::Url::parse(value).map_err(|error| refused(&error.to_string()))?;
        let secure = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(refused(&format!(
                    "has the scheme {other:?}, not http or https"
                )))
            }
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(refused("names no host"));
        }
        let origin = &url[url::Position::BeforeHost..url::Position::AfterPort];
        Ok(Target {
            origin: origin.to_owned(),
            path: path(url.path()),
            secure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::front_door::tests::env;
    use crate::cmd::semantics_settings::tests::serve_args;

    fn telemetry(flags: &[&str]) -> TelemetryArgs {
        serve_args(flags).telemetry
    }

    fn reference(pairs: &[(&str, &str)]) -> Result<TraceSetup, String> {
        trace_setup(Traces::AsTheReference, &telemetry(&[]), env(pairs))
    }

    fn export(pairs: &[(&str, &str)]) -> Result<Option<OtlpExport>, String> {
        reference(pairs).map(|setup| setup.options.export)
    }

    const ON: (&str, &str) = ("TRACING_ENABLED", "true");

    #[test]
    fn the_reference_traces_only_with_tracing_enabled() {
        assert_eq!(export(&[]), Ok(None));
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        let off = reference(&[endpoint]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(off.options.export, None);
        assert!(off
            .note
            .is_some_and(|note| note.contains("TRACING_ENABLED is not true")));
        assert!(reference(&[("TRACING_ENABLED", "yes")]).is_err());
    }

    #[test]
    fn http_posts_to_the_endpoint_with_v1_traces_and_the_traces_endpoint_as_it_is() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(
            export(&[ON, base]),
            Ok(Some(OtlpExport::Http(
                "http://collector:4318/v1/traces".into()
            )))
        );
        let prefixed = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/otlp/");
        assert_eq!(
            export(&[ON, prefixed]),
            Ok(Some(OtlpExport::Http(
                "http://collector:4318/otlp/v1/traces".into()
            )))
        );
        let signal = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:9/in");
        assert_eq!(
            export(&[ON, base, signal]),
            Ok(Some(OtlpExport::Http("http://other:9/in".into())))
        );
        let bare = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:9");
        assert_eq!(
            export(&[ON, bare]),
            Ok(Some(OtlpExport::Http("http://other:9/".into())))
        );
    }

    #[test]
    fn grpc_takes_the_host_and_port() {
        let grpc = ("TRACING_EXPORTER_PROTOCOL", "grpc");
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317");
        assert_eq!(
            export(&[ON, grpc, base]),
            Ok(Some(OtlpExport::Grpc("http://collector:4317".into())))
        );
        let insecure = ("OTEL_EXPORTER_OTLP_INSECURE", "TRUE");
        assert_eq!(
            export(&[ON, grpc, insecure]),
            Ok(Some(OtlpExport::Grpc("http://localhost:4317".into())))
        );
        let refused = export(&[ON, ("TRACING_EXPORTER_PROTOCOL", "zipkin")]);
        assert!(
            refused
                .as_ref()
                .is_err_and(|error| error.starts_with("TRACING_EXPORTER_PROTOCOL=")),
            "{refused:?}"
        );
    }

    #[test]
    fn tls_unless_the_url_says_http_or_insecure_is_true_and_the_protocol_is_not_read() {
        let grpc = ("TRACING_EXPORTER_PROTOCOL", "grpc");
        for (pairs, expected) in [
            (
                vec![ON],
                OtlpExport::Http("https://localhost:4318/v1/traces".into()),
            ),
            (
                vec![ON, grpc],
                OtlpExport::Grpc("https://localhost:4317".into()),
            ),
            (
                vec![
                    ON,
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ],
                OtlpExport::Http("https://collector:4318/v1/traces".into()),
            ),
            (
                vec![
                    ON,
                    grpc,
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                    ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "false"),
                ],
                OtlpExport::Grpc("https://collector:4317".into()),
            ),
        ] {
            assert_eq!(export(&pairs), Ok(Some(expected)), "{pairs:?}");
        }
        let with_ca = reference(&[ON, ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/otel/ca.pem")])
            .unwrap_or_else(|error| panic!("{error}"));
        assert_ne!(with_ca.options.tls, OtlpTlsFiles::default());
        let not_a_url = export(&[ON, ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]);
        assert!(not_a_url.is_err(), "{not_a_url:?}");
    }

    #[test]
    fn the_service_and_the_sampling_rate_are_the_references() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        let setup = reference(&[ON, base]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(setup.options.service.name, "RateLimit");
        assert_eq!(setup.options.service.namespace.as_deref(), Some(""));
        let instance = setup.options.service.instance_id.unwrap_or_default();
        assert_eq!(instance.len(), 36, "{instance}");
        assert_eq!(instance.as_bytes()[14], b'4', "{instance}");
        assert!((setup.options.sample_ratio - 1.0).abs() < f64::EPSILON);
        let named = reference(&[
            ON,
            base,
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "gateway"),
            ("TRACING_SERVICE_INSTANCE_ID", "pod-1"),
            ("TRACING_SAMPLING_RATE", "2.5"),
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            named.options.service,
            TracedService {
                name: "envoy-ratelimit".into(),
                namespace: Some("gateway".into()),
                instance_id: Some("pod-1".into()),
            }
        );
        assert!((named.options.sample_ratio - 1.0).abs() < f64::EPSILON);
        assert!(reference(&[ON, base, ("TRACING_SAMPLING_RATE", "half")]).is_err());
    }

    #[test]
    fn floodgates_traces_keep_the_otlp_flags_and_say_tracing_enabled_is_not_read() {
        let flags = telemetry(&["--otlp-endpoint", "http://jaeger:4317"]);
        let setup = trace_setup(Traces::Floodgate, &flags, env(&[ON]))
            .unwrap_or_else(|error| panic!("{error}"));
        if std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() {
            assert_eq!(
                setup.options.export,
                Some(OtlpExport::Grpc("http://jaeger:4317".into()))
            );
        }
        assert!(setup
            .note
            .is_some_and(|note| note.contains("--traces reference")));
    }
}
