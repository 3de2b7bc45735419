//! One RLQS stream (one Envoy's connection to floodgate): its domain, its buckets, what each
//! usage report turns into, and the new assignments pushed between reports when the other
//! Envoys on its buckets join or change demand. Dropping it takes its demand off every bucket.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::board::{DomainBuckets, EnvoyDemand, QuotaBoard, StreamId};
use super::division::Division;
use super::mailbox::Mailbox;
use crate::core::policy::adjustment::Adjustments;
use crate::core::policy::rlqs::{demand_moved, worth_pushing, Assignment, BucketError, BucketKey};
use crate::core::policy::rules::RuleSet;

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
    /// Whole seconds the counts cover, as Envoy says (`time_elapsed`): 0 on the report that
    /// creates the bucket, the report interval on the periodic ones.
    pub elapsed_seconds: u64,
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
#[derive(Debug, Clone)]
struct StreamBucket {
    /// Since when `pending` requests have been reported without a rate measured.
    window_start: Instant,
    pending: u64,
    /// Since when its reports have counted no request.
    idle_since: Option<Instant>,
    /// What it is divided under, as of this stream's last report on it.
    division: Division,
    /// The last assignment sent on it (`None`: none yet).
    sent: Option<Assignment>,
    /// Why it has not been answered yet, if it has not.
    held: Option<Hold>,
}

/// Why a bucket's report is not answered at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// The startup grace: the Envoy keeps the assignment it had until every Envoy has
    /// reported to this floodgate.
    Grace,
    /// New to this floodgate, which exchanges demands with others: divided once an exchange
    /// has told it what they offer on it.
    Peers,
}

pub struct QuotaStream {
    board: Arc<QuotaBoard>,
    id: StreamId,
    domain: Option<String>,
    buckets: HashMap<BucketKey, StreamBucket>,
    mailbox: Arc<Mailbox>,
    /// The earliest the next push may go (`push_interval` after the last).
    next_push: Instant,
}

