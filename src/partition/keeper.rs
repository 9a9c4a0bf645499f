//! The keeper: a partition's housekeeping task.
//!
//! Invariants: it deletes only rows the engine has acknowledged (below the
//! ack levels and record floors the engine reports), never a row that may
//! still be handed out; it writes no metadata itself but asks the writer
//! for it; it stops as soon as the partition is no longer active.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::shared::{PartitionState, Shared, WriteCommand};

/// The keeper: deletes acknowledged tasks, asks the writer to persist the
/// ack levels when they are due, and wakes it for expired leases and delayed
/// tasks that are ready.
pub(super) async fn run(shared: Arc<Shared>, writes: mpsc::Sender<WriteCommand>, stop: CancellationToken) {
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
        let (deletes, record_deletes, metadata_due, write_due, keys_limited) = {
            let mut engine = shared.engine();
            let deletes = engine.gc_requests(now);
            (
                deletes,
                engine.record_deletes(),
                engine.metadata_due(now).is_some(),
                engine.write_due(now),
                engine.keys_limited(),
            )
        };
        for through in record_deletes {
            if let Err(error) = shared.store.delete_records_through(&shared.id, through.section, through.key).await {
                tracing::warn!(partition = %shared.id, %error, "delete of finished records failed; the next one covers it");
            }
        }
        if write_due {
            shared.wake_writer.notify_one();
        }
        if keys_limited {
            // Keys held back by their rate may start again as time passes.
            (shared.on_ready)();
        }
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
