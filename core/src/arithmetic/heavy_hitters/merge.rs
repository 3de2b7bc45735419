//! Heavy hitters merged from several space-saving summaries: the one-minute buckets of one
//! instance (`heavy_hitters::HeavyHitters`), and those every instance that shares a Redis
//! publishes, read back together (merged summaries, Agarwal et al. 2012).
//!
//! # The error
//!
//! Within one summary a listed value's `admitted` and `refused` are exact since it was kept, and
//! it may have had up to its `error` hits before. A value a summary does not list had at most
//! that summary's [`BucketSummary::floor`] hits there: nothing when the summary had room for
//! every value, else its smallest estimate (space-saving replaces the value with the fewest
//! hits, so no value it dropped had more). Merged, a value's hits over a window lie between its
//! `admitted + refused` and that plus its `error`: its own errors, plus the floor of each
//! summary that does not list it. [`MergedHitters::error_bound`], the sum of every summary's
//! floor, bounds every value's `error`, and the hits of any value the merge does not show.

use serde::{Deserialize, Serialize};

use super::{Hitter, HitterWindow, BUCKETS, LABEL_BYTES, TOP_K};
use crate::ground::time::Micros;

const MINUTE: Micros = 60_000_000;

/// One one-minute bucket of one instance: every hit it counted, and the values it kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketSummary {
    /// Minutes since the epoch.
    pub minute: i64,
    pub admitted: u64,
    pub refused: u64,
    /// At most [`TOP_K`] values.
    pub top: Vec<Hitter>,
}

impl BucketSummary {
    /// The most hits a value this summary does not list may have had in its minute.
    pub fn floor(&self) -> u64 {
        if self.top.len() < TOP_K {
            return 0;
        }
        self.top.iter().map(Hitter::estimate).min().unwrap_or(0)
    }

    /// The summary cut to what one instance can hold ([`TOP_K`] values, labels of
    /// [`LABEL_BYTES`] and the cut mark): one read from elsewhere cannot grow a merge.
    pub fn bounded(mut self) -> Self {
        self.top.truncate(TOP_K);
        for hitter in &mut self.top {
            let mut end = hitter.label.len().min(LABEL_BYTES + '…'.len_utf8());
            while !hitter.label.is_char_boundary(end) {
                end -= 1;
            }
            hitter.label.truncate(end);
        }
        self
    }
}

/// One rule's heavy hitters over a window, from every summary given.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MergedHitters {
    /// Every hit of the window, kept or not.
    pub admitted: u64,
    pub refused: u64,
    /// Most refused first (then most admitted), at most [`TOP_K`].
    pub top: Vec<Hitter>,
    /// No value's hits exceed what `top` shows for it by more, and no value missing from
    /// `top` had more (see the module's text).
    pub error_bound: u64,
}

/// `summaries` merged over `window` at `now` (the last minute weighs the previous bucket by
/// how much of it is still within 60 s, as a sliding window counts).
pub fn merge(summaries: &[BucketSummary], now: Micros, window: HitterWindow) -> MergedHitters {
    let minute = now.div_euclid(MINUTE);
    let mut merged = MergedHitters::default();
    // Per value: the floors of the summaries that list it, to leave out of its error.
    let mut listed_floors: Vec<u64> = Vec::new();
    for summary in summaries {
        let weight = weight(window, now, minute.saturating_sub(summary.minute));
        if weight <= 0.0 {
            continue;
        }
        let scaled = |count: u64| (count as f64 * weight).round() as u64;
        merged.admitted += scaled(summary.admitted);
        merged.refused += scaled(summary.refused);
        let floor = scaled(summary.floor());
        merged.error_bound += floor;
        for hitter in &summary.top {
            let at = position_of(&mut merged.top, &mut listed_floors, hitter);
            merged.top[at].admitted += scaled(hitter.admitted);
            merged.top[at].refused += scaled(hitter.refused);
            merged.top[at].error += scaled(hitter.error);
            listed_floors[at] += floor;
        }
    }
    for (hitter, listed) in merged.top.iter_mut().zip(&listed_floors) {
        hitter.error += merged.error_bound.saturating_sub(*listed);
    }
    merged
        .top
        .retain(|hitter| hitter.admitted + hitter.refused > 0);
    merged
        .top
        .sort_by(|a, b| (b.refused, b.admitted, a.id).cmp(&(a.refused, a.admitted, b.id)));
    merged.top.truncate(TOP_K);
    merged
}

/// Every hit of each of the last ten minutes at `now` in `summaries`, oldest first, the
/// current (partial) minute last: (admitted, refused).
pub fn per_minute(summaries: &[BucketSummary], now: Micros) -> [(u64, u64); BUCKETS] {
    let minute = now.div_euclid(MINUTE);
    let mut minutes = [(0, 0); BUCKETS];
    for summary in summaries {
        let age = minute.saturating_sub(summary.minute);
        if let Some(at) = usize::try_from(age)
            .ok()
            .and_then(|age| (BUCKETS - 1).checked_sub(age))
        {
            minutes[at].0 += summary.admitted;
            minutes[at].1 += summary.refused;
        }
    }
    minutes
}

