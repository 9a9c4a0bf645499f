//! One task of `fairway worker`: its command runs under a guard (see
//! `guard.rs`) with the payload on stdin, the lease is heartbeated while it
//! runs, and the task is reported exactly once, or not at all when its lease
//! is no longer this worker's.
//!
//! How a run ends, and what the server hears:
//! - exit 0: `CompleteTask` (on `visits.*` queues, with the outcome line);
//! - another status, no or a bad outcome line: `FailTask`, retryable, with
//!   the last line of stderr;
//! - status 126 or 127 (the command cannot be started, as a shell says it):
//!   `FailTask` with the reason, and the worker stops taking tasks;
//! - `--timeout` passed: the command's group is killed, `FailTask`;
//! - the worker stopped twice (a second signal): the command's group is
//!   killed and the task handed back with `FailTask`;
//! - the lease lost (another worker has the task now) or run out while the
//!   server could not be reached: the group is killed, nothing is reported.
//!
//! Output is kept to bounded tails: the last line of stdout is the result,
//! the tail of stderr goes to the worker's log when the task fails.

use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tonic::Code;

use fairway::proto::v1 as pb;

use super::{Client, RPC_TIMEOUT, Settings, guard, outcome, transient};

/// Bytes of stdout kept: its last line is the result or the outcome.
const STDOUT_TAIL_BYTES: usize = 64 * 1024;
/// Bytes of stderr kept, for the failure message and the log.
const STDERR_TAIL_BYTES: usize = 4 * 1024;
/// Lines of the stderr tail the log shows for a failed task.
const STDERR_TAIL_LINES: usize = 10;
/// How long the command's output may stay open after it exited.
const OUTPUT_AFTER_EXIT: Duration = Duration::from_secs(5);
/// At most this long between two heartbeats, or two tries of one.
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);
/// The server keeps at most this many bytes of a failure message.
const MAX_MESSAGE_BYTES: usize = 4096;

/// How a task's run ended, for the worker's loop.
#[derive(Debug)]
pub(super) enum TaskEnd {
    Completed,
    /// Failed (a status other than 0, a bad outcome, a timeout).
    Failed,
    /// The command cannot be started: the worker stops taking tasks.
    CannotStart(String),
    /// Stopped by a second signal and handed back.
    HandedBack,
    /// The lease is no longer this worker's, or the report did not reach the
    /// server before it ran out: the task will be delivered again.
    Unreported,
}

/// Runs the command for `task` and reports how it ended; `abandon` stops it
/// and hands the task back.
pub(super) async fn run(client: Client, settings: &Settings, task: pb::Task, abandon: CancellationToken) -> TaskEnd {
    let started = Instant::now();
    let mut run = Run { client, settings, task, deadline: None, cannot_start: false };
    run.deadline = run.task.lease_deadline.and_then(|d| SystemTime::try_from(d).ok());
    let end = run.execute(abandon).await;
    let took = started.elapsed();
    let task = &run.task;
    let who = format!("task {} (key {:?}, attempt {})", task.task_id, task.fairness_key, task.attempt);
    match &end {
        Ok(Ended::Completed) => tracing::info!("{who} completed in {took:.1?}"),
        Ok(Ended::Failed { message, will_retry, stderr_tail }) => {
            let next = if *will_retry { "it will be retried" } else { "it is a dead letter now" };
            tracing::warn!("{who} failed in {took:.1?}: {message}; {next}{}", indent(stderr_tail));
        }
        Ok(Ended::HandedBack) => tracing::warn!("{who} stopped after {took:.1?} and handed back"),
        Ok(Ended::LeaseLost(why)) => tracing::warn!("{who} stopped after {took:.1?}: {why}"),
        Err(error) => tracing::warn!("{who}: {error:#}; it will be delivered again when its lease runs out"),
    }
    match end {
        Ok(Ended::Completed) => TaskEnd::Completed,
        Ok(Ended::Failed { message, .. }) if run.cannot_start => TaskEnd::CannotStart(message),
        Ok(Ended::Failed { .. }) => TaskEnd::Failed,
        Ok(Ended::HandedBack) => TaskEnd::HandedBack,
        Ok(Ended::LeaseLost(_)) | Err(_) => TaskEnd::Unreported,
    }
}

