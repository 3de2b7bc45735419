//! The proleptic Gregorian calendar in UTC, on the core's microseconds: which month an instant
//! falls in, and where a month starts. Calendar months are the windows of a MONTH limit under
//! `--calendar-months` (envoyproxy/ratelimit's `USE_CALENDAR_MONTH_RATE_LIMIT`), and dates are
//! what [`rfc3339`] prints.
//!
//! Howard Hinnant's `days_from_civil` / `civil_from_days`, counted from March so that February,
//! the month of varying length, comes last in its year: a year of the March-based count is
//! 400-year eras of 146 097 days, and within an era the day of the year says the month by
//! `(5·day + 2) / 153`. Signed floor division throughout, so instants before 1970 work too.
//! Lua mirrors `month_index` and `month_start` (src/store/redis/lua/prelude.lua).
//!
//! Months are counted from January 1970 (index 0): the index of a month is
//! `(year − 1970) · 12 + (month − 1)`.

use crate::ground::time::{Micros, MICROS_PER_SECOND};

/// One day in microseconds (no leap seconds, as Unix time has none).
pub const MICROS_PER_DAY: Micros = 86_400 * MICROS_PER_SECOND;

/// Days from 0000-03-01 to 1970-01-01.
const EPOCH_FROM_MARCH_ZERO: i64 = 719_468;

/// Days in a 400-year era, which repeats exactly.
const DAYS_PER_ERA: i64 = 146_097;

/// Months from March of year 0 to January 1970 (1970 × 12 − 2).
const JANUARY_1970_FROM_MARCH_ZERO: i64 = 1970 * 12 - 2;

/// A day since 1970-01-01 (negative before) as (year, month 1–12, day 1–31).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let (march_year, march_month, day_of_year) = march_based(days);
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let (year, month) = if march_month < 10 {
        (march_year, march_month + 3)
    } else {
        (march_year + 1, march_month - 9)
    };
    // Both fit: a month is 1–12 and a day 1–31 by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// `2026-11-30T10:00:00Z`, UTC, whole seconds.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    let seconds = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    format!(
        "{}Z",
        date_time_text(i64::try_from(seconds).unwrap_or(i64::MAX))
    )
}

