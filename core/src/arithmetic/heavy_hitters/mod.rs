//! Heavy hitters of one rule: which descriptor values take the most hits, admitted and
//! refused, over the last minute and the last ten, in bounded memory (space-saving,
//! Metwally et al. 2005). Ten one-minute buckets, each keeping at most [`TOP_K`] values: a
//! value not kept replaces the one with the fewest hits, whose estimate it inherits as its
//! `error`: its own counts (admitted, refused) are exact from then on, and it may have had up
//! to `error` hits before. Any value with more than 1/K of a bucket's hits is in it. The whole structure has a fixed size ([`HeavyHitters::BYTES`], under 16 KiB).
//!
//! The last minute is the current bucket plus the previous one weighted by how much of it is
//! still within 60 s (as a sliding window counts); the last ten minutes, the ten buckets.
//! Both are read as the buckets' summaries merged ([`merge`]), as those of several instances are.

pub mod merge;

use serde::{Deserialize, Serialize};

use self::merge::BucketSummary;
use crate::ground::time::Micros;

/// Values kept per bucket.
pub const TOP_K: usize = 20;

/// One-minute buckets kept: ten minutes.
pub const BUCKETS: usize = 10;

/// Bytes of a raw value kept (longer ones are cut, marked with `…`).
pub const LABEL_BYTES: usize = 40;

const MINUTE: Micros = 60_000_000;

/// One kept value of a bucket.
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: u64,
    admitted: u32,
    refused: u32,
    error: u32,
    label_len: u8,
    label: [u8; LABEL_BYTES],
}

const EMPTY: Slot = Slot {
    id: 0,
    admitted: 0,
    refused: 0,
    error: 0,
    label_len: 0,
    label: [0; LABEL_BYTES],
};

impl Slot {
    /// Space-saving's estimate: the hits counted, and at most `error` before.
    fn estimate(&self) -> u64 {
        u64::from(self.admitted) + u64::from(self.refused) + u64::from(self.error)
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Minutes since the epoch; `i64::MIN`: unused.
    minute: i64,
    len: usize,
    /// Every hit of the minute, kept or not.
    admitted: u64,
    refused: u64,
    slots: [Slot; TOP_K],
}

const UNUSED: Bucket = Bucket {
    minute: i64::MIN,
    len: 0,
    admitted: 0,
    refused: 0,
    slots: [EMPTY; TOP_K],
};

/// One rule's heavy hitters.
#[derive(Debug, Clone)]
pub struct HeavyHitters {
    buckets: [Bucket; BUCKETS],
}

/// A value's hits over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hitter {
    /// The value as recorded (raw), or empty when only its id was kept (hashed).
    pub label: String,
    pub id: u64,
    pub admitted: u64,
    pub refused: u64,
    /// Hits the value may have had before it was kept, beyond `admitted` and `refused`
    /// (space-saving's bound).
    pub error: u64,
}

impl Hitter {
    /// Space-saving's estimate: the hits counted, and at most `error` before.
    pub fn estimate(&self) -> u64 {
        self.admitted + self.refused + self.error
    }
}

/// How a rule's values appear among its heavy hitters (`heavy_hitters:` on a descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HitterValues {
    /// As a keyed hash (`#3f2a…`), the same for one value within one process: a value (an
    /// address, an API key) may identify a person or be a secret, and leaves the process only
    /// when the rule says so.
    #[default]
    Hashed,
    /// As sent (the first 40 bytes).
    Raw,
}

impl HitterValues {
    pub const ALL: [HitterValues; 2] = [HitterValues::Hashed, HitterValues::Raw];

    pub fn name(self) -> &'static str {
        match self {
            HitterValues::Hashed => "hashed",
            HitterValues::Raw => "raw",
        }
    }

    pub fn parse(text: &str) -> Option<HitterValues> {
        HitterValues::ALL
            .into_iter()
            .find(|values| values.name() == text)
    }
}