struct Run<'a> {
    client: Client,
    settings: &'a Settings,
    task: pb::Task,
    /// When the lease runs out, as the server last said.
    deadline: Option<SystemTime>,
    /// The command exited as a shell does when it cannot start one.
    cannot_start: bool,
}

enum Ended {
    Completed,
    Failed { message: String, will_retry: bool, stderr_tail: String },
    HandedBack,
    LeaseLost(String),
}

impl Run<'_> {
    async fn execute(&mut self, abandon: CancellationToken) -> anyhow::Result<Ended> {
        let settings = self.settings;
        let spawned = guard::command(&settings.command)
            .env("FAIRWAY_QUEUE", &settings.queue)
            .env("FAIRWAY_TASK_ID", self.task.task_id.to_string())
            .env("FAIRWAY_ATTEMPT", self.task.attempt.to_string())
            .env("FAIRWAY_FAIRNESS_KEY", &self.task.fairness_key)
            .env("FAIRWAY_PARTITION", self.task.partition.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                self.cannot_start = true;
                return self.fail(format!("the worker cannot start the command's guard: {error}"), String::new()).await;
            }
        };
        // Dropped before the guard is reaped (the worker ends, a bug): the
        // guard still takes its command down.
        let guard = StopOnDrop(child.id());
        let mut stdin = child.stdin.take().expect("piped");
        let payload = self.task.payload.clone();
        // A command that does not read its stdin must not block the worker.
        let feeder = tokio::spawn(async move { stdin.write_all(&payload).await });
        let output = Output {
            stdout: tokio::spawn(tail(child.stdout.take().expect("piped"), STDOUT_TAIL_BYTES)),
            stderr: tokio::spawn(tail(child.stderr.take().expect("piped"), STDERR_TAIL_BYTES)),
            feeder,
        };
        let timeout = tokio::time::sleep(settings.timeout);
        tokio::pin!(timeout);
        let stopped = loop {
            tokio::select! {
                status = child.wait() => break Stopped::Exited(status.context("waiting for the command")?),
                _ = tokio::time::sleep(self.heartbeat_in()) => {
                    if let Some(lost) = self.heartbeat().await {
                        break Stopped::LeaseLost(lost);
                    }
                }
                _ = &mut timeout => break Stopped::TimedOut,
                _ = abandon.cancelled() => break Stopped::Abandoned,
            }
        };
        if !matches!(stopped, Stopped::Exited(_)) {
            guard.stop();
            let _ = child.wait().await;
        }
        guard.disarm();
        let (stdout, stderr) = output.collect().await;
        let stderr_tail = String::from_utf8_lossy(&stderr).into_owned();
        let status = match stopped {
            Stopped::Exited(status) => status,
            Stopped::LeaseLost(lost) => return Ok(Ended::LeaseLost(lost)),
            Stopped::TimedOut => {
                let after = fairway::clock::duration_serde::format(settings.timeout);
                return self
                    .fail(format!("timed out after {after} (--timeout); the command was killed"), stderr_tail)
                    .await;
            }
            Stopped::Abandoned => {
                let message = "handed back: the worker was stopped before the command finished";
                return match self.report_failure(message.into()).await? {
                    Some(true) => Ok(Ended::HandedBack),
                    Some(false) => Ok(Ended::Failed { message: message.into(), will_retry: false, stderr_tail }),
                    None => {
                        Ok(Ended::LeaseLost("the lease was no longer this worker's when it was handed back".into()))
                    }
                };
            }
        };
        if !status.success() {
            let message = match last_line(stderr_tail.as_bytes()) {
                Some(line) => format!("{line} (exit status {})", status.code().unwrap_or(-1)),
                None => format!("the command ended with exit status {}", status.code().unwrap_or(-1)),
            };
            self.cannot_start = matches!(status.code(), Some(126 | 127));
            return self.fail(message, stderr_tail).await;
        }
        let Some(stdout) = stdout else {
            let message =
                "the command exited, but a process it started outside its process group keeps its output open";
            return self.fail(message.into(), stderr_tail).await;
        };
        let line = last_line(&stdout);
        let result = if settings.queue.starts_with("visits.") {
            match line.as_deref().map(|line| outcome::visit_outcome(line, &self.task.payload)) {
                Some(Ok(outcome)) => outcome.encode_to_vec(),
                Some(Err(error)) => return self.fail(format!("bad outcome line: {error:#}"), stderr_tail).await,
                None => return self.fail("the command printed no outcome line".into(), stderr_tail).await,
            }
        } else {
            line.unwrap_or_default().into_bytes()
        };
        let lease_token = self.task.lease_token.clone();
        let (completed, uncertain_before) = self
            .report(|mut client| {
                let request = pb::CompleteTaskRequest { lease_token: lease_token.clone(), result: result.clone() };
                async move { client.complete_task(with_timeout(request)).await.map(|_| ()) }
            })
            .await;
        match completed {
            Ok(()) => Ok(Ended::Completed),
            // An earlier try whose outcome was unknown had landed.
            Err(status) if status.code() == Code::FailedPrecondition && uncertain_before => Ok(Ended::Completed),
            Err(status) if status.code() == Code::FailedPrecondition => Ok(Ended::LeaseLost(format!(
                "the lease was no longer this worker's when the command finished ({})",
                status.message()
            ))),
            Err(status) => Err(anyhow::anyhow!("cannot complete it: {:?}: {}", status.code(), status.message())),
        }
    }

    async fn fail(&mut self, message: String, stderr_tail: String) -> anyhow::Result<Ended> {
        match self.report_failure(message.clone()).await? {
            Some(will_retry) => Ok(Ended::Failed { message, will_retry, stderr_tail }),
            None => Ok(Ended::LeaseLost("the lease was no longer this worker's when it failed".into())),
        }
    }

    /// Reports a failure: `Some(will_retry)`, or `None` when the lease is no
    /// longer this worker's.
    async fn report_failure(&mut self, message: String) -> anyhow::Result<Option<bool>> {
        let request = pb::FailTaskRequest {
            lease_token: self.task.lease_token.clone(),
            retryable: true,
            message: truncate(&message, MAX_MESSAGE_BYTES),
            retry_after: None,
        };
        let (failed, _) = self
            .report(|mut client| {
                let request = request.clone();
                async move { client.fail_task(with_timeout(request)).await.map(|r| r.into_inner().will_retry) }
            })
            .await;
        match failed {
            Ok(will_retry) => Ok(Some(will_retry)),
            Err(status) if status.code() == Code::FailedPrecondition => Ok(None),
            Err(status) => Err(anyhow::anyhow!("cannot report the failure: {:?}: {}", status.code(), status.message())),
        }
    }

    /// Sends a report, again while the server cannot be reached and the
    /// lease has not run out; says too whether an earlier try may have
    /// landed.
    async fn report<T, F, Fut>(&self, call: F) -> (Result<T, tonic::Status>, bool)
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let mut pause = Duration::from_millis(100);
        let mut uncertain = false;
        loop {
            match call(self.client.clone()).await {
                Err(status) if transient(&status) && !self.lease_ran_out() => {
                    uncertain |= !matches!(status.code(), Code::Unavailable | Code::Aborted);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                reported => return (reported, uncertain),
            }
        }
    }

    /// Extends the lease; says why the task must stop when it cannot.
    async fn heartbeat(&mut self) -> Option<String> {
        let request = pb::HeartbeatTaskRequest { lease_token: self.task.lease_token.clone() };
        match self.client.heartbeat_task(with_timeout(request)).await {
            Ok(response) => {
                self.deadline = response.into_inner().lease_deadline.and_then(|d| SystemTime::try_from(d).ok());
                None
            }
            Err(status) if transient(&status) && !self.lease_ran_out() => None,
            Err(status) if transient(&status) => Some(format!(
                "the lease ran out while the server could not be reached ({}); the task will be delivered again",
                status.message()
            )),
            Err(status) => Some(format!("the lease is lost ({:?}: {})", status.code(), status.message())),
        }
    }

    fn lease_ran_out(&self) -> bool {
        self.deadline.is_some_and(|deadline| SystemTime::now() >= deadline)
    }

    /// A third of what is left of the lease, between 100 ms and 10 s.
    fn heartbeat_in(&self) -> Duration {
        let left = self.deadline.map_or(MAX_HEARTBEAT_INTERVAL * 3, |deadline| {
            deadline.duration_since(SystemTime::now()).unwrap_or_default()
        });
        (left / 3).clamp(Duration::from_millis(100), MAX_HEARTBEAT_INTERVAL)
    }
}

