//! One shard of the memory store: its counters, and what eviction must know of them without a
//! scan: how many can be forgotten now, and from when the next exhausted one can.
//!
//! Forgetting a counter hands its budget back (it starts afresh), so `make_room` takes, in
//! order: expired counters; then, among those not exhausted now, the least used at its last
//! charge, then the nearest expiry. Never an exhausted one: when only those are left the store
//! refuses the new counter instead (`MemoryStore`). Whether a counter is exhausted, and for how
//! long, is the core's answer (`Evaluation::fullness`), kept with the counter.

use hashbrown::HashMap;

use crate::core::arithmetic::algorithm::{Fullness, State};
use crate::core::ground::time::Micros;

const MICROS_PER_MILLI: Micros = 1_000;

/// A counter's key inside the store: a keyed 128-bit hash of the counter identity. The key is
/// random per process, so nobody can craft descriptor values that share someone else's counter.
/// Two `u64` halves rather than a `u128`, whose 16-byte alignment would pad every table entry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotKey {
    pub(super) high: u64,
    pub(super) low: u64,
}

impl std::hash::Hash for SlotKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.low);
    }
}

/// One counter: 40 bytes, so a table entry with its key is 56.
pub(super) struct Slot {
    pub(super) state: State,
    pub(super) expires_at: Micros,
    standing: Standing,
}

impl Slot {
    /// The counter an evaluation at `now` left, `fullness` being how full it is then.
    pub(super) fn new(state: State, expires_at: Micros, fullness: Fullness, now: Micros) -> Self {
        Self {
            state,
            expires_at,
            standing: Standing::new(fullness, now, expires_at),
        }
    }
}

/// What eviction needs to know of a counter, in 6 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Standing {
    /// `Fullness::used` at the counter's last charge (it can only have fallen since).
    used: u16,
    /// How long before `expires_at` an exhausted counter has room again, in whole ms rounded
    /// down, so never earlier than it does: it may be kept a little longer, never less. `ROOMY`
    /// when it had room at its last charge.
    room_before_expiry_ms: u32,
}

const ROOMY: u32 = u32::MAX;

impl Standing {
    fn new(fullness: Fullness, now: Micros, expires_at: Micros) -> Self {
        let room_before_expiry_ms = match fullness.exhausted_for {
            None => ROOMY,
            Some(exhausted_for) => {
                let room_at = now.saturating_add(exhausted_for);
                let before_expiry = expires_at.saturating_sub(room_at).max(0) / MICROS_PER_MILLI;
                // Beyond 49 days the room comes later than recorded: kept longer, never less.
                u32::try_from(before_expiry).map_or(ROOMY - 1, |ms| ms.min(ROOMY - 1))
            }
        };
        Self {
            used: fullness.used,
            room_before_expiry_ms,
        }
    }

    /// When an exhausted counter has room again; `None` when it had room at its last charge.
    fn room_at(self, expires_at: Micros) -> Option<Micros> {
        (self.room_before_expiry_ms != ROOMY).then(|| {
            expires_at.saturating_sub(i64::from(self.room_before_expiry_ms) * MICROS_PER_MILLI)
        })
    }

    fn is_roomy(self) -> bool {
        self.room_before_expiry_ms == ROOMY
    }

    /// The same counter once it has room again.
    fn with_room(self) -> Self {
        Self {
            room_before_expiry_ms: ROOMY,
            ..self
        }
    }
}

/// What one `make_room` dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Freed {
    /// Counters past their expiry: they meant nothing any more.
    pub(super) expired: usize,
    /// A live counter, forgotten before its expiry.
    pub(super) evicted: usize,
}

impl Freed {
    pub(super) fn total(self) -> usize {
        self.expired + self.evicted
    }
}

pub(super) struct Shard {
    slots: HashMap<SlotKey, Slot, PassThroughHash>,
    /// Counters that had room at their last charge: any of them can be forgotten now.
    roomy: usize,
    /// No counter held as exhausted has room again before this instant: a lower bound (a
    /// counter dropped or charged since may have set it), made exact by every `make_room`;
    /// `Micros::MAX` when none is held.
    next_room_at: Micros,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            slots: HashMap::default(),
            roomy: 0,
            next_room_at: Micros::MAX,
        }
    }
}

impl Shard {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn allocation_size(&self) -> usize {
        self.slots.allocation_size()
    }

