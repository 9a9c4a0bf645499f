//! Planning a write: ids and passes for new tasks, lease records, the ends
//! of leases, dedup records, and what is due, within the byte budget.

use super::aging::{MAX_MOVES_PER_WRITE, WAITING_RECORD_BYTES};
use super::{LEASE_EXPIRED, MAX_MAINTENANCE_PER_WRITE, PartitionEngine, lease_done, lease_key};
use crate::clock::{UnixMillis, millis};
use crate::core::engine::dedup::bucket_of;
use crate::core::engine::delayed::DelayKey;
use crate::core::engine::leases::LeaseError;
use crate::core::engine::outcomes::{Added, Finish, Finished, Outcome};
use crate::core::engine::plan::{AppendPlan, IdsExhausted, PlanInput};
use crate::core::engine::policy::{AfterFailure, DispatchOrder};
use crate::core::engine::rows::{PartitionWrite, Record, RecordKey, RecordTask, RecordValue, Section};
use crate::core::engine::sizes::{
    SMALL_ROW_BYTES, bury_bytes, ending_bytes, meta_bytes, record_bytes, requeue_bytes, spec_bytes,
};
use crate::core::fairness::{GroupTask, advance, stride};
use crate::model::{FairLevel, PRIORITY_LEVELS, StoredTask, TaskSpec};

/// The most ids what is due takes in one write: a promotion takes one (its
/// new level), a held lease written again one (its seq), a parking up to
/// three (a finished lease over a task whose lease may have landed, the
/// parked record, a slot for a key entering the directory), each at most
/// [`MAX_MAINTENANCE_PER_WRITE`] times; and a write without a task row its
/// write mark.
const MAX_DUE_IDS: usize = MAX_MAINTENANCE_PER_WRITE * (1 + 1 + 3) + 1;

