//! Every bucket of every domain, with each reporting stream's last demand on it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::mailbox::Mailbox;
use super::settings::QuotaSettings;
use super::stream::QuotaStream;
use crate::core::arithmetic::algorithm::Share;
use crate::core::arithmetic::priority::Priority;
use crate::core::policy::rlqs::{
    aggregate_demand, class_totals, divide, instance_part, peers_moved, BucketKey, ShareSettings,
};

pub(super) type StreamId = u64;

/// Shared by every RLQS stream of the process.
pub struct QuotaBoard {
    pub(super) settings: QuotaSettings,
    pub(super) domains: Mutex<HashMap<String, DomainBuckets>>,
    next_stream: AtomicU64,
    pub(super) open_streams: AtomicUsize,
    /// When this process heard its first report: its startup grace runs from then.
    first_report: OnceLock<Instant>,
    /// Whether demands are exchanged with other floodgates (`exchange` runs): a bucket new to
    /// this instance then waits for an exchange before its first assignment.
    exchanging: AtomicBool,
    /// Asks the exchange for a round now (a bucket waits for one).
    exchange_wanted: Notify,
    /// Whether this instance has retired the instances that stopped publishing before its
    /// startup grace ended (once: by then every Envoy has reported to some floodgate).
    retired: AtomicBool,
}

#[derive(Default)]
pub(super) struct DomainBuckets {
    pub(super) buckets: HashMap<BucketKey, Vec<EnvoyDemand>>,
    /// What the other floodgates sharing the store last said they offer on each bucket
    /// (`exchange`); empty when floodgate runs alone.
    pub(super) peers: HashMap<BucketKey, PeerDemands>,
    /// The buckets that are priority classes of one rule's counter, by that counter.
    pub(super) classes: ClassGroups,
    /// The buckets an exchange with the other floodgates has covered since they appeared here.
    pub(super) heard: HashSet<BucketKey>,
}

/// Buckets that name a rule's priority class (`{tenant: t1, priority: low}`), grouped by the
/// bucket they are classes of (`{tenant: t1}`): one limit for the group, divided among its
/// classes first (`core::policy::rlqs::class_totals`).
#[derive(Default)]
pub(super) struct ClassGroups {
    group_of: HashMap<BucketKey, BucketKey>,
    members: HashMap<BucketKey, Vec<(BucketKey, usize)>>,
}

impl ClassGroups {
    /// Records `member` (of class `class`) in `group`; the group's members with their classes.
    pub(super) fn join(
        &mut self,
        member: &BucketKey,
        class: usize,
        group: BucketKey,
    ) -> &[(BucketKey, usize)] {
        if !self.group_of.contains_key(member) {
            self.group_of.insert(member.clone(), group.clone());
        }
        let members = self.members.entry(group).or_default();
        match members.iter_mut().find(|(known, _)| known == member) {
            Some(known) => known.1 = class,
            None => members.push((member.clone(), class)),
        }
        members
    }

    /// The other buckets of `member`'s group, whose parts move with its demand.
    fn siblings<'a>(&'a self, member: &'a BucketKey) -> impl Iterator<Item = &'a BucketKey> {
        self.group_of
            .get(member)
            .and_then(|group| self.members.get(group))
            .into_iter()
            .flatten()
            .map(|(sibling, _)| sibling)
            .filter(move |sibling| *sibling != member)
    }

    /// `member` is gone (no stream reports on it).
    pub(super) fn leave(&mut self, member: &BucketKey) {
        let Some(group) = self.group_of.remove(member) else {
            return;
        };
        if let Some(members) = self.members.get_mut(&group) {
            members.retain(|(known, _)| known != member);
            if members.is_empty() {
                self.members.remove(&group);
            }
        }
    }
}

impl DomainBuckets {
    /// Marks `stream`'s demand on `key` held through the startup grace, or no longer.
    pub(super) fn hold(&mut self, key: &BucketKey, stream: StreamId, held: bool) {
        let envoys = self.buckets.get_mut(key).into_iter().flatten();
        for envoy in envoys.filter(|envoy| envoy.stream == stream) {
            envoy.held = held;
        }
    }