impl QuotaStream {
    pub(super) fn new(board: Arc<QuotaBoard>, id: StreamId) -> Self {
        Self {
            board,
            id,
            domain: None,
            buckets: HashMap::new(),
            mailbox: Arc::default(),
            next_push: Instant::now(),
        }
    }

    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// Records one usage report (`domain` as the message carries it: only the first need set
    /// it) and answers every bucket in it, against the rules and adjustments in force, except
    /// those held (the startup grace, or a first exchange with the other floodgates): they are
    /// pushed once released. An error closes the stream; nothing of the failing report is kept.
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
        let board = Arc::clone(&self.board);
        let grace_ends = board.grace_ends(now);
        let domain_rules = in_force.rules.domain(&domain);
        let mut domains = board.domains.lock();
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
            let division = Division::of(&key, &domain, domain_rules, in_force, &settings);
            let in_grace = now < grace_ends;
            actions.extend(self.answer(buckets, key, usage, division, in_grace, now));
        }
        Ok(actions)
    }

    /// One bucket of a report: recorded, then abandoned, held or answered.
    fn answer(
        &mut self,
        buckets: &mut DomainBuckets,
        key: BucketKey,
        usage: &BucketReport,
        division: Division,
        in_grace: bool,
        now: Instant,
    ) -> Option<StreamAction> {
        let settings = self.board.settings();
        let first = !self.buckets.contains_key(&key);
        let held_before = self.buckets.get(&key).and_then(|known| known.held);
        let (mut known, demand) = self.measure(&key, usage, division, now);
        if known
            .idle_since
            .is_some_and(|since| now.saturating_duration_since(since) >= settings.abandon_after)
        {
            self.buckets.remove(&key);
            remove_stream(buckets, &key, self.id);
            return Some(StreamAction::Abandon { bucket: key });
        }
        if self.record_demand(buckets, &key, demand, now) {
            buckets.post_to_others(&key, Some(self.id));
        }
        // Held through the grace: a bucket the Envoy had before this stream (it reports more
        // than its creation's zero seconds on its first report here) keeps what it enforces.
        let had_it = first && usage.elapsed_seconds >= 1;
        known.held = if in_grace && (had_it || held_before == Some(Hold::Grace)) {
            self.mailbox.post(&key);
            Some(Hold::Grace)
        } else if self.board.exchanging() && !buckets.heard.contains(&key) {
            self.board.want_exchange();
            Some(Hold::Peers)
        } else {
            None
        };
        buckets.hold(&key, self.id, known.held == Some(Hold::Grace));
        let action = if known.held.is_none() {
            let assignment =
                known
                    .division
                    .assignment(buckets, &key, self.id, now, self.board.settings());
            known.sent = Some(assignment);
            Some(StreamAction::Assign {
                bucket: key.clone(),
                assignment,
                ttl: settings.assignment_ttl,
            })
        } else {
            None
        };
        self.buckets.insert(key, known);
        action
    }

    /// Records this stream's demand on `key`; whether the others' shares may have moved with
    /// it (it joined the bucket, or its demand moved).
    fn record_demand(
        &self,
        buckets: &mut DomainBuckets,
        key: &BucketKey,
        demand: Option<f64>,
        now: Instant,
    ) -> bool {
        let push = self.board.settings().push;
        let envoys = buckets.buckets.entry(key.clone()).or_default();
        match envoys.iter_mut().find(|envoy| envoy.stream == self.id) {
            Some(envoy) => {
                let before = envoy.demand;
                envoy.demand = demand.or(envoy.demand);
                envoy.reported_at = now;
                demand_moved(before, envoy.demand, push)
            }
            None => {
                envoys.push(EnvoyDemand {
                    stream: self.id,
                    demand,
                    reported_at: now,
                    mailbox: Arc::clone(&self.mailbox),
                    held: false,
                });
                true
            }
        }
    }

    /// Until a new assignment may be due on one of this stream's buckets and may go: something
    /// was posted, `push_interval` has passed since the last push, and, while a bucket is held
    /// through the startup grace, the grace is over.
    pub async fn push_due(&self) {
        self.mailbox.posted().await;
        let mut at = self.next_push;
        let grace_held = self
            .buckets
            .values()
            .any(|known| known.held == Some(Hold::Grace));
        if let Some(end) = self.board.grace_end().filter(|_| grace_held) {
            at = at.max(end);
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }

    /// The new assignments of the buckets posted since the last push that are worth pushing
    /// (`core::policy::rlqs::worth_pushing`): Envoy applies them to the buckets it reported.
    pub fn pushes(&mut self, now: Instant) -> Vec<StreamAction> {
        let posted = self.mailbox.take();
        let (Some(domain), false) = (self.domain.clone(), posted.is_empty()) else {
            return Vec::new();
        };
        let board = Arc::clone(&self.board);
        let settings = board.settings();
        self.next_push = now + settings.push_interval;
        let in_grace = board.grace_end().is_some_and(|end| now < end);
        let mut domains = board.domains.lock();
        let Some(buckets) = domains.get_mut(&domain) else {
            return Vec::new();
        };
        let mut actions = Vec::new();
        for key in posted {
            let Some(known) = self.buckets.get_mut(&key) else {
                continue;
            };
            if known.held == Some(Hold::Grace) && in_grace {
                self.mailbox.post(&key);
                continue;
            }
            buckets.hold(&key, self.id, false);
            if board.exchanging() && !buckets.heard.contains(&key) {
                known.held = Some(Hold::Peers);
                board.want_exchange();
                continue;
            }
            known.held = None;
            let assignment = known
                .division
                .assignment(buckets, &key, self.id, now, settings);
            let limit = known.division.per_second();
            if worth_pushing(known.sent, assignment, limit, settings.push) {
                known.sent = Some(assignment);
                actions.push(StreamAction::Assign {
                    bucket: key,
                    assignment,
                    ttl: settings.assignment_ttl,
                });
            }
        }
        actions
    }

    /// The bucket's state after a report of `usage`, and the rate measured, if its window
    /// is long enough to say one: two reports a few milliseconds apart (Envoy's first report
    /// of a new bucket, then its periodic one) carry their requests into the next window. A
    /// bucket this stream first hears of in a periodic report (the Envoy had it before: from
    /// another floodgate, or this one before a restart) is measured over Envoy's own
    /// `time_elapsed`.
    fn measure(
        &self,
        key: &BucketKey,
        usage: &BucketReport,
        division: Division,
        now: Instant,
    ) -> (StreamBucket, Option<f64>) {
        let requests = usage.allowed.saturating_add(usage.denied);
        let idle_since = |known: Option<&StreamBucket>| {
            (requests == 0).then(|| known.and_then(|k| k.idle_since).unwrap_or(now))
        };
        let Some(known) = self.buckets.get(key) else {
            let fresh = StreamBucket {
                window_start: now,
                pending: if usage.elapsed_seconds >= 1 {
                    0
                } else {
                    requests
                },
                idle_since: idle_since(None),
                division,
                sent: None,
                held: None,
            };
            let demand = (usage.elapsed_seconds >= 1)
                .then(|| requests as f64 / usage.elapsed_seconds as f64);
            return (fresh, demand);
        };
        let counted = known.pending.saturating_add(requests);
        let elapsed = now.saturating_duration_since(known.window_start);
        let idle_since = idle_since(Some(known));
        if elapsed < MIN_WINDOW {
            let carried = StreamBucket {
                pending: counted,
                idle_since,
                division,
                ..known.clone()
            };
            return (carried, None);
        }
        let measured = StreamBucket {
            window_start: now,
            pending: 0,
            idle_since,
            division,
            ..known.clone()
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
            buckets.heard.remove(key);
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
