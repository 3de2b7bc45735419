//! `floodgate serve`: the wiring of configuration, store, limiter, background tasks and
//! listeners, in named steps: the settings ([`settings`]), the first rules, the listeners
//! ([`listeners`]), the one store the settings name ([`store`]) and the run loop ([`run`]).

mod limitador;
mod listeners;
mod run;
mod settings;
mod store;

use std::sync::Arc;

use crate::cmd::app_error::AppError;
use crate::cmd::cli::ServeArgs;
use crate::cmd::front_door::FrontDoor;
use crate::cmd::serve_source::{self, FirstRules};
use crate::core::policy::rlqs::UnmatchedBucket;
use crate::core::policy::rules::RuleSet;

use listeners::BoundListeners;
use run::{LimiterParts, Serving, ServingSettings, Signals};
use settings::ServeSettings;
use store::{build_store, StorePlan};

/// Serves until a stop signal; `door` is how the process was started (its default store).
pub async fn serve(args: ServeArgs, door: FrontDoor) -> Result<(), AppError> {
    // First of all, so that no signal ends the process while it starts.
    let signals = Signals::install();
    let ServeSettings {
        store: choice,
        statsd,
        charging,
        limiter: limiter_settings,
        addresses,
        grpc_tls,
        config_gate,
        store_gate,
        load_options,
    } = ServeSettings::read(&args, door)?;
    let Some(first) =
        serve_source::first_rules(&args, door, load_options, signals.stopped.clone()).await?
    else {
        tracing::info!("stopped before the first configuration arrived");
        return Ok(());
    };
    let FirstRules {
        rules,
        follower: reloader,
        loaded,
    } = first;
    log_warnings(&rules);
    let reload_status = Arc::clone(reloader.status());
    let bound = BoundListeners::bind(&args, addresses)?;
    let serving_settings = ServingSettings {
        grpc_tls,
        config_gate,
        store_gate,
        statsd,
        reload_status,
    };
    let mut serving = Serving::start(&args, serving_settings, bound, signals, &rules);
    warn_of_a_missing_default_rule(&args.rlqs.rlqs_unmatched, &rules);

    tracing::info!(store = ?choice.kind, "store chosen by {}", choice.reason);
    let plan = StorePlan::new(choice.kind, &args, charging, &rules)?;
    let limitador_file = limitador::load(&args).await?;
    let limitador_counting = plan.limitador_counting();
    serving.counting_notes = plan.counting_notes();
    serving.counting_notes.log(&rules);
    let built = build_store(plan, &args, (door, charging), &rules, &serving.shutdown).await?;
    let Some(store) = built else {
        return Ok(());
    };
    if let Some(file) = limitador_file {
        let counting = (limitador_counting, charging);
        let limitador = file.start(&args, counting, &serving.shutdown).await?;
        serving.serve_limitador(limitador);
    }
    let parts = LimiterParts {
        rules,
        settings: limiter_settings,
        telemetry: args.telemetry.decision_telemetry(),
        loaded,
        reloader,
        max_keys: args.max_keys,
        charging,
        max_waiting: args.max_waiting,
    };
    run::serve_store(store, parts, serving).await?;
    tracing::info!("floodgate stopped");
    Ok(())
}

fn log_warnings(rules: &RuleSet) {
    for warning in rules.warnings() {
        tracing::warn!("{warning}");
    }
}

/// Things the reference accepts but that are probably mistakes: loaded, and said once.
/// `--rlqs-unmatched rule:NAME` where no loaded domain has a rule named NAME: every unmatched
/// bucket is allowed (a misspelt name would otherwise go unnoticed until buckets pass).
fn warn_of_a_missing_default_rule(unmatched: &UnmatchedBucket, rules: &RuleSet) {
    let UnmatchedBucket::Rule(name) = unmatched else {
        return;
    };
    if rules
        .domains()
        .all(|domain| unmatched.default_rule(domain).is_none())
    {
        tracing::warn!(
            "--rlqs-unmatched rule:{name}: no domain has a rule with `name: {name}`, so RLQS \
             buckets that meet no rule are allowed (allow-all) until a configuration has one"
        );
    }
}