    pub(super) fn get(&self, key: &SlotKey) -> Option<&Slot> {
        self.slots.get(key)
    }

    /// Stores `slot` under `key`; whether the key is new to the shard.
    pub(super) fn put(&mut self, key: SlotKey, slot: Slot) -> bool {
        let room_at = slot.standing.room_at(slot.expires_at);
        // Most charges are to a counter held already: replaced in place, one lookup.
        let new = match self.slots.get_mut(&key) {
            Some(held) => {
                if held.standing.is_roomy() {
                    self.roomy = self.roomy.saturating_sub(1);
                }
                *held = slot;
                false
            }
            None => {
                self.slots.insert(key, slot);
                true
            }
        };
        match room_at {
            None => self.roomy += 1,
            Some(room_at) => self.next_room_at = self.next_room_at.min(room_at),
        }
        new
    }

    /// Drops every counter expired at `now`; how many.
    pub(super) fn drop_expired(&mut self, now: Micros) -> usize {
        self.drop_expired_but(now, &[])
    }

    /// Whether `make_room` can free anything at `now` (it may still not, if what it could free
    /// is all in the request being decided).
    pub(super) fn may_free(&self, now: Micros) -> bool {
        self.roomy > 0 || self.next_room_at <= now
    }

    /// Frees at least one place if it can without forgetting an exhausted counter or any of
    /// `keep` (the counters of the request being decided): the expired counters, else the one
    /// least used, then nearest to expiry, among those with room.
    pub(super) fn make_room(&mut self, now: Micros, keep: &[SlotKey]) -> Freed {
        let mut expired = 0;
        let mut victim: Option<(SlotKey, (u16, Micros))> = None;
        let mut next_room_at = Micros::MAX;
        let mut regained_room = 0;
        for (key, slot) in self.slots.iter_mut() {
            if slot.expires_at <= now {
                expired += usize::from(!keep.contains(key));
                continue;
            }
            match slot.standing.room_at(slot.expires_at) {
                Some(room_at) if room_at > now => {
                    next_room_at = next_room_at.min(room_at);
                    continue;
                }
                Some(_) => {
                    slot.standing = slot.standing.with_room();
                    regained_room += 1;
                }
                None => {}
            }
            let rank = (slot.standing.used, slot.expires_at);
            let better = victim.is_none_or(|(_, best)| rank < best);
            if better && !keep.contains(key) {
                victim = Some((*key, rank));
            }
        }
        self.roomy += regained_room;
        self.next_room_at = next_room_at;
        if expired > 0 {
            return Freed {
                expired: self.drop_expired_but(now, keep),
                evicted: 0,
            };
        }
        let evicted = victim.is_some_and(|(key, _)| self.remove(&key));
        Freed {
            expired: 0,
            evicted: usize::from(evicted),
        }
    }

    fn drop_expired_but(&mut self, now: Micros, keep: &[SlotKey]) -> usize {
        let before = self.slots.len();
        let roomy = &mut self.roomy;
        self.slots.retain(|key, slot| {
            let drop = slot.expires_at <= now && !keep.contains(key);
            if drop && slot.standing.is_roomy() {
                *roomy = roomy.saturating_sub(1);
            }
            !drop
        });
        before - self.slots.len()
    }

    pub(super) fn remove(&mut self, key: &SlotKey) -> bool {
        match self.slots.remove(key) {
            Some(slot) => {
                if slot.standing.is_roomy() {
                    self.roomy = self.roomy.saturating_sub(1);
                }
                true
            }
            None => false,
        }
    }
}

/// The slot keys are already uniform hashes: hashing them again would only cost time.
#[derive(Clone, Copy, Default)]
pub(super) struct PassThroughHash;

impl std::hash::BuildHasher for PassThroughHash {
    type Hasher = PassThroughHasher;
    fn build_hasher(&self) -> PassThroughHasher {
        PassThroughHasher(0)
    }
}

pub(super) struct PassThroughHasher(u64);