/// Which window a top list covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitterWindow {
    LastMinute,
    LastTenMinutes,
}

impl Default for HeavyHitters {
    fn default() -> Self {
        Self {
            buckets: [UNUSED; BUCKETS],
        }
    }
}

/// A rule's heavy hitters stay within 16 KiB, whatever the traffic (checked when compiling).
const _: () = assert!(HeavyHitters::BYTES <= 16 * 1024);

impl HeavyHitters {
    /// The structure's size: all it ever holds.
    pub const BYTES: usize = std::mem::size_of::<Self>();

    /// One hit of value `id` (`label`: its text to keep, empty to keep none) at `now`.
    pub fn record(&mut self, now: Micros, id: u64, label: &str, admitted: bool) {
        let minute = now.div_euclid(MINUTE);
        let index = usize::try_from(minute.rem_euclid(BUCKETS as i64)).unwrap_or(0);
        let Some(bucket) = self.buckets.get_mut(index) else {
            return;
        };
        if bucket.minute != minute {
            *bucket = Bucket { minute, ..UNUSED };
        }
        if admitted {
            bucket.admitted += 1;
        } else {
            bucket.refused += 1;
        }
        let slot = match bucket.slots[..bucket.len].iter().position(|s| s.id == id) {
            Some(at) => &mut bucket.slots[at],
            None if bucket.len < TOP_K => {
                bucket.len += 1;
                let slot = &mut bucket.slots[bucket.len - 1];
                *slot = labelled(id, label, 0);
                slot
            }
            None => {
                let fewest = (0..TOP_K)
                    .min_by_key(|&at| bucket.slots[at].estimate())
                    .unwrap_or(0);
                let error = u32::try_from(bucket.slots[fewest].estimate()).unwrap_or(u32::MAX);
                let slot = &mut bucket.slots[fewest];
                *slot = labelled(id, label, error);
                slot
            }
        };
        if admitted {
            slot.admitted = slot.admitted.saturating_add(1);
        } else {
            slot.refused = slot.refused.saturating_add(1);
        }
    }

    /// Every hit over `window` at `now`, admitted and refused (weighted as [`Self::top`]).
    pub fn totals(&self, now: Micros, window: HitterWindow) -> (u64, u64) {
        let merged = merge::merge(&self.summaries(now), now, window);
        (merged.admitted, merged.refused)
    }

    /// Every hit of each of the last ten minutes at `now`, oldest first, the current (partial)
    /// minute last: (admitted, refused).
    pub fn per_minute(&self, now: Micros) -> [(u64, u64); BUCKETS] {
        merge::per_minute(&self.summaries(now), now)
    }

    /// The values with the most hits over `window` at `now`, most refused first (then most
    /// admitted), at most [`TOP_K`] (`merge::merge` of the buckets).
    pub fn top(&self, now: Micros, window: HitterWindow) -> Vec<Hitter> {
        merge::merge(&self.summaries(now), now, window).top
    }

    /// Each bucket of the last ten minutes at `now` that counted a hit, as a summary to merge
    /// (with other instances', `merge`).
    pub fn summaries(&self, now: Micros) -> Vec<BucketSummary> {
        self.summaries_where(now, |_, _| true)
    }

    /// [`Self::summaries`], only those of the buckets for which `wanted(minute, hits)` holds
    /// (hits: admitted and refused), decided before any is built: what changed since the
    /// last publication, say.
    pub fn summaries_where(
        &self,
        now: Micros,
        mut wanted: impl FnMut(i64, u64) -> bool,
    ) -> Vec<BucketSummary> {
        self.buckets
            .iter()
            .filter(|bucket| bucket.admitted + bucket.refused > 0)
            .filter(|bucket| merge::within_ten_minutes(bucket.minute, now))
            .filter(|bucket| wanted(bucket.minute, bucket.admitted + bucket.refused))
            .map(|bucket| BucketSummary {
                minute: bucket.minute,
                admitted: bucket.admitted,
                refused: bucket.refused,
                top: bucket.slots[..bucket.len].iter().map(hitter_of).collect(),
            })
            .collect()
    }
}

