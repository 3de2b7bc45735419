//! The flags of hybrid counting (`--store hybrid`, and `counting: hybrid` on a rule under
//! `--store redis`): `--hybrid-sync-ms`, `--hybrid-local-share`, what they cannot combine with,
//! and what the store says about a rule set's counting at start and at every reload.

use std::time::Duration;

use crate::cmd::cli::ServeArgs;
use crate::core::arithmetic::algorithm::{Counting, Quota};
use crate::core::arithmetic::hybrid::supports;
use crate::core::decision::charging::Charging;
use crate::core::policy::rules::RuleSet;
use crate::store::hybrid::HybridOptions;

/// Why hybrid counting cannot run with these flags, or `None` when it can.
fn refusal(charging: Charging) -> Option<&'static str> {
    if charging != Charging::AllOrNothing {
        return Some(
            "hybrid counting charges all or nothing: --charge every-descriptor or \
             all-or-refused (envoyproxy/ratelimit's charging, the default started as \
             `ratelimit`, or STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT set) records refused \
             hits, which would spend the local budgets on hits nobody admitted; use --charge \
             all-or-nothing",
        );
    }
    None
}

/// The hybrid store's options from the flags, counting unmarked limits as `default_counting`
/// says (`Hybrid`: `--store hybrid`; `Exact`: `--store redis`), or why they cannot work.
pub fn hybrid_options(
    args: &ServeArgs,
    charging: Charging,
    default_counting: Counting,
) -> Result<HybridOptions, String> {
    if let Some(refusal) = refusal(charging) {
        return Err(match default_counting {
            Counting::Hybrid => format!("--store hybrid: {refusal}; use --store redis"),
            Counting::Exact => refusal.to_owned(),
        });
    }
    let options = HybridOptions {
        sync_interval: Duration::from_millis(args.redis_connection.hybrid_sync_ms),
        local_share: args.redis_connection.hybrid_local_share,
        max_keys: args.max_keys,
        default_counting,
    };
    options.check().map_err(|error| error.to_string())?;
    Ok(options)
}

/// Under `--store redis`: the hybrid store's options when these flags allow hybrid counting
/// (then unmarked limits stay exact), else `None`, and rules that say `counting: hybrid` are
/// refused ([`refused_hybrid_rules`]).
pub fn redis_hybrid_options(args: &ServeArgs, charging: Charging) -> Option<HybridOptions> {
    if refusal(charging).is_some() {
        return None;
    }
    hybrid_options(args, charging, Counting::Exact).ok()
}

/// The `counting: hybrid` rules a Redis store without hybrid counting (`--charge
/// every-descriptor` or `all-or-refused`) cannot honour, as errors: at start, and as a
/// reload's store check.
pub fn refused_hybrid_rules(rules: &RuleSet) -> Vec<String> {
    marked(rules, Counting::Hybrid)
        .into_iter()
        .map(|rule| {
            format!(
                "{rule}: `counting: hybrid` cannot run here: it needs all-or-nothing charging, \
                 not --charge every-descriptor or all-or-refused (the reference's, the default \
                 started as `ratelimit`): pass --charge all-or-nothing, or remove `counting`, \
                 and the rule is counted exactly"
            )
        })
        .collect()
}

/// What the chosen store says about the counting of a rule set, logged at start and once per
/// reload that goes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountingNotes {
    /// `--store memory`: every counter is local and exact already, so `counting:` means
    /// nothing.
    Memory,
    /// A store with hybrid counting, whose unmarked limits are counted as `default` says.
    Hybrid { default: Counting },
    /// Nothing to say (a Redis store without hybrid counting refuses such rules instead).
    Silent,
}

impl CountingNotes {
    pub fn log(self, rules: &RuleSet) {
        match self {
            CountingNotes::Memory => {
                let marked = marked_any(rules);
                if !marked.is_empty() {
                    tracing::warn!(
                        rules = %marked.join(", "),
                        "`counting:` has no effect under --store memory: each instance counts \
                         on its own, exactly; it chooses between exact and hybrid counting \
                         under --store redis and --store hybrid"
                    );
                }
            }
            CountingNotes::Hybrid { default } => {
                let exact = exact_rules(rules, default);
                if !exact.is_empty() {
                    tracing::info!(
                        rules = %exact.join(", "),
                        "hybrid counting decides these rules exactly, one Redis call each: \
                         only fixed and sliding windows are counted locally (a bucket's or a \
                         log's state depends on the order of every hit, so it cannot be added \
                         up from several instances)"
                    );
                }
            }
            CountingNotes::Silent => {}
        }
    }
}

/// Whether a limit is counted hybrid, written or by default.
fn counts_hybrid(quota: &Quota, default: Counting) -> bool {
    quota.counting.unwrap_or(default) == Counting::Hybrid
}

/// The rules that would be counted hybrid, but whose algorithm is decided exactly in Redis
/// (`rule (algorithm)`).
pub fn exact_rules(rules: &RuleSet, default: Counting) -> Vec<String> {
    rules
        .all_rules()
        .filter_map(|rule| {
            let quota = rule
                .limits
                .iter()
                .find(|quota| counts_hybrid(quota, default) && !supports(quota.algorithm))?;
            Some(format!("{} ({})", rule.path, quota.algorithm))
        })
        .collect()
}

/// The rules with a limit that says `counting: <counting>`.
fn marked(rules: &RuleSet, counting: Counting) -> Vec<String> {
    rules
        .all_rules()
        .filter(|rule| {
            rule.limits
                .iter()
                .any(|quota| quota.counting == Some(counting))
        })
        .map(|rule| rule.path.clone())
        .collect()
}

/// The rules with a limit that says `counting:` at all.
fn marked_any(rules: &RuleSet) -> Vec<String> {
    rules
        .all_rules()
        .filter(|rule| rule.limits.iter().any(|quota| quota.counting.is_some()))
        .map(|rule| rule.path.clone())
        .collect()
}
