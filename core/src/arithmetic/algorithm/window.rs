//! Where a windowed algorithm's windows lie on the time line (fixed and sliding windows): either
//! W µs each, aligned to the Unix epoch, as envoyproxy/ratelimit counts every unit by default, or
//! UTC calendar months, as it counts MONTH with `USE_CALENDAR_MONTH_RATE_LIMIT` (floodgate's
//! `--calendar-months`): a window starts at 00:00:00 UTC on the 1st and ends at the next 1st,
//! whatever the month's length (28, 29, 30 or 31 days).
//!
//! N calendar months (`unit_multiplier: N`) are N consecutive months, counted from January 1970
//! as epoch windows are counted from the epoch: 3 are quarters (January–March, April–June, …),
//! 12 are calendar years, 5 are January–May 1970, June–October 1970, and so on.
//!
//! Lua mirrors this in `window_span` (src/store/redis/lua/prelude.lua).

use crate::ground::calendar::{month_index, month_start, MICROS_PER_DAY};
use crate::ground::time::Micros;

/// How a quota's windows tile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tiling {
    /// Windows of `length` µs (≥ 1), starting at multiples of it since the epoch.
    Epoch { length: Micros },
    /// Windows of `months` (≥ 1) UTC calendar months, starting at multiples of it since
    /// January 1970.
    CalendarMonths { months: u32 },
}

/// One window: from `start` (included) to `end` (excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: Micros,
    pub end: Micros,
}

impl Span {
    pub fn length(&self) -> Micros {
        self.end.saturating_sub(self.start)
    }
}

impl Tiling {
    /// The window holding `now`.
    pub fn holding(self, now: Micros) -> Span {
        match self {
            Tiling::Epoch { length } => {
                let start = epoch_window_start(now, length);
                Span {
                    start,
                    end: start.saturating_add(length.max(1)),
                }
            }
            Tiling::CalendarMonths { months } => {
                let months = i64::from(months.max(1));
                let index = month_index(now);
                let first = index - index.rem_euclid(months);
                Span {
                    start: month_start(first),
                    end: month_start(first.saturating_add(months)),
                }
            }
        }
    }

    /// The window right after `span` (one of this tiling's windows).
    pub fn after(self, span: Span) -> Span {
        self.holding(span.end)
    }

    /// The window right before `span` (one of this tiling's windows).
    pub fn before(self, span: Span) -> Span {
        self.holding(span.start.saturating_sub(1))
    }

    /// The longest a window can be: `length`, or 31 days a month.
    pub fn longest(self) -> Micros {
        match self {
            Tiling::Epoch { length } => length,
            Tiling::CalendarMonths { months } => {
                MICROS_PER_DAY.saturating_mul(31_i64.saturating_mul(i64::from(months)))
            }
        }
    }
}

/// Start of the epoch-aligned window of `window` µs holding `now`: now − (now mod⁺ W), Euclidean
/// so that instants before 1970 align too; a `window` below 1 counts as 1.
fn epoch_window_start(now: Micros, window: Micros) -> Micros {
    now.saturating_sub(now.rem_euclid(window.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ground::calendar::dates::*;
    use crate::ground::time::MICROS_PER_SECOND;

    fn at(seconds: i64) -> Micros {
        seconds * MICROS_PER_SECOND
    }

    #[test]
    fn a_calendar_month_runs_from_the_first_to_the_next_first() {
        let months = Tiling::CalendarMonths { months: 1 };
        let january = months.holding(FEB_2027 - 2 * MICROS_PER_SECOND);
        assert_eq!(
            january,
            Span {
                start: JAN_2027,
                end: FEB_2027
            }
        );
        assert_eq!(january.length(), 31 * MICROS_PER_DAY);
        let february = months.after(january);
        assert_eq!(
            february,
            Span {
                start: FEB_2027,
                end: MAR_2027
            }
        );
        assert_eq!(february.length(), 28 * MICROS_PER_DAY);
        assert_eq!(
            months.before(january),
            Span {
                start: DEC_2026,
                end: JAN_2027
            }
        );
        assert_eq!(months.holding(FEB_2027), february);
        assert_eq!(months.holding(FEB_2027 - 1), january);
    }

    #[test]
    fn several_months_count_from_january_1970() {
        let quarters = Tiling::CalendarMonths { months: 3 };
        let first = quarters.holding(FEB_2027);
        assert_eq!(
            first,
            Span {
                start: JAN_2027,
                end: APR_2027
            }
        );
        let years = Tiling::CalendarMonths { months: 12 };
        assert_eq!(
            years.holding(MAR_2027),
            Span {
                start: JAN_2027,
                end: JAN_2028
            }
        );
        // 5 months: 1970-01 … 1970-05 is the first; 2027-01 is month 684, 684 = 5 · 136 + 4.
        let fives = Tiling::CalendarMonths { months: 5 };
        let span = fives.holding(JAN_2027);
        assert_eq!(span.start, month_start(680));
        assert_eq!(span.end, month_start(685));
    }

    #[test]
    fn epoch_windows_are_as_before() {
        let minutes = Tiling::Epoch {
            length: 60 * MICROS_PER_SECOND,
        };
        let span = minutes.holding(at(61));
        assert_eq!(
            span,
            Span {
                start: at(60),
                end: at(120)
            }
        );
        assert_eq!(
            minutes.after(span),
            Span {
                start: at(120),
                end: at(180)
            }
        );
        assert_eq!(
            minutes.before(span),
            Span {
                start: at(0),
                end: at(60)
            }
        );
        assert_eq!(
            minutes.holding(-1),
            Span {
                start: at(-60),
                end: 0
            }
        );
    }

    #[test]
    fn the_ends_of_time_saturate() {
        for tiling in [
            Tiling::CalendarMonths { months: 1 },
            Tiling::CalendarMonths { months: u32::MAX },
            Tiling::Epoch { length: i64::MAX },
            Tiling::Epoch { length: 1 },
        ] {
            for now in [
                Micros::MIN,
                Micros::MIN + 1,
                -1,
                0,
                Micros::MAX - 1,
                Micros::MAX,
            ] {
                let span = tiling.holding(now);
                assert!(
                    span.start <= now && now <= span.end,
                    "{tiling:?} at {now}: {span:?}"
                );
                let _ = tiling.after(span);
                let _ = tiling.before(span);
            }
        }
        assert_eq!(
            Tiling::CalendarMonths { months: u32::MAX }.longest(),
            Micros::MAX
        );
    }
}
