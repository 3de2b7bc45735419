//! `floodgate validate [PATH]`: load a configuration as `serve` would, and print its rules or
//! every error in it. The configuration is the files at PATH, or, without one and with
//! `--config-type grpc-xds-sotw`, the first snapshot the xDS management server sends: fetched
//! on a stream of its own and never acknowledged, so the server records nothing as applied.

use std::process::ExitCode;
use std::time::Duration;

use crate::cmd::cli::{ConfigTypeArg, ValidateArgs};
use crate::core::policy::config::{load, LoadOptions};
use crate::core::policy::rules::RuleSet;
use crate::engine::config_source::xds::{fetch_once, XdsSettings};
use crate::engine::config_source::{read_sources, ConfigLocation};
use crate::engine::reload::load_xds_resources;

/// How long `validate` waits for the management server's first snapshot.
const XDS_FETCH_TIMEOUT: Duration = Duration::from_secs(15);

pub async fn main(args: ValidateArgs) -> ExitCode {
    let limitador = args.limitador_limits.as_deref().map(limitador_limits);
    if args.path.is_none() && args.xds.config_type == ConfigTypeArg::File {
        if let Some(checked) = limitador {
            return checked;
        }
    }
    let rules = rules(&args).await;
    match limitador {
        Some(checked) if checked != ExitCode::SUCCESS => checked,
        _ => rules,
    }
}

/// Compiles Limitador's limits file and prints its limits (exit 0) or the error (exit 1).
fn limitador_limits(path: &std::path::Path) -> ExitCode {
    match crate::engine::limitador::limits_file::load(path) {
        Ok(limits) => {
            crate::cmd::output::print_line(format_args!(
                "{}: Limitador limits ok, {} limits",
                path.display(),
                limits.limit_count()
            ));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

async fn rules(args: &ValidateArgs) -> ExitCode {
    let options = LoadOptions {
        yaml_strings: args.yaml_strings.into(),
        ..args.limits.load_options(
            args.default_algorithm,
            args.merge_domain_config,
            args.calendar_months,
        )
    };
    match (&args.path, args.xds.config_type) {
        (Some(path), _) => files(path, &options, args.limits.max_config_bytes),
        (None, ConfigTypeArg::GrpcXdsSotw) => {
            let settings = match crate::cmd::xds_settings::xds_settings(&args.xds) {
                Ok(settings) => settings,
                Err(error) => {
                    eprintln!("{error}");
                    return ExitCode::from(crate::cmd::EXIT_USAGE);
                }
            };
            xds(&settings, &options, args.limits.max_config_bytes).await
        }
        (None, ConfigTypeArg::File) => {
            eprintln!(
                "nothing to validate: give a PATH (a YAML file or a directory of them), or \
                 --config-type grpc-xds-sotw to check what the xDS management server sends, \
                 or --limitador-limits FILE"
            );
            ExitCode::from(crate::cmd::EXIT_USAGE)
        }
    }
}

fn files(path: &std::path::Path, options: &LoadOptions, max_config_bytes: u64) -> ExitCode {
    let location = ConfigLocation::Path(path.to_path_buf());
    let sources = match read_sources(&location, max_config_bytes) {
        Ok(sources) => sources,
        Err(error) => {
            eprintln!("cannot read the configuration: {error}");
            return ExitCode::FAILURE;
        }
    };
    if sources.is_empty() {
        eprintln!(
            "{}: no configuration files there (floodgate reads *.yaml and *.yml): \
             nothing would be limited; point at the directory that holds the rules",
            path.display()
        );
        return ExitCode::FAILURE;
    }
    let loaded = load(&sources, options)
        .map_err(|errors| errors.0.iter().map(ToString::to_string).collect());
    report(&path.display().to_string(), loaded)
}

async fn xds(settings: &XdsSettings, options: &LoadOptions, max_config_bytes: u64) -> ExitCode {
    if let Err(error) = settings.check_tls_files() {
        eprintln!("TLS to the xDS management server: {error}");
        return ExitCode::FAILURE;
    }
    let snapshot = match fetch_once(settings, XDS_FETCH_TIMEOUT).await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let label = format!(
        "xds {} (node {:?}) version {:?}, {} resources, not acknowledged",
        settings.server,
        settings.node_id,
        snapshot.version,
        snapshot.resources.len()
    );
    report(
        &label,
        load_xds_resources(&snapshot.resources, options, max_config_bytes, None),
    )
}

/// Prints the rules (exit 0) or every problem (exit 1).
fn report(label: &str, loaded: Result<RuleSet, Vec<String>>) -> ExitCode {
    match loaded {
        Ok(rules) => {
            crate::cmd::output::print_line(format_args!("{label}: configuration ok"));
            for warning in rules.warnings() {
                crate::cmd::output::print_line(format_args!("warning: {warning}"));
            }
            for domain in rules.domains() {
                crate::cmd::output::print_line(format_args!(
                    "domain {} ({}):",
                    domain.name,
                    domain.sources.join(", ")
                ));
                for rule in domain.rules() {
                    crate::cmd::output::print_line(format_args!(
                        "  {}",
                        crate::core::policy::describe::rule_summary(rule)
                    ));
                }
            }
            ExitCode::SUCCESS
        }
        Err(problems) => {
            eprintln!("{} error(s) in {label}:", problems.len());
            for problem in &problems {
                eprintln!("  {problem}");
            }
            ExitCode::FAILURE
        }
    }
}
