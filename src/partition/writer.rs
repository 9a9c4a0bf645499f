use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::handle::{PartitionError, PartitionState, Shared, WriteCommand};
use crate::model::TaskSpec;
use crate::store::StoreError;

type Reply = tokio::sync::oneshot::Sender<Result<Vec<i64>, PartitionError>>;

/// The writer: one conditional write at a time, appends grouped in batches.
/// On stop it finishes what is queued and writes the ack levels a last time.
pub(super) async fn run(shared: Arc<Shared>, mut commands: mpsc::Receiver<WriteCommand>, stop: CancellationToken) {
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(command) => command,
            None => tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(command) => command,
                    None => break,
                },
                _ = stop.cancelled() => break,
            },
        };
        let batch = gather(&shared, first, &mut commands, &mut carried);
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
    sync_metadata(&shared, true).await;
}

/// Takes whatever else is queued, while the batch stays within
/// `max_batch_tasks` and `max_batch_bytes`; the first command that would
/// break a limit is `carried` to the next batch. A batch always has at least
/// one command.
fn gather(
    shared: &Shared,
    first: WriteCommand,
    commands: &mut mpsc::Receiver<WriteCommand>,
    carried: &mut Option<WriteCommand>,
) -> Vec<WriteCommand> {
    let (max_tasks, max_bytes) = (shared.config.max_batch_tasks, shared.config.max_batch_bytes);
    let (mut tasks, mut bytes) = size(&first);
    let mut batch = vec![first];
    while tasks < max_tasks && bytes < max_bytes {
        let Ok(command) = commands.try_recv() else { break };
        let (more_tasks, more_bytes) = size(&command);
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

/// Tasks in a command, and roughly the bytes they take in a store batch.
fn size(command: &WriteCommand) -> (usize, usize) {
    match command {
        WriteCommand::Append { specs, .. } => {
            (specs.len(), specs.iter().map(|s| s.payload.len() + s.fairness_key.len() + 64).sum())
        }
        WriteCommand::SyncMetadata => (0, 0),
    }
}

fn fail_queued(shared: &Shared, commands: &mut mpsc::Receiver<WriteCommand>) {
    commands.close();
    while let Ok(command) = commands.try_recv() {
        if let WriteCommand::Append { reply, .. } = command {
            let _ = reply.send(Err(shared.lost()));
        }
    }
}

/// Performs a batch of commands; false once the partition is lost.
async fn process(shared: &Shared, batch: Vec<WriteCommand>) -> bool {
    let mut sync = false;
    let mut specs: Vec<TaskSpec> = Vec::new();
    let mut replies: Vec<(usize, Reply)> = Vec::new();
    for command in batch {
        match command {
            WriteCommand::Append { specs: more, reply } => {
                replies.push((more.len(), reply));
                specs.extend(more);
            }
            WriteCommand::SyncMetadata => sync = true,
        }
    }
    if !specs.is_empty() {
        match append(shared, &specs).await {
            Ok(ids) => {
                let mut ids = ids.into_iter();
                for (count, reply) in replies {
                    let _ = reply.send(Ok(ids.by_ref().take(count).collect()));
                }
            }
            Err(error) => {
                for (_, reply) in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
    if sync {
        sync_metadata(shared, false).await;
    }
    shared.state() != PartitionState::Lost
}

/// One append for the whole batch; the ids it got, in order.
async fn append(shared: &Shared, specs: &[TaskSpec]) -> Result<Vec<i64>, PartitionError> {
    let plan = loop {
        let prepared = shared.engine().prepare_append(specs, shared.clock.now_ms());
        match prepared {
            Ok(plan) => break plan,
            Err(exhausted) => renew_range(shared, exhausted.range_id).await?,
        }
    };
    let written = shared.store.append(&shared.id, plan.range_id, &plan.tasks, plan.metadata.as_ref()).await;
    match written {
        Ok(()) => {
            let ids = plan.tasks.iter().map(|t| t.level.id).collect();
            shared.engine().append_succeeded(plan, shared.clock.now_ms());
            (shared.on_ready)();
            Ok(ids)
        }
        Err(error) => {
            let may_have_applied = !error.certainly_not_applied();
            shared.engine().append_failed(plan, may_have_applied);
            if may_have_applied {
                shared.wake_reader.notify_one();
            }
            Err(on_write_error(shared, error))
        }
    }
}

/// Takes the next range id, and with it a new block of task ids.
async fn renew_range(shared: &Shared, range_id: i64) -> Result<(), PartitionError> {
    match shared.store.take_ownership(&shared.id, range_id, &shared.node).await {
        Ok(meta) => {
            tracing::debug!(partition = %shared.id, range_id = meta.range_id, "renewed the id block");
            shared.engine().renew_range(meta.range_id);
            Ok(())
        }
        Err(error) => Err(on_write_error(shared, error)),
    }
}

async fn sync_metadata(shared: &Shared, force: bool) {
    let now = shared.clock.now_ms();
    let meta = {
        let engine = shared.engine();
        if force { Some(engine.metadata()) } else { engine.metadata_due(now) }
    };
    let Some(meta) = meta else { return };
    match shared.store.update_metadata(&shared.id, &meta).await {
        Ok(()) => shared.engine().metadata_persisted(&meta, now),
        Err(error) => {
            let error = on_write_error(shared, error);
            tracing::warn!(partition = %shared.id, %error, "could not write the ack levels");
        }
    }
}

/// A fenced write means another node owns the partition: stop handing out.
fn on_write_error(shared: &Shared, error: StoreError) -> PartitionError {
    if let StoreError::Fenced { current_range_id } = error {
        tracing::warn!(partition = %shared.id, current_range_id, "fenced: dropping the partition");
        shared.set_state(PartitionState::Lost);
        (shared.on_ready)();
        return shared.lost();
    }
    PartitionError::Store(error)
}

/// The keeper: deletes acknowledged tasks and asks the writer to persist
/// the ack levels when they are due.
pub(super) async fn keep(shared: Arc<Shared>, writes: mpsc::Sender<WriteCommand>, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(shared.config.keeper_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.cancelled() => return,
        }
        if shared.state() != PartitionState::Active {
            return;
        }
        let now = shared.clock.now_ms();
        let (deletes, metadata_due) = {
            let mut engine = shared.engine();
            (engine.gc_requests(now), engine.metadata_due(now).is_some())
        };
        for delete in deletes {
            if let Err(error) = shared.store.delete_through(&shared.id, delete.priority, delete.through).await {
                tracing::warn!(partition = %shared.id, %error, "delete of acknowledged tasks failed; the next one covers it");
            }
        }
        if metadata_due {
            let _ = writes.try_send(WriteCommand::SyncMetadata);
        }
    }
}
