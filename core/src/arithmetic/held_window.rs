//! Limitador's counting, with its reservations: a fixed window that starts at a counter's first
//! touch (never aligned to the clock), and holds of estimated usage (`Reserve`) that admission
//! counts until they are committed or expire.
//!
//! Every matching counter is decided together, all or nothing: a call is admitted only when
//! each counter stays within its limit, `value + outstanding + amount <= max_value` for a
//! reservation and `value + delta <= max_value` for a check (a check ignores holds, as
//! Limitador's `is_rate_limited` and `check_rate_limited_and_update` do). The memory store and
//! the Lua twin (`src/store/redis/lua/held_window.lua`) both call into these rules.
//!
//! Times are microseconds since the Unix epoch, handed in by the caller (no clock here).

/// One counter's window: its value and the instant the window closes (0: never started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub value: u64,
    pub expires_at: u64,
}

impl Window {
    /// The value counted at `now`: nothing once the window has closed.
    pub fn value_at(&self, now: u64) -> u64 {
        if self.expires_at <= now {
            0
        } else {
            self.value
        }
    }

    /// How long the window still runs at `now` (0 once closed).
    pub fn ttl_at(&self, now: u64) -> u64 {
        self.expires_at.saturating_sub(now)
    }

    /// Adds `delta`, starting a new window of `window` microseconds when the last one has
    /// closed (or none ever started). Returns the value after.
    pub fn add(&mut self, delta: u64, window: u64, now: u64) -> u64 {
        if self.expires_at <= now {
            self.value = delta;
            self.expires_at = now.saturating_add(window);
        } else {
            self.value = self.value.saturating_add(delta);
        }
        self.value
    }
}

/// An estimated usage held against a counter until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub id: String,
    pub amount: u64,
    pub expires_at: u64,
}

impl Hold {
    pub fn is_live_at(&self, now: u64) -> bool {
        self.expires_at > now
    }
}

/// The sum of the holds still live at `now`.
pub fn outstanding(holds: &[Hold], now: u64) -> u64 {
    holds
        .iter()
        .filter(|hold| hold.is_live_at(now))
        .fold(0u64, |sum, hold| sum.saturating_add(hold.amount))
}

/// What one counter showed when it was decided: its limit, its value, what is held against
/// it, and how long its window still runs (a closed window reads as a fresh one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub max_value: u64,
    pub value: u64,
    pub outstanding: u64,
    pub window_ttl: u64,
}

/// The answer for a set of counters decided together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The index of the first counter that refused, if any did.
    pub limited_by: Option<usize>,
    /// Each counter's remaining budget, in the order given, as Limitador reports it.
    pub remaining: Vec<u64>,
}

impl Admission {
    pub fn admitted(&self) -> bool {
        self.limited_by.is_none()
    }
}

/// A check of `delta` (holds ignored). `applied`: the delta is charged when admitted, and the
/// remaining budgets show it.
pub fn check(readings: &[Reading], delta: u64, applied: bool) -> Admission {
    let limited_by = readings
        .iter()
        .position(|reading| reading.value.saturating_add(delta) > reading.max_value);
    let charged = if applied && limited_by.is_none() {
        delta
    } else {
        0
    };
    let remaining = readings
        .iter()
        .map(|reading| {
            reading
                .max_value
                .saturating_sub(reading.value)
                .saturating_sub(charged)
        })
        .collect();
    Admission {
        limited_by,
        remaining,
    }
}

/// A reservation of `check_amount`, holding `hold_amount` when admitted: every counter must
/// fit `value + outstanding + check_amount`, and the remaining budgets show the hold granted.
pub fn reserve(readings: &[Reading], check_amount: u64, hold_amount: u64) -> Admission {
    let limited_by = readings.iter().position(|reading| {
        reading
            .value
            .saturating_add(reading.outstanding)
            .saturating_add(check_amount)
            > reading.max_value
    });
    let granted = if limited_by.is_none() { hold_amount } else { 0 };
    let remaining = readings
        .iter()
        .map(|reading| {
            reading.max_value.saturating_sub(
                reading
                    .value
                    .saturating_add(reading.outstanding)
                    .saturating_add(granted),
            )
        })
        .collect();
    Admission {
        limited_by,
        remaining,
    }
}

