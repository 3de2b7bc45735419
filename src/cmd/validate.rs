//! `floodgate validate PATH`: load a configuration as `serve` would, and print its rules or
//! every error in it.

use std::process::ExitCode;

use crate::cmd::cli::ValidateArgs;
use crate::core::config::load;
use crate::engine::config_source::{read_sources, ConfigLocation};

pub fn main(args: ValidateArgs) -> ExitCode {
    let options = args.limits.load_options(
        args.default_algorithm,
        args.merge_domain_config,
        args.calendar_months,
    );
    let location = ConfigLocation::Path(args.path.clone());
    let sources = match read_sources(&location, args.limits.max_config_bytes) {
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
            args.path.display()
        );
        return ExitCode::FAILURE;
    }
    match load(&sources, &options) {
        Ok(rules) => {
            crate::cmd::output::print_line(format_args!(
                "{}: configuration ok",
                args.path.display()
            ));
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
                        crate::core::describe::rule_summary(rule)
                    ));
                }
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{} error(s) in {}:", errors.0.len(), args.path.display());
            for error in &errors.0 {
                eprintln!("  {error}");
            }
            ExitCode::FAILURE
        }
    }
}
