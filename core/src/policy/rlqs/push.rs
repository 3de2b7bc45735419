//! Telling an Envoy its new share before it asks: when the Envoys on a bucket or their demands
//! change, floodgate pushes the new assignments to the Envoys already on it instead of waiting
//! for each one's next report. Envoy 1.40 builds a new token bucket whenever an assignment's
//! shape changes, starting it at the old bucket's fill ratio (and full when there was none),
//! so every push can hand out tokens again: pushes are kept to the changes that move the
//! bound, and a bucket new on an Envoy opens with a small burst.

use super::assignment::{Assignment, TokenBucketShape};

/// The knobs of pushing (the guide, docs/rlqs.md, explains the defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushSettings {
    /// A share that moved by less than this part of the bucket's limit is not pushed: the
    /// Envoy gets it at its next report. Below it, the total can pass the limit by no more
    /// than this part until then.
    pub min_change: f64,
    /// A demand that moved by less than this part of itself does not make floodgate look at
    /// the other Envoys' shares.
    pub demand_move: f64,
    /// Part of its burst a bucket new on an Envoy is assigned until the Envoy's demand there
    /// is measured: Envoy starts that token bucket full, and the whole burst on top of the
    /// rate would let a new bucket's first seconds pass the limit.
    pub opening_burst: f64,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            min_change: 0.02,
            demand_move: 0.05,
            opening_burst: 0.25,
        }
    }
}

/// Whether `new` should be pushed to an Envoy that was last sent `sent` (`None`: nothing yet)
/// on a bucket whose limit is `limit` requests per second.
pub fn worth_pushing(
    sent: Option<Assignment>,
    new: Assignment,
    limit: f64,
    settings: PushSettings,
) -> bool {
    match (sent, new) {
        (None, _) => true,
        (Some(sent), new) if sent == new => false,
        (Some(Assignment::TokenBucket(sent)), Assignment::TokenBucket(new)) => {
            (new.rate() - sent.rate()).abs() >= settings.min_change * limit.max(0.0)
        }
        _ => true,
    }
}

/// Whether an Envoy's demand moved enough, from `before` to `after` (requests per second;
/// `None`: not measured), that the other Envoys' shares should be looked at again.
pub fn demand_moved(before: Option<f64>, after: Option<f64>, settings: PushSettings) -> bool {
    match (before, after) {
        (None, None) => false,
        (Some(before), Some(after)) => {
            (after - before).abs() > settings.demand_move * before.abs().max(after.abs())
        }
        _ => true,
    }
}

/// Whether what the other floodgates offer on a bucket moved so that this floodgate's Envoys
/// should be pushed new shares: a floodgate appeared, or a demand moved as [`demand_moved`].
/// One that went away is not pushed for: its Envoys may still enforce the part it gave them
/// until they report elsewhere, so the others take its part at their own next reports.
pub fn peers_moved(before: &[Option<f64>], after: &[Option<f64>], settings: PushSettings) -> bool {
    match after.len().cmp(&before.len()) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            // The store lists the peers in no set order: compare them smallest first.
            let sorted = |demands: &[Option<f64>]| {
                let mut demands = demands.to_vec();
                demands.sort_by(|a, b| a.unwrap_or(-1.0).total_cmp(&b.unwrap_or(-1.0)));
                demands
            };
            sorted(before)
                .iter()
                .zip(&sorted(after))
                .any(|(before, after)| demand_moved(*before, *after, settings))
        }
    }
}

/// The assignment of a bucket new on an Envoy: `assignment` with `opening_burst` of its burst
/// (at least one token). Once the Envoy's demand is measured the whole burst follows; Envoy
/// then keeps the bucket's fill ratio, so a bucket drained by its load stays drained.
pub fn opening(assignment: Assignment, settings: PushSettings) -> Assignment {
    match assignment {
        Assignment::TokenBucket(shape) => {
            let burst = (f64::from(shape.max_tokens) * settings.opening_burst.clamp(0.0, 1.0))
                .ceil()
                .max(1.0);
            Assignment::TokenBucket(TokenBucketShape {
                // At most max_tokens: the product of a u32 and a fraction up to 1.
                max_tokens: (burst as u32).min(shape.max_tokens).max(1),
                ..shape
            })
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(rate: u32, max_tokens: u32) -> Assignment {
        Assignment::TokenBucket(TokenBucketShape {
            max_tokens,
            tokens_per_fill: rate,
            fill_interval_seconds: 1,
        })
    }

    #[test]
    fn only_changes_that_move_the_bound_are_pushed() {
        let settings = PushSettings::default();
        assert!(worth_pushing(None, bucket(50, 50), 100.0, settings));
        assert!(!worth_pushing(
            Some(bucket(50, 50)),
            bucket(50, 50),
            100.0,
            settings
        ));
        // 1 of a limit of 100 is under the 2 % that matters; 2 is not.
        assert!(!worth_pushing(
            Some(bucket(50, 50)),
            bucket(51, 51),
            100.0,
            settings
        ));
        assert!(worth_pushing(
            Some(bucket(50, 50)),
            bucket(48, 48),
            100.0,
            settings
        ));
        assert!(worth_pushing(
            Some(bucket(100, 100)),
            Assignment::DenyAll,
            100.0,
            settings
        ));
        assert!(!worth_pushing(
            Some(Assignment::AllowAll),
            Assignment::AllowAll,
            100.0,
            settings
        ));
    }

    #[test]
    fn a_demand_moves_when_it_appears_or_changes_by_more_than_five_percent() {
        let settings = PushSettings::default();
        assert!(demand_moved(None, Some(3.0), settings));
        assert!(!demand_moved(None, None, settings));
        assert!(!demand_moved(Some(30.0), Some(31.0), settings));
        assert!(demand_moved(Some(30.0), Some(33.0), settings));
        assert!(peers_moved(&[Some(1.0)], &[Some(1.0), None], settings));
        assert!(!peers_moved(&[Some(100.0)], &[Some(101.0)], settings));
        assert!(peers_moved(&[Some(100.0)], &[Some(80.0)], settings));
        // In another order, the same peers.
        assert!(!peers_moved(
            &[Some(3.0), Some(100.0)],
            &[Some(100.0), Some(3.0)],
            settings
        ));
        // A peer that went away is not pushed for.
        assert!(!peers_moved(
            &[Some(100.0), Some(3.0)],
            &[Some(3.0)],
            settings
        ));
    }

    #[test]
    fn a_new_bucket_opens_with_a_quarter_of_the_burst() {
        let settings = PushSettings::default();
        assert_eq!(opening(bucket(100, 100), settings), bucket(100, 25));
        assert_eq!(opening(bucket(3, 3), settings), bucket(3, 1));
        assert_eq!(opening(bucket(1, 1), settings), bucket(1, 1));
        assert_eq!(
            opening(Assignment::AllowAll, settings),
            Assignment::AllowAll
        );
    }
}
