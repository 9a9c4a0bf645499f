//! The state machine of one owned partition, its methods by role: planning
//! writes (`planning`), concluding them (`write_outcome`), reads (`reads`), handing
//! tasks out (`dispatch`), deletes and metadata (`upkeep`). What it takes
//! and gives back is in the engine's other files (config, outcomes, plan,
//! report, sizes).

mod aging;
mod cancels;
mod dispatch;
mod lookup;
mod planning;
mod purge;
mod reads;
mod upkeep;
mod write_outcome;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::IdBlock;
use super::aged::AgedWindow;
use super::config::EngineConfig;
use super::dedup::DedupIndex;
use super::delayed::{DelayKey, Delayed};
use super::dispatch_tally::DispatchTally;
use super::key_rates::KeyRates;
use super::leases::Leases;
use super::parked::ParkedKeys;
use super::pauses::Pauses;
use super::report::TaskCounts;
use super::subqueue::Subqueue;
use crate::clock::UnixMillis;
use crate::core::engine::rows::{PartitionMeta, Record, RecordKey, RecordValue, Section};
use crate::model::{FairLevel, Priority, StoredTask};

/// Where the lease record of sequence number `seq` lives.
fn lease_key(seq: i64) -> RecordKey {
    RecordKey { section: Section::Leases, key: (0, seq) }
}

/// A finished lease: a record of where its task was, over the lease's (an
/// overwrite, not a tombstone), so that a new owner does not hand the task
/// out again before the persisted ack level covers it. Removed later by a
/// range delete below the oldest lease still needed.
fn lease_done(seq: i64, task: &StoredTask) -> Record {
    Record { at: lease_key(seq), value: RecordValue::FinishedLease { priority: task.priority, level: task.level } }
}

/// The most of each kind of due work one write handles: expired leases,
/// due delayed tasks, held leases written again, tasks parked.
pub const MAX_MAINTENANCE_PER_WRITE: usize = 256;

/// The failure message of a lease that ran out.
const LEASE_EXPIRED: &str = "lease expired";

/// The engine of one owned partition. See the module docs for its invariants.
#[derive(Debug)]
pub struct PartitionEngine {
    range_id: i64,
    /// The node that owns the partition, as written in its metadata.
    owner: String,
    /// The region the partition is homed in, and the one it was handed over
    /// from, as written in its metadata.
    region: String,
    moved_from: String,
    ids: IdBlock,
    subqueues: Vec<Subqueue>,
    config: EngineConfig,
    last_meta_sync: UnixMillis,
    counts: TaskCounts,
    leases: Leases,
    /// Leases taken and not written yet.
    unwritten_leases: Vec<i64>,
    delayed: Delayed,
    /// The waiting records of a queue with a `max_wait`.
    aged: AgedWindow,
    /// The highest lease seq planned, and what the last range deletes of
    /// finished leases and promoted delayed records covered.
    max_lease_seq: i64,
    lease_gc_through: i64,
    delayed_gc_through: DelayKey,
    /// Dead letters at or below it were put back or removed (in the metadata).
    dead_letters_through: (i64, i64),
    /// Finished leases (seq → priority and level) whose tasks the persisted
    /// ack level does not cover yet: their records must stay.
    finished: BTreeMap<i64, (Priority, FairLevel)>,
    dedup: DedupIndex,
    rates: KeyRates,
    parked: ParkedKeys,
    /// The keys the operator paused: held as though at their limits.
    pauses: Pauses,
    /// Lease records written by writes of unknown outcome that may be all
    /// that holds a task (task level id → the lowest such seq): the lease
    /// of a parked task whose record the write deleted, or a held lease's
    /// record written again. Kept from the range delete of leases until a
    /// later write of the task's lease, or its end, is durable.
    kept_lease_records: HashMap<i64, i64>,
    /// Tasks back in the buffer after a write of unknown outcome leased
    /// them (by level id): a lease record of theirs may have landed. One
    /// that is parked gets a finished lease record over it, so that a new
    /// owner does not take it as held beside its parked record.
    maybe_leased: HashSet<i64>,
    /// The seqs of the last lease records written, oldest first (at most
    /// `config.move_lease_after`), and how many were written since the
    /// leases below them were last looked for.
    lease_rows: VecDeque<i64>,
    lease_rows_unchecked: usize,
    largest_write: usize,
    /// What was handed out lately, by key.
    tally: DispatchTally,
    /// Tasks cancelled and not reached yet, by task id (in the metadata;
    /// see `crate::core::engine::cancel`), and whether one went since the
    /// metadata was last written.
    cancelled: BTreeSet<i64>,
    cancelled_moved: bool,
    /// Tasks of ids below it were cancelled by a purge (in the metadata),
    /// and whether the buffer may hold some of them (see `purge`).
    purged_below: i64,
    purge_sweeping: bool,
}

impl PartitionEngine {
    /// Starts from the metadata returned by a successful `take_ownership`,
    /// with no lease out.
    pub fn load(meta: &PartitionMeta, config: EngineConfig, now: UnixMillis) -> Self {
        Self::load_with_leases(meta, Vec::new(), Vec::new(), config, now)
    }

