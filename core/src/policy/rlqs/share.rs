//! How one rule's limit is divided among the Envoys reporting on one bucket.
//!
//! Every Envoy gets a floor (`floor_fraction` of the limit, split evenly), so a newcomer or a
//! quiet Envoy can still admit something before its demand is known; the rest is shared
//! max-min fairly (water-filling) on each Envoy's demand plus `headroom`, so an Envoy asking
//! less than an even share gets what it asks and the others split what it leaves. What no
//! demand claims is split evenly, as room for bursts. The shares always add up to the limit:
//! between two reports of the same Envoys, the admitted total cannot pass it.

use crate::arithmetic::algorithm::Share;

/// The knobs of the division (the guide, docs/rlqs.md, explains the defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareSettings {
    /// Part of the limit (0 to 1) split evenly before demand is looked at.
    pub floor_fraction: f64,
    /// Extra asked on top of an Envoy's measured demand (0.05: 5 % more), for growth between
    /// two reports. Under contention what a light Envoy is given and does not use is lost to
    /// the others until its next report, so this is kept small: a demand that grows faster is
    /// measured (denied requests count as demand) and met at the next report.
    pub headroom: f64,
}

impl Default for ShareSettings {
    fn default() -> Self {
        Self {
            floor_fraction: 0.1,
            headroom: 0.05,
        }
    }
}

/// Each Envoy's share of `limit` (requests per second), in the order of `demands`. A demand
/// is requests per second offered (admitted and denied); `None` is an Envoy whose demand is
/// not measured yet, which asks for an even share.
pub fn divide(limit: f64, demands: &[Option<f64>], settings: ShareSettings) -> Vec<f64> {
    let count = demands.len();
    if count == 0 || !limit.is_finite() || limit <= 0.0 {
        return vec![0.0; count];
    }
    let envoys = count as f64;
    let floor_fraction = settings.floor_fraction.clamp(0.0, 1.0);
    let headroom = settings.headroom.max(0.0);
    let floor = limit * floor_fraction / envoys;
    let pool = limit - floor * envoys;
    let needs: Vec<f64> = demands
        .iter()
        .map(|demand| match demand {
            Some(rate) if rate.is_finite() => (rate.max(0.0) * (1.0 + headroom) - floor).max(0.0),
            _ => pool / envoys,
        })
        .collect();
    let given = water_fill(pool, &needs);
    let unclaimed = (pool - given.iter().sum::<f64>()).max(0.0);
    given
        .into_iter()
        .map(|share| floor + share + unclaimed / envoys)
        .collect()
}

/// One floodgate's part of `limit` when several share a bucket (each aggregating its own
/// Envoys): the limit divided as among Envoys, this instance's demand `own` first, then every
/// other instance's last published demand. Every instance divides the same demands, so their
/// parts add up to the limit as the Envoys' shares do; each then divides its part among its
/// own Envoys with [`divide`].
pub fn instance_part(
    limit: f64,
    own: Option<f64>,
    peers: &[Option<f64>],
    settings: ShareSettings,
) -> f64 {
    let mut demands = Vec::with_capacity(peers.len() + 1);
    demands.push(own);
    demands.extend_from_slice(peers);
    divide(limit, &demands, settings)
        .first()
        .copied()
        .unwrap_or(0.0)
}

/// What one floodgate's Envoys on a bucket offer together: the sum of those measured, `None`
/// while none is (it then asks for an even part, as an unmeasured Envoy does).
pub fn aggregate_demand(demands: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    demands
        .into_iter()
        .flatten()
        .filter(|rate| rate.is_finite())
        .fold(None, |sum, rate| Some(sum.unwrap_or(0.0) + rate.max(0.0)))
}

/// The part of `limit` each priority class of one rule may divide among its buckets' Envoys,
/// in the order of `classes`: the classes that have buckets, each its share of the capacity
/// and what its buckets offer (`None` while unmeasured). Highest share first, each class gets
/// what it asks (demand × headroom; unmeasured: an even part of the limit, as an unmeasured
/// Envoy asks), at most its cap (share × limit) and what the classes above left; what no class
/// asked goes to the classes in the same order, up to their caps. So a lower class yields to a
/// higher one under load and uses what it leaves; the parts add up to at most the limit.
pub fn class_totals(
    limit: f64,
    classes: &[(Share, Option<f64>)],
    settings: ShareSettings,
) -> Vec<f64> {
    let limit = if limit.is_finite() {
        limit.max(0.0)
    } else {
        0.0
    };
    let headroom = settings.headroom.max(0.0);
    let mut order: Vec<usize> = (0..classes.len()).collect();
    order.sort_by(|&a, &b| classes[b].0.cmp(&classes[a].0));
    let cap = |index: usize| limit * f64::from(classes[index].0.millionths()) / 1e6;
    let mut totals = vec![0.0; classes.len()];
    let mut remaining = limit;
    for &index in &order {
        let asked = classes[index]
            .1
            .filter(|demand| demand.is_finite())
            .map_or(limit / classes.len() as f64, |demand| {
                demand.max(0.0) * (1.0 + headroom)
            });
        let given = asked.min(cap(index)).min(remaining).max(0.0);
        totals[index] = given;
        remaining -= given;
    }
    for &index in &order {
        let more = (cap(index) - totals[index]).max(0.0).min(remaining);
        totals[index] += more;
        remaining -= more;
    }
    totals
}

