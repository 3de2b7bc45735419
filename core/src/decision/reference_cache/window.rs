//! The reference's windows (its `src/utils/utilities.go`): `UnitToDivider` seconds each,
//! aligned to the Unix epoch, MONTH 30 days and YEAR 365 days; with
//! `USE_CALENDAR_MONTH_RATE_LIMIT` (its PR #1206) a MONTH is the UTC calendar month instead.
//! "Now" is whole seconds, as its `UnixNow`.

use crate::arithmetic::algorithm::Quota;
use crate::ground::calendar::{month_index, month_start};
use crate::ground::time::{Micros, MICROS_PER_SECOND};
use crate::ground::unit::Unit;

/// The reference's `UnitToDivider`: a unit's window in seconds (floodgate's units are sized the
/// same, `Unit::seconds`).
pub fn unit_to_divider(unit: Unit) -> i64 {
    i64::try_from(unit.seconds()).unwrap_or(i64::MAX)
}

/// The window a reference key counts in, in Unix seconds: from `start` (included, the key's
/// last field) to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReferenceWindow {
    pub start: i64,
    pub end: i64,
    /// A calendar month (`USE_CALENDAR_MONTH_RATE_LIMIT`) rather than an epoch-aligned divider.
    calendar_month: bool,
    /// The instant the window was taken at, in whole seconds.
    now_seconds: i64,
}

impl ReferenceWindow {
    /// The window of `quota` holding `now`. `cache_key.go` line 82:
    /// `(now/divider)*divider`; with calendar months, 00:00 UTC on the month's 1st.
    pub fn at(quota: &Quota, now: Micros) -> Self {
        let now_seconds = now.div_euclid(MICROS_PER_SECOND);
        if quota.calendar_months && quota.unit == Unit::Month {
            let month = month_index(now);
            return Self {
                start: month_start(month).div_euclid(MICROS_PER_SECOND),
                end: month_start(month.saturating_add(1)).div_euclid(MICROS_PER_SECOND),
                calendar_month: true,
                now_seconds,
            };
        }
        let divider = unit_to_divider(quota.unit).max(1);
        let start = now_seconds.div_euclid(divider).saturating_mul(divider);
        Self {
            start,
            end: start.saturating_add(divider),
            calendar_month: false,
            now_seconds,
        }
    }

    /// The `EXPIRE` the reference sets on every call, before its jitter: a whole divider
    /// (`fixed_cache_impl.go` line 168, `UnitToDivider`), however far into the window the call
    /// comes; for a calendar month the rest of the month (PR #1206's `MonthExpirationSeconds`).
    /// At least 1: `EXPIRE key 0` would delete the key.
    pub fn expiration_seconds(&self) -> i64 {
        let seconds = if self.calendar_month {
            self.end.saturating_sub(self.now_seconds)
        } else {
            self.end.saturating_sub(self.start)
        };
        seconds.max(1)
    }

    /// Time from `now` until the window ends (the answer's `duration_until_reset` before
    /// rounding; the reference's `CalculateReset` is `divider - now % divider` seconds).
    pub fn reset_after(&self, now: Micros) -> Micros {
        self.end
            .saturating_mul(MICROS_PER_SECOND)
            .saturating_sub(now)
            .max(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Micros = MICROS_PER_SECOND;

    fn window(unit: Unit, seconds: i64) -> ReferenceWindow {
        ReferenceWindow::at(&Quota::new(1, unit), seconds * SECOND + 250_000)
    }

    #[test]
    fn windows_start_at_multiples_of_the_divider() {
        // The reference's own cases (test/redis/fixed_cache_impl_test.go, TestRedis, now 1234):
        // keys end in 1234 (SECOND), 1200 (MINUTE), 0 (HOUR).
        assert_eq!(window(Unit::Second, 1234).start, 1234);
        assert_eq!(window(Unit::Minute, 1234).start, 1200);
        assert_eq!(window(Unit::Hour, 1234).start, 0);
        // TestOverLimitWithLocalCache and friends, now 1000000: DAY 950400, HOUR 997200.
        assert_eq!(window(Unit::Day, 1_000_000).start, 950_400);
        assert_eq!(window(Unit::Hour, 1_000_000).start, 997_200);
        // MONTH is 30 days and YEAR 365, from the epoch.
        let now = 1_709_078_400; // 2024-02-28T00:00:00Z
        assert_eq!(window(Unit::Month, now).start, now - now % 2_592_000);
        assert_eq!(window(Unit::Year, now).start, now - now % 31_536_000);
        assert_eq!(window(Unit::Week, now).start, now - now % 604_800);
    }

    #[test]
    fn every_call_sets_a_whole_divider_to_expire() {
        let late_in_the_hour = window(Unit::Hour, 3_599);
        assert_eq!(late_in_the_hour.expiration_seconds(), 3_600);
        assert_eq!(window(Unit::Second, 7).expiration_seconds(), 1);
        assert_eq!(window(Unit::Month, 5).expiration_seconds(), 2_592_000);
    }

    #[test]
    fn the_reset_is_the_rest_of_the_window() {
        let hour = window(Unit::Hour, 3_599);
        assert_eq!(hour.reset_after(3_599 * SECOND + 250_000), 750_000);
        assert_eq!(hour.end, 3_600);
    }

    #[test]
    fn calendar_months_start_on_the_first_and_expire_with_the_month() {
        let calendar = Quota::new(1, Unit::Month).with_calendar_months(true);
        // 2024-02-28T00:00:00Z: February 2024 (29 days) started 2024-02-01.
        let now = 1_709_078_400;
        let month = ReferenceWindow::at(&calendar, now * SECOND);
        assert_eq!(month.start, 1_706_745_600);
        assert_eq!(month.end, 1_709_251_200);
        assert_eq!(month.expiration_seconds(), 2 * 86_400);
        // Only MONTH changes: a calendar flag on a DAY quota would not move it.
        let day = Quota {
            calendar_months: true,
            ..Quota::new(1, Unit::Day)
        };
        assert_eq!(
            ReferenceWindow::at(&day, now * SECOND).expiration_seconds(),
            86_400
        );
    }
}