    /// Starts from the metadata and the lease records (task, deadline) of the partition.
    /// `finished` are the records of finished leases: (seq, priority, level).
    pub fn load_with_leases(
        meta: &PartitionMeta,
        leased: Vec<(StoredTask, UnixMillis, i64)>,
        finished: Vec<(i64, Priority, FairLevel)>,
        config: EngineConfig,
        now: UnixMillis,
    ) -> Self {
        // A lease record written after another one of the same task supersedes
        // it (an earlier write of unknown outcome can leave a stale record).
        let mut last_finished: HashMap<i64, i64> = HashMap::new();
        for (seq, _, level) in &finished {
            let last = last_finished.entry(level.id).or_default();
            *last = (*last).max(*seq);
        }
        let leased =
            leased.into_iter().filter(|(task, _, seq)| last_finished.get(&task.level.id).is_none_or(|f| f < seq));
        let leases = Leases::load(leased, now, config.tasks.lease_ms());
        let finished: BTreeMap<i64, (Priority, FairLevel)> =
            finished.into_iter().map(|(seq, priority, level)| (seq, (priority, level))).collect();
        let subqueues = Priority::all()
            .map(|p| {
                let leased = leases.levels().filter(|t| t.priority == p).map(|t| t.level);
                let done = finished.values().filter(|(priority, _)| *priority == p).map(|(_, level)| *level);
                Subqueue::load(p, &meta.subqueues[p.index()], leased.chain(done), config.counters.clone(), now)
            })
            .collect();
        let rates = KeyRates::new(config.tasks.key_rate_per_second, config.tasks.key_burst);
        let parked = Priority::all()
            .flat_map(|p| meta.subqueues[p.index()].parked.iter().map(move |entry| (p, entry.clone())))
            .collect::<Vec<_>>();
        PartitionEngine {
            parked: ParkedKeys::load(parked, config.max_parked_keys),
            kept_lease_records: HashMap::new(),
            maybe_leased: HashSet::new(),
            lease_rows: VecDeque::new(),
            lease_rows_unchecked: 0,
            largest_write: 0,
            tally: DispatchTally::default(),
            cancelled: meta.cancelled.iter().copied().collect(),
            cancelled_moved: false,
            purged_below: meta.purged_below,
            purge_sweeping: meta.purged_below > 0,
            leases,
            unwritten_leases: Vec::new(),
            delayed: Delayed::new(config.buffer_tasks, meta.delayed_through),
            aged: AgedWindow::new(config.buffer_tasks, meta.waiting_through),
            max_lease_seq: 0,
            lease_gc_through: 0,
            delayed_gc_through: meta.delayed_through,
            dead_letters_through: meta.dead_letters_through,
            finished,
            dedup: DedupIndex::default(),
            rates,
            pauses: Pauses::default(),
            range_id: meta.range_id,
            owner: meta.owner.clone(),
            region: meta.region.clone(),
            moved_from: meta.moved_from.clone(),
            ids: IdBlock::for_range(meta.range_id),
            subqueues,
            config,
            last_meta_sync: now,
            counts: TaskCounts::default(),
        }
    }

    /// The range id this engine owns the partition under: every write is
    /// conditional on it.
    pub fn range_id(&self) -> i64 {
        self.range_id
    }

    /// Writes the next metadata as a hand-over to a node of `to_region`
    /// (see [`PartitionMeta::handed_over`]), so that the next owner may take
    /// the partition at once.
    pub fn hand_over(&mut self, to_region: &str) {
        let held = PartitionMeta {
            owner: std::mem::take(&mut self.owner),
            region: std::mem::take(&mut self.region),
            moved_from: std::mem::take(&mut self.moved_from),
            ..PartitionMeta::default()
        };
        let handed = held.handed_over(to_region);
        (self.owner, self.region, self.moved_from) = (handed.owner, handed.region, handed.moved_from);
    }

    /// The settings the engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Runs on with the task policy and weights of `config` and with
    /// `pauses`, from now on: tasks already written keep their passes, a
    /// lease running keeps its deadline until its next heartbeat. What
    /// places rows (`ordering`, `max_wait`, `age_boost`, `late_slack`) and
    /// how the partition buffers stay as the engine was opened with: a
    /// change of those needs the partition opened again.
    pub fn retune(&mut self, config: &EngineConfig, pauses: Pauses) {
        let fixed = &self.config.tasks;
        let tasks = super::TaskPolicy {
            ordering: fixed.ordering,
            max_wait: fixed.max_wait,
            age_boost: fixed.age_boost,
            late_slack: fixed.late_slack,
            ..config.tasks.clone()
        };
        if (tasks.key_rate_per_second, tasks.key_burst) != (fixed.key_rate_per_second, fixed.key_burst) {
            self.rates = KeyRates::new(tasks.key_rate_per_second, tasks.key_burst);
        }
        self.config.tasks = tasks;
        self.config.weights = config.weights.clone();
        self.pauses = pauses;
    }

    /// The keys paused here.
    pub fn pauses(&self) -> &Pauses {
        &self.pauses
    }

    /// Uses every id of the block but the last `left`.
    #[cfg(test)]
    pub fn use_ids_but(&mut self, left: i64) {
        self.ids.use_all_but(left);
    }

    /// After a `take_ownership` that renewed the range id (and so the id block).
    pub fn renew_range(&mut self, range_id: i64) {
        assert!(range_id > self.range_id, "range ids only grow");
        self.range_id = range_id;
        self.ids = IdBlock::for_range(range_id);
    }
}
