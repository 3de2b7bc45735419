//! Every bucket of every domain, with each reporting stream's last demand on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::settings::QuotaSettings;
use super::stream::QuotaStream;
use crate::core::algorithm::Share;
use crate::core::priority::Priority;
use crate::core::quota::{
    aggregate_demand, class_totals, divide, instance_part, BucketKey, ShareSettings,
};

pub(super) type StreamId = u64;

/// Shared by every RLQS stream of the process.
pub struct QuotaBoard {
    pub(super) settings: QuotaSettings,
    pub(super) domains: Mutex<HashMap<String, DomainBuckets>>,
    next_stream: AtomicU64,
    pub(super) open_streams: AtomicUsize,
}

#[derive(Default)]
pub(super) struct DomainBuckets {
    pub(super) buckets: HashMap<BucketKey, Vec<EnvoyDemand>>,
    /// What the other floodgates sharing the store last said they offer on each bucket
    /// (`exchange`); empty when floodgate runs alone.
    pub(super) peers: HashMap<BucketKey, PeerDemands>,
    /// The buckets that are priority classes of one rule's counter, by that counter.
    pub(super) classes: ClassGroups,
}

/// Buckets that name a rule's priority class (`{tenant: t1, priority: low}`), grouped by the
/// bucket they are classes of (`{tenant: t1}`): one limit for the group, divided among its
/// classes first (`core::quota::class_totals`).
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
#[derive(Debug, Clone, Copy)]
pub(super) struct EnvoyDemand {
    pub(super) stream: StreamId,
    /// Requests per second offered (admitted and denied) between its last two reports; `None`
    /// until it has reported twice.
    pub(super) demand: Option<f64>,
    pub(super) reported_at: Instant,
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
        }
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

    /// What this instance offers on each bucket an Envoy reported on within `abandon_after`:
    /// what it publishes to the other floodgates.
    pub fn published_demands(&self, now: Instant) -> Vec<PublishedDemand> {
        let domains = self.domains.lock();
        let mut published = Vec::new();
        for (domain, buckets) in domains.iter() {
            for (bucket, envoys) in &buckets.buckets {
                let live: Vec<Option<f64>> = envoys
                    .iter()
                    .filter(|envoy| envoy.is_live(now, &self.settings))
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
    pub fn record_peers(&self, published: &[PublishedDemand], peers: Vec<Vec<Option<f64>>>) {
        let mut domains = self.domains.lock();
        for buckets in domains.values_mut() {
            buckets.peers.clear();
        }
        for (item, demands) in published.iter().zip(peers) {
            if demands.is_empty() {
                continue;
            }
            if let Some(buckets) = domains.get_mut(&item.domain) {
                buckets
                    .peers
                    .insert(item.bucket.clone(), PeerDemands { demands });
            }
        }
    }

    /// The share of `limit` (requests per second) of `stream` on one bucket, after recording
    /// its demand: the demands of every stream that reported on the bucket within
    /// `abandon_after` are divided.
    /// With `peers` (other floodgates' demands on the bucket), `limit` is first divided among
    /// the instances (`core::quota::instance_part`) and this instance's part among its streams.
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