    /// Tells every stream on `key` but `except`, and every stream on the other classes of
    /// `key`'s counter, that its share there may have moved.
    pub(super) fn post_to_others(&self, key: &BucketKey, except: Option<StreamId>) {
        let post = |bucket: &BucketKey| {
            for envoy in self.buckets.get(bucket).into_iter().flatten() {
                if Some(envoy.stream) != except {
                    envoy.mailbox.post(bucket);
                }
            }
        };
        post(key);
        for sibling in self.classes.siblings(key) {
            post(sibling);
        }
    }

    /// What every floodgate's Envoys offer on `key`: this one's (measured) and the others'
    /// last published demands; `None` while none is measured.
    pub(super) fn global_demand(&self, key: &BucketKey) -> Option<f64> {
        let own = self
            .buckets
            .get(key)
            .into_iter()
            .flatten()
            .map(|envoy| envoy.demand);
        let peers = self
            .peers
            .get(key)
            .into_iter()
            .flat_map(|peers| peers.demands.iter().copied());
        aggregate_demand(own.chain(peers))
    }

    /// The part of a rule's `limit` that bucket `key` divides: the whole limit, or for a
    /// bucket of priority class `class` (of `priority`), its class's part of the limit
    /// (`class_totals`, by what every class's buckets offer) and its share of that among the
    /// buckets of its class.
    pub(super) fn bucket_total(
        &mut self,
        key: &BucketKey,
        class: Option<(&Priority, usize)>,
        limit: f64,
        settings: ShareSettings,
    ) -> f64 {
        let Some((priority, class)) = class else {
            return limit;
        };
        let group = key.without(&priority.key);
        let members = self.classes.join(key, class, group).to_vec();
        // The classes that have buckets (a class without any asks nothing), with their demand.
        let mut present: Vec<(usize, Share, Option<f64>)> = Vec::new();
        let mut own_class: Vec<(bool, Option<f64>)> = Vec::new();
        for (member, member_class) in &members {
            let demand = self.global_demand(member);
            match present
                .iter_mut()
                .find(|(index, _, _)| index == member_class)
            {
                Some(entry) => entry.2 = aggregate_demand([entry.2, demand]),
                None => {
                    let share = priority
                        .classes
                        .get(*member_class)
                        .map_or(Share::FULL, |class| class.share);
                    present.push((*member_class, share, demand));
                }
            }
            if *member_class == class {
                own_class.push((member == key, demand));
            }
        }
        let classes: Vec<(Share, Option<f64>)> = present
            .iter()
            .map(|(_, share, demand)| (*share, *demand))
            .collect();
        let total = class_totals(limit, &classes, settings)
            .into_iter()
            .zip(&present)
            .find(|(_, (index, _, _))| *index == class)
            .map_or(0.0, |(total, _)| total);
        let demands: Vec<Option<f64>> = own_class.iter().map(|(_, demand)| *demand).collect();
        divide(total, &demands, settings)
            .into_iter()
            .zip(&own_class)
            .find(|(_, (is_key, _))| *is_key)
            .map_or(0.0, |(part, _)| part)
    }
}

/// The other instances' demands on one bucket, as of the last exchange that succeeded.
#[derive(Debug, Clone)]
pub(super) struct PeerDemands {
    pub(super) demands: Vec<Option<f64>>,
}

/// One bucket this instance publishes its demand on.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedDemand {
    pub domain: String,
    pub bucket: BucketKey,
    pub demand: Option<f64>,
}

/// One stream's last report on one bucket.
#[derive(Clone)]
pub(super) struct EnvoyDemand {
    pub(super) stream: StreamId,
    /// Requests per second offered (admitted and denied) between its last two reports; `None`
    /// until it has reported twice.
    pub(super) demand: Option<f64>,
    pub(super) reported_at: Instant,
    /// Where the stream is told that its share here may have moved.
    pub(super) mailbox: Arc<Mailbox>,
    /// Held through the startup grace: its Envoy keeps what another instance gave it, and that
    /// instance's remembered demand stands for it until the grace ends, so it is not published.
    pub(super) held: bool,
}

