//! Which of the other floodgates' published demands on a bucket count, by their age: one that
//! published within the live horizon is there; one that stopped publishing is remembered a
//! while longer, because the Envoys it served may still enforce the parts it gave them until
//! they report to another floodgate. A floodgate that has just started and heard every Envoy
//! it will hear (its startup grace is over) retires the remembered ones: their Envoys have
//! reported again by then. `lua/rlqs_exchange.lua` decides the same in Redis.

/// What an exchange does with another instance's entry on a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEntry {
    /// Published within the live horizon: counted.
    Live,
    /// Stopped publishing, within the memory: counted at its last demand.
    Remembered,
    /// Past the memory, or retired: deleted.
    Forgotten,
}

impl PeerEntry {
    pub fn counts(self) -> bool {
        !matches!(self, PeerEntry::Forgotten)
    }
}

/// The fate of an entry published `age_ms` ago, with a live horizon of `horizon_ms`, a memory
/// of `memory_ms` (at least the horizon) and, when `retire`, no memory at all.
pub fn peer_entry(age_ms: u64, horizon_ms: u64, memory_ms: u64, retire: bool) -> PeerEntry {
    if age_ms <= horizon_ms {
        PeerEntry::Live
    } else if !retire && age_ms <= memory_ms {
        PeerEntry::Remembered
    } else {
        PeerEntry::Forgotten
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_that_stopped_publishing_is_remembered_until_retired_or_past_the_memory() {
        assert_eq!(peer_entry(0, 3_000, 15_000, false), PeerEntry::Live);
        assert_eq!(peer_entry(3_000, 3_000, 15_000, true), PeerEntry::Live);
        assert_eq!(
            peer_entry(3_001, 3_000, 15_000, false),
            PeerEntry::Remembered
        );
        assert_eq!(
            peer_entry(15_000, 3_000, 15_000, false),
            PeerEntry::Remembered
        );
        assert_eq!(
            peer_entry(15_001, 3_000, 15_000, false),
            PeerEntry::Forgotten
        );
        assert_eq!(peer_entry(3_001, 3_000, 15_000, true), PeerEntry::Forgotten);
        assert!(PeerEntry::Remembered.counts() && !PeerEntry::Forgotten.counts());
    }
}
