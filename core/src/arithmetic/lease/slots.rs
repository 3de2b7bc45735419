//! The slots one lease counter holds. Every admitted acquire takes a slot of its own, each with
//! its own expiry, so a lease id names as many slots as it was admitted for: the id is the
//! caller's word, and a counter that kept one slot per id would let one id carry any number of
//! requests in flight.

use std::collections::BTreeMap;

use crate::ground::time::Micros;

/// The slots of one counter: lease id → the expiries of the slots it holds, soonest first
/// (never an empty list), and how many there are in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leases {
    by_id: BTreeMap<String, Vec<Micros>>,
    held: usize,
}

/// One slot per pair: an id named twice holds two slots (how a store's stored slots are read).
impl FromIterator<(String, Micros)> for Leases {
    fn from_iter<I: IntoIterator<Item = (String, Micros)>>(slots: I) -> Leases {
        let mut leases = Leases::new();
        for (id, expires_at) in slots {
            leases.take(&id, expires_at);
        }
        leases
    }
}

impl Leases {
    pub fn new() -> Leases {
        Leases::default()
    }

    /// Slots held, every id's counted.
    pub fn held(&self) -> u32 {
        u32::try_from(self.held).unwrap_or(u32::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// The expiries of the slots `id` holds, soonest first (none for an unknown id).
    pub fn slots_of(&self, id: &str) -> &[Micros] {
        self.by_id.get(id).map_or(&[], Vec::as_slice)
    }

    /// Takes one more slot for `id`, held until `expires_at`.
    pub fn take(&mut self, id: &str, expires_at: Micros) {
        let slots = self.by_id.entry(id.to_owned()).or_default();
        let at = slots.partition_point(|expiry| *expiry <= expires_at);
        slots.insert(at, expires_at);
        self.held += 1;
    }

    /// Frees the slot of `id` that expires soonest: its expiry, or `None` when `id` holds no
    /// slot.
    pub fn free_soonest(&mut self, id: &str) -> Option<Micros> {
        let slots = self.by_id.get_mut(id)?;
        let freed = (!slots.is_empty()).then(|| slots.remove(0));
        if slots.is_empty() {
            self.by_id.remove(id);
        }
        if freed.is_some() {
            self.held -= 1;
        }
        freed
    }

    /// Drops the slots that have expired at `now` (an expiry ≤ now).
    pub fn expire(&mut self, now: Micros) {
        let mut dropped = 0;
        self.by_id.retain(|_, slots| {
            let expired = slots.partition_point(|expiry| *expiry <= now);
            slots.drain(..expired);
            dropped += expired;
            !slots.is_empty()
        });
        self.held -= dropped;
    }

    /// When the first slot frees by itself; `None` when none is held.
    pub fn earliest_expiry(&self) -> Option<Micros> {
        self.by_id
            .values()
            .filter_map(|slots| slots.first())
            .min()
            .copied()
    }

    /// When the last slot frees by itself (the store may forget the counter then); `None` when
    /// none is held.
    pub fn latest_expiry(&self) -> Option<Micros> {
        self.by_id
            .values()
            .filter_map(|slots| slots.last())
            .max()
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_holds_one_slot_per_take_and_frees_the_soonest_first() {
        let mut leases = Leases::new();
        for expiry in [30, 10, 20, 10] {
            leases.take("a", expiry);
        }
        leases.take("b", 5);
        assert_eq!(leases.held(), 5);
        assert_eq!(leases.slots_of("a"), [10, 10, 20, 30]);
        assert_eq!(leases.free_soonest("a"), Some(10));
        assert_eq!(leases.slots_of("a"), [10, 20, 30]);
        assert_eq!(leases.free_soonest("nobody"), None);
        assert_eq!(
            (leases.earliest_expiry(), leases.latest_expiry()),
            (Some(5), Some(30))
        );
        leases.expire(10);
        assert_eq!(leases.held(), 2);
        assert_eq!(leases.slots_of("a"), [20, 30]);
        assert!(leases.slots_of("b").is_empty());
        for _ in 0..2 {
            assert!(leases.free_soonest("a").is_some());
        }
        assert!(leases.is_empty());
        assert_eq!(leases, Leases::new(), "an id without slots is forgotten");
        assert_eq!(leases.earliest_expiry(), None);
    }
}