/// `seconds` since the epoch (negative before it) as `2026-11-30T10:00:00`, UTC, with no zone
/// and no fraction: how every RFC 3339 timestamp floodgate writes begins.
pub fn date_time_text(seconds: i64) -> String {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The month holding `instant` (UTC), counted from January 1970.
pub fn month_index(instant: Micros) -> i64 {
    let (march_year, march_month, _) = march_based(instant.div_euclid(MICROS_PER_DAY));
    march_year * 12 + march_month - JANUARY_1970_FROM_MARCH_ZERO
}

/// 00:00:00 UTC on the 1st of month `index` (counted from January 1970), clamped to the
/// instants a `Micros` can hold.
pub fn month_start(index: i64) -> Micros {
    // Months since March of year 0; any i64 index stays far from overflow in i128.
    let from_march_zero = i128::from(index) + i128::from(JANUARY_1970_FROM_MARCH_ZERO);
    let march_year = from_march_zero.div_euclid(12);
    let march_month = from_march_zero.rem_euclid(12);
    let era = march_year.div_euclid(400);
    let year_of_era = march_year - era * 400;
    let day_of_era =
        year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + (153 * march_month + 2) / 5;
    let days = era * i128::from(DAYS_PER_ERA) + day_of_era - i128::from(EPOCH_FROM_MARCH_ZERO);
    let micros = days * i128::from(MICROS_PER_DAY);
    Micros::try_from(micros).unwrap_or(if micros < 0 { Micros::MIN } else { Micros::MAX })
}

/// A day since 1970-01-01 in the March-based count: (year, month 0–11 with 0 = March, day of
/// that year 0–365).
fn march_based(days: i64) -> (i64, i64, i64) {
    // Saturating and Euclidean: no i64 overflows here (a Micros holds at most 1.1e8 days).
    let from_march_zero = days.saturating_add(EPOCH_FROM_MARCH_ZERO);
    let era = from_march_zero.div_euclid(DAYS_PER_ERA);
    let day_of_era = from_march_zero.rem_euclid(DAYS_PER_ERA);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153;
    (era * 400 + year_of_era, march_month, day_of_year)
}

/// 00:00:00 UTC on the 1st of months around the ends of months of every length, in µs, for
/// tests (`date -u -d 2027-02-01 +%s`, …).
#[cfg(test)]
pub(crate) mod dates {
    use crate::ground::time::{Micros, MICROS_PER_SECOND};

    pub(crate) const DEC_2026: Micros = 1_796_083_200 * MICROS_PER_SECOND;
    pub(crate) const JAN_2027: Micros = 1_798_761_600 * MICROS_PER_SECOND;
    pub(crate) const FEB_2027: Micros = 1_801_440_000 * MICROS_PER_SECOND;
    pub(crate) const MAR_2027: Micros = 1_803_859_200 * MICROS_PER_SECOND;
    pub(crate) const APR_2027: Micros = 1_806_537_600 * MICROS_PER_SECOND;
    pub(crate) const MAY_2027: Micros = 1_809_129_600 * MICROS_PER_SECOND;
    pub(crate) const JAN_2028: Micros = 1_830_297_600 * MICROS_PER_SECOND;
    pub(crate) const FEB_2028: Micros = 1_832_976_000 * MICROS_PER_SECOND;
    pub(crate) const MAR_2028: Micros = 1_835_481_600 * MICROS_PER_SECOND;
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::dates::*;
    use super::*;

    fn index_of(year: i64, month: i64) -> i64 {
        (year - 1970) * 12 + month - 1
    }

    #[test]
    fn months_start_on_the_first_at_midnight_utc() {
        assert_eq!(month_start(0), 0);
        assert_eq!(month_start(index_of(2026, 12)), DEC_2026);
        assert_eq!(month_start(index_of(2027, 1)), JAN_2027);
        assert_eq!(month_start(index_of(2027, 2)), FEB_2027);
        assert_eq!(month_start(index_of(2027, 3)), MAR_2027);
        assert_eq!(month_start(index_of(2028, 1)), JAN_2028);
        assert_eq!(month_start(index_of(2028, 2)), FEB_2028);
        assert_eq!(month_start(index_of(2028, 3)), MAR_2028);
        // December 1969, before the epoch.
        assert_eq!(month_start(-1), -31 * MICROS_PER_DAY);
    }

    #[test]
    fn an_instant_falls_in_its_month_up_to_the_last_microsecond() {
        for (start, next, year, month) in [
            (DEC_2026, JAN_2027, 2026, 12),
            (JAN_2027, FEB_2027, 2027, 1),
            (FEB_2027, MAR_2027, 2027, 2),
            (FEB_2028, MAR_2028, 2028, 2),
        ] {
            let index = index_of(year, month);
            assert_eq!(month_index(start), index, "{year}-{month} first µs");
            assert_eq!(month_index(next - 1), index, "{year}-{month} last µs");
            assert_eq!(month_index(next), index + 1, "{year}-{month} next");
        }
        assert_eq!(month_index(-1), -1);
        assert_eq!(month_index(Micros::MIN), month_index(Micros::MIN + 1));
    }

    #[test]
    fn month_lengths_follow_the_gregorian_rules() {
        let days_in = |year: i64, month: i64| {
            let index = index_of(year, month);
            (month_start(index + 1) - month_start(index)) / MICROS_PER_DAY
        };
        assert_eq!(days_in(2027, 1), 31);
        assert_eq!(days_in(2027, 2), 28);
        assert_eq!(days_in(2028, 2), 29);
        assert_eq!(days_in(2027, 4), 30);
        assert_eq!(days_in(2100, 2), 28);
        assert_eq!(days_in(2000, 2), 29);
        assert_eq!(days_in(1969, 12), 31);
    }

    #[test]
    fn indexes_and_starts_agree_over_the_whole_range() {
        for index in (-30_000..30_000).step_by(7) {
            assert_eq!(month_index(month_start(index)), index);
            assert_eq!(month_index(month_start(index) - 1), index - 1);
        }
    }

    #[test]
    fn far_months_clamp_instead_of_overflowing() {
        assert_eq!(month_start(i64::MAX), Micros::MAX);
        assert_eq!(month_start(i64::MIN), Micros::MIN);
        // The last month a Micros reaches starts within range; the one after it is clamped.
        let last = month_index(Micros::MAX);
        assert!(month_start(last) < Micros::MAX);
        assert_eq!(month_index(month_start(last)), last);
        assert_eq!(month_start(last + 1), Micros::MAX);
        let first = month_index(Micros::MIN);
        assert!(month_start(first + 1) > Micros::MIN);
        assert_eq!(month_start(first - 1), Micros::MIN);
    }

    #[test]
    fn civil_dates_round_trip() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(
            civil_from_days(FEB_2028 / MICROS_PER_DAY + 28),
            (2028, 2, 29)
        );
        assert_eq!(
            civil_from_days(MAR_2027 / MICROS_PER_DAY - 1),
            (2027, 2, 28)
        );
        // Any day count is answered, none overflows.
        let _ = civil_from_days(i64::MAX);
        let _ = civil_from_days(i64::MIN);
    }

    #[test]
    fn timestamps_are_utc_rfc3339() {
        let at = |seconds| UNIX_EPOCH + Duration::from_secs(seconds);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_796_083_210)), "2026-12-01T00:00:10Z");
        assert_eq!(rfc3339(at(4_107_542_399)), "2100-02-28T23:59:59Z");
    }
}