impl PartitionEngine {
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
    /// [`Self::write_succeeded`] or [`Self::write_failed`]. Writes must land,
    /// if at all, in the order they were planned (the shell's writer makes
    /// one at a time, and fences after one of unknown outcome before it
    /// plans again): the metadata of a write that landed after a later one
    /// would put the stored ack level back below the one this engine counts
    /// as persisted and deletes through, where a new owner gives new keys
    /// their passes.
    pub fn plan(
        &mut self,
        input: PlanInput<'_>,
        now: UnixMillis,
        unit: &mut dyn FnMut() -> f64,
    ) -> Result<AppendPlan, IdsExhausted> {
        // Tasks a purge cancelled go with this write, their leases among
        // those to write (so counted below).
        self.sweep_purged(now);
        let ids_needed = self.ids_needed(&input);
        let ids_before = self.ids.remaining();
        if ids_before < ids_needed {
            return Err(IdsExhausted { range_id: self.range_id });
        }
        let mut plan = AppendPlan {
            range_id: self.range_id,
            write: PartitionWrite::default(),
            added: Vec::with_capacity(input.specs.len()),
            finished: Vec::with_capacity(input.finishes.len()),
            redriven: 0,
            redrive_duplicates: 0,
            buried: Vec::with_capacity(input.bury.len()),
            cancels: Vec::with_capacity(input.cancels.len()),
            cancelling: Vec::new(),
            cancel_ended: Vec::new(),
            cancelled_unreported: 0,
            purging: None,
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
            waiting: Vec::new(),
            moved: Vec::new(),
        };
        if input.purge {
            // Before the new tasks of this write take their ids: they stay.
            self.plan_purge(&mut plan);
        }
        // What is due goes in while it fits beside the commands and the
        // metadata, if this write may carry it (see the end of the plan).
        let piggyback = now - self.last_meta_sync >= millis(self.config.piggyback_interval);
        let to_park = self.to_park(now);
        let may_carry_meta = (piggyback && self.metadata_moved())
            || self.delayed.next_due().is_some_and(|d| d <= now)
            || !to_park.is_empty()
            || !input.redrive.is_empty()
            // A cancelled task's end writes the metadata without its mark.
            || !input.cancels.is_empty()
            || !self.cancelled.is_empty()
            || input.purge;
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
        let waiting = if self.max_wait_ms().is_some() { WAITING_RECORD_BYTES } else { 0 };
        let due = self.delayed.take_due(now, MAX_MAINTENANCE_PER_WRITE, |task| fits(requeue_bytes(task) + waiting));
        for (key, dead) in due {
            plan.write.delete.push(RecordKey { section: Section::Delayed, key });
            let task = self.relevel(&mut plan, dead.clone());
            plan.write.tasks.push(task);
            plan.promoted.push((key, dead));
            plan.delayed_floor = Some(key);
        }
        // Tasks past `max_wait` go to the front before the new tasks of
        // this write get their ids, so they go before those too.
        self.plan_aged_moves(&mut plan, now, &mut fits);
        for (index, spec) in input.specs.iter().enumerate() {
            let in_turn = input.in_turn.binary_search(&index).is_ok();
            // A task matched in its turn goes to the backlog instead if a
            // task of its key went there since its turn was judged, so that
            // it does not pass that task (its worker gets nothing).
            let direct = input.direct.binary_search(&index).is_ok() && (!in_turn || self.quiet(spec));
            let added = if direct {
                self.plan_direct(&mut plan, spec, in_turn, now)
            } else {
                self.plan_add(&mut plan, spec, now)
            };
            plan.added.push(added);
        }
        // Dead letters are put back oldest first: those gone from the
        // floor up go below it.
        plan.dead_letters_floor = plan.dead_letters_floor.max(input.redrive_floor);
        for (key, dead) in input.redrive {
            plan.write.delete.push(key);
            // Back with everything it was added with, its dedup id too; if
            // a newer task holds that id now, this one would run beside it.
            let mut fresh = StoredTask { attempt: 1, ..dead };
            if self.is_purged(fresh.task_id) {
                // Dead letters outlive a purge: one put back after it is a
                // task of its own, not one the purge cancelled.
                fresh.task_id = self.ids.take().expect("checked the block has room");
            }
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
        for letter in input.bury {
            self.plan_moved_dead_letter(&mut plan, letter, now);
        }
        self.plan_cancels(&mut plan, input.cancels);
        for finish in input.finishes {
            let finished = self.plan_finish(&mut plan, finish, now, unit);
            plan.finished.push(finished);
        }
        let expired = self
            .leases
            .take_expired(now, MAX_MAINTENANCE_PER_WRITE, |task| fits(ending_bytes(task, LEASE_EXPIRED.len())));
        for lease in expired {
            let id = lease.task.level.id;
            if self.is_cancelled(lease.task.task_id) {
                plan.cancelled_unreported += 1;
                self.plan_ending(&mut plan, lease.task, lease.seq, &Outcome::Complete, now, unit);
            } else if lease.delivered {
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
            plan.write.put.push(Record { at: lease_key(seq), value: RecordValue::task(task.clone(), deadline) });
            plan.leases.push((id, task, deadline));
        }
        self.unwritten_leases.extend(unwritten);
        for (id, task, deadline) in self.leases_to_move() {
            if !fits(record_bytes(&task, 0)) {
                break;
            }
            let seq = self.lease_seq();
            plan.write.put.push(Record { at: lease_key(seq), value: RecordValue::task(task.clone(), deadline) });
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
            plan.write.put.push(Record { at, value: RecordValue::task(task.clone(), now) });
            plan.parked.push((at, task));
        }
        let floors_raised = plan.delayed_floor.is_some() || plan.dead_letters_floor.is_some();
        // Marks written and marks gone go in the same write: a mark that
        // outlived its task in the store would wait for ever.
        let marks = !plan.cancelling.is_empty() || !plan.cancel_ended.is_empty();
        let purge = plan.purging.is_some();
        if floors_raised || marks || purge || !plan.parked.is_empty() || (piggyback && self.metadata_moved()) {
            let mut meta = self.metadata();
            meta.purged_below = meta.purged_below.max(plan.purging.unwrap_or(0));
            meta.cancelled.extend(&plan.cancelling);
            meta.cancelled.retain(|id| !plan.cancel_ended.contains(id));
            meta.cancelled.sort_unstable();
            meta.delayed_through = plan.delayed_floor.unwrap_or(meta.delayed_through).max(meta.delayed_through);
            meta.dead_letters_through =
                plan.dead_letters_floor.map_or(meta.dead_letters_through, |f| f.max(meta.dead_letters_through));
            plan.write.metadata = Some(meta);
        }
        if plan.write.tasks.is_empty() && !plan.write.is_empty() {
            let mark = self.ids.take().expect("checked the block has room");
            let at = RecordKey { section: Section::WriteMark, key: (0, 0) };
            plan.write.put.push(Record { at, value: RecordValue::WriteMark(mark) });
        }
        debug_assert!(ids_before - self.ids.remaining() <= ids_needed, "a plan took more ids than it counted");
        Ok(plan)
    }

    /// The most ids a plan of `input` takes: one per new task, and one more
    /// for the lease of one handed straight to a worker; one per dead
    /// letter put back or moved in; one per lease record waiting to be
    /// written; and [`MAX_DUE_IDS`] for what is due.
    fn ids_needed(&self, input: &PlanInput<'_>) -> i64 {
        // A dead letter put back after a purge takes a new task id as well.
        let purged_letters = input.redrive.iter().filter(|(_, task)| self.is_purged(task.task_id)).count();
        let commands = input.specs.len() + input.direct.len() + input.redrive.len() + purged_letters + input.bury.len();
        (commands + self.unwritten_leases.len() + MAX_DUE_IDS + MAX_MOVES_PER_WRITE) as i64
    }

    /// The bytes the commands of `input` add to a write, at most.
    fn command_bytes(&self, input: &PlanInput<'_>) -> usize {
        let specs: usize = input.specs.iter().map(spec_bytes).sum();
        let redrive: usize = input.redrive.iter().map(|(_, task)| requeue_bytes(task)).sum();
        let finishes: usize = input.finishes.iter().map(|f| self.finish_bytes(f)).sum();
        let bury: usize = input.bury.iter().map(bury_bytes).sum();
        // In a queue with a `max_wait`, each task row comes with its waiting record.
        let waiting = match self.max_wait_ms() {
            Some(_) => (input.specs.len() + input.redrive.len()) * WAITING_RECORD_BYTES,
            None => 0,
        };
        // A mark of a cancelled task goes in the metadata; a dead letter's is a deleted row.
        let cancels = input.cancels.len() * SMALL_ROW_BYTES;
        specs + redrive + finishes + bury + waiting + cancels
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
            task.level.pass = self.next_pass(index, &task);
            self.plan_waiting_record(plan, &task);
            plan.write.tasks.push(task);
        } else {
            self.plan_delayed(plan, (now + millis(spec.delay), id), task);
        }
        Added::Added { task_id: id }
    }

    /// A new task leased at once to a waiting worker: no backlog row, its
    /// lease record holds it (and brings it back if the lease expires).
    /// `in_turn`: its key's counter advances as for a task of the backlog.
    fn plan_direct(&mut self, plan: &mut AppendPlan, spec: &TaskSpec, in_turn: bool, now: UnixMillis) -> Added {
        debug_assert!(spec.delay.is_zero() && spec.dedup_id.is_none(), "sync match of a delayed or dedup task");
        let id = self.ids.take().expect("checked the block has room");
        let seq = self.lease_seq();
        // Pass -1: below every backlog level, so no subqueue ever marks it.
        let task = spec.at_level(FairLevel::new(-1, id), now);
        if in_turn {
            self.next_pass(spec.priority.index(), &task);
        }
        let deadline = now + self.config.tasks.lease_ms();
        self.leases.start(task.clone(), deadline);
        self.leases.set_written_place(id, seq, deadline);
        self.rates.consume(&task.fairness_key, now);
        plan.write.put.push(Record { at: lease_key(seq), value: RecordValue::task(task.clone(), deadline) });
        plan.leases.push((id, task, deadline));
        plan.direct.push(id);
        Added::Added { task_id: id }
    }

    fn plan_delayed(&mut self, plan: &mut AppendPlan, key: DelayKey, task: StoredTask) {
        let key = self.delayed.key_above_floor(key, plan.delayed_floor);
        plan.write.put.push(Record {
            at: RecordKey { section: Section::Delayed, key },
            value: RecordValue::task(task.clone(), key.0),
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
        let outcome = if self.ends_cancelled(plan, &task) { &Outcome::Complete } else { outcome };
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
                    at: RecordKey {
                        section: Section::DeadLetters,
                        key: self.dead_letter_key(plan.dead_letters_floor, now, id),
                    },
                    value: RecordValue::Task(RecordTask { task, at_unix_ms: now, message: message.to_owned() }),
                });
                Finished::Buried
            }
        }
    }

    /// Writes `letter`, a dead letter of another partition, as one of this
    /// partition's: a fresh id (its task id and level id, as an added task
    /// gets), keyed like a new burial at `now`, so above the floor (it is
    /// listed and put back like any); its task, failure time and message
    /// as they were.
    fn plan_moved_dead_letter(&mut self, plan: &mut AppendPlan, letter: &RecordTask, now: UnixMillis) {
        let id = self.ids.take().expect("checked the block has room");
        let task = StoredTask { level: FairLevel::new(0, id), task_id: id, dedup_slot: 0, ..letter.task.clone() };
        plan.write.put.push(Record {
            at: RecordKey {
                section: Section::DeadLetters,
                key: self.dead_letter_key(plan.dead_letters_floor, now, id),
            },
            value: RecordValue::Task(RecordTask { task, ..letter.clone() }),
        });
        plan.buried.push(id);
    }

    /// The key of a new dead letter: failed at `now`, or just above the
    /// floor (the one stored, or the one the same write raises, `raised`,
    /// by putting dead letters back) if a clock behind an earlier owner's,
    /// or a letter put back with a higher id in the same millisecond, would
    /// put it below: below the floor it would never be listed nor put back.
    fn dead_letter_key(&self, raised: Option<(i64, i64)>, now: UnixMillis, id: i64) -> (i64, i64) {
        let floor = raised.map_or(self.dead_letters_through, |r| r.max(self.dead_letters_through));
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
        plan.write.put.push(Record {
            at: RecordKey { section: Section::Dedup, key },
            value: RecordValue::Dedup { dedup_id: dedup_id.to_owned(), task_id },
        });
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
    /// counter: it counts against its key's share like any new task; or,
    /// with deadline ordering, from its deadline, which it keeps).
    fn relevel(&mut self, plan: &mut AppendPlan, mut task: StoredTask) -> StoredTask {
        let index = task.priority.index();
        self.pin(plan, index);
        let pass = self.next_pass(index, &task);
        task.level = FairLevel::new(pass, self.ids.take().expect("checked the block has room"));
        self.plan_waiting_record(plan, &task);
        task
    }

    /// The pass of a new level for `task` in subqueue `index` (whose ack
    /// level is pinned), from the counter of the share its key counts
    /// against (its own, or its group's). With FIFO ordering every task
    /// counts against one shared key of weight 1, so passes follow the order
    /// of arrival. Deadline ordering stores tasks in the order of arrival
    /// too: its order is the dispatch's, which takes the earliest deadline
    /// among the buffered tasks (a pass that were the deadline would drag
    /// the ack level forward to the latest deadline dispatched, and every
    /// later task due before it would be clamped to one pass).
    fn next_pass(&mut self, index: usize, task: &StoredTask) -> i64 {
        let subqueue = &mut self.subqueues[index];
        match self.config.tasks.ordering {
            DispatchOrder::Fair => {
                let key = task.fairness_key.as_str();
                let (share, weight) = self.config.weights.share(key, task.fairness_weight);
                let cost = self.config.tasks.cost_of(task);
                let (base, lead) = (subqueue.ack.pass, self.config.tasks.group_lead);
                if lead > 0 && share != key {
                    let task = GroupTask { group: share, key, advance: advance(weight, cost), cost };
                    subqueue.leads.next_pass(&mut subqueue.counters, task, base, lead)
                } else {
                    subqueue.counters.next_pass(share, base, advance(weight, cost))
                }
            }
            DispatchOrder::Fifo | DispatchOrder::Deadline => {
                subqueue.counters.next_pass("", subqueue.ack.pass, stride(1.0))
            }
        }
    }

    pub(super) fn pin(&mut self, plan: &mut AppendPlan, index: usize) {
        if !plan.pinned[index] {
            self.subqueues[index].pin();
            plan.pinned[index] = true;
        }
    }
}