/// How a command's run ended, before the worker reports it.
enum Stopped {
    Exited(std::process::ExitStatus),
    LeaseLost(String),
    TimedOut,
    Abandoned,
}

/// A guard not yet reaped: stopped (with its command) if dropped armed.
struct StopOnDrop(Option<u32>);

impl StopOnDrop {
    fn stop(&self) {
        if let Some(pid) = self.0 {
            guard::stop(pid);
        }
    }

    /// The guard is reaped: its pid may name another process now.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The readers of a command's output, and the writer of its input.
struct Output {
    stdout: tokio::task::JoinHandle<Vec<u8>>,
    stderr: tokio::task::JoinHandle<Vec<u8>>,
    feeder: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Output {
    /// The tails of stdout (`None` if it is still open after
    /// `OUTPUT_AFTER_EXIT`: a process that left the command's group holds
    /// it) and of stderr (empty then). Nothing is left running.
    async fn collect(self) -> (Option<Vec<u8>>, Vec<u8>) {
        let Output { stdout, stderr, feeder } = self;
        feeder.abort();
        let deadline = tokio::time::Instant::now() + OUTPUT_AFTER_EXIT;
        let (stdout_abort, stderr_abort) = (stdout.abort_handle(), stderr.abort_handle());
        let stdout = tokio::time::timeout_at(deadline, stdout).await.ok().map(Result::unwrap_or_default);
        let stderr = tokio::time::timeout_at(deadline, stderr).await.ok().map(Result::unwrap_or_default);
        stdout_abort.abort();
        stderr_abort.abort();
        (stdout, stderr.unwrap_or_default())
    }
}

/// A request with the deadline of every call but polls.
fn with_timeout<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(RPC_TIMEOUT);
    request
}

/// The last `limit` bytes `reader` gives before its end.
async fn tail(mut reader: impl AsyncRead + Unpin, limit: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buffer = vec![0u8; 8192];
    while let Ok(read @ 1..) = reader.read(&mut buffer).await {
        kept.extend_from_slice(&buffer[..read]);
        if kept.len() > 2 * limit {
            kept.drain(..kept.len() - limit);
        }
    }
    if kept.len() > limit {
        kept.drain(..kept.len() - limit);
    }
    kept
}

fn last_line(bytes: &[u8]) -> Option<String> {
    String::from_utf8_lossy(bytes).lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_owned())
}

/// The last lines of a stderr tail, indented under a log line.
fn indent(stderr_tail: &str) -> String {
    let lines: Vec<&str> = stderr_tail.lines().filter(|l| !l.trim().is_empty()).collect();
    let shown = &lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..];
    shown.iter().map(|line| format!("\n  | {line}")).collect()
}

/// At most `limit` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_is_kept_to_a_bounded_tail() {
        let output: Vec<u8> = (0..100_000u32).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let kept = tail(&output[..], 1000).await;
        assert_eq!(kept.len(), 1000);
        assert_eq!(last_line(&kept).as_deref(), Some("line 99999"));
        assert_eq!(tail(&b"short"[..], 1000).await, b"short");
    }

    #[test]
    fn messages_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(truncate("abc", 10), "abc");
        let shown = indent(&(1..=30).map(|i| format!("e{i}\n")).collect::<String>());
        assert_eq!(shown.lines().count(), 1 + STDERR_TAIL_LINES, "{shown}");
        assert!(shown.ends_with("  | e30"), "{shown}");
    }
}
