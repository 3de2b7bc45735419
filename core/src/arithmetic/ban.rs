//! Bans that escalate (`ban:` on a rule): a key its rule refuses `after` times within
//! `within` is refused outright for `ban_for`, then for twice as long at each repeat, up to
//! `max`. Pure arithmetic on one key's ban record; `src/store/redis/lua/ban.lua` is its twin
//! and the differential test (tests/redis/redis_bans.rs) demands the same outcomes. All
//! integer µs, below 2^53 (exact in Lua's doubles): `max` is at most [`MAX_BAN`].
//!
//!   check   : banned_for = until − now when until > now, else 0; nothing changes
//!   strike  : a refusal by the rule's limits.
//!             banned now → nothing changes (refusals during a ban do not count);
//!             else strikes restart at now when none are counted or since + within ≤ now;
//!             strikes + 1; at `after`: until = now + length, length = ban_for doubled
//!             `level` times (each step capped at max), level + 1 (at most MAX_LEVEL),
//!             strikes = 0, banned_for = length
//!   lift    : the record is forgotten (an operator's reset)
//!   expires : the record means nothing after max(since + within while strikes are counted,
//!             until + max once banned): a key that stays clean for `max` after its ban
//!             starts again at `ban_for`.

use crate::ground::time::Micros;

/// The longest ban (`max` at most 7 days): a record lives at most `max` past its ban.
pub const MAX_BAN: Micros = 7 * 24 * 3_600 * 1_000_000;

/// The most escalation steps remembered; `ban_for` doubled this often passes any `max`.
pub const MAX_LEVEL: u32 = 40;

/// A rule's `ban:` settings, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BanPolicy {
    /// Refusals within `within` that start a ban (≥ 1).
    pub after: u32,
    pub within: Micros,
    /// The first ban's length.
    pub ban_for: Micros,
    /// The longest ban (≥ `ban_for`, ≤ [`MAX_BAN`]).
    pub max: Micros,
}

/// One key's ban record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BanState {
    /// Refusals counted since `since`.
    pub strikes: u32,
    pub since: Micros,
    /// Bans started so far: the next lasts `ban_for` doubled this many times.
    pub level: u32,
    /// Banned until this instant (0: never banned).
    pub until: Micros,
}

/// What a call does to a key's ban record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BanAction {
    /// Is the key banned now?
    Check,
    /// The rule's limits refused the key once more.
    Strike,
    /// Forget the record.
    Lift,
}

/// What a call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BanOutcome {
    /// Time left of the ban in force (µs); 0: not banned.
    pub banned_for: Micros,
    pub strikes: u32,
    pub level: u32,
}

/// The record after a call, and until when it means anything (`None`: forget it).
pub type NextBan = Option<(BanState, Micros)>;

/// Decides `action` on the record `state` (`None`: none, or expired) at `now`.
pub fn decide(
    policy: &BanPolicy,
    state: Option<BanState>,
    now: Micros,
    action: BanAction,
) -> (BanOutcome, NextBan) {
    let state = state.unwrap_or_default();
    let banned_for = (state.until - now).max(0);
    let unchanged = |state: BanState| {
        let outcome = BanOutcome {
            banned_for,
            strikes: state.strikes,
            level: state.level,
        };
        (outcome, keep(policy, state, now))
    };
    match action {
        BanAction::Lift => (BanOutcome::default(), None),
        BanAction::Check => unchanged(state),
        BanAction::Strike if banned_for > 0 => unchanged(state),
        BanAction::Strike => strike(policy, state, now),
    }
}

fn strike(policy: &BanPolicy, mut state: BanState, now: Micros) -> (BanOutcome, NextBan) {
    if state.strikes == 0 || state.since + policy.within <= now {
        state.strikes = 0;
        state.since = now;
    }
    state.strikes += 1;
    let mut banned_for = 0;
    if state.strikes >= policy.after {
        banned_for = ban_length(policy, state.level);
        state.until = now + banned_for;
        state.level = (state.level + 1).min(MAX_LEVEL);
        state.strikes = 0;
    }
    let outcome = BanOutcome {
        banned_for,
        strikes: state.strikes,
        level: state.level,
    };
    (outcome, keep(policy, state, now))
}