/// A fresh slot for `id`, which may have had `error` hits before it was kept.
fn labelled(id: u64, label: &str, error: u32) -> Slot {
    let mut slot = Slot { id, error, ..EMPTY };
    let mut end = label.len().min(LABEL_BYTES);
    while !label.is_char_boundary(end) {
        end -= 1;
    }
    slot.label[..end].copy_from_slice(&label.as_bytes()[..end]);
    slot.label_len = u8::try_from(end).unwrap_or(0);
    if end < label.len() {
        // Marks a cut value: the length one past what is kept.
        slot.label_len = u8::MAX;
    }
    slot
}

fn hitter_of(slot: &Slot) -> Hitter {
    Hitter {
        label: label_of(slot),
        id: slot.id,
        admitted: u64::from(slot.admitted),
        refused: u64::from(slot.refused),
        error: u64::from(slot.error),
    }
}

fn label_of(slot: &Slot) -> String {
    let cut = slot.label_len == u8::MAX;
    let len = if cut {
        LABEL_BYTES
    } else {
        usize::from(slot.label_len)
    };
    let mut end = len.min(LABEL_BYTES);
    while std::str::from_utf8(&slot.label[..end]).is_err() && end > 0 {
        end -= 1;
    }
    let mut text = String::from_utf8_lossy(&slot.label[..end]).into_owned();
    if cut {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Micros = 1_796_083_200_000_000;

    #[test]
    fn a_flood_from_a_thousand_values_still_shows_the_one_above_the_rest() {
        let mut hitters = HeavyHitters::default();
        for round in 0..20 {
            for value in 0..1_000_u64 {
                hitters.record(T0 + round, 10 + value, "", true);
            }
            for _ in 0..200 {
                hitters.record(T0 + round, 7, "10.0.0.7", false);
            }
        }
        let top = hitters.top(T0 + 30, HitterWindow::LastMinute);
        assert_eq!(
            top.first().map(|h| (h.id, h.label.as_str())),
            Some((7, "10.0.0.7"))
        );
        assert!(top[0].refused >= 4_000, "{top:?}");
        assert!(top.len() <= TOP_K);
    }

    #[test]
    fn windows_slide_by_the_minute() {
        let mut hitters = HeavyHitters::default();
        for _ in 0..10 {
            hitters.record(T0, 1, "a", false);
        }
        for _ in 0..4 {
            hitters.record(T0 + MINUTE, 2, "b", true);
        }
        // Half a minute into the next minute: half of the first bucket still counts.
        let now = T0 + MINUTE + MINUTE / 2;
        let last = hitters.top(now, HitterWindow::LastMinute);
        let counts: Vec<(u64, u64, u64)> =
            last.iter().map(|h| (h.id, h.admitted, h.refused)).collect();
        assert_eq!(counts, [(1, 0, 5), (2, 4, 0)]);
        assert_eq!(hitters.totals(now, HitterWindow::LastMinute), (4, 5));
        assert_eq!(hitters.totals(now, HitterWindow::LastTenMinutes), (4, 10));
        let minutes = hitters.per_minute(now);
        assert_eq!((minutes[8], minutes[9]), ((0, 10), (4, 0)));
        let later = T0 + 11 * MINUTE;
        assert!(hitters
            .top(later, HitterWindow::LastTenMinutes)
            .iter()
            .all(|h| h.id == 2));
        assert!(hitters
            .top(T0 + 12 * MINUTE, HitterWindow::LastTenMinutes)
            .is_empty());
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let mut hitters = HeavyHitters::default();
        let long = "é".repeat(30);
        hitters.record(T0, 1, &long, true);
        let top = hitters.top(T0, HitterWindow::LastMinute);
        assert_eq!(top[0].label, format!("{}…", "é".repeat(20)));
    }
}