impl EnvoyDemand {
    /// Whether its Envoy reported within `abandon_after` (at least 1 s): an Envoy silent longer
    /// is gone from the division.
    fn is_live(&self, now: Instant, settings: &QuotaSettings) -> bool {
        now.saturating_duration_since(self.reported_at)
            < settings.abandon_after.max(Duration::from_secs(1))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{open} RLQS streams are open, the bound (--rlqs-max-streams): retry later, or raise the bound"
)]
pub struct StreamsExhausted {
    pub open: usize,
}

impl Default for QuotaBoard {
    fn default() -> Self {
        Self::with_settings(QuotaSettings::default())
    }
}

impl QuotaBoard {
    pub fn new(settings: QuotaSettings) -> Arc<Self> {
        Arc::new(Self::with_settings(settings))
    }

    fn with_settings(settings: QuotaSettings) -> Self {
        Self {
            settings,
            domains: Mutex::new(HashMap::new()),
            next_stream: AtomicU64::new(0),
            open_streams: AtomicUsize::new(0),
            first_report: OnceLock::new(),
            exchanging: AtomicBool::new(false),
            exchange_wanted: Notify::new(),
            retired: AtomicBool::new(false),
        }
    }

    /// Whether the next exchange should retire the instances that stopped publishing: this
    /// instance's startup grace is over and it has not retired them yet.
    pub fn retire_due(&self, now: Instant) -> bool {
        !self.retired.load(Ordering::Acquire) && self.grace_end().is_some_and(|end| now >= end)
    }

