//! Priority classes as arithmetic: the part of a limit's capacity a class may use, and the
//! reserve it must leave for the classes above it.
//!
//!   capacity C = `Quota::capacity` (the most `remaining` an algorithm ever reports)
//!   usable     = floor(C × share)           share in millionths, integer arithmetic
//!   reserve    = C − usable
//!   admit      ⇔ the counter's own test admits n + reserve hits
//!                (fits(n + reserve): the hit leaves at least `reserve` remaining)
//!   retry      = the counter's retry_after(n + reserve): when the hit fits above the reserve
//!
//! So a class at 100 % has no reserve and decides exactly as a rule without classes, and a
//! class is refused before the counter is full, leaving the rest to the classes above it. The
//! reserve is computed from the quota in force when the counter is evaluated (an adjusted
//! limit moves it along), and passed as a plain integer to the Redis script.

use super::Quota;

/// The share of a capacity a priority class may use, in millionths: 1 to 1 000 000 (100 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Share(u32);

impl Share {
    /// The whole capacity: no reserve (a rule without classes).
    pub const FULL: Share = Share(MILLION);

    /// `None` outside 1..=1 000 000: a share of nothing would refuse every request.
    pub fn from_millionths(millionths: u32) -> Option<Share> {
        (1..=MILLION)
            .contains(&millionths)
            .then_some(Share(millionths))
    }

    pub fn millionths(self) -> u32 {
        self.0
    }

    pub fn is_full(self) -> bool {
        self.0 == MILLION
    }

    /// floor(`amount` × share): the part of `amount` this share covers.
    pub fn of(self, amount: u64) -> u64 {
        let part = u128::from(amount) * u128::from(self.0) / u128::from(MILLION);
        // part ≤ amount, so it always fits.
        u64::try_from(part).unwrap_or(amount)
    }
}

const MILLION: u32 = 1_000_000;

impl Default for Share {
    fn default() -> Self {
        Share::FULL
    }
}

impl std::fmt::Display for Share {
    /// As a percentage with up to four decimals, the way configuration writes it (`12.5%`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let whole = self.0 / 10_000;
        let fraction = self.0 % 10_000;
        if fraction == 0 {
            write!(f, "{whole}%")
        } else {
            let digits = format!("{fraction:04}");
            write!(f, "{whole}.{}%", digits.trim_end_matches('0'))
        }
    }
}

impl Quota {
    /// The units a class with `share` must leave unused: C − floor(C × share).
    pub fn reserve(&self, share: Share) -> u64 {
        let capacity = self.capacity();
        capacity - share.of(capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arithmetic::algorithm::Algorithm;
    use crate::ground::unit::Unit;

    fn percent(value: u32) -> Share {
        Share::from_millionths(value * 10_000).unwrap_or(Share::FULL)
    }

    #[test]
    fn the_reserve_is_what_the_share_does_not_cover_rounded_in_favour_of_the_reserve() {
        let window = Quota::new(100, Unit::Second);
        assert_eq!(window.reserve(percent(100)), 0);
        assert_eq!(window.reserve(percent(80)), 20);
        assert_eq!(window.reserve(percent(50)), 50);
        let odd = Quota::new(7, Unit::Second);
        // floor(7 × 0.5) = 3 usable: 4 reserved.
        assert_eq!(odd.reserve(percent(50)), 4);
        let tiny = Share::from_millionths(1).unwrap_or(Share::FULL);
        assert_eq!(odd.reserve(tiny), 7);
    }

    #[test]
    fn buckets_reserve_part_of_their_capacity_not_of_their_rate() {
        let token = Quota::new(10, Unit::Second)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(40);
        assert_eq!(token.reserve(percent(50)), 20);
        // nginx burst 20: 21 at once; half of it is 10.
        let leaky = Quota::new(10, Unit::Second)
            .with_algorithm(Algorithm::LeakyBucket)
            .with_burst(20);
        assert_eq!(leaky.reserve(percent(50)), 11);
        let huge = Quota::new(u32::MAX, Unit::Second)
            .with_algorithm(Algorithm::LeakyBucket)
            .with_burst(u32::MAX);
        // C = 2^32 (burst + 1): no overflow on the way.
        assert_eq!(huge.reserve(percent(50)), 1 << 31);
    }

    #[test]
    fn shares_outside_one_millionth_to_the_whole_are_refused() {
        assert_eq!(Share::from_millionths(0), None);
        assert_eq!(Share::from_millionths(1_000_001), None);
        assert!(Share::from_millionths(1_000_000).is_some_and(Share::is_full));
    }

    #[test]
    fn shares_display_as_percentages() {
        assert_eq!(percent(80).to_string(), "80%");
        assert_eq!(Share::FULL.to_string(), "100%");
        let fractional = Share::from_millionths(125_000).unwrap_or(Share::FULL);
        assert_eq!(fractional.to_string(), "12.5%");
        let smallest = Share::from_millionths(100).unwrap_or(Share::FULL);
        assert_eq!(smallest.to_string(), "0.01%");
    }
}