/// Max-min fair: the smallest needs are met whole while the even split of what remains covers
/// them; every larger need gets that even split.
fn water_fill(pool: f64, needs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..needs.len()).collect();
    order.sort_by(|&a, &b| needs[a].total_cmp(&needs[b]));
    let mut given = vec![0.0; needs.len()];
    let mut remaining = pool;
    for (served, &index) in order.iter().enumerate() {
        let level = remaining / (needs.len() - served) as f64;
        if needs[index] <= level {
            given[index] = needs[index];
            remaining -= needs[index];
        } else {
            for &rest in &order[served..] {
                given[rest] = level;
            }
            break;
        }
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn a_lower_class_yields_to_a_higher_one_and_takes_what_it_leaves() {
        let settings = ShareSettings::default();
        let full = Share::FULL;
        let half = Share::from_millionths(500_000).unwrap_or(Share::FULL);
        // Critical offers 10/s, low 60/s, limit 30: critical 10.5 (its ask), low its cap of 15,
        // the 4.5 nobody asked for back to critical.
        let totals = class_totals(30.0, &[(half, Some(60.0)), (full, Some(10.0))], settings);
        assert!(
            close(totals[0], 15.0) && close(totals[1], 15.0),
            "{totals:?}"
        );
        // Critical over the limit: low gets nothing.
        let totals = class_totals(30.0, &[(full, Some(40.0)), (half, Some(40.0))], settings);
        assert!(
            close(totals[0], 30.0) && close(totals[1], 0.0),
            "{totals:?}"
        );
        // Critical quiet: low up to its cap, the rest kept for critical.
        let totals = class_totals(30.0, &[(full, Some(0.0)), (half, Some(100.0))], settings);
        assert!(
            close(totals[1], 15.0) && close(totals[0], 15.0),
            "{totals:?}"
        );
        // Unmeasured classes ask an even part, as unmeasured Envoys do; a class alone has up
        // to its cap.
        let alone = class_totals(30.0, &[(half, None)], settings);
        assert!(close(alone[0], 15.0), "{alone:?}");
        let totals = class_totals(30.0, &[(full, None), (half, None)], settings);
        assert!(
            close(totals[0], 15.0) && close(totals[1], 15.0),
            "{totals:?}"
        );
    }

    #[test]
    fn instances_divide_the_limit_as_envoys_do_and_their_parts_add_up() {
        let settings = ShareSettings::default();
        // Instance A's Envoys offer 10 + 20 /s, B's 300 /s: A asks 30 × 1.05, B the rest.
        let a_demand = aggregate_demand([Some(10.0), Some(20.0), None]);
        assert_eq!(a_demand, Some(30.0));
        let a = instance_part(100.0, a_demand, &[Some(300.0)], settings);
        let b = instance_part(100.0, Some(300.0), &[a_demand], settings);
        assert!(close(a, 31.5), "{a}");
        assert!(close(a + b, 100.0), "{a} + {b}");
        // Alone, an instance has the whole limit; unmeasured, it asks for an even part.
        assert!(close(instance_part(100.0, a_demand, &[], settings), 100.0));
        assert_eq!(aggregate_demand([None, None]), None);
        let fresh = instance_part(100.0, None, &[Some(500.0)], settings);
        assert!(close(fresh, 50.0), "{fresh}");
    }

    #[test]
    fn one_envoy_gets_the_whole_limit() {
        let shares = divide(100.0, &[Some(500.0)], ShareSettings::default());
        assert!(close(shares[0], 100.0), "{shares:?}");
    }

    #[test]
    fn unequal_demand_over_the_limit_is_shared_max_min_fairly() {
        // 100/s among demands 10 and 300: the small one gets 10 × 1.05 and its floor is inside
        // that; the large one the rest.
        let shares = divide(100.0, &[Some(10.0), Some(300.0)], ShareSettings::default());
        assert!(close(shares[0], 10.5), "{shares:?}");
        assert!(close(shares[1], 89.5), "{shares:?}");
    }

    #[test]
    fn a_light_envoy_under_contention_leaves_little_of_the_limit_unused() {
        // 170/s and 30/s offered against 100/s: the light one keeps 5 % for its growth, the
        // heavy one has the rest, so 98.5 of the 100 are used.
        let demands = [Some(170.0), Some(30.0)];
        let shares = divide(100.0, &demands, ShareSettings::default());
        assert!(close(shares[1], 31.5), "{shares:?}");
        let used: f64 = shares
            .iter()
            .zip(demands.iter().flatten())
            .map(|(share, demand)| share.min(*demand))
            .sum();
        assert!(used >= 97.0, "{used} of 100 used: {shares:?}");
    }

    #[test]
    fn two_large_demands_split_evenly() {
        let shares = divide(100.0, &[Some(200.0), Some(900.0)], ShareSettings::default());
        assert!(
            close(shares[0], 50.0) && close(shares[1], 50.0),
            "{shares:?}"
        );
    }

    #[test]
    fn demand_under_the_limit_leaves_the_rest_as_headroom_for_all() {
        let shares = divide(100.0, &[Some(10.0), Some(20.0)], ShareSettings::default());
        // Needs 10.5 and 21 (floors of 5 inside them); 68.5 unclaimed, 34.25 each.
        assert!(close(shares[0], 44.75), "{shares:?}");
        assert!(close(shares[1], 55.25), "{shares:?}");
    }

    #[test]
    fn a_newcomer_asks_an_even_share_and_never_gets_less_than_its_floor() {
        let shares = divide(
            90.0,
            &[Some(1000.0), None, Some(1000.0)],
            ShareSettings::default(),
        );
        assert!(shares.iter().all(|s| close(*s, 30.0)), "{shares:?}");
        let idle = divide(100.0, &[Some(0.0), Some(1000.0)], ShareSettings::default());
        assert!(close(idle[0], 5.0), "{idle:?}");
    }

    #[test]
    fn no_limit_or_no_envoys_give_nothing() {
        assert!(divide(100.0, &[], ShareSettings::default()).is_empty());
        assert_eq!(
            divide(0.0, &[Some(1.0)], ShareSettings::default()),
            vec![0.0]
        );
        assert_eq!(
            divide(f64::NAN, &[None], ShareSettings::default()),
            vec![0.0]
        );
    }

    proptest! {
        #[test]
        fn under_contention_only_the_light_envoys_headroom_goes_unused(
            limit in 1.0f64..1e5,
            parts in proptest::collection::vec(0.0f64..1.0, 2..20),
            over in 1.0f64..4.0,
        ) {
            // Demands adding up to `over` × the limit, each at least its floor.
            let settings = ShareSettings::default();
            let floor = limit * settings.floor_fraction / parts.len() as f64;
            let sum: f64 = parts.iter().sum::<f64>().max(1e-9);
            let demands: Vec<Option<f64>> = parts
                .iter()
                .map(|part| Some(floor + part / sum * limit * over))
                .collect();
            let shares = divide(limit, &demands, settings);
            let mut used = 0.0;
            let mut light = 0.0;
            for (share, demand) in shares.iter().zip(demands.iter().flatten()) {
                used += share.min(*demand);
                if *share >= *demand {
                    light += demand;
                }
            }
            prop_assert!(
                used >= limit - settings.headroom * light - 1e-6 * limit,
                "used {used} of {limit}, light demand {light}"
            );
        }

        #[test]
        fn shares_add_up_to_the_limit_and_cover_modest_demand(
            limit in 1.0f64..1e6,
            demands in proptest::collection::vec(proptest::option::of(0.0f64..1e7), 1..40),
        ) {
            let settings = ShareSettings::default();
            let shares = divide(limit, &demands, settings);
            let total: f64 = shares.iter().sum();
            prop_assert!(close(total, limit), "total {total} limit {limit}");
            let floor = limit * settings.floor_fraction / demands.len() as f64;
            let even = limit / demands.len() as f64;
            for (share, demand) in shares.iter().zip(&demands) {
                prop_assert!(*share >= floor * (1.0 - 1e-9));
                // Whoever asks no more than an even share gets all it asks.
                if let Some(rate) = demand {
                    if rate * (1.0 + settings.headroom) <= even {
                        prop_assert!(*share >= rate * (1.0 - 1e-9), "share {share} demand {rate}");
                    }
                }
            }
        }
    }
}
