//! What the worker's loop learns from its polls and from the tasks that
//! end, and what it makes of it: how long to wait before the next poll,
//! whether to stop, what to say.
//!
//! Invariants: five failures in a row hold the next poll back once per
//! further failure (1 s, doubling up to a minute), then the poll goes out;
//! a poll that cannot reach the server is tried again after 0.5 s, doubling
//! up to 30 s; an error that no wait can mend ends the taking of tasks.

use std::time::Duration;

use tokio::task::JoinError;
use tonic::Code;

use fairway::clock::duration_serde;

use super::task::TaskEnd;

/// How often a worker asks again for a queue that does not exist yet.
const QUEUE_MISSING_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between two polls of a server that cannot be reached.
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(30);
/// Failures in a row after which the worker slows down, and its longest wait.
const FAILURES_BEFORE_BACKOFF: u32 = 5;
const MAX_FAILURE_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub(super) struct Health {
    completed: u64,
    failed: u64,
    /// Handed back at a second signal, or not reported (lease lost).
    other: u64,
    failures_in_a_row: u32,
    /// The run of failures the worker last waited for.
    waited_for: u32,
    /// Why the worker stops taking tasks, when it must.
    pub(super) fatal: Option<String>,
    /// Polls in a row that could not reach the server.
    unreachable: u32,
    told_missing: bool,
}

impl Health {
    /// Counts a task's end (a task whose run panicked: not reported).
    pub(super) fn record(&mut self, joined: Result<TaskEnd, JoinError>) {
        let end = joined.unwrap_or_else(|error| {
            tracing::error!("a task's run failed ({error}); it will be delivered again when its lease runs out");
            TaskEnd::Unreported
        });
        match end {
            TaskEnd::Completed => {
                self.completed += 1;
                self.failures_in_a_row = 0;
                self.waited_for = 0;
            }
            TaskEnd::Failed => {
                self.failed += 1;
                self.failures_in_a_row += 1;
            }
            TaskEnd::CannotStart(reason) => {
                self.failed += 1;
                self.fatal = Some(format!("the command cannot be started: {reason}"));
            }
            TaskEnd::HandedBack | TaskEnd::Unreported => self.other += 1,
        }
    }

    pub(super) fn summary(&self) -> String {
        format!(
            "stopped: {} tasks completed, {} failed, {} handed back or left to their leases",
            self.completed, self.failed, self.other
        )
    }

    /// How long to wait before the next poll, after failures in a row; once
    /// per failure past the fifth.
    pub(super) fn failure_wait(&mut self) -> Option<Duration> {
        let over = self.failures_in_a_row.checked_sub(FAILURES_BEFORE_BACKOFF)?;
        if self.waited_for == self.failures_in_a_row {
            return None;
        }
        self.waited_for = self.failures_in_a_row;
        let wait = (Duration::from_secs(1) * 2u32.saturating_pow(over.min(10))).min(MAX_FAILURE_WAIT);
        tracing::warn!(
            "{} tasks failed in a row; waiting {} before taking more",
            self.failures_in_a_row,
            duration_serde::format(wait)
        );
        Some(wait)
    }

    pub(super) fn reached(&mut self, server: &str) {
        if self.unreachable > 0 {
            tracing::info!("reached {server} again; taking tasks");
        }
        self.unreachable = 0;
    }

    /// How long to wait after a failed poll; `None` when the error ends the
    /// taking of tasks (then in `fatal`).
    pub(super) fn poll_failed(&mut self, error: &tonic::Status, queue: &str, server: &str) -> Option<Duration> {
        match error.code() {
            // A worker may start before the queue is created: it waits for
            // it. A server with too many polls parked refuses more: wait too.
            Code::NotFound | Code::ResourceExhausted => {
                if !self.told_missing {
                    tracing::warn!("{}; polling {queue} again every {QUEUE_MISSING_RETRY:?}", error.message());
                    self.told_missing = true;
                }
                Some(QUEUE_MISSING_RETRY)
            }
            _ if transient(error) => {
                self.unreachable += 1;
                let wait = (Duration::from_millis(250) * 2u32.saturating_pow(self.unreachable.min(10)))
                    .min(MAX_RECONNECT_WAIT);
                tracing::warn!(
                    "cannot reach {server} ({:?}: {}); trying again in {}",
                    error.code(),
                    error.message(),
                    duration_serde::format(wait)
                );
                Some(wait)
            }
            code => {
                self.fatal = Some(format!("poll {queue}: {code:?}: {}", error.message()));
                None
            }
        }
    }
}

/// Errors after which the same call may succeed later: the server is
/// restarting, unreachable, or busy with the same lease.
pub(super) fn transient(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Aborted | Code::Cancelled | Code::DeadlineExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_in_a_row_hold_back_one_poll_each_and_a_success_ends_it() {
        let mut health = Health::default();
        for _ in 0..4 {
            health.record(Ok(TaskEnd::Failed));
            assert_eq!(health.failure_wait(), None, "fewer than five failures: no wait");
        }
        health.record(Ok(TaskEnd::Failed));
        assert_eq!(health.failure_wait(), Some(Duration::from_secs(1)));
        assert_eq!(health.failure_wait(), None, "once waited, the next poll goes out");
        health.record(Ok(TaskEnd::Failed));
        assert_eq!(health.failure_wait(), Some(Duration::from_secs(2)), "doubling");
        for _ in 0..20 {
            health.record(Ok(TaskEnd::Failed));
        }
        assert_eq!(health.failure_wait(), Some(MAX_FAILURE_WAIT));
        health.record(Ok(TaskEnd::Completed));
        assert_eq!(health.failure_wait(), None);
        assert_eq!(health.summary(), "stopped: 1 tasks completed, 26 failed, 0 handed back or left to their leases");
    }

    #[test]
    fn errors_no_wait_can_mend_end_the_taking_of_tasks() {
        let mut health = Health::default();
        let wait = health.poll_failed(&tonic::Status::unavailable("tcp connect error"), "q", "s");
        assert_eq!(wait, Some(Duration::from_millis(500)));
        assert!(health.poll_failed(&tonic::Status::not_found("no queue q"), "q", "s").is_some());
        assert_eq!(health.poll_failed(&tonic::Status::unauthenticated("expired"), "q", "s"), None);
        assert!(health.fatal.as_deref().is_some_and(|f| f.contains("Unauthenticated") && f.contains("expired")));
    }
}
