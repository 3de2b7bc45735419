//! One RLQS stream (one Envoy's connection to floodgate): its domain, its buckets, and what
//! each usage report turns into. Dropping it takes its demand off every bucket.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::board::{DomainBuckets, EnvoyDemand, QuotaBoard, StreamId};
use crate::core::adjustment::Adjustments;
use crate::core::quota::{assign, Assignment, BucketError, BucketKey, BucketLimit};
use crate::core::rules::RuleSet;

/// What a report is answered against: the rules and the runtime adjustments (overrides,
/// adaptive limits) in force now.
#[derive(Clone, Copy)]
pub struct InForce<'a> {
    pub rules: &'a RuleSet,
    pub adjustments: &'a Adjustments,
    /// Now on the adjustments' clock (overrides expire on it).
    pub now_unix_ms: u64,
}

/// One bucket's usage in a report, as the wire carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketReport {
    pub bucket_id: HashMap<String, String>,
    pub allowed: u64,
    pub denied: u64,
}

/// What one bucket of a report gets back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamAction {
    Assign {
        bucket: BucketKey,
        assignment: Assignment,
        ttl: Duration,
    },
    /// The bucket was idle for `abandon_after`: the Envoy forgets it.
    Abandon { bucket: BucketKey },
}

/// Why a report closes its stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("the first usage report of an RLQS stream has no domain: set `domain` in Envoy's rate_limit_quota filter")]
    MissingDomain,
    #[error("a usage report names domain '{found}' on a stream opened for domain '{opened}': a stream serves one domain; open another stream for another")]
    DomainChanged { opened: String, found: String },
    #[error("bucket {index} of the usage report: {error}")]
    Bucket { index: usize, error: BucketError },
    #[error("the stream reports {buckets} buckets, over the bound of {max} per stream (--rlqs-max-buckets-per-stream): build bucket ids from fewer distinct values")]
    TooManyStreamBuckets { buckets: usize, max: usize },
    #[error("domain '{domain}' has {buckets} buckets, the bound (--rlqs-max-buckets-per-domain): build bucket ids from fewer distinct values, or raise the bound")]
    TooManyDomainBuckets { domain: String, buckets: usize },
}

/// The shortest time between two reports that gives a rate.
const MIN_WINDOW: Duration = Duration::from_millis(50);

/// A bucket as this stream knows it.
#[derive(Debug, Clone, Copy)]
struct StreamBucket {
    /// Since when `pending` requests have been reported without a rate measured.
    window_start: Instant,
    pending: u64,
    /// Since when its reports have counted no request.
    idle_since: Option<Instant>,
}

pub struct QuotaStream {
    board: Arc<QuotaBoard>,
    id: StreamId,
    domain: Option<String>,
    buckets: HashMap<BucketKey, StreamBucket>,
}

