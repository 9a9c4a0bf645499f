//! The writer: the one task that makes a partition's conditional writes of
//! its task rows and metadata.
//!
//! Invariants: one write at a time, each conditional on the owner's range
//! id, so no two writes of a partition race; a task reaches a worker only
//! after the write that holds its lease record succeeded; a write of unknown
//! outcome is settled (fenced by this node itself) before anything is
//! written again; after `Fenced`, nothing more is written or handed out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tokio::sync::oneshot;

use super::error::{CancelError, FinishError, PartitionError};
use super::shared::{
    AppendReply, BuryReply, CancelReply, Delivery, FinishReply, PartitionState, PurgeReply, RedriveReply, RedriveStep,
    RedriveStepDone, Shared, WriteCommand, on_write_error,
};
use super::stored::StoredPartition;

use crate::core::engine::dedup::{DedupEntry, MAX_DEDUP_SLOTS};
use crate::core::engine::{AppendPlan, Cancel, Finish, PlanInput, bury_bytes, spec_bytes};
use crate::model::TaskSpec;
use crate::store::{
    MAX_BUCKETS_PER_READ, ROW_BYTES, RecordKey, RecordRange, RecordTask, RecordValue, RowRef, Section, StoreError,
    StoredRow, stored_task_bytes,
};

/// The writer: one conditional write at a time, commands grouped in
/// batches, each batch also carrying what the engine has due (lease records,
/// expired leases, delayed tasks now ready). Woken by commands, and by
/// [`Shared::wake_writer`] when the engine has something due. On stop it
/// finishes what is queued and writes the ack levels a last time.
pub(super) async fn run(shared: Arc<Shared>, mut commands: mpsc::Receiver<WriteCommand>, stop: CancellationToken) {
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(command) => Some(command),
            None => tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(command) => Some(command),
                    None => break,
                },
                _ = shared.wake_writer.notified() => None,
                _ = stop.cancelled() => break,
            },
        };
        let batch = match first {
            Some(first) => gather(&shared, first, &mut commands, &mut carried),
            None if shared.engine().write_due(shared.clock.now_ms()) => Vec::new(),
            None => continue,
        };
        if !process(&shared, batch).await {
            fail_queued(&shared, &mut commands);
            return;
        }
    }
    if shared.state() == PartitionState::Lost {
        fail_queued(&shared, &mut commands);
        return;
    }
    commands.close();
    while let Some(first) = carried.take().or_else(|| commands.try_recv().ok()) {
        let batch = gather(&shared, first, &mut commands, &mut carried);
        if !process(&shared, batch).await {
            return;
        }
    }
    shared.drop_deliveries();
    // Only now, after every queued write, does the metadata name no owner:
    // a next owner that sees it takes a partition this node writes no more.
    if let Some(region) = shared.hand_over_to.lock().unwrap_or_else(|p| p.into_inner()).take() {
        shared.engine().hand_over(&region);
    }
    if write_final_metadata(&shared).await {
        shared.handed_over.store(true, Ordering::Release);
    }
}

/// How long a stopping partition keeps trying its last metadata write.
const FINAL_METADATA_PATIENCE: Duration = Duration::from_secs(30);