/// The policy bounds of every reservation: the share of a limit one hold may claim, and the
/// longest a hold may last.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldBounds {
    /// 0.0 to 1.0: a hold is at most `max_value × max_fraction` of each counter it holds.
    pub max_fraction: f64,
    /// Microseconds.
    pub max_ttl: u64,
}

impl Default for HoldBounds {
    fn default() -> Self {
        Self {
            max_fraction: 1.0,
            max_ttl: 60_000_000,
        }
    }
}

impl HoldBounds {
    /// The amount actually held for a request of `amount` against counters with these limits:
    /// the smallest `max_value × max_fraction` (truncated), never more than asked.
    pub fn hold_amount(&self, amount: u64, max_values: impl IntoIterator<Item = u64>) -> u64 {
        max_values
            .into_iter()
            // Truncation is the rule: a hold never rounds up past its share.
            .map(|max_value| (max_value as f64 * self.max_fraction) as u64)
            .min()
            .map_or(amount, |cap| amount.min(cap))
    }

    /// How long a hold may last: the requested ttl (the maximum when none was asked), never
    /// longer than the maximum.
    pub fn hold_ttl(&self, requested: Option<u64>) -> u64 {
        requested.map_or(self.max_ttl, |ttl| ttl.min(self.max_ttl))
    }
}

/// When a hold on a counter expires: after `ttl`, but never past the counter's window.
pub fn hold_expiry(now: u64, ttl: u64, window_ttl: u64) -> u64 {
    now.saturating_add(ttl.min(window_ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(max_value: u64, value: u64, outstanding: u64) -> Reading {
        Reading {
            max_value,
            value,
            outstanding,
            window_ttl: 60,
        }
    }

    #[test]
    fn a_window_starts_at_its_first_touch_and_forgets_its_value_when_it_closes() {
        let mut window = Window::default();
        assert_eq!(window.add(3, 10, 100), 3);
        assert_eq!(window.add(2, 10, 105), 5);
        assert_eq!(window.value_at(109), 5);
        assert_eq!(window.value_at(110), 0);
        assert_eq!(window.add(1, 10, 110), 1);
        assert_eq!(window.ttl_at(112), 8);
    }

    #[test]
    fn a_reservation_counts_the_holds_outstanding_all_or_nothing() {
        let admission = reserve(&[reading(10, 2, 4), reading(100, 0, 0)], 4, 4);
        assert!(admission.admitted());
        assert_eq!(admission.remaining, vec![0, 96]);
        let refused = reserve(&[reading(100, 0, 0), reading(10, 2, 4)], 5, 5);
        assert_eq!(refused.limited_by, Some(1));
        assert_eq!(refused.remaining, vec![100, 4]);
    }

    #[test]
    fn a_check_ignores_the_holds() {
        let admission = check(&[reading(10, 6, 4)], 4, true);
        assert!(admission.admitted());
        assert_eq!(admission.remaining, vec![0]);
        assert_eq!(check(&[reading(10, 6, 4)], 5, false).limited_by, Some(0));
    }

    #[test]
    fn a_hold_is_clamped_to_its_share_and_its_ttl_to_the_maximum_and_the_window() {
        let bounds = HoldBounds {
            max_fraction: 0.5,
            max_ttl: 30,
        };
        assert_eq!(bounds.hold_amount(8, [10, 100]), 5);
        assert_eq!(bounds.hold_amount(3, [10]), 3);
        assert_eq!(bounds.hold_amount(7, []), 7);
        assert_eq!(bounds.hold_ttl(None), 30);
        assert_eq!(bounds.hold_ttl(Some(45)), 30);
        assert_eq!(hold_expiry(100, 30, 12), 112);
    }

    #[test]
    fn an_expired_hold_costs_nothing() {
        let holds = [
            Hold {
                id: "a".into(),
                amount: 4,
                expires_at: 10,
            },
            Hold {
                id: "b".into(),
                amount: 3,
                expires_at: 20,
            },
        ];
        assert_eq!(outstanding(&holds, 5), 7);
        assert_eq!(outstanding(&holds, 10), 3);
        assert_eq!(outstanding(&holds, 20), 0);
    }
}
