//! The state machine of one owned partition; what it takes and gives back
//! is in its sibling files (config, outcomes, plan, report, sizes).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use super::IdBlock;
use super::config::EngineConfig;
use super::dedup::{DedupEntry, DedupIndex, bucket_of};
use super::delayed::{DelayKey, Delayed};
use super::key_rates::KeyRates;
use super::leases::{LeaseError, Leases};
use super::outcomes::{Added, Candidate, Finish, Finished, Outcome};
use super::parked::{ParkedKeys, ParkedRead};
use super::plan::{AppendPlan, GcRequest, IdsExhausted, PlanInput, ReadRequest};
use super::policy::{AfterFailure, DispatchOrder};
use super::report::{PartitionSnapshot, SubqueueSnapshot, TaskCounts};
use super::sizes::{SMALL_ROW_BYTES, ending_bytes, meta_bytes, record_bytes, requeue_bytes, spec_bytes};
use super::subqueue::Subqueue;
use crate::clock::{UnixMillis, millis};
use crate::core::fairness::stride;
use crate::model::{FairLevel, PRIORITY_LEVELS, Priority, StoredTask, TaskSpec};
use crate::store::codec::encode_meta;
use crate::store::codec::{encode_dedup, encode_finished_lease, encode_record_task};
use crate::store::{PartitionMeta, PartitionWrite, Record, RecordKey, Section, SubqueueMeta};

/// Where the lease record of sequence number `seq` lives.
fn lease_key(seq: i64) -> RecordKey {
    RecordKey { section: Section::Leases, key: (0, seq) }
}

/// A finished lease: a record of where its task was, over the lease's (an
/// overwrite, not a tombstone), so that a new owner does not hand the task
/// out again before the persisted ack level covers it. Removed later by a
/// range delete below the oldest lease still needed.
fn lease_done(seq: i64, task: &StoredTask) -> Record {
    Record { at: lease_key(seq), value: encode_finished_lease(task.priority, task.level) }
}

/// The most expired leases and due delayed tasks one write handles.
pub const MAX_MAINTENANCE_PER_WRITE: usize = 256;

/// The failure message of a lease that ran out.
const LEASE_EXPIRED: &str = "lease expired";

