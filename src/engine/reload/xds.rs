//! Rules that arrive over xDS, swapped in as a file reload's are: every resource of a snapshot
//! turned into a source (`xds:<resource name>`), all of them loaded together with
//! `core::policy::config::load` on a loader thread, checked against the store, and installed through
//! the same `install` as file reloads — so a counter whose rule did not change (same domain,
//! rule path, algorithm and window) keeps counting.
//!
//! A snapshot is taken or refused whole: one bad resource (bytes that do not decode, a rule the
//! loader refuses, more configuration than `--max-config-bytes`, a limit the store cannot
//! decide) NACKs it with every problem, each naming its resource, and the rules in force stay.
//! Each rejected version is logged once at error level; the management server's resends of it
//! are NACKed again by the client without loading them again.

use std::sync::Arc;

use envoy_types::pb::google::protobuf::Any;

use super::loader::{Loader, Retired};
use super::status::ReloadStatus;
use super::swap_in;
use crate::core::policy::config::{load, LoadOptions, SourceFile};
use crate::core::policy::rules::RuleSet;
use crate::engine::config_source::xds::{decode_all, to_source, Snapshot, XdsClient};
use crate::engine::shutdown::Shutdown;

/// Follows an xDS subscription and loads what it brings.
pub struct XdsReloader {
    client: XdsClient,
    options: LoadOptions,
    /// `--max-config-bytes`, over the text the resources convert to.
    max_config_bytes: u64,
    status: Arc<ReloadStatus>,
    store_check: Option<fn(&RuleSet) -> Vec<String>>,
    loader: Loader,
    /// The version whose rejection was logged at error level last.
    logged_rejection: Option<String>,
}

impl XdsReloader {
    pub fn new(client: XdsClient, options: LoadOptions, max_config_bytes: u64) -> Self {
        let status = Arc::new(ReloadStatus::awaiting_xds(client.server().to_string()));
        Self {
            client,
            options,
            max_config_bytes,
            status,
            store_check: None,
            loader: Loader,
            logged_rejection: None,
        }
    }

    /// Refuses snapshots whose rules `check` finds problems in.
    pub fn with_store_check(mut self, check: fn(&RuleSet) -> Vec<String>) -> Self {
        self.store_check = Some(check);
        self
    }

    pub fn status(&self) -> &Arc<ReloadStatus> {
        &self.status
    }

    /// Waits for the first snapshot that loads, and acknowledges it; `None` when `shutdown`
    /// comes first. (Without `FORCE_START_WITHOUT_INITIAL_CONFIG` the reference, too, waits
    /// for its first configuration before it listens.)
    pub async fn first(&mut self, shutdown: Shutdown) -> Option<RuleSet> {
        tracing::info!(
            server = %self.client.server(),
            "waiting for the first RateLimitConfig snapshot from the xDS management server \
             before listening (FORCE_START_WITHOUT_INITIAL_CONFIG=true listens at once)"
        );
        let stop = shutdown.fired();
        tokio::pin!(stop);
        loop {
            let snapshot = tokio::select! {
                () = &mut stop => return None,
                snapshot = self.client.next_snapshot() => snapshot,
            };
            if let Some(accepted) = self.take(snapshot).await {
                // Nothing listens yet: the version may be recorded before the caller installs.
                let rules = accepted.go_live(&self.status, |rules| rules);
                self.client.accept().await;
                return Some(rules);
            }
        }
    }

    /// Follows the subscription until `shutdown`: each snapshot that loads goes through
    /// `install` (which returns the rule set it replaced, freed on a loader thread), then is
    /// acknowledged.
    pub async fn run(
        mut self,
        install: impl Fn(RuleSet) -> Box<dyn Retired> + Send + 'static,
        shutdown: Shutdown,
    ) {
        let stop = shutdown.fired();
        tokio::pin!(stop);
        loop {
            let snapshot = tokio::select! {
                () = &mut stop => return,
                snapshot = self.client.next_snapshot() => snapshot,
            };
            if let Some(accepted) = self.take(snapshot).await {
                self.loader.retire(accepted.go_live(&self.status, &install));
                self.client.accept().await;
            }
        }
    }

    /// Loads `snapshot`: the rules to swap in, or `None` after NACKing it.
    async fn take(&mut self, snapshot: Snapshot) -> Option<AcceptedSnapshot> {
        let Snapshot { version, resources } = snapshot;
        let options = self.options.clone();
        let cap = self.max_config_bytes;
        let check = self.store_check;
        let count = resources.len();
        let loaded = self
            .loader
            .run(move || load_xds_resources(&resources, &options, cap, check))
            .await
            .unwrap_or_else(|gone| Err(vec![format!("{gone}; restart floodgate")]));
        match loaded {
            Ok(rules) => {
                self.logged_rejection = None;
                Some(AcceptedSnapshot {
                    rules,
                    version,
                    resources: count,
                })
            }
            Err(problems) => {
                let message = problems.join("\n");
                let live = self.status.record_failure(message.clone());
                crate::telemetry::config_loads::reload_failed();
                let in_force = self.client.accepted_version().to_owned();
                if self.logged_rejection.as_deref() == Some(version.as_str()) {
                    tracing::debug!(xds_version = %version, "configuration from xDS rejected again");
                } else {
                    tracing::error!(
                        xds_version = %version,
                        xds_version_in_force = %in_force,
                        live_version = live,
                        errors = problems.len(),
                        "configuration from xDS rejected (NACK), keeping version {live}: {}",
                        problems.join("; ")
                    );
                    self.logged_rejection = Some(version);
                }
                self.client.reject(&message).await;
                None
            }
        }
    }
}

