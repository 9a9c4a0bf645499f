//! Where schedules send their runs: a queue, through the node's router on a
//! server, through a model of a queue in a simulation.

use async_trait::async_trait;

use crate::clock::UnixMillis;
use crate::store::schedules::RunTemplate;

/// A run's task, added or found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddedRun {
    /// The task's id.
    pub task_id: i64,
    /// True when a task with the run's dedup id was already pending or
    /// running: nothing was added, `task_id` is that task.
    pub duplicate: bool,
}

/// Why a run could not be added.
#[derive(Debug, thiserror::Error)]
pub enum RunQueueError {
    /// The queue could not be reached; the run may not have been added.
    /// Retry later (its dedup id makes a retry safe).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The queue refused the run for good (e.g. its template no longer fits
    /// the queue's limits).
    #[error("refused: {0}")]
    Refused(String),
}

/// The queues runs go to.
#[async_trait]
pub trait RunQueue: Send + Sync + std::fmt::Debug {
    /// Creates `queue` if it is new, so that workers may poll it before
    /// its first run.
    async fn prepare(&self, queue: &str) -> Result<(), RunQueueError>;

    /// Adds a run of `template` under `dedup_id`, ordered by `deadline` in
    /// a queue whose ordering is `deadline`.
    async fn add_run(
        &self,
        template: &RunTemplate,
        dedup_id: &str,
        deadline: UnixMillis,
    ) -> Result<AddedRun, RunQueueError>;
}
