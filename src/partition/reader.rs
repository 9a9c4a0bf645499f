//! The reader: refills a partition's buffer from the store.
//!
//! Invariants: it only reads; what it read reaches the engine under its
//! mutex, never across an await; read errors are retried with backoff; it
//! stops as soon as the partition is no longer active.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::shared::{PartitionState, Shared};

/// The reader: refills the buffer of each priority level that runs low, and
/// waits to be woken otherwise. Read errors are retried with backoff.
pub(super) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let mut backoff = Duration::ZERO;
    loop {
        if stop.is_cancelled() || shared.state() != PartitionState::Active {
            return;
        }
        let requests = shared.engine().read_requests(shared.clock.now_ms());
        if requests.is_empty() {
            tokio::select! {
                _ = shared.wake_reader.notified() => continue,
                _ = stop.cancelled() => return,
            }
        }
        let mut applied = false;
        let mut sweep = false;
        let mut failed = false;
        for request in requests {
            match shared.store.read(&shared.id, request.priority, request.after, request.limit).await {
                Ok(tasks) => {
                    let mut engine = shared.engine();
                    applied |= engine.apply_read(request, tasks);
                    sweep |= engine.purge_sweeping();
                }
                Err(error) => {
                    shared.engine().read_failed(request);
                    tracing::warn!(partition = %shared.id, %error, "read failed; retrying");
                    failed = true;
                }
            }
        }
        if applied {
            (shared.on_ready)();
        }
        if sweep {
            // Tasks a purge cancelled came in: the writer takes them.
            shared.wake_writer.notify_one();
        }
        if failed {
            backoff = (backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(2));
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.cancelled() => return,
            }
        } else {
            backoff = Duration::ZERO;
        }
    }
}