/// A snapshot that loaded and does not decide yet.
struct AcceptedSnapshot {
    rules: RuleSet,
    version: String,
    resources: usize,
}

impl AcceptedSnapshot {
    /// Swaps the rules in through `install`, and only then records and logs the version, as a
    /// file reload does (`Reloaded::go_live`).
    fn go_live<R>(self, status: &ReloadStatus, install: impl FnOnce(RuleSet) -> R) -> R {
        let Self {
            rules,
            version,
            resources,
        } = self;
        swap_in(rules, install, |shape| {
            let live = status.record_xds_success(shape, &version);
            tracing::info!(
                xds_version = %version,
                version = live,
                resources,
                domains = shape.domains,
                rules = shape.rules,
                "configuration from xDS accepted"
            );
        })
    }
}

/// A snapshot's resources, decoded, converted, capped, loaded together and checked against
/// the store; every problem, each naming its resource, when they do not make a rule set.
pub fn load_xds_resources(
    resources: &[Any],
    options: &LoadOptions,
    max_config_bytes: u64,
    store_check: Option<fn(&RuleSet) -> Vec<String>>,
) -> Result<RuleSet, Vec<String>> {
    let configs = decode_all(resources)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let sources: Vec<SourceFile> = configs.iter().map(to_source).collect();
    drop(configs);
    let bytes: u64 = sources
        .iter()
        .map(|source| u64::try_from(source.text.len()).unwrap_or(u64::MAX))
        .fold(0, u64::saturating_add);
    if bytes > max_config_bytes {
        return Err(vec![format!(
            "the snapshot's {} resources make {bytes} bytes of configuration, over the cap of \
             {max_config_bytes} bytes: raise --max-config-bytes (FLOODGATE_MAX_CONFIG_BYTES) and \
             the memory limit with it, or push fewer rules to this instance",
            sources.len()
        )]);
    }
    let rules = load(&sources, options)
        .map_err(|errors| errors.0.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    drop(sources);
    if let Some(check) = store_check {
        let problems = check(&rules);
        if !problems.is_empty() {
            return Err(problems);
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::{
        RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
    };
    use prost::Message as _;

    use super::*;
    use crate::engine::config_source::xds::RATE_LIMIT_CONFIG_TYPE;

    fn resource(name: &str, domain: &str, unit: i32) -> Any {
        let config = RateLimitConfig {
            name: name.to_owned(),
            domain: domain.to_owned(),
            descriptors: vec![RateLimitDescriptor {
                key: format!("k{name}"),
                rate_limit: Some(RateLimitPolicy {
                    unit,
                    requests_per_unit: 5,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            }],
        };
        Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.to_owned(),
            value: config.encode_to_vec(),
        }
    }

    fn problems(resources: &[Any], options: &LoadOptions, cap: u64) -> Vec<String> {
        match load_xds_resources(resources, options, cap, None) {
            Ok(_) => panic!("loaded"),
            Err(problems) => problems,
        }
    }

    #[test]
    fn resources_load_together_and_problems_name_the_resource() {
        let options = LoadOptions::default();
        let rules = load_xds_resources(
            &[resource("a", "edge", 1), resource("b", "api", 2)],
            &options,
            u64::MAX,
            None,
        )
        .unwrap_or_else(|problems| panic!("{problems:?}"));
        assert_eq!(rules.domains().count(), 2);
        let bad = problems(
            &[resource("a", "edge", 1), resource("broken", "api", 0)],
            &options,
            u64::MAX,
        );
        assert!(
            bad[0].starts_with("xds:broken: api.kbroken: invalid rate limit unit"),
            "{bad:?}"
        );
    }

    #[test]
    fn the_same_domain_twice_needs_merge_domain_config() {
        let twice = [resource("edge-1", "edge", 1), resource("edge-2", "edge", 2)];
        let refused = problems(&twice, &LoadOptions::default(), u64::MAX);
        assert!(
            refused.iter().any(|problem| problem.contains("xds:edge-2")),
            "{refused:?}"
        );
        let merged = LoadOptions {
            merge_domains: true,
            ..LoadOptions::default()
        };
        let merged_rules = load_xds_resources(&twice, &merged, u64::MAX, None)
            .unwrap_or_else(|problems| panic!("{problems:?}"));
        assert_eq!(merged_rules.rule_count(), 2);
    }

    #[test]
    fn a_snapshot_over_the_byte_cap_is_refused() {
        let refused = problems(&[resource("a", "edge", 1)], &LoadOptions::default(), 10);
        assert!(
            refused[0].contains("over the cap of 10 bytes"),
            "{refused:?}"
        );
    }

    #[test]
    fn the_store_check_refuses_too() {
        let refused = load_xds_resources(
            &[resource("a", "edge", 1)],
            &LoadOptions::default(),
            u64::MAX,
            Some(|_| vec!["too exact for Redis".to_owned()]),
        );
        assert_eq!(refused.err(), Some(vec!["too exact for Redis".to_owned()]));
    }
}
