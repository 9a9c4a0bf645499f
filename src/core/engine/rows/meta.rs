//! A partition's metadata row: per subqueue the levels, backlog and parked
//! keys the next owner starts from, and the fencing token every write is
//! conditional on.

use crate::model::{FairLevel, PRIORITY_LEVELS};

/// What a store keeps per subqueue besides its tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubqueueMeta {
    /// Everything at or below it was dispatched.
    pub ack_level: FairLevel,
    /// The highest level written (best effort).
    pub max_level: FairLevel,
    /// Written minus dispatched (approximate).
    pub approx_backlog: i64,
    /// The keys furthest ahead and their next passes, for the next owner.
    pub top_keys: Vec<(String, i64)>,
    /// Levels above the ack level already dispatched (tasks dispatched out
    /// of level order); the next owner does not hand them out again.
    pub dispatched_above_ack: Vec<FairLevel>,
    /// Keys held at their limits whose waiting tasks are parked records.
    pub parked: Vec<ParkedKeyMeta>,
}

/// A parked key: its tasks wait in the records `(slot, seq)` of the parked
/// section; those at or below `floor` were handed out. A negative slot is
/// the shared slot of its priority level, for the held keys past the
/// directory (`crate::core::engine::parked`); its `fairness_key` is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParkedKeyMeta {
    /// The key held at its limits.
    pub fairness_key: String,
    /// The key's slot: the first part of the keys of its records in
    /// [`Section::Parked`].
    pub slot: i64,
    /// Every record of the slot with a sequence number at or below this one was
    /// handed out.
    pub floor: i64,
}

/// The metadata row of a partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionMeta {
    /// The fencing token: every write is conditional on it.
    pub range_id: i64,
    /// The node that took it last (informational: the range id decides).
    pub owner: String,
    /// The region whose nodes may take it (empty: any). Its owners fence it
    /// with that region's Paxos (`LOCAL_SERIAL`), so a node of another
    /// region never takes it: `Store::take_ownership` refuses.
    pub region: String,
    /// Set when the partition was handed over from another region (the
    /// region named here) to `region`: the next owner first makes every
    /// write of the old region visible in its own (see
    /// `Store::take_ownership`), then clears it.
    pub moved_from: String,
    /// What is kept per priority level, highest first (at [`Priority::index`]).
    pub subqueues: [SubqueueMeta; PRIORITY_LEVELS],
    /// Every delayed record at or below this key has been made ready: the
    /// next owner reads delayed records above it.
    pub delayed_through: (i64, i64),
    /// Every dead letter at or below this key was put back or removed:
    /// reads of dead letters start above it, past their deleted rows.
    pub dead_letters_through: (i64, i64),
    /// Every waiting record at or below this key is of a task that left the
    /// backlog or was moved to its front: the next owner reads waiting
    /// records above it (see `crate::core::engine::aged`).
    pub waiting_through: (i64, i64),
    /// Set on a partition of an earlier generation (see
    /// `Store::force_queue_home`) once every task it held was added again
    /// to the next generation: nothing reads it any more.
    pub drained: bool,
    /// Tasks cancelled and not reached yet, by task id, ascending: each
    /// ends, completed, when it is next handed out or reported on.
    pub cancelled: Vec<i64>,
    /// Every task of an id below it was in the partition when a purge
    /// landed (see `crate::core::engine::cancel`): it ends as a cancelled
    /// one does. 0 when the partition was never purged.
    pub purged_below: i64,
}

impl PartitionMeta {
    /// This metadata as a hand-over to a node of `to_region` writes it: no
    /// owner, and homed in `to_region`, handed over from its region, when
    /// that is another one. A partition of no region (its fence spans every
    /// region) stays so.
    pub fn handed_over(self, to_region: &str) -> PartitionMeta {
        let moves = !self.region.is_empty() && self.region != to_region;
        let (region, moved_from) = if moves {
            (to_region.to_owned(), self.region.clone())
        } else {
            (self.region.clone(), self.moved_from.clone())
        };
        PartitionMeta { owner: String::new(), region, moved_from, ..self }
    }

    /// Its bytes as a backend stores them, at most: every number counted at
    /// its widest encoding, every string and list with its framing.
    pub fn stored_bytes(&self) -> usize {
        let strings: usize = [&self.owner, &self.region, &self.moved_from].iter().map(|s| s.len() + FIELD).sum();
        let subqueues: usize = self.subqueues.iter().map(SubqueueMeta::stored_bytes).sum();
        NUMBER + FIELD + strings + subqueues + 3 * LEVEL
    }
}

/// The widest number: a field tag and a 10-byte varint.
const NUMBER: usize = 11;
/// A nested field's or a string's framing: its tag and its length.
const FIELD: usize = 6;
/// A level (or any pair of numbers): framed, two numbers.
const LEVEL: usize = FIELD + 2 * NUMBER;

impl SubqueueMeta {
    /// Its bytes within [`PartitionMeta::stored_bytes`].
    fn stored_bytes(&self) -> usize {
        let top_keys: usize = self.top_keys.iter().map(|(key, _)| FIELD + FIELD + key.len() + NUMBER).sum();
        let parked: usize = self.parked.iter().map(|p| FIELD + FIELD + p.fairness_key.len() + 2 * NUMBER).sum();
        FIELD + NUMBER + 2 * LEVEL + NUMBER + top_keys + self.dispatched_above_ack.len() * LEVEL + parked
    }
}