impl QuotaStream {
    pub(super) fn new(board: Arc<QuotaBoard>, id: StreamId) -> Self {
        Self {
            board,
            id,
            domain: None,
            buckets: HashMap::new(),
        }
    }

    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// Records one usage report (`domain` as the message carries it: only the first need set
    /// it) and answers every bucket in it, against the rules and adjustments in force. An error closes the
    /// stream; nothing of the failing report is kept.
    pub fn report(
        &mut self,
        domain: &str,
        usages: &[BucketReport],
        in_force: InForce<'_>,
        now: Instant,
    ) -> Result<Vec<StreamAction>, ReportError> {
        let domain = self.check_domain(domain)?;
        let settings = self.board.settings().clone();
        let keys = usages
            .iter()
            .enumerate()
            .map(|(index, usage)| {
                BucketKey::from_map(&usage.bucket_id, settings.bucket_keys)
                    .map_err(|error| ReportError::Bucket { index, error })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let new_buckets = count_new(&keys, |key| self.buckets.contains_key(key));
        if self.buckets.len() + new_buckets > settings.max_buckets_per_stream {
            return Err(ReportError::TooManyStreamBuckets {
                buckets: self.buckets.len() + new_buckets,
                max: settings.max_buckets_per_stream,
            });
        }
        let domain_rules = in_force.rules.domain(&domain);
        let mut domains = self.board.domains.lock();
        let buckets = domains.entry(domain.clone()).or_default();
        let unknown = count_new(&keys, |key| buckets.buckets.contains_key(key));
        if buckets.buckets.len() + unknown > settings.max_buckets_per_domain {
            return Err(ReportError::TooManyDomainBuckets {
                domain,
                buckets: buckets.buckets.len(),
            });
        }
        let mut actions = Vec::with_capacity(usages.len());
        for (key, usage) in keys.into_iter().zip(usages) {
            let requests = usage.allowed.saturating_add(usage.denied);
            let (known, demand) = self.measure(&key, requests, now);
            if known
                .idle_since
                .is_some_and(|since| now.saturating_duration_since(since) >= settings.abandon_after)
            {
                self.buckets.remove(&key);
                remove_stream(buckets, &key, self.id);
                actions.push(StreamAction::Abandon { bucket: key });
                continue;
            }
            let matched = domain_rules.and_then(|rules| key.lookup(rules));
            // The bucket's priority class, when it names one of its rule's classes.
            let class = matched.as_ref().and_then(|matched| {
                let priority = matched.rule.priority.as_ref()?;
                matched.class_entry?;
                Some((
                    &**priority,
                    priority.class_for(key.value_of(&priority.key)).index,
                ))
            });
            let rule = matched
                .map(|matched| matched.rule)
                .or_else(|| domain_rules.and_then(|rules| settings.unmatched.default_rule(rules)));
            let limit = rule.map(|rule| {
                let adjustment =
                    in_force
                        .adjustments
                        .effective(&domain, &rule.path, in_force.now_unix_ms);
                BucketLimit::of_adjusted_rule(rule, adjustment)
            });
            let envoys = buckets.buckets.entry(key.clone()).or_default();
            match envoys.iter_mut().find(|envoy| envoy.stream == self.id) {
                Some(envoy) => {
                    envoy.demand = demand.or(envoy.demand);
                    envoy.reported_at = now;
                }
                None => envoys.push(EnvoyDemand {
                    stream: self.id,
                    demand,
                    reported_at: now,
                }),
            }
            let assignment = match limit {
                None => settings.unmatched.fallback(),
                Some(BucketLimit::Unlimited) => Assignment::AllowAll,
                Some(limit @ BucketLimit::Limited { per_second, .. }) => {
                    let total = buckets.bucket_total(&key, class, per_second, settings.shares);
                    // The last exchange's, however old: while the store cannot be reached
                    // the total stays divided as it last was (under-admitting if a peer has
                    // gone, never admitting the limit once per instance).
                    let peers = buckets
                        .peers
                        .get(&key)
                        .map(|peers| peers.demands.as_slice());
                    // This stream's demand was recorded above, so the bucket is there.
                    let share = buckets.buckets.get_mut(&key).map_or(0.0, |envoys| {
                        QuotaBoard::share(envoys, self.id, (total, peers), now, &settings)
                    });
                    assign(limit, share)
                }
            };
            self.buckets.insert(key.clone(), known);
            actions.push(StreamAction::Assign {
                bucket: key,
                assignment,
                ttl: settings.assignment_ttl,
            });
        }
        Ok(actions)
    }

    /// The bucket's state after a report of `requests`, and the rate measured, if its window
    /// is long enough to say one: two reports a few milliseconds apart (Envoy's first report
    /// of a new bucket, then its periodic one) carry their requests into the next window.
    fn measure(&self, key: &BucketKey, requests: u64, now: Instant) -> (StreamBucket, Option<f64>) {
        let idle_since = |known: Option<&StreamBucket>| {
            (requests == 0).then(|| known.and_then(|k| k.idle_since).unwrap_or(now))
        };
        let Some(known) = self.buckets.get(key) else {
            let fresh = StreamBucket {
                window_start: now,
                pending: requests,
                idle_since: idle_since(None),
            };
            return (fresh, None);
        };
        let counted = known.pending.saturating_add(requests);
        let elapsed = now.saturating_duration_since(known.window_start);
        if elapsed < MIN_WINDOW {
            let carried = StreamBucket {
                pending: counted,
                idle_since: idle_since(Some(known)),
                ..*known
            };
            return (carried, None);
        }
        let measured = StreamBucket {
            window_start: now,
            pending: 0,
            idle_since: idle_since(Some(known)),
        };
        (measured, Some(counted as f64 / elapsed.as_secs_f64()))
    }

    fn check_domain(&mut self, domain: &str) -> Result<String, ReportError> {
        match (&self.domain, domain) {
            (None, "") => Err(ReportError::MissingDomain),
            (None, first) => {
                self.domain = Some(first.to_owned());
                Ok(first.to_owned())
            }
            (Some(opened), "") => Ok(opened.clone()),
            (Some(opened), found) if opened == found => Ok(opened.clone()),
            (Some(opened), found) => Err(ReportError::DomainChanged {
                opened: opened.clone(),
                found: found.to_owned(),
            }),
        }
    }
}

/// The distinct keys of `keys` that are not `known` yet.
fn count_new(keys: &[BucketKey], known: impl Fn(&BucketKey) -> bool) -> usize {
    keys.iter()
        .filter(|key| !known(key))
        .collect::<std::collections::HashSet<_>>()
        .len()
}

fn remove_stream(buckets: &mut DomainBuckets, key: &BucketKey, stream: StreamId) {
    if let Some(envoys) = buckets.buckets.get_mut(key) {
        envoys.retain(|envoy| envoy.stream != stream);
        if envoys.is_empty() {
            buckets.buckets.remove(key);
            buckets.classes.leave(key);
        }
    }
}

impl Drop for QuotaStream {
    fn drop(&mut self) {
        if let Some(domain) = &self.domain {
            let mut domains = self.board.domains.lock();
            if let Some(buckets) = domains.get_mut(domain) {
                for key in self.buckets.keys() {
                    remove_stream(buckets, key, self.id);
                }
                if buckets.buckets.is_empty() {
                    domains.remove(domain);
                }
            }
        }
        self.board.open_streams.fetch_sub(1, Ordering::AcqRel);
    }
}
