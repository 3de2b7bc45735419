//! The xDS config source's settings from `--xds-*` flags and envoyproxy/ratelimit's
//! `CONFIG_GRPC_XDS_*` / `XDS_CLIENT_*` variables: every value checked at start, a value that
//! cannot be used a usage error naming the flag, the variable and what to write.

use std::path::PathBuf;
use std::time::Duration;

use crate::cmd::cli::XdsArgs;
use crate::cmd::reference_env::go_duration;
use crate::engine::config_source::xds::{
    parse_node_metadata, BackoffSettings, ServerAddress, StreamHeaders, XdsSettings, XdsTlsFiles,
};

/// The settings, or what is wrong with them (a usage error).
pub fn xds_settings(args: &XdsArgs) -> Result<XdsSettings, String> {
    let defaults = BackoffSettings::default();
    let backoff = BackoffSettings {
        initial: duration(
            "--xds-backoff-initial",
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            &args.xds_backoff_initial,
            defaults.initial,
        )?,
        max: duration(
            "--xds-backoff-max",
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            &args.xds_backoff_max,
            defaults.max,
        )?,
        factor: factor(&args.xds_backoff_factor, defaults.factor)?,
        jitter: args.xds_backoff_jitter,
    };
    let (node_metadata, skipped) = parse_node_metadata(&args.xds_node_metadata);
    for entry in skipped {
        tracing::warn!(
            variable = "CONFIG_GRPC_XDS_NODE_METADATA",
            "CONFIG_GRPC_XDS_NODE_METADATA: {entry:?} has no '=' and is left out of the node's \
             metadata, as envoyproxy/ratelimit leaves it out: write key=value"
        );
    }
    let settings = XdsSettings {
        server: ServerAddress::parse(&args.xds_server_url).map_err(|error| error.to_string())?,
        node_id: args.xds_node_id.clone(),
        node_metadata,
        headers: StreamHeaders::parse(&args.xds_headers).map_err(|error| error.to_string())?,
        tls: tls_files(args)?,
        connect_retry_interval: duration(
            "--xds-connect-retry-interval",
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            &args.xds_connect_retry_interval,
            Duration::from_secs(3),
        )?,
        backoff,
        max_message_bytes: message_size(&args.xds_max_message_bytes)?,
    };
    if settings.connect_retry_interval.is_zero() {
        return Err(
            "--xds-connect-retry-interval (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL) is 0, \
             which would retry without a pause: give a positive duration (the default is 3s)"
                .to_owned(),
        );
    }
    Ok(settings)
}

/// A file setting: empty (as deployments often set them) is none.
fn file(value: &Option<String>) -> Option<PathBuf> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

fn tls_files(args: &XdsArgs) -> Result<Option<XdsTlsFiles>, String> {
    let cert = file(&args.xds_tls_cert);
    let key = file(&args.xds_tls_key);
    let client_identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(
                "--xds-tls-cert (CONFIG_GRPC_XDS_CLIENT_TLS_CERT) and --xds-tls-key \
                 (CONFIG_GRPC_XDS_CLIENT_TLS_KEY) go together: give both for mutual TLS with \
                 the management server, or neither"
                    .to_owned(),
            )
        }
    };
    let server_name = args
        .xds_tls_server_name
        .as_deref()
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned);
    let files = XdsTlsFiles {
        client_identity,
        server_ca: file(&args.xds_tls_ca),
        server_name,
    };
    if args.xds_tls {
        return Ok(Some(files));
    }
    if files
        != (XdsTlsFiles {
            client_identity: None,
            server_ca: None,
            server_name: None,
        })
    {
        tracing::warn!(
            "TLS files for the xDS management server are set, but CONFIG_GRPC_XDS_SERVER_USE_TLS \
             (--xds-tls) is not: connecting without TLS, as envoyproxy/ratelimit does"
        );
    }
    Ok(None)
}