/// The engine of one owned partition. See the module docs for its invariants.
#[derive(Debug)]
pub struct PartitionEngine {
    range_id: i64,
    /// The node that owns the partition, as written in its metadata.
    owner: String,
    ids: IdBlock,
    subqueues: Vec<Subqueue>,
    config: EngineConfig,
    last_meta_sync: UnixMillis,
    counts: TaskCounts,
    leases: Leases,
    /// Leases taken and not written yet.
    unwritten_leases: Vec<i64>,
    delayed: Delayed,
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
            leases,
            unwritten_leases: Vec::new(),
            delayed: Delayed::new(config.buffer_tasks, meta.delayed_through),
            max_lease_seq: 0,
            lease_gc_through: 0,
            delayed_gc_through: meta.delayed_through,
            dead_letters_through: meta.dead_letters_through,
            finished,
            dedup: DedupIndex::default(),
            rates,
            range_id: meta.range_id,
            owner: meta.owner.clone(),
            ids: IdBlock::for_range(meta.range_id),
            subqueues,
            config,
            last_meta_sync: now,
            counts: TaskCounts::default(),
        }
    }

    pub fn range_id(&self) -> i64 {
        self.range_id
    }

    /// The owner written with the next metadata ("" to hand the partition over).
    pub fn set_owner(&mut self, owner: String) {
        self.owner = owner;
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// After a `take_ownership` that renewed the range id (and so the id block).
    pub fn renew_range(&mut self, range_id: i64) {
        assert!(range_id > self.range_id, "range ids only grow");
        self.range_id = range_id;
        self.ids = IdBlock::for_range(range_id);
    }

    /// Plans a write of new tasks alone (see [`Self::plan`]).
    pub fn prepare_append(&mut self, specs: &[TaskSpec], now: UnixMillis) -> Result<AppendPlan, IdsExhausted> {
        self.plan(PlanInput { specs, ..PlanInput::default() }, now, &mut || 0.5)
    }

    /// Plans one write: the new tasks of `input.specs` (delayed ones to the
    /// delayed records; duplicates of a held dedup id not at all), the
    /// finishes, the re-driven dead letters, and what is due: lease records
    /// to write, expired leases, delayed tasks now ready, the metadata.
    /// `unit` draws random numbers in `[0, 1)` for the backoff jitter.
    ///
    /// The dedup buckets of the specs must be resolved first (see
    /// [`Self::unresolved_buckets`]). Every plan must be concluded with
    /// [`Self::write_succeeded`] or [`Self::write_failed`].
    pub fn plan(
        &mut self,
        input: PlanInput<'_>,
        now: UnixMillis,
        unit: &mut dyn FnMut() -> f64,
    ) -> Result<AppendPlan, IdsExhausted> {
        let ids_needed = 2 * input.specs.len()
            + input.redrive.len()
            + self.unwritten_leases.len()
            + 3 * MAX_MAINTENANCE_PER_WRITE
            + 1;
        if self.ids.remaining() < ids_needed as i64 {
            return Err(IdsExhausted { range_id: self.range_id });
        }
        let mut plan = AppendPlan {
            range_id: self.range_id,
            write: PartitionWrite::default(),
            added: Vec::with_capacity(input.specs.len()),
            finished: Vec::with_capacity(input.finishes.len()),
            redriven: 0,
            redrive_duplicates: 0,
            leases: Vec::new(),
            direct: Vec::new(),
            pinned: [false; PRIORITY_LEVELS],
            delayed: Vec::new(),
            promoted: Vec::new(),
            ending: Vec::new(),
            expired: 0,
            buckets: Vec::new(),
            delayed_floor: None,
            dead_letters_floor: None,
            moved_leases: Vec::new(),
            parked: Vec::new(),
        };
        // What is due goes in while it fits beside the commands and the
        // metadata, if this write may carry it (see the end of the plan).
        let piggyback = now - self.last_meta_sync >= millis(self.config.piggyback_interval);
        let to_park = self.to_park(now);
        let may_carry_meta = (piggyback && self.metadata_moved())
            || self.delayed.next_due().is_some_and(|d| d <= now)
            || !to_park.is_empty()
            || !input.redrive.is_empty();
        let meta_bytes = if may_carry_meta { meta_bytes(&self.metadata(), to_park.len()) } else { 0 };
        let reserved = self.command_bytes(&input) + meta_bytes;
        let mut room = input.max_bytes.saturating_sub(reserved);
        let mut fits = |cost: usize| {
            let fits = cost <= room;
            if fits {
                room -= cost;
            }
            fits
        };
        // Promotions first: the floor they raise bounds the keys of new
        // delayed records below.
        let due = self.delayed.take_due(now, MAX_MAINTENANCE_PER_WRITE, |task| fits(requeue_bytes(task)));
        for (key, dead) in due {
            plan.write.delete.push(RecordKey { section: Section::Delayed, key });
            let task = self.relevel(&mut plan, dead.clone());
            plan.write.tasks.push(task);
            plan.promoted.push((key, dead));
            plan.delayed_floor = Some(key);
        }
        for (index, spec) in input.specs.iter().enumerate() {
            let added = if input.direct.binary_search(&index).is_ok() {
                self.plan_direct(&mut plan, spec, now)
            } else {
                self.plan_add(&mut plan, spec, now)
            };
            plan.added.push(added);
        }
        for (key, dead) in input.redrive {
            plan.write.delete.push(key);
            // Dead letters are put back oldest first: those gone are below the floor.
            plan.dead_letters_floor = plan.dead_letters_floor.max(Some(key.key));
            // Back with everything it was added with, its dedup id too; if
            // a newer task holds that id now, this one would run beside it.
            let mut fresh = StoredTask { attempt: 1, ..dead };
            if let Some(dedup_id) = &fresh.dedup_id {
                if self.dedup.find(dedup_id).is_some() {
                    plan.redrive_duplicates += 1;
                    continue;
                }
                fresh.dedup_slot = self.hold_dedup(&mut plan, dedup_id, fresh.task_id);
            }
            let task = self.relevel(&mut plan, fresh);
            plan.write.tasks.push(task);
            plan.redriven += 1;
        }
        for finish in input.finishes {
            let finished = self.plan_finish(&mut plan, finish, now, unit);
            plan.finished.push(finished);
        }
        let expired = self
            .leases
            .take_expired(now, MAX_MAINTENANCE_PER_WRITE, |task| fits(ending_bytes(task, LEASE_EXPIRED.len())));
        for lease in expired {
            let id = lease.task.level.id;
            if lease.delivered {
                plan.expired += 1;
                let fail = Outcome::Fail { retryable: true, message: LEASE_EXPIRED.into(), retry_after: None };
                self.plan_ending(&mut plan, lease.task, lease.seq, &fail, now, unit);
            } else {
                // Nobody got it: back to the queue without counting an attempt.
                plan.write.put.push(lease_done(lease.seq, &lease.task));
                plan.ending.push((id, lease.task.task_id));
                self.plan_delayed(&mut plan, (now, id), lease.task);
            }
        }
        let mut unwritten = std::mem::take(&mut self.unwritten_leases).into_iter();
        for id in unwritten.by_ref() {
            let Some(lease) = self.leases.get(id) else { continue };
            if !fits(record_bytes(&lease.task, 0)) {
                // The lease waits for the next write, ahead of later ones.
                self.unwritten_leases.push(id);
                break;
            }
            let task = lease.task.clone();
            if let Some(record) = self.parked.record_of_lease(id) {
                plan.write.delete.push(record);
            }
            // The lease runs from the write that makes it durable, not from the take.
            let deadline = now + self.config.tasks.lease_ms();
            let seq = self.lease_seq();
            self.leases.set_written_place(id, seq, deadline);
            plan.write.put.push(Record { at: lease_key(seq), value: encode_record_task(&task, deadline, "") });
            plan.leases.push((id, task, deadline));
        }
        self.unwritten_leases.extend(unwritten);
        for (id, task, deadline) in self.leases_to_move() {
            if !fits(record_bytes(&task, 0)) {
                break;
            }
            let seq = self.lease_seq();
            plan.write.put.push(Record { at: lease_key(seq), value: encode_record_task(&task, deadline, "") });
            plan.moved_leases.push((id, seq));
        }
        for (priority, level) in to_park {
            let subqueue = &mut self.subqueues[priority.index()];
            let Some(task) = subqueue.take_to_park(level) else { continue };
            if !fits(record_bytes(&task, 0) + SMALL_ROW_BYTES) {
                subqueue.restore(task);
                break;
            }
            if self.maybe_leased.contains(&task.level.id) {
                let seq = self.ids.take().expect("checked the block has room");
                self.max_lease_seq = self.max_lease_seq.max(seq);
                plan.write.put.push(lease_done(seq, &task));
            }
            let seq = self.ids.take().expect("checked the block has room");
            let ids = &mut self.ids;
            let at = self.parked.park(&task, seq, || ids.take().expect("checked the block has room"));
            plan.write.put.push(Record { at, value: encode_record_task(&task, now, "") });
            plan.parked.push((at, task));
        }
        let floors_raised = plan.delayed_floor.is_some() || plan.dead_letters_floor.is_some();
        if floors_raised || !plan.parked.is_empty() || (piggyback && self.metadata_moved()) {
            let mut meta = self.metadata();
            meta.delayed_through = plan.delayed_floor.unwrap_or(meta.delayed_through).max(meta.delayed_through);
            meta.dead_letters_through =
                plan.dead_letters_floor.map_or(meta.dead_letters_through, |f| f.max(meta.dead_letters_through));
            plan.write.metadata = Some(meta);
        }
        if plan.write.tasks.is_empty() && !plan.write.is_empty() {
            let mark = self.ids.take().expect("checked the block has room");
            let at = RecordKey { section: Section::WriteMark, key: (0, 0) };
            plan.write.put.push(Record { at, value: mark.to_be_bytes().to_vec() });
        }
        Ok(plan)
    }

    /// The bytes the commands of `input` add to a write, at most.
    fn command_bytes(&self, input: &PlanInput<'_>) -> usize {
        let specs: usize = input.specs.iter().map(spec_bytes).sum();
        let redrive: usize = input.redrive.iter().map(|(_, task)| requeue_bytes(task)).sum();
        let finishes: usize = input.finishes.iter().map(|f| self.finish_bytes(f)).sum();
        specs + redrive + finishes
    }

    /// The bytes a worker's report on a lease adds to a write, at most (the
    /// retry or dead-letter record holds the whole task).
    pub fn finish_bytes(&self, finish: &Finish) -> usize {
        let message = match &finish.outcome {
            Outcome::Complete => 0,
            Outcome::Fail { message, .. } => message.len(),
        };
        self.leases.get(finish.lease_id).map_or(SMALL_ROW_BYTES, |lease| ending_bytes(&lease.task, message))
    }

    fn plan_add(&mut self, plan: &mut AppendPlan, spec: &TaskSpec, now: UnixMillis) -> Added {
        if let Some(dedup_id) = &spec.dedup_id
            && let Some(held) = self.dedup.find(dedup_id)
        {
            return Added::Duplicate { task_id: held.task_id };
        }
        let id = self.ids.take().expect("checked the block has room");
        let mut task = spec.at_level(FairLevel::new(0, id), now);
        if let Some(dedup_id) = &spec.dedup_id {
            task.dedup_slot = self.hold_dedup(plan, dedup_id, id);
        }
        if spec.delay.is_zero() {
            let index = spec.priority.index();
            self.pin(plan, index);
            task.level.pass = self.next_pass(index, &spec.fairness_key, spec.fairness_weight);
            plan.write.tasks.push(task);
        } else {
            self.plan_delayed(plan, (now + millis(spec.delay), id), task);
        }
        Added::Added { task_id: id }
    }

    /// A new task leased at once to a waiting worker: no backlog row, its
    /// lease record holds it (and brings it back if the lease expires).
    fn plan_direct(&mut self, plan: &mut AppendPlan, spec: &TaskSpec, now: UnixMillis) -> Added {
        debug_assert!(spec.delay.is_zero() && spec.dedup_id.is_none(), "sync match of a delayed or dedup task");
        let id = self.ids.take().expect("checked the block has room");
        let seq = self.lease_seq();
        // Pass -1: below every backlog level, so no subqueue ever marks it.
        let task = spec.at_level(FairLevel::new(-1, id), now);
        let deadline = now + self.config.tasks.lease_ms();
        self.leases.start(task.clone(), deadline);
        self.leases.set_written_place(id, seq, deadline);
        self.rates.consume(&task.fairness_key, now);
        plan.write.put.push(Record { at: lease_key(seq), value: encode_record_task(&task, deadline, "") });
        plan.leases.push((id, task, deadline));
        plan.direct.push(id);
        Added::Added { task_id: id }
    }

    fn plan_delayed(&mut self, plan: &mut AppendPlan, key: DelayKey, task: StoredTask) {
        let key = self.delayed.key_above_floor(key, plan.delayed_floor);
        plan.write.put.push(Record {
            at: RecordKey { section: Section::Delayed, key },
            value: encode_record_task(&task, key.0, ""),
        });
        plan.delayed.push((key, task));
    }

    fn plan_finish(
        &mut self,
        plan: &mut AppendPlan,
        finish: &Finish,
        now: UnixMillis,
        unit: &mut dyn FnMut() -> f64,
    ) -> Result<Finished, LeaseError> {
        let task = self.leases.begin_finish(finish.lease_id, finish.attempt)?;
        let seq = self.leases.get(finish.lease_id).map_or(0, |l| l.seq);
        Ok(self.plan_ending(plan, task, seq, &finish.outcome, now, unit))
    }

    /// Ends the lease of `task`: done, retried later, or buried.
    #[allow(clippy::too_many_arguments)]
    fn plan_ending(
        &mut self,
        plan: &mut AppendPlan,
        task: StoredTask,
        seq: i64,
        outcome: &Outcome,
        now: UnixMillis,
        unit: &mut dyn FnMut() -> f64,
    ) -> Finished {
        let id = task.level.id;
        plan.ending.push((id, task.task_id));
        plan.write.put.push(lease_done(seq, &task));
        let (retryable, message, retry_after) = match outcome {
            Outcome::Complete => {
                self.free_dedup(plan, &task);
                return Finished::Completed;
            }
            Outcome::Fail { retryable, message, retry_after } => (*retryable, message.as_str(), *retry_after),
        };
        match self.config.tasks.after_failure(task.attempt, retryable, retry_after, now, unit()) {
            AfterFailure::Retry { not_before } => {
                let retry = StoredTask { attempt: task.attempt + 1, ..task };
                self.plan_delayed(plan, (not_before, id), retry);
                Finished::Retrying { not_before }
            }
            AfterFailure::Bury => {
                self.free_dedup(plan, &task);
                plan.write.put.push(Record {
                    at: RecordKey { section: Section::DeadLetters, key: self.dead_letter_key(now, id) },
                    value: encode_record_task(&task, now, message),
                });
                Finished::Buried
            }
        }
    }

    /// The key of a new dead letter: failed at `now`, or just above the
    /// floor if a clock behind an earlier owner's would put it below.
    fn dead_letter_key(&self, now: UnixMillis, id: i64) -> (i64, i64) {
        let floor = self.dead_letters_through;
        if (now, id) > floor { (now, id) } else { (floor.0 + 1, id) }
    }

    /// Where reads of dead letters start: above those put back or removed.
    pub fn dead_letters_floor(&self) -> (i64, i64) {
        self.dead_letters_through
    }

    /// The seq of a new lease record.
    fn lease_seq(&mut self) -> i64 {
        let seq = self.ids.take().expect("checked the block has room");
        self.max_lease_seq = self.max_lease_seq.max(seq);
        self.lease_rows.push_back(seq);
        if self.lease_rows.len() > self.config.move_lease_after {
            self.lease_rows.pop_front();
        }
        self.lease_rows_unchecked += 1;
        seq
    }

    /// Held leases with `config.move_lease_after` newer records above
    /// theirs, to write again (looked for once in a sixteenth of that).
    fn leases_to_move(&mut self) -> Vec<(i64, StoredTask, UnixMillis)> {
        let after = self.config.move_lease_after.max(1);
        if self.lease_rows.len() < after || self.lease_rows_unchecked < after.div_ceil(16) {
            return Vec::new();
        }
        self.lease_rows_unchecked = 0;
        self.leases.held_below(self.lease_rows[0], MAX_MAINTENANCE_PER_WRITE)
    }

    /// Records that `task_id` holds `dedup_id` (in memory and in the write); its slot.
    fn hold_dedup(&mut self, plan: &mut AppendPlan, dedup_id: &str, task_id: i64) -> i64 {
        let key = self.dedup.insert(dedup_id, task_id);
        plan.buckets.push(key.0);
        plan.write
            .put
            .push(Record { at: RecordKey { section: Section::Dedup, key }, value: encode_dedup(dedup_id, task_id) });
        key.1
    }

    fn free_dedup(&mut self, plan: &mut AppendPlan, task: &StoredTask) {
        let Some(dedup_id) = &task.dedup_id else { return };
        let key = (bucket_of(dedup_id), task.dedup_slot);
        if self.dedup.is_resolved(key.0) {
            self.dedup.remove(dedup_id);
            plan.buckets.push(key.0);
        }
        plan.write.delete.push(RecordKey { section: Section::Dedup, key });
    }

    /// Gives a task a new level (a fresh id, and a pass from its key's
    /// counter: it counts against its key's share like any new task).
    fn relevel(&mut self, plan: &mut AppendPlan, mut task: StoredTask) -> StoredTask {
        let index = task.priority.index();
        self.pin(plan, index);
        let pass = self.next_pass(index, &task.fairness_key, task.fairness_weight);
        task.level = FairLevel::new(pass, self.ids.take().expect("checked the block has room"));
        task
    }

    /// The pass of a new task of `key` in subqueue `index`. With FIFO
    /// ordering every task counts against one shared key of weight 1, so
    /// passes follow the order of arrival.
    fn next_pass(&mut self, index: usize, key: &str, weight_hint: Option<f64>) -> i64 {
        let subqueue = &mut self.subqueues[index];
        match self.config.tasks.ordering {
            DispatchOrder::Fair => {
                let weight = self.config.weights.resolve(key, weight_hint);
                subqueue.counters.next_pass(key, subqueue.ack.pass, stride(weight))
            }
            DispatchOrder::Fifo => subqueue.counters.next_pass("", subqueue.ack.pass, stride(1.0)),
        }
    }

    fn pin(&mut self, plan: &mut AppendPlan, index: usize) {
        if !plan.pinned[index] {
            self.subqueues[index].pin();
            plan.pinned[index] = true;
        }
    }

    /// The write is durable: merge its tasks, start its leases, end the
    /// leases it finished, release the pins.
    pub fn write_succeeded(&mut self, plan: AppendPlan, now: UnixMillis) {
        if let Some(meta) = &plan.write.metadata {
            self.metadata_persisted(meta, now);
        }
        self.count_succeeded(&plan);
        self.largest_write = self.largest_write.max(plan.write.bytes());
        if let Some(floor) = plan.delayed_floor {
            self.delayed.raise_floor(floor);
        }
        if let Some(floor) = plan.dead_letters_floor {
            self.dead_letters_through = self.dead_letters_through.max(floor);
        }
        for (key, task) in plan.delayed {
            self.delayed.added(key, task);
        }
        for (id, _) in plan.ending {
            if let Some(lease) = self.leases.get(id) {
                self.finished.insert(lease.seq, (lease.task.priority, lease.task.level));
            }
            self.leases.finished(id);
            self.kept_lease_records.remove(&id);
        }
        for (id, task, _) in &plan.leases {
            self.leases.written(*id, true, now);
            self.parked.lease_written(*id);
            self.kept_lease_records.remove(id);
            self.maybe_leased.remove(id);
            self.subqueues[task.priority.index()].leased(task.level);
        }
        for (_, task) in &plan.parked {
            self.subqueues[task.priority.index()].leased(task.level);
            self.maybe_leased.remove(&task.level.id);
        }
        for (id, seq) in &plan.moved_leases {
            self.leases.moved(*id, *seq);
            self.kept_lease_records.remove(id);
        }
        self.parked.parked(&plan.parked);
        let capacity = self.config.buffer_tasks;
        for subqueue in &mut self.subqueues {
            if plan.pinned[subqueue.priority.index()] {
                let priority = subqueue.priority;
                subqueue.merge_written(plan.write.tasks.iter().filter(|t| t.priority == priority).cloned(), capacity);
                subqueue.unpin();
            }
            subqueue.advance_ack();
        }
    }

    fn count_succeeded(&mut self, plan: &AppendPlan) {
        let counts = &mut self.counts;
        counts.added += plan.added.iter().filter(|added| matches!(added, Added::Added { .. })).count() as u64;
        counts.dispatched += plan.leases.len() as u64;
        for finished in &plan.finished {
            match finished {
                Ok(Finished::Completed) => counts.completed += 1,
                Ok(Finished::Retrying { .. } | Finished::Buried) => counts.failed += 1,
                Err(_) => {}
            }
        }
        counts.expired += plan.expired;
    }

    /// The write failed. If it `may_have_applied`, whatever it touched is
    /// read again from the store before it is trusted.
    pub fn write_failed(&mut self, plan: AppendPlan, may_have_applied: bool, now: UnixMillis) {
        // A held lease's record written again higher may have landed: its
        // end is then written there (superseding both), and the earlier
        // record is kept until it is.
        if may_have_applied {
            for (id, seq) in &plan.moved_leases {
                if let Some(lease) = self.leases.get(*id) {
                    self.kept_lease_records.entry(*id).or_insert(lease.seq);
                }
                self.leases.moved(*id, *seq);
            }
        }
        for bucket in plan.buckets {
            self.dedup.forget(bucket);
        }
        for (id, _) in plan.ending {
            self.leases.finish_failed(id);
        }
        for (id, _, _) in plan.leases {
            let direct = plan.direct.contains(&id);
            if direct && may_have_applied {
                // The lease record alone holds this new task: keep the lease,
                // undelivered, so that it expires at once and the task goes
                // to the queue if the record landed.
                self.leases.written(id, false, now);
                continue;
            }
            // Written or not, the task was not delivered: it is ready again
            // (a parked one is its key's head again, its record deleted or not).
            // A lease record that landed is range-deleted once it is older
            // than every lease in use; a new owner that loads it takes the
            // task's later lease record if there is one (see `Leases::load`),
            // else treats it as held and retries the task when it expires.
            let seq = self.leases.get(id).map_or(0, |lease| lease.seq);
            if let Some(task) = self.leases.not_written(id) {
                self.rates.refund(&task.fairness_key);
                if self.parked.holds_lease(id) {
                    if may_have_applied {
                        // If the write landed, its lease record alone holds the task.
                        // The earliest such record is kept: the range delete stops below it.
                        self.kept_lease_records.entry(id).or_insert(seq);
                    }
                    self.parked.lease_not_written(id, task);
                } else if !direct {
                    if may_have_applied {
                        self.maybe_leased.insert(id);
                    }
                    self.subqueues[task.priority.index()].restore(task);
                }
            }
        }
        for (_, task) in &plan.parked {
            self.subqueues[task.priority.index()].restore(task.clone());
        }
        self.parked.park_failed(&plan.parked, may_have_applied);
        let delayed_lowest = plan.delayed.iter().chain(&plan.promoted).map(|(key, _)| *key).min();
        if may_have_applied {
            if let Some(lowest) = delayed_lowest {
                self.delayed.promotion_uncertain(lowest);
            }
        } else {
            self.delayed.promotion_failed(plan.promoted);
        }
        for subqueue in &mut self.subqueues {
            if !plan.pinned[subqueue.priority.index()] {
                continue;
            }
            if may_have_applied {
                let priority = subqueue.priority;
                let lowest = plan
                    .write
                    .tasks
                    .iter()
                    .filter(|t| t.priority == priority)
                    .map(|t| t.level)
                    .min()
                    .expect("a pinned subqueue has tasks in the plan");
                subqueue.rewind_before(lowest);
            }
            subqueue.unpin();
            subqueue.advance_ack();
        }
    }

    /// Dedup buckets of `dedup_ids` (of new tasks, or of dead letters to put
    /// back) not known in memory: read them from the store and pass them to
    /// [`Self::resolve_bucket`] before planning.
    pub fn unresolved_buckets<'a>(&self, dedup_ids: impl Iterator<Item = &'a str>) -> Vec<i64> {
        let mut buckets: Vec<i64> = dedup_ids.map(bucket_of).filter(|b| !self.dedup.is_resolved(*b)).collect();
        buckets.sort_unstable();
        buckets.dedup();
        buckets
    }

    pub fn resolve_bucket(&mut self, bucket: i64, entries: Vec<DedupEntry>) {
        self.dedup.resolve(bucket, entries);
    }

    /// Whether the writer has work without a command: lease records to
    /// write, expired leases, delayed tasks now ready, or delayed records to
    /// read (after taking the partition, or after a write of unknown outcome).
    pub fn write_due(&self, now: UnixMillis) -> bool {
        !self.unwritten_leases.is_empty()
            || self.leases.next_deadline().is_some_and(|d| d <= now)
            || self.delayed.next_due().is_some_and(|d| d <= now)
            || self.delayed.read_request().is_some()
            || !self.parked.reads(1).is_empty()
            || !self.to_park(now).is_empty()
    }

    /// Reads of the oldest parked task of keys whose head is not in memory,
    /// to make before planning (at most `max`).
    pub fn parked_reads(&self, max: usize) -> Vec<ParkedRead> {
        self.parked.reads(max)
    }

    /// The result of a parked read: the oldest record above `read.after`.
    pub fn apply_parked_read(&mut self, read: &ParkedRead, found: Option<(i64, StoredTask)>) {
        self.parked.apply_read(read, found);
    }

    /// Ready tasks to park now, lowest first per level: every ready task of
    /// a parked key, and, once `park_after` tasks are dispatched above the
    /// ack level, the one that holds it back if its key is at its limits
    /// (while the directory has room). At most [`MAX_MAINTENANCE_PER_WRITE`].
    fn to_park(&self, now: UnixMillis) -> Vec<(Priority, FairLevel)> {
        if !self.keys_limited() {
            return Vec::new();
        }
        let mut levels = Vec::new();
        let mut entering: Vec<(Priority, String)> = Vec::new();
        for subqueue in &self.subqueues {
            let priority = subqueue.priority;
            let pinned = subqueue.dispatched_above_ack() >= self.config.park_after;
            if !pinned && self.parked.is_empty() {
                continue;
            }
            let max = MAX_MAINTENANCE_PER_WRITE - levels.len();
            let found = subqueue.to_park(max, |task, holds_ack| {
                let key = task.fairness_key.as_str();
                if self.parked.is_parked(priority, key) || entering.iter().any(|(p, k)| *p == priority && k == key) {
                    return true;
                }
                let enters = pinned
                    && holds_ack
                    && !self.key_allowed(key, now)
                    && self.parked.len() + entering.len() < self.config.max_parked_keys;
                if enters {
                    entering.push((priority, key.to_owned()));
                }
                enters
            });
            levels.extend(found.into_iter().map(|level| (priority, level)));
        }
        levels
    }

    /// The read of delayed records to make before planning, if the buffer runs low.
    pub fn delayed_read(&self) -> Option<(DelayKey, usize)> {
        self.delayed.read_request()
    }

    pub fn apply_delayed_read(&mut self, after: DelayKey, records: Vec<(DelayKey, StoredTask)>, limit: usize) {
        self.delayed.apply_read(after, records, limit);
    }

    /// Extends the lease of `lease_id` by the lease timeout from `now`.
    pub fn heartbeat(&mut self, lease_id: i64, attempt: u32, now: UnixMillis) -> Result<UnixMillis, LeaseError> {
        let deadline = now + self.config.tasks.lease_ms();
        self.leases.heartbeat(lease_id, attempt, deadline)
    }

    /// The deadline of the lease of `lease_id` at `attempt`, if it runs.
    pub fn lease_deadline(&self, lease_id: i64, attempt: u32) -> Option<UnixMillis> {
        self.leases.check(lease_id, attempt).ok().map(|lease| lease.deadline)
    }

    /// A lease was written but its worker had gone: it goes back to the queue.
    pub fn lease_undelivered(&mut self, lease_id: i64, now: UnixMillis) {
        self.leases.undelivered(lease_id, now);
    }

    /// Reads the reader should start now; each must be concluded with
    /// [`Self::apply_read`] or [`Self::read_failed`].
    pub fn read_requests(&mut self, now: UnixMillis) -> Vec<ReadRequest> {
        let (capacity, reload_at) = (self.config.buffer_tasks, self.config.reload_at);
        let blocked = self.blocked_ready(now);
        self.subqueues
            .iter_mut()
            .zip(blocked)
            .filter_map(|(s, blocked)| {
                s.read_request(capacity, reload_at, blocked).map(|(after, limit)| ReadRequest {
                    priority: s.priority,
                    after,
                    limit,
                })
            })
            .collect()
    }

    /// Whether some level wants a read (without starting one).
    pub fn wants_read(&self, now: UnixMillis) -> bool {
        let blocked = self.blocked_ready(now);
        self.subqueues
            .iter()
            .zip(blocked)
            .any(|(s, blocked)| s.may_have_unread() && s.ready().saturating_sub(blocked) <= self.config.reload_at)
    }

    /// Per subqueue, the ready tasks of keys at their limits now.
    fn blocked_ready(&self, now: UnixMillis) -> Vec<usize> {
        let limited = self.keys_limited();
        self.subqueues
            .iter()
            .map(|s| if limited { s.blocked(|key| self.dispatchable(s.priority, key, now)) } else { 0 })
            .collect()
    }

    /// Takes the result of a read; false if it was stale and ignored.
    pub fn apply_read(&mut self, request: ReadRequest, tasks: Vec<StoredTask>) -> bool {
        let capacity = self.config.buffer_tasks;
        self.subqueues[request.priority.index()].apply_read(request.after, tasks, request.limit, capacity)
    }

    pub fn read_failed(&mut self, request: ReadRequest) {
        self.subqueues[request.priority.index()].read_failed();
    }

    /// Whether the queue limits keys' concurrency or rate.
    pub fn keys_limited(&self) -> bool {
        self.config.tasks.key_concurrency > 0 || self.rates.limited()
    }

    /// Whether a task of `key` may start now (its concurrency and rate limits).
    fn key_allowed(&self, key: &str, now: UnixMillis) -> bool {
        let concurrency = self.config.tasks.key_concurrency;
        (concurrency == 0 || self.leases.running(key) < concurrency) && self.rates.allows(key, now)
    }

    /// Whether a buffered task of `key` may be dispatched now: its key is
    /// within its limits and not parked (a parked key's tasks go out of its
    /// records, in order).
    fn dispatchable(&self, priority: Priority, key: &str, now: UnixMillis) -> bool {
        self.key_allowed(key, now) && (self.parked.is_empty() || !self.parked.is_parked(priority, key))
    }

    /// The task this partition would dispatch next, passing over keys at
    /// their limits. Strict priority: a level is not passed over while it
    /// may hold unread tasks. A parked key's oldest task competes with the
    /// backlog at the pass it was given, or at the ack level's if that is
    /// higher: it comes back like a key that was idle.
    pub fn peek(&self, now: UnixMillis) -> Option<Candidate> {
        for subqueue in &self.subqueues {
            let priority = subqueue.priority;
            let ready = subqueue.first_ready(|key| self.dispatchable(priority, key, now)).map(|task| Candidate {
                priority,
                pass_ahead: task.level.pass.saturating_sub(subqueue.ack.pass),
                level: task.level,
                parked: false,
            });
            let parked = self
                .parked
                .heads(priority)
                .filter(|task| self.key_allowed(&task.fairness_key, now) && self.leases.get(task.level.id).is_none())
                .map(|task| Candidate {
                    priority,
                    pass_ahead: task.level.pass.saturating_sub(subqueue.ack.pass).max(0),
                    level: task.level,
                    parked: true,
                })
                .min();
            if let Some(candidate) = ready.into_iter().chain(parked).min() {
                return Some(candidate);
            }
            if subqueue.may_have_unread() {
                return None;
            }
        }
        None
    }

    /// Hands out the task of a candidate from [`Self::peek`] and starts its
    /// lease, with the deadline returned. The lease record goes with the
    /// next write ([`Self::plan`]); until it is durable the task must not
    /// reach a worker, and the ack level does not pass it.
    pub fn take(&mut self, candidate: Candidate, now: UnixMillis) -> Option<(StoredTask, UnixMillis)> {
        let task = if candidate.parked {
            self.parked.take(candidate.priority, candidate.level.id)?
        } else {
            self.subqueues[candidate.priority.index()].take(candidate.level)?
        };
        self.rates.consume(&task.fairness_key, now);
        let deadline = now + self.config.tasks.lease_ms();
        self.leases.start(task.clone(), deadline);
        self.unwritten_leases.push(task.level.id);
        Some((task, deadline))
    }

    /// Takes the next task and treats its lease as written at once: for
    /// drivers that persist nothing (tests and models of the engine).
    pub fn take_next(&mut self, now: UnixMillis) -> Option<StoredTask> {
        let candidate = self.peek(now)?;
        let (task, _) = self.take(candidate, now)?;
        self.unwritten_leases.retain(|id| *id != task.level.id);
        self.leases.written(task.level.id, true, now);
        self.parked.lease_written(task.level.id);
        self.subqueues[task.priority.index()].leased(task.level);
        self.counts.dispatched += 1;
        Some(task)
    }

    /// Gives back a task from [`Self::take`] whose lease was not written yet.
    pub fn untake(&mut self, task: StoredTask) {
        let id = task.level.id;
        self.unwritten_leases.retain(|unwritten| *unwritten != id);
        if let Some(task) = self.leases.not_written(id) {
            self.rates.refund(&task.fairness_key);
            if self.parked.holds_lease(id) {
                self.parked.lease_not_written(id, task);
            } else {
                self.subqueues[task.priority.index()].restore(task);
            }
        }
    }

    /// Moves the ack levels over what has been dispatched.
    pub fn settle(&mut self) {
        for subqueue in &mut self.subqueues {
            subqueue.advance_ack();
        }
    }

    /// Range deletes of records no owner reads any more: finished leases
    /// below the oldest running one, and delayed records below the floor
    /// persisted in the metadata. Each is unconditional and idempotent.
    pub fn record_deletes(&mut self) -> Vec<RecordKey> {
        let mut deletes = Vec::new();
        let subqueues = &self.subqueues;
        self.finished.retain(|_, (priority, level)| *level > subqueues[priority.index()].persisted_ack);
        let lowest = self
            .leases
            .lowest_seq()
            .into_iter()
            .chain(self.finished.keys().next().copied())
            .chain(self.kept_lease_records.values().copied())
            .min();
        let lease_floor = lowest.map_or(self.max_lease_seq, |lowest| lowest - 1);
        if lease_floor > self.lease_gc_through {
            self.lease_gc_through = lease_floor;
            deletes.push(lease_key(lease_floor));
        }
        let delayed_floor = self.delayed.floor();
        if delayed_floor > self.delayed_gc_through {
            self.delayed_gc_through = delayed_floor;
            deletes.push(RecordKey { section: Section::Delayed, key: delayed_floor });
        }
        deletes
    }

    /// Deletes that are due.
    pub fn gc_requests(&mut self, now: UnixMillis) -> Vec<GcRequest> {
        let (min_acks, interval) = (self.config.gc_min_acks, millis(self.config.gc_interval));
        self.subqueues
            .iter_mut()
            .filter_map(|s| {
                s.gc_due(now, min_acks, interval).map(|through| GcRequest { priority: s.priority, through })
            })
            .collect()
    }

    /// The metadata to write now, if the ack levels moved and the last write
    /// is older than `ack_sync_interval`.
    pub fn metadata_due(&self, now: UnixMillis) -> Option<PartitionMeta> {
        let due = now - self.last_meta_sync >= millis(self.config.ack_sync_interval);
        (due && self.metadata_moved()).then(|| self.metadata())
    }

    /// The metadata as it stands (for a final write at shutdown).
    pub fn metadata(&self) -> PartitionMeta {
        PartitionMeta {
            range_id: self.range_id,
            owner: self.owner.clone(),
            subqueues: std::array::from_fn(|i| {
                let subqueue = &self.subqueues[i];
                SubqueueMeta {
                    parked: self.parked.meta(subqueue.priority),
                    ..subqueue.meta(self.config.saved_top_keys)
                }
            }),
            delayed_through: self.delayed.floor(),
            dead_letters_through: self.dead_letters_through,
        }
    }

    pub fn metadata_persisted(&mut self, meta: &PartitionMeta, now: UnixMillis) {
        self.last_meta_sync = now;
        self.parked.metadata_persisted();
        for (subqueue, saved) in self.subqueues.iter_mut().zip(&meta.subqueues) {
            subqueue.persisted_ack = subqueue.persisted_ack.max(saved.ack_level);
        }
    }

    /// Whether the metadata changed since it was last written: an ack level
    /// moved, or a parked key's floor.
    fn metadata_moved(&self) -> bool {
        self.subqueues.iter().any(|s| s.ack != s.persisted_ack) || self.parked.changed()
    }

    /// True when nothing older than `max_age` waits: a new task may then go
    /// straight to a waiting worker without passing anyone.
    pub fn backlog_negligible(&self, now: UnixMillis, max_age: Duration) -> bool {
        let max_age = millis(max_age);
        self.subqueues.iter().all(|s| s.backlog_negligible(now, max_age))
    }

    /// What this engine has counted since it was loaded.
    pub fn counts(&self) -> TaskCounts {
        self.counts
    }

    pub fn snapshot(&self, top_keys: usize) -> PartitionSnapshot {
        PartitionSnapshot {
            range_id: self.range_id,
            subqueues: self
                .subqueues
                .iter()
                .map(|s| {
                    let (tracked, approximate) = s.tracked_keys();
                    SubqueueSnapshot {
                        priority: s.priority,
                        ack_level: s.ack,
                        read_level: s.read,
                        max_level: s.max,
                        buffered: s.ready() as u64,
                        approx_backlog: s.approx_backlog.max(0) as u64,
                        dispatched_above_ack: s.dispatched_above_ack() as u64,
                        reader_at_end: s.at_end,
                        tracked_keys: tracked as u64,
                        approximate_keys: approximate,
                        top_keys: s.top_keys(top_keys),
                        parked_keys: self.parked.keys(s.priority) as u64,
                        parked_tasks: self.parked.tasks(s.priority),
                    }
                })
                .collect(),
            counts: self.counts,
            leased: self.leases.len() as u64,
            delayed: self.delayed.len() as u64,
            metadata_bytes: encode_meta(&self.metadata()).len() as u64,
            largest_write_bytes: self.largest_write as u64,
        }
    }
}