/// The last metadata write of a partition that stops (handed over, or the
/// node shutting down): its ack levels, and on a hand-over `owner = ""`.
/// Until it lands the rightful node waits for this one, which still looks
/// alive, so it is tried again with backoff until it lands, the partition is
/// fenced (someone took it: nothing to hand over), or
/// [`FINAL_METADATA_PATIENCE`] runs out. A write of unknown outcome is never
/// simply written again: it may have landed and the partition been taken
/// since (in another region's Paxos, which a retry here would not see), so
/// it is settled first with a fence of this node's own (which completes any
/// proposal in flight): refused, the partition was handed over or taken;
/// granted, the write did not land, and it is made again under the new
/// range id. Returns whether nothing is left to hand over.
async fn write_final_metadata(shared: &Shared) -> bool {
    let deadline = tokio::time::Instant::now() + FINAL_METADATA_PATIENCE;
    let mut backoff = Duration::from_millis(50);
    let mut settle_first = false;
    loop {
        let attempt = if settle_first { settle_final(shared).await } else { write_final(shared).await };
        let error = match attempt {
            Ok(Some(done)) => return done,
            Ok(None) => {
                settle_first = false;
                continue;
            }
            Err(error) => error,
        };
        settle_first = matches!(error, StoreError::Uncertain(_)) || settle_first;
        if tokio::time::Instant::now() + backoff > deadline {
            tracing::error!(partition = %shared.id, %error, "gave up the last metadata write; this node hands it over later, or the next owner takes it once this node's heartbeat stops");
            return false;
        }
        tracing::warn!(partition = %shared.id, %error, "the last metadata write failed; trying again");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// One try of the last metadata write: `Some(true)` when it landed or the
/// partition was taken.
async fn write_final(shared: &Shared) -> Result<Option<bool>, StoreError> {
    let meta = shared.engine().metadata();
    match shared.store.update_metadata(&shared.id, &meta).await {
        Ok(()) => {
            shared.engine().metadata_persisted(&meta, shared.clock.now_ms());
            Ok(Some(true))
        }
        Err(StoreError::Fenced { current_range_id }) => {
            tracing::info!(partition = %shared.id, current_range_id, "already taken over: nothing to hand over");
            Ok(Some(true))
        }
        Err(error) => Err(error),
    }
}

/// Settles a last metadata write of unknown outcome with a fence: `Some(true)`
/// when the fence is refused (the write landed, or another node took the
/// partition), `None` when granted (the write did not land: write it again).
async fn settle_final(shared: &Shared) -> Result<Option<bool>, StoreError> {
    let range_id = shared.engine().range_id();
    let region = shared.region.clone();
    match shared.store.take_ownership(&shared.id, range_id, &shared.node, &region).await {
        Ok(meta) => {
            tracing::info!(partition = %shared.id, range_id = meta.range_id, "the last metadata write had not landed; writing it again");
            shared.engine().renew_range(meta.range_id);
            Ok(None)
        }
        Err(StoreError::Fenced { .. } | StoreError::HomedElsewhere { .. }) => {
            tracing::info!(partition = %shared.id, "the last metadata write had landed, or the partition was taken");
            Ok(Some(true))
        }
        Err(error) => Err(error),
    }
}

/// Takes whatever else is queued, while the batch stays within
/// `max_batch_tasks` and half of `max_write_bytes` (the commands' share of a
/// write); the first command that would break a limit is `carried` to the
/// next batch. A batch always has at least one command.
fn gather(
    shared: &Shared,
    first: WriteCommand,
    commands: &mut mpsc::Receiver<WriteCommand>,
    carried: &mut Option<WriteCommand>,
) -> Vec<WriteCommand> {
    let (max_tasks, max_bytes) = (shared.config.max_batch_tasks, shared.config.max_write_bytes / 2);
    let (mut tasks, mut bytes) = size(shared, &first);
    let mut batch = vec![first];
    while tasks < max_tasks && bytes < max_bytes {
        let Ok(command) = commands.try_recv() else { break };
        let (more_tasks, more_bytes) = size(shared, &command);
        if tasks + more_tasks > max_tasks || bytes + more_bytes > max_bytes {
            *carried = Some(command);
            break;
        }
        tasks += more_tasks;
        bytes += more_bytes;
        batch.push(command);
    }
    batch
}

/// Rows in a command, and the most bytes it adds to a write. A re-drive
/// counts none here: it takes what fits once the rest is known (see
/// [`redrivable`]).
fn size(shared: &Shared, command: &WriteCommand) -> (usize, usize) {
    match command {
        WriteCommand::Append { specs, .. } => (specs.len(), specs.iter().map(spec_bytes).sum()),
        WriteCommand::Finish { finish, .. } => (2, shared.engine().finish_bytes(finish)),
        WriteCommand::Redrive { .. } => (1, 0),
        WriteCommand::Bury { letters, .. } => (letters.len(), letters.iter().map(bury_bytes).sum()),
        WriteCommand::Cancel { .. } => (1, ROW_BYTES),
        WriteCommand::Purge { .. } => (0, 0),
        WriteCommand::SyncMetadata => (0, 0),
    }
}

fn fail_queued(shared: &Shared, commands: &mut mpsc::Receiver<WriteCommand>) {
    commands.close();
    while let Ok(command) = commands.try_recv() {
        command.fail(shared.lost());
    }
    shared.drop_deliveries();
}

/// What a batch asks for, and whom to answer.
#[derive(Default)]
struct Requests {
    specs: Vec<TaskSpec>,
    /// Indexes of specs handed straight to a poller, ascending, and the pollers.
    direct: Vec<usize>,
    /// Indexes among `direct` matched in their key's turn beside a backlog.
    in_turn: Vec<usize>,
    pollers: Vec<oneshot::Sender<Delivery>>,
    appends: Vec<(usize, AppendReply)>,
    finishes: Vec<Finish>,
    finish_replies: Vec<FinishReply>,
    redrive: Option<(RedriveStep, RedriveReply)>,
    bury: Vec<RecordTask>,
    bury_replies: Vec<(usize, BuryReply)>,
    cancels: Vec<Cancel>,
    cancel_replies: Vec<CancelReply>,
    purge_replies: Vec<PurgeReply>,
    sync: bool,
}

impl Requests {
    fn new(batch: Vec<WriteCommand>) -> Self {
        let mut requests = Requests::default();
        for command in batch {
            match command {
                WriteCommand::Append { specs, deliver, in_turn, reply } => {
                    if let Some(deliver) = deliver {
                        if in_turn {
                            requests.in_turn.push(requests.specs.len());
                        }
                        requests.direct.push(requests.specs.len());
                        requests.pollers.push(deliver);
                    }
                    requests.appends.push((specs.len(), reply));
                    requests.specs.extend(specs);
                }
                WriteCommand::Finish { finish, reply } => {
                    requests.finishes.push(finish);
                    requests.finish_replies.push(reply);
                }
                WriteCommand::Redrive { step, reply } => match &requests.redrive {
                    // One re-drive per write: a concurrent second one finds
                    // the same dead letters being put back, and puts back
                    // none (it read none, so it stops).
                    Some(_) => {
                        let _ = reply.send(Ok(RedriveStepDone::default()));
                    }
                    None => requests.redrive = Some((step, reply)),
                },
                WriteCommand::Bury { letters, reply } => {
                    requests.bury_replies.push((letters.len(), reply));
                    requests.bury.extend(letters);
                }
                WriteCommand::Cancel { cancel, reply } => {
                    requests.cancels.push(cancel);
                    requests.cancel_replies.push(reply);
                }
                WriteCommand::Purge { reply } => requests.purge_replies.push(reply),
                WriteCommand::SyncMetadata => requests.sync = true,
            }
        }
        requests
    }

    fn fail(self, error: PartitionError) {
        for (_, reply) in self.appends {
            let _ = reply.send(Err(error.clone()));
        }
        for reply in self.finish_replies {
            let _ = reply.send(Err(FinishError::Partition(error.clone())));
        }
        for (_, reply) in self.bury_replies {
            let _ = reply.send(Err(error.clone()));
        }
        for reply in self.cancel_replies {
            let _ = reply.send(Err(CancelError::Partition(error.clone())));
        }
        for reply in self.purge_replies {
            let _ = reply.send(Err(error.clone()));
        }
        if let Some((_, reply)) = self.redrive {
            let _ = reply.send(Err(error));
        }
    }
}

/// Performs a batch of commands in one write; false once the partition is lost.
async fn process(shared: &Shared, batch: Vec<WriteCommand>) -> bool {
    let mut requests = Requests::new(batch);
    let sync = requests.sync;
    if let Err(error) = prepare(shared, &mut requests).await {
        requests.fail(error);
    } else {
        write(shared, requests).await;
    }
    if sync {
        sync_metadata(shared).await;
    }
    shared.state() != PartitionState::Lost
}

/// Reads what planning needs from the store: the dedup buckets of the new
/// tasks, delayed tasks when their buffer runs low, parked tasks, and in a
/// queue with a `max_wait` the waiting records and the rows of tasks past it.
async fn prepare(shared: &Shared, requests: &mut Requests) -> Result<(), PartitionError> {
    resolve_dedup(shared, requests.specs.iter().filter_map(|s| s.dedup_id.as_deref())).await?;
    let delayed_read = shared.engine().delayed_read();
    if let Some((after, limit)) = delayed_read {
        let records = shared.store.read_records(&shared.id, RecordRange::above(Section::Delayed, after), limit).await?;
        let tasks = records
            .into_iter()
            .map(|r| r.value.into_task("a delayed record").map(|t| (r.at.key, t.task)))
            .collect::<Result<Vec<_>, _>>()?;
        shared.engine().apply_delayed_read(after, tasks, limit);
    }
    read_parked(shared).await?;
    read_waiting(shared).await
}

/// Rows of tasks past `max_wait` read per write, at most.
const AGED_READS_PER_WRITE: usize = 16;

/// Reads the waiting records when the engine's window runs low, then the
/// rows of tasks past `max_wait` above the read level, so that the plan
/// can move them to the front.
async fn read_waiting(shared: &Shared) -> Result<(), PartitionError> {
    let waiting_read = shared.engine().waiting_read();
    if let Some((after, limit)) = waiting_read {
        let records = shared.store.read_records(&shared.id, RecordRange::above(Section::Waiting, after), limit).await?;
        let records = records
            .into_iter()
            .map(|record| match record.value {
                RecordValue::Waiting { priority, level } => Ok((record.at.key, priority, level)),
                other => Err(StoreError::from(other.misplaced("a waiting record"))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        shared.engine().apply_waiting_read(after, records, limit);
    }
    let reads = shared.engine().aged_reads(shared.clock.now_ms(), AGED_READS_PER_WRITE);
    // At once: on Cassandra each is a serial read, a Paxos round.
    let rows = futures::future::try_join_all(
        reads.iter().map(|(_, priority, level)| shared.store.read_row(&shared.id, RowRef::Task(*priority, *level))),
    )
    .await?;
    for ((key, _, _), row) in reads.into_iter().zip(rows) {
        let found = match row {
            Some(StoredRow::Task(task)) => Some(task),
            Some(StoredRow::Record(other)) => return Err(StoreError::from(other.misplaced("a task row")).into()),
            None => None,
        };
        shared.engine().apply_aged_read(key, found);
    }
    Ok(())
}

/// Parked keys whose oldest task is read per write, at most.
const PARKED_READS_PER_WRITE: usize = 16;

/// Reads the oldest parked task of keys whose head is not in memory. Each
/// read covers one key's slot above what it has handed out.
async fn read_parked(shared: &Shared) -> Result<(), PartitionError> {
    let reads = shared.engine().parked_reads(PARKED_READS_PER_WRITE);
    for read in reads {
        let range = RecordRange::bucket(Section::Parked, read.slot, read.after);
        let records = shared.store.read_records(&shared.id, range, 1).await?;
        let found = match records.into_iter().next() {
            Some(record) => Some((record.at.key.1, record.value.into_task("a parked record")?.task)),
            None => None,
        };
        shared.engine().apply_parked_read(&read, found);
    }
    Ok(())
}

/// Bucket reads in flight at once, each of up to [`MAX_BUCKETS_PER_READ`]
/// buckets: a batch of new ids each needs its bucket before the write.
const CONCURRENT_DEDUP_READS: usize = 8;

/// Reads the dedup buckets of `dedup_ids` that the engine does not know yet,
/// [`MAX_BUCKETS_PER_READ`] to a read and up to [`CONCURRENT_DEDUP_READS`]
/// reads at once. Each read covers its buckets only, however many ids
/// hashed elsewhere were freed: it crosses only those buckets' deleted slots.
async fn resolve_dedup<'a>(shared: &Shared, dedup_ids: impl Iterator<Item = &'a str>) -> Result<(), PartitionError> {
    let buckets = shared.engine().unresolved_buckets(dedup_ids);
    let groups: Vec<Vec<i64>> = buckets.chunks(MAX_BUCKETS_PER_READ).map(<[i64]>::to_vec).collect();
    let reads = futures::stream::iter(groups).map(|buckets| read_dedup_buckets(shared, buckets));
    let mut reads = reads.buffer_unordered(CONCURRENT_DEDUP_READS);
    while let Some(read) = reads.next().await {
        for (bucket, entries) in read? {
            shared.engine().resolve_bucket(bucket, entries);
        }
    }
    Ok(())
}

/// The entries of each of `buckets` (empty for a bucket with none).
async fn read_dedup_buckets(
    shared: &Shared,
    buckets: Vec<i64>,
) -> Result<HashMap<i64, Vec<DedupEntry>>, PartitionError> {
    let records = shared.store.read_buckets(&shared.id, Section::Dedup, &buckets, MAX_DEDUP_SLOTS).await?;
    let mut entries: HashMap<i64, Vec<DedupEntry>> = buckets.iter().map(|bucket| (*bucket, Vec::new())).collect();
    for record in records {
        let RecordValue::Dedup { dedup_id, task_id } = record.value else {
            return Err(record.value.misplaced("a dedup record").into());
        };
        let (bucket, slot) = record.at.key;
        entries.entry(bucket).or_default().push(DedupEntry { slot, dedup_id, task_id });
    }
    Ok(entries)
}

/// Dead letters read from the store at a time by a re-drive.
const REDRIVE_PAGE: usize = 16;

/// The letters one write of a re-drive puts back, and how far it read.
#[derive(Default)]
struct Redrivable {
    letters: Vec<(RecordKey, crate::model::StoredTask)>,
    /// The floor the write raises: the last letter put back while every
    /// letter from the floor up to it is put back too. Past a letter the
    /// filter leaves, the floor stays (that letter must still be listed),
    /// and the rows of letters put back beyond it are deleted one by one.
    floor: Option<(i64, i64)>,
    done: RedriveStepDone,
}

/// Dead letters to put back in this write, oldest first: those `step`'s
/// filter chooses, at most `step.limit`, among at most `step.read` read,
/// and as many as fit in `room` bytes (the first always), with their dedup
/// buckets resolved.
async fn redrivable(shared: &Shared, step: &RedriveStep, mut room: usize) -> Result<Redrivable, PartitionError> {
    let floor = shared.engine().dead_letters_floor();
    let mut after = step.after.map_or(floor, |after| after.max(floor));
    let mut from_floor = after == floor;
    let stored = StoredPartition::new(shared.store.clone(), shared.id.clone());
    let mut out = Redrivable::default();
    'pages: while out.letters.len() < step.limit && out.done.read < step.read {
        let mut page = (step.read - out.done.read).min(REDRIVE_PAGE);
        if step.filter.is_everything() {
            page = page.min(step.limit - out.letters.len());
        }
        let letters = stored.dead_letters(after, page).await?;
        let last_page = letters.len() < page;
        for (at, letter) in letters {
            if out.letters.len() == step.limit {
                break 'pages;
            }
            if step.filter.matches(&letter) {
                let task = letter.task;
                let bytes = stored_task_bytes(&task) + 2 * ROW_BYTES;
                if !out.letters.is_empty() && bytes > room {
                    break 'pages;
                }
                room = room.saturating_sub(bytes);
                if from_floor {
                    out.floor = Some(at.key);
                }
                out.letters.push((at, task));
            } else {
                from_floor = false;
            }
            after = at.key;
            out.done.read += 1;
            out.done.through = Some(at.key);
        }
        if last_page {
            out.done.end = true;
            break;
        }
    }
    resolve_dedup(shared, out.letters.iter().filter_map(|(_, task)| task.dedup_id.as_deref())).await?;
    Ok(out)
}

async fn write(shared: &Shared, mut requests: Requests) {
    let redrive = match &requests.redrive {
        Some((step, _)) => match redrivable(shared, step, redrive_room(shared, &requests)).await {
            Ok(redrivable) => redrivable,
            Err(error) => {
                if let Some((_, reply)) = requests.redrive.take() {
                    let _ = reply.send(Err(error));
                }
                Redrivable::default()
            }
        },
        None => Redrivable::default(),
    };
    let plan = match plan(shared, &requests, &redrive).await {
        Ok(plan) => plan,
        Err(error) => return requests.fail(error),
    };
    // A task matched in its turn that the plan put in the backlog instead
    // (see `PlanInput::in_turn`) has no lease: its poller is dropped.
    let pollers =
        requests.direct.iter().map(|index| plan.added[*index].task_id()).zip(std::mem::take(&mut requests.pollers));
    shared.await_leases(pollers.filter(|(id, _)| plan.leased_directly(*id)));
    let written =
        if plan.write.is_empty() { Ok(()) } else { shared.store.write(&shared.id, plan.range_id, &plan.write).await };
    let written = match written {
        Err(error) if !error.certainly_not_applied() => settle_uncertain(shared, &plan, error).await,
        other => other,
    };
    let now = shared.clock.now_ms();
    match written {
        Ok(()) => {
            let added = plan.added.clone();
            let finished = plan.finished.clone();
            let redriven =
                RedriveStepDone { redriven: plan.redriven, duplicates: plan.redrive_duplicates, ..redrive.done };
            let buried = plan.buried.clone();
            let cancels = plan.cancels.clone();
            let leases = plan.leases.clone();
            let (leases, purged, wakes) = {
                let mut engine = shared.engine();
                engine.write_succeeded(plan, now);
                let purged = engine.purge_counts();
                // A task cancelled by this very write reaches no worker: its
                // lease ran out with the write, and its poller gets nothing.
                let (leases, cancelled): (Vec<_>, Vec<_>) =
                    leases.into_iter().partition(|(_, task, _)| !engine.is_cancelled(task.task_id));
                let cancelled: Vec<i64> = cancelled.into_iter().map(|(id, _, _)| id).collect();
                shared.forget_deliveries(&cancelled);
                // After a purge the buffer may hold tasks it cancelled (the
                // next write takes them), or have room that a sweep made
                // (the reader refills it, as a dispatch would have it do).
                let sweeping = engine.purge_sweeping();
                let refill = engine.purged_below() > 0 && (sweeping || engine.wants_read(now));
                (leases, purged, PurgeWakes { sweeping, refill })
            };
            for reply in requests.purge_replies {
                let _ = reply.send(Ok(purged));
            }
            if wakes.sweeping {
                shared.wake_writer.notify_one();
            }
            if wakes.refill {
                shared.wake_reader.notify_one();
            }
            let mut added = added.into_iter();
            for (count, reply) in requests.appends {
                let _ = reply.send(Ok(added.by_ref().take(count).collect()));
            }
            for (reply, finished) in requests.finish_replies.into_iter().zip(finished) {
                let _ = reply.send(finished.map_err(FinishError::Lease));
            }
            let mut buried = buried.into_iter();
            for (count, reply) in requests.bury_replies {
                let _ = reply.send(Ok(buried.by_ref().take(count).collect()));
            }
            if let Some((_, reply)) = requests.redrive {
                let _ = reply.send(Ok(redriven));
            }
            for (reply, cancelled) in requests.cancel_replies.into_iter().zip(cancels) {
                let _ = reply.send(cancelled.map_err(CancelError::Refused));
            }
            shared.deliver(leases);
        }
        Err(error) => {
            let may_have_applied = !error.certainly_not_applied();
            let leases: Vec<i64> = plan.leases.iter().map(|(id, _, _)| *id).collect();
            shared.engine().write_failed(plan, may_have_applied, now);
            shared.forget_deliveries(&leases);
            if may_have_applied {
                shared.wake_reader.notify_one();
                shared.wake_writer.notify_one();
            }
            requests.fail(on_write_error(shared, error));
        }
    }
    (shared.on_ready)();
}

/// After a write of unknown outcome: takes the next range id first (until
/// then the write can still land: Cassandra completes an accepted Paxos
/// proposal at the next round on the partition), then reads back a row only
/// this write writes, to learn whether it landed. `Ok` if it did; a certain
/// error if it did not; the original error if that cannot be told.
///
/// If the range id cannot be taken, nothing may be read or planned again
/// in this partition: a re-read could move past the write, which could then
/// land below it. The partition is dropped; whoever takes it next (this
/// node, at its next rebalance) fences first and reads it from the store.
async fn settle_uncertain(shared: &Shared, plan: &AppendPlan, error: StoreError) -> Result<(), StoreError> {
    let range_id = shared.engine().range_id();
    if let Err(fence_error) = renew_range(shared, range_id).await {
        if shared.state() != PartitionState::Lost {
            tracing::warn!(partition = %shared.id, %error, %fence_error, "cannot fence after a write of unknown outcome: dropping the partition until it is taken again");
            shared.set_state(PartitionState::Lost);
        }
        return Err(error);
    }
    let Some((row, written)) = plan.probe() else { return Err(error) };
    match shared.store.read_row(&shared.id, row).await {
        Ok(Some(found)) if found == written => {
            tracing::info!(partition = %shared.id, %error, "a write of unknown outcome had landed");
            Ok(())
        }
        Ok(_) => Err(StoreError::Unavailable(format!("{error}; it did not land"))),
        Err(_) => Err(error),
    }
}

/// What the commands' share of a write has left for a re-drive.
fn redrive_room(shared: &Shared, requests: &Requests) -> usize {
    let engine = shared.engine();
    let used: usize = requests.specs.iter().map(spec_bytes).sum::<usize>()
        + requests.bury.iter().map(bury_bytes).sum::<usize>()
        + requests.finishes.iter().map(|f| engine.finish_bytes(f)).sum::<usize>();
    (shared.config.max_write_bytes / 2).saturating_sub(used)
}

/// Plans the write, renewing the range id when the id block runs out.
async fn plan(shared: &Shared, requests: &Requests, redrive: &Redrivable) -> Result<AppendPlan, PartitionError> {
    loop {
        let mut unit = || rand::random::<f64>();
        let input = PlanInput {
            specs: &requests.specs,
            direct: &requests.direct,
            in_turn: &requests.in_turn,
            finishes: &requests.finishes,
            redrive: redrive.letters.clone(),
            redrive_floor: redrive.floor,
            bury: &requests.bury,
            cancels: &requests.cancels,
            purge: !requests.purge_replies.is_empty(),
            max_bytes: shared.config.max_write_bytes,
        };
        let prepared = shared.engine().plan(input, shared.clock.now_ms(), &mut unit);
        match prepared {
            Ok(plan) => return Ok(plan),
            Err(exhausted) => renew_range(shared, exhausted.range_id).await?,
        }
    }
}

/// Whom a write wakes after a purge: the writer, for tasks of the buffer
/// it cancelled; the reader, to refill what a sweep took.
struct PurgeWakes {
    sweeping: bool,
    refill: bool,
}

/// Takes the next range id, and with it a new block of task ids.
async fn renew_range(shared: &Shared, range_id: i64) -> Result<(), PartitionError> {
    match shared.store.take_ownership(&shared.id, range_id, &shared.node, &shared.region).await {
        Ok(meta) => {
            tracing::debug!(partition = %shared.id, range_id = meta.range_id, "renewed the id block");
            shared.engine().renew_range(meta.range_id);
            Ok(())
        }
        Err(error) => Err(on_write_error(shared, error)),
    }
}

async fn sync_metadata(shared: &Shared) {
    let now = shared.clock.now_ms();
    let Some(meta) = shared.engine().metadata_due(now) else { return };
    match shared.store.update_metadata(&shared.id, &meta).await {
        Ok(()) => shared.engine().metadata_persisted(&meta, now),
        Err(error) => {
            let error = on_write_error(shared, error);
            tracing::warn!(partition = %shared.id, %error, "could not write the ack levels");
        }
    }
}