/// `ban_for` doubled `level` times, each step capped at `max`.
pub fn ban_length(policy: &BanPolicy, level: u32) -> Micros {
    let mut length = policy.ban_for.min(policy.max);
    for _ in 0..level {
        length = (length * 2).min(policy.max);
    }
    length
}

/// `state` with its expiry, or `None` when it means nothing from `now` on.
fn keep(policy: &BanPolicy, state: BanState, now: Micros) -> NextBan {
    let counting = if state.strikes > 0 {
        state.since + policy.within
    } else {
        0
    };
    let remembered = if state.level > 0 {
        state.until + policy.max
    } else {
        0
    };
    let expires_at = counting.max(remembered);
    (expires_at > now).then_some((state, expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Micros = 1_000_000;

    fn policy() -> BanPolicy {
        BanPolicy {
            after: 3,
            within: 10 * SECOND,
            ban_for: 60 * SECOND,
            max: 200 * SECOND,
        }
    }

    /// Runs `actions` at their instants: the outcomes.
    fn run(actions: &[(Micros, BanAction)]) -> Vec<BanOutcome> {
        let mut record: NextBan = None;
        actions
            .iter()
            .map(|&(now, action)| {
                let state = record.filter(|(_, expires)| *expires > now).map(|(s, _)| s);
                let (outcome, next) = decide(&policy(), state, now, action);
                record = next;
                outcome
            })
            .collect()
    }

    #[test]
    fn the_third_refusal_within_the_window_bans_and_a_repeat_doubles_up_to_the_max() {
        use BanAction::{Check, Strike};
        let s = SECOND;
        let outcomes = run(&[
            (0, Strike),
            (s, Strike),
            (2 * s, Strike),
            (3 * s, Check),
            (30 * s, Strike),
            (62 * s, Check),
            (70 * s, Strike),
            (71 * s, Strike),
            (72 * s, Strike),
            (200 * s, Strike),
            (201 * s, Strike),
            (202 * s, Strike),
        ]);
        let banned: Vec<Micros> = outcomes.iter().map(|o| o.banned_for / s).collect();
        assert_eq!(banned, [0, 0, 60, 59, 32, 0, 0, 0, 120, 0, 0, 200]);
        assert_eq!(outcomes[11].level, 3);
    }

    #[test]
    fn strikes_outside_the_window_start_again_and_a_clean_key_is_forgotten() {
        use BanAction::Strike;
        let s = SECOND;
        // Two strikes, then the window passes: the third starts a new count.
        let spread = run(&[(0, Strike), (s, Strike), (11 * s, Strike), (12 * s, Strike)]);
        assert_eq!(
            spread.iter().map(|o| o.strikes).collect::<Vec<_>>(),
            [1, 2, 1, 2]
        );
        // Banned once; clean for `max` after the ban: the next ban is the first length again.
        let mut actions: Vec<(Micros, BanAction)> = (0..3).map(|i| (i * s, Strike)).collect();
        actions.extend((0..3).map(|i| ((2 + 60 + 200 + i) * s, Strike)));
        let outcomes = run(&actions);
        assert_eq!(outcomes[5].banned_for, 60 * s);
    }

    #[test]
    fn a_lift_forgets_the_ban() {
        let (_, next) = decide(
            &policy(),
            Some(BanState {
                strikes: 0,
                since: 0,
                level: 1,
                until: 100,
            }),
            5,
            BanAction::Lift,
        );
        assert_eq!(next, None);
        assert_eq!(ban_length(&policy(), 0), 60 * SECOND);
        assert_eq!(ban_length(&policy(), 1), 120 * SECOND);
        assert_eq!(ban_length(&policy(), MAX_LEVEL), 200 * SECOND);
    }
}