impl std::hash::Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Micros = 1_796_083_200_000_000;
    const SECOND: Micros = 1_000_000;
    const DAY: Micros = 86_400 * SECOND;

    fn key(n: u64) -> SlotKey {
        SlotKey {
            high: n,
            low: n.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    fn state() -> State {
        State::FixedWindow {
            window_start: NOW,
            count: 1,
        }
    }

    fn roomy(used: u16, expires_at: Micros) -> Slot {
        let fullness = Fullness {
            used,
            exhausted_for: None,
        };
        Slot::new(state(), expires_at, fullness, NOW)
    }

    fn exhausted(exhausted_for: Micros, expires_at: Micros) -> Slot {
        let fullness = Fullness {
            used: Fullness::ALL_USED,
            exhausted_for: Some(exhausted_for),
        };
        Slot::new(state(), expires_at, fullness, NOW)
    }

    #[test]
    fn an_exhausted_counter_is_held_as_such_until_it_has_room_never_less() {
        for (exhausted_for, expires_in) in [
            (1, 1),
            (1, 10 * SECOND),
            (1_500, 60 * SECOND),
            (SECOND, DAY),
            (DAY, 100 * DAY),
            (SECOND, 100 * DAY),
            (0, 0),
        ] {
            let slot = exhausted(exhausted_for, NOW + expires_in);
            let room_at = slot
                .standing
                .room_at(slot.expires_at)
                .unwrap_or(Micros::MIN);
            let truly = NOW + exhausted_for;
            assert!(
                room_at >= truly,
                "{exhausted_for} µs, expiring in {expires_in}"
            );
            assert!(room_at <= slot.expires_at);
            if expires_in - exhausted_for < 40 * DAY {
                assert!(room_at - truly < MICROS_PER_MILLI, "{room_at} for {truly}");
            }
        }
    }

    #[test]
    fn room_is_made_from_expired_then_least_used_then_nearest_expiry() {
        let mut shard = Shard::default();
        shard.put(key(1), exhausted(DAY, NOW + 2 * DAY));
        shard.put(key(2), roomy(30_000, NOW + 90 * SECOND));
        shard.put(key(3), roomy(10_000, NOW + 120 * SECOND));
        shard.put(key(4), roomy(10_000, NOW + 60 * SECOND));
        shard.put(key(5), roomy(100, NOW - 1));
        shard.put(key(6), roomy(100, NOW + 10 * SECOND));

        // Key 6 is the request's own: kept, whatever its rank.
        let keep = [key(6)];
        let order: Vec<Freed> = (0..5).map(|_| shard.make_room(NOW, &keep)).collect();
        assert_eq!(
            order[0],
            Freed {
                expired: 1,
                evicted: 0
            }
        );
        assert!(shard.get(&key(5)).is_none());
        assert_eq!(
            order[1],
            Freed {
                expired: 0,
                evicted: 1
            }
        );
        assert!(
            shard.get(&key(4)).is_none(),
            "as used as 3, expiring sooner"
        );
        assert!(shard.get(&key(3)).is_none() && shard.get(&key(2)).is_none());
        assert_eq!(
            order[4],
            Freed::default(),
            "only the exhausted and the kept are left"
        );
        assert!(shard.get(&key(1)).is_some() && shard.get(&key(6)).is_some());
        assert!(shard.may_free(NOW), "key 6 has room");
    }

    #[test]
    fn the_counts_follow_charges_and_regained_room() {
        let mut shard = Shard::default();
        assert!(!shard.may_free(NOW));
        assert!(shard.put(key(1), exhausted(10 * SECOND, NOW + 60 * SECOND)));
        assert!(!shard.may_free(NOW));
        assert!(!shard.may_free(NOW + 10 * SECOND - 1));
        assert!(shard.may_free(NOW + 10 * SECOND));
        assert_eq!(shard.make_room(NOW + 5 * SECOND, &[]), Freed::default());
        // Charged again, with room: the same key, counted once.
        assert!(!shard.put(key(1), roomy(1, NOW + 60 * SECOND)));
        assert_eq!(shard.roomy, 1);
        assert!(!shard.put(key(1), exhausted(SECOND, NOW + 60 * SECOND)));
        assert_eq!(shard.roomy, 0);
        // Its room back, a scan counts it with room, and may forget it.
        let later = NOW + 2 * SECOND;
        assert_eq!(
            shard.make_room(later, &[]),
            Freed {
                expired: 0,
                evicted: 1
            }
        );
        assert_eq!((shard.len(), shard.roomy), (0, 0));
        assert_eq!(shard.next_room_at, Micros::MAX);
    }
}