/// Whether a summary of `minute` still counts in the last ten minutes at `now`.
pub fn within_ten_minutes(minute: i64, now: Micros) -> bool {
    let age = now.div_euclid(MINUTE).saturating_sub(minute);
    (0..BUCKETS as i64).contains(&age)
}

/// The index of `hitter`'s value in `top`, added with no hits if missing.
fn position_of(top: &mut Vec<Hitter>, listed_floors: &mut Vec<u64>, hitter: &Hitter) -> usize {
    if let Some(at) = top.iter().position(|kept| kept.id == hitter.id) {
        if top[at].label.is_empty() {
            top[at].label.clone_from(&hitter.label);
        }
        return at;
    }
    top.push(Hitter {
        label: hitter.label.clone(),
        id: hitter.id,
        admitted: 0,
        refused: 0,
        error: 0,
    });
    listed_floors.push(0);
    top.len() - 1
}

/// How much of a bucket `age` minutes old counts in `window` at `now`.
fn weight(window: HitterWindow, now: Micros, age: i64) -> f64 {
    match (window, age) {
        (HitterWindow::LastTenMinutes, age) if (0..BUCKETS as i64).contains(&age) => 1.0,
        (HitterWindow::LastMinute, 0) => 1.0,
        (HitterWindow::LastMinute, 1) => 1.0 - now.rem_euclid(MINUTE) as f64 / MINUTE as f64,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Micros = 1_796_083_200_000_000;
    const MINUTE_OF_T0: i64 = T0 / MINUTE;

    fn hitter(id: u64, admitted: u64, refused: u64, error: u64) -> Hitter {
        Hitter {
            label: String::new(),
            id,
            admitted,
            refused,
            error,
        }
    }

    /// A full summary: value `id` with `refused` refusals, then K − 1 values of `rest` hits.
    fn full(id: u64, refused: u64, rest: u64) -> BucketSummary {
        let mut top = vec![hitter(id, 0, refused, 0)];
        top.extend((1..TOP_K as u64).map(|n| hitter(1000 + n + id * 100, rest, 0, 0)));
        BucketSummary {
            minute: MINUTE_OF_T0,
            admitted: rest * (TOP_K as u64 - 1) + 50,
            refused,
            top,
        }
    }

    #[test]
    fn a_value_listed_by_two_instances_has_their_counts_summed() {
        let one = BucketSummary {
            minute: MINUTE_OF_T0,
            admitted: 10,
            refused: 4,
            top: vec![hitter(7, 2, 4, 0), hitter(8, 8, 0, 0)],
        };
        let two = BucketSummary {
            minute: MINUTE_OF_T0,
            admitted: 3,
            refused: 6,
            top: vec![hitter(7, 1, 6, 0), hitter(9, 2, 0, 0)],
        };
        let merged = merge(&[one, two], T0 + 1, HitterWindow::LastMinute);
        let counts: Vec<(u64, u64, u64, u64)> = merged
            .top
            .iter()
            .map(|h| (h.id, h.admitted, h.refused, h.error))
            .collect();
        assert_eq!(counts, [(7, 3, 10, 0), (8, 8, 0, 0), (9, 2, 0, 0)]);
        assert_eq!((merged.admitted, merged.refused), (13, 10));
        // Neither summary was full: every value they dropped had no hit.
        assert_eq!(merged.error_bound, 0);
    }

    #[test]
    fn a_value_missing_from_a_full_summary_may_have_had_its_smallest_count_there() {
        let one = full(7, 40, 3);
        let two = full(8, 30, 2);
        assert_eq!((one.floor(), two.floor()), (3, 2));
        let merged = merge(&[one, two], T0, HitterWindow::LastTenMinutes);
        assert_eq!(merged.error_bound, 5);
        let error_of = |id| merged.top.iter().find(|h| h.id == id).map(|h| h.error);
        // 7 is in the first summary only: the second may have dropped up to 2 of its hits.
        assert_eq!(error_of(7), Some(2));
        assert_eq!(error_of(8), Some(3));
        assert!(merged.top.len() <= TOP_K);
    }

    #[test]
    fn summaries_outside_the_window_do_not_count_and_a_bounded_one_is_cut() {
        let old = BucketSummary {
            minute: MINUTE_OF_T0 - 10,
            ..full(7, 40, 3)
        };
        assert!(!within_ten_minutes(old.minute, T0));
        assert_eq!(
            merge(&[old], T0, HitterWindow::LastTenMinutes),
            MergedHitters::default()
        );
        let mut long = full(7, 1, 1);
        long.top.push(hitter(99, 1, 1, 0));
        long.top[0].label = "x".repeat(500);
        let bounded = long.bounded();
        assert_eq!(bounded.top.len(), TOP_K);
        assert_eq!(bounded.top[0].label.len(), LABEL_BYTES + 3);
    }
}