fn duration(flag: &str, variable: &str, text: &str, default: Duration) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(default);
    }
    go_duration(text).ok_or_else(|| {
        format!(
            "{flag} ({variable})={text:?} is not a duration: write it as envoyproxy/ratelimit \
             does (10s, 500ms, 1m30s)"
        )
    })
}

fn factor(text: &str, default: f64) -> Result<f64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(default);
    }
    match text.parse::<f64>() {
        Ok(factor) if factor.is_finite() => Ok(factor),
        _ => Err(format!(
            "--xds-backoff-factor (XDS_CLIENT_BACKOFF_RANDOM_FACTOR)={text:?} is not a number: \
             write one such as 0.5 or 2"
        )),
    }
}

/// 0 or empty: gRPC's default.
fn message_size(text: &str) -> Result<Option<usize>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<usize>() {
        Ok(0) => Ok(None),
        Ok(bytes) => Ok(Some(bytes)),
        Err(_) => Err(format!(
            "--xds-max-message-bytes (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES)={text:?} is not a number \
             of bytes: write one such as 16777216"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Line {
        #[command(flatten)]
        xds: XdsArgs,
    }

    fn parse(args: &[&str]) -> Result<XdsSettings, String> {
        let line = Line::try_parse_from(std::iter::once("floodgate").chain(args.iter().copied()))
            .map_err(|error| error.to_string())?;
        xds_settings(&line.xds)
    }

    #[test]
    fn the_defaults_are_the_references() {
        let settings = parse(&[]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(settings.server.to_string(), "localhost:18000");
        assert_eq!(settings.node_id, "default");
        assert!(settings.node_metadata.is_empty() && settings.headers.names().is_empty());
        assert_eq!(settings.connect_retry_interval, Duration::from_secs(3));
        assert_eq!(settings.backoff, BackoffSettings::default());
        assert_eq!(settings.max_message_bytes, None);
        assert!(settings.tls.is_none());
    }

    #[test]
    fn values_are_read_and_empty_ones_are_defaults() {
        let settings = parse(&[
            "--xds-server-url=xds:9",
            "--xds-backoff-initial=250ms",
            "--xds-backoff-max=",
            "--xds-backoff-factor=2",
            "--xds-backoff-jitter=false",
            "--xds-max-message-bytes=1024",
            "--xds-tls",
            "--xds-tls-ca=/ca.pem",
            "--xds-tls-server-name=envoy-gateway",
            "--xds-tls-cert=",
        ])
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(settings.server.to_string(), "xds:9");
        assert_eq!(
            settings.backoff,
            BackoffSettings {
                initial: Duration::from_millis(250),
                max: Duration::from_secs(60),
                factor: 2.0,
                jitter: false,
            }
        );
        assert_eq!(settings.max_message_bytes, Some(1024));
        assert_eq!(
            settings.tls,
            Some(XdsTlsFiles {
                client_identity: None,
                server_ca: Some(PathBuf::from("/ca.pem")),
                server_name: Some("envoy-gateway".to_owned()),
            })
        );
    }

    #[test]
    fn bad_values_name_the_flag_and_the_variable() {
        for (args, named) in [
            (
                &["--xds-backoff-initial=soon"][..],
                "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            ),
            (
                &["--xds-backoff-factor=fast"],
                "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            ),
            (&["--xds-backoff-jitter=maybe"], "XDS_CLIENT_BACKOFF_JITTER"),
            (
                &["--xds-max-message-bytes=4MiB"],
                "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            ),
            (
                &["--xds-connect-retry-interval=0"],
                "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            ),
            (
                &["--xds-server-url=http://x:1"],
                "CONFIG_GRPC_XDS_SERVER_URL",
            ),
            (
                &["--xds-headers=novalue"],
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            ),
            (
                &["--xds-tls", "--xds-tls-key=/k.pem"],
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            ),
        ] {
            let error = parse(args).err().unwrap_or_default();
            assert!(error.contains(named), "{args:?}: {error}");
        }
    }
}