    /// An exchange retired them.
    pub fn retired(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// When the startup grace ends (`startup_grace` after the first report, which starts it
    /// if `now` is the first).
    pub(super) fn grace_ends(&self, now: Instant) -> Instant {
        *self.first_report.get_or_init(|| now) + self.settings.startup_grace
    }

    /// When the startup grace ends, if a report has started it.
    pub(super) fn grace_end(&self) -> Option<Instant> {
        self.first_report
            .get()
            .map(|first| *first + self.settings.startup_grace)
    }

    /// From now on demands are exchanged with other floodgates (`exchange::run`).
    pub fn exchange_demands(&self) {
        self.exchanging.store(true, Ordering::Release);
    }

    pub(super) fn exchanging(&self) -> bool {
        self.exchanging.load(Ordering::Acquire)
    }

    /// A bucket waits for an exchange: have one now.
    pub(super) fn want_exchange(&self) {
        self.exchange_wanted.notify_one();
    }

    /// Until a bucket waits for an exchange.
    pub async fn exchange_wanted(&self) {
        self.exchange_wanted.notified().await;
    }

    pub fn settings(&self) -> &QuotaSettings {
        &self.settings
    }

    /// A new stream's state, counted against `max_streams` until it is dropped.
    pub fn open_stream(self: &Arc<Self>) -> Result<QuotaStream, StreamsExhausted> {
        let open = self.open_streams.fetch_add(1, Ordering::AcqRel);
        if open >= self.settings.max_streams {
            self.open_streams.fetch_sub(1, Ordering::AcqRel);
            return Err(StreamsExhausted { open });
        }
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        Ok(QuotaStream::new(Arc::clone(self), id))
    }

    /// Open RLQS streams.
    pub fn streams(&self) -> usize {
        self.open_streams.load(Ordering::Acquire)
    }

    /// Buckets known in every domain.
    pub fn all_buckets(&self) -> usize {
        self.domains
            .lock()
            .values()
            .map(|domain| domain.buckets.len())
            .sum()
    }

    /// Buckets known in `domain` (reported by at least one open stream).
    pub fn buckets(&self, domain: &str) -> usize {
        self.domains
            .lock()
            .get(domain)
            .map_or(0, |domain| domain.buckets.len())
    }

    /// What this instance offers on each bucket an Envoy reported on within `abandon_after`
    /// (but for the Envoys held through the startup grace): what it publishes to the other
    /// floodgates.
    pub fn published_demands(&self, now: Instant) -> Vec<PublishedDemand> {
        let domains = self.domains.lock();
        let mut published = Vec::new();
        for (domain, buckets) in domains.iter() {
            for (bucket, envoys) in &buckets.buckets {
                let live: Vec<Option<f64>> = envoys
                    .iter()
                    .filter(|envoy| !envoy.held && envoy.is_live(now, &self.settings))
                    .map(|envoy| envoy.demand)
                    .collect();
                if !live.is_empty() {
                    published.push(PublishedDemand {
                        domain: domain.clone(),
                        bucket: bucket.clone(),
                        demand: aggregate_demand(live),
                    });
                }
            }
        }
        published
    }

    /// The other instances' demands, one list per bucket of `published` (in order); a bucket
    /// no other instance published on has no peers. Peers of buckets not in `published` are
    /// forgotten.
    /// Every bucket of `published` has now been heard by the others; the streams on those that
    /// waited for it, or whose peers' demand moved, are told to look at their shares again.
    pub fn record_peers(&self, published: &[PublishedDemand], peers: Vec<Vec<Option<f64>>>) {
        let mut domains = self.domains.lock();
        let mut before = HashMap::new();
        for (domain, buckets) in domains.iter_mut() {
            for (bucket, demands) in buckets.peers.drain() {
                before.insert((domain.clone(), bucket), demands.demands);
            }
        }
        for (item, demands) in published.iter().zip(peers) {
            let Some(buckets) = domains.get_mut(&item.domain) else {
                continue;
            };
            let first = buckets.heard.insert(item.bucket.clone());
            let known = before
                .remove(&(item.domain.clone(), item.bucket.clone()))
                .unwrap_or_default();
            if first || peers_moved(&known, &demands, self.settings.push) {
                buckets.post_to_others(&item.bucket, None);
            }
            if !demands.is_empty() {
                buckets
                    .peers
                    .insert(item.bucket.clone(), PeerDemands { demands });
            }
        }
    }

    /// An exchange failed: the buckets that waited for one are divided among this instance's
    /// Envoys alone rather than wait longer.
    pub fn release_unheard(&self) {
        let mut domains = self.domains.lock();
        for buckets in domains.values_mut() {
            let unheard: Vec<BucketKey> = buckets
                .buckets
                .keys()
                .filter(|bucket| !buckets.heard.contains(*bucket))
                .cloned()
                .collect();
            for bucket in unheard {
                buckets.post_to_others(&bucket, None);
                buckets.heard.insert(bucket);
            }
        }
    }

    /// The share of `limit` (requests per second) of `stream` on one bucket, after recording
    /// its demand: the demands of every stream that reported on the bucket within
    /// `abandon_after` are divided.
    /// With `peers` (other floodgates' demands on the bucket), `limit` is first divided among
    /// the instances (`core::policy::rlqs::instance_part`) and this instance's part among its streams.
    pub(super) fn share(
        demands: &mut Vec<EnvoyDemand>,
        stream: StreamId,
        (limit, peers): (f64, Option<&[Option<f64>]>),
        now: Instant,
        settings: &QuotaSettings,
    ) -> f64 {
        demands.retain(|envoy| envoy.stream == stream || envoy.is_live(now, settings));
        let rates: Vec<Option<f64>> = demands.iter().map(|envoy| envoy.demand).collect();
        let limit = match peers {
            Some(peers) if !peers.is_empty() => instance_part(
                limit,
                aggregate_demand(rates.iter().copied()),
                peers,
                settings.shares,
            ),
            _ => limit,
        };
        let shares = divide(limit, &rates, settings.shares);
        demands
            .iter()
            .zip(shares)
            .find(|(envoy, _)| envoy.stream == stream)
            .map_or(0.0, |(_, share)| share)
    }
}
