//! `fairway worker`: runs a command per task of a queue, the no-code way to
//! put a script to work (docs/scheduler.md, "`fairway worker`").
//!
//! The loop takes a task only for a free slot (`--concurrency`), and keeps
//! these promises:
//! - **Nothing taken in vain.** A command that cannot be found is refused
//!   before any task is taken; one that cannot start later (exit 126 or 127)
//!   fails its task with the reason and stops the worker; five failures in a
//!   row slow the polls down (doubling waits up to a minute) instead of
//!   running the queue into its dead letters at full speed.
//! - **A server that goes away is waited for.** Polls that cannot reach it
//!   are tried again with doubling waits up to 30 s, and the log says so;
//!   running commands go on, and their reports are tried again until their
//!   leases run out.
//! - **Signals.** The first SIGINT or SIGTERM stops taking tasks and lets
//!   the running commands finish (a terminal's Ctrl-C does not reach them:
//!   they run in process groups of their own); a second one kills them and
//!   hands their tasks back. No command outlives the worker (`guard.rs`).
//!
//! Each task's run is `task.rs`; its outcome line on `visits.*` queues is
//! `outcome.rs`.

mod guard;
mod outcome;
mod task;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use fairway::clock::duration_serde;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;

pub(super) use guard::{GUARD_ARG, run as run_guard};
use task::TaskEnd;

use super::client::ServerArg;

type Client = MatchingClient<fairway::security::AuthChannel>;

/// How often a worker asks again for a queue that does not exist yet.
const QUEUE_MISSING_RETRY: Duration = Duration::from_secs(5);
/// The longest wait between two polls of a server that cannot be reached.
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(30);
/// Failures in a row after which the worker slows down, and its longest wait.
const FAILURES_BEFORE_BACKOFF: u32 = 5;
const MAX_FAILURE_WAIT: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
pub(super) struct WorkerArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// Commands running at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    concurrency: u32,
    /// Stop after this many tasks have finished (0: run until stopped).
    #[arg(long, default_value_t = 0)]
    max_tasks: u64,
    #[arg(long, default_value = "fairway-worker")]
    worker_id: String,
    /// Kill a command that runs longer than this (and everything it
    /// started), and fail its task, e.g. 90s, 2h.
    #[arg(long, default_value = "1h", value_parser = parse_timeout)]
    timeout: Duration,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// What every task's run needs to know.
#[derive(Debug)]
struct Settings {
    queue: String,
    command: Vec<String>,
    timeout: Duration,
}

pub(super) async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    check_program(&args.command[0])?;
    let client = MatchingClient::new(args.server.lazy_channel()?)
        .max_decoding_message_size(fairway::server::CLIENT_MAX_MESSAGE_BYTES);
    let settings =
        Arc::new(Settings { queue: args.queue.clone(), command: args.command.clone(), timeout: args.timeout });
    tracing::info!(
        "taking tasks of {} from {}, {} at a time, for {:?} (timeout {}); Ctrl-C to stop",
        args.queue,
        args.server.address(),
        args.concurrency,
        args.command.join(" "),
        duration_serde::format(args.timeout),
    );
    let signals = Signals::watch();
    let slots = Arc::new(Semaphore::new(args.concurrency as usize));
    let mut running = tokio::task::JoinSet::new();
    let mut health = Health::default();
    let mut started = 0u64;
    'taking: loop {
        while let Some(end) = running.try_join_next() {
            health.record(end.expect("a task's run does not panic"));
        }
        if (args.max_tasks > 0 && started >= args.max_tasks) || health.cannot_start.is_some() {
            break;
        }
        if let Some(wait) = health.failure_wait() {
            tracing::warn!(
                "{} tasks failed in a row; waiting {} before taking more",
                health.failures_in_a_row,
                duration_serde::format(wait)
            );
            tokio::select! {
                _ = signals.stopping.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
                // A task that ends may say the command cannot start.
                Some(end) = running.join_next() => health.record(end.expect("a task's run does not panic")),
            }
            continue;
        }
        // Wait for a free slot before taking a task, so that no task waits leased.
        let first = tokio::select! {
            _ = signals.stopping.cancelled() => break,
            permit = slots.clone().acquire_owned() => permit.expect("never closed"),
        };
        let free = 1 + slots.available_permits() as u64;
        let want = if args.max_tasks > 0 { free.min(args.max_tasks - started) } else { free };
        let request = pb::PollTasksRequest {
            queue: args.queue.clone(),
            worker_id: args.worker_id.clone(),
            max_wait: Some(prost_types::Duration { seconds: 30, nanos: 0 }),
            max_tasks: want as u32,
        };
        let mut poller = client.clone();
        let poll = poller.poll_tasks(request);
        tokio::pin!(poll);
        // While the poll waits, tasks that end are counted: one that says the
        // command cannot start ends the poll before it takes more.
        let polled = loop {
            tokio::select! {
                _ = signals.stopping.cancelled() => break 'taking,
                polled = &mut poll => break polled,
                Some(end) = running.join_next() => {
                    health.record(end.expect("a task's run does not panic"));
                    if health.cannot_start.is_some() {
                        break 'taking;
                    }
                }
            }
        };
        let tasks = match polled {
            Ok(polled) => {
                health.reached(args.server.address());
                polled.into_inner().tasks
            }
            Err(error) => {
                drop(first);
                let Some(wait) = health.poll_failed(&error, &args.queue, args.server.address())? else { continue };
                tokio::select! {
                    _ = signals.stopping.cancelled() => break,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        let mut first = Some(first);
        for task in tasks {
            let permit = match first.take() {
                Some(permit) => permit,
                None => slots.clone().acquire_owned().await.expect("never closed"),
            };
            started += 1;
            let (client, settings, abandon) = (client.clone(), settings.clone(), signals.abandon.clone());
            running.spawn(async move {
                let _permit = permit;
                task::run(client, &settings, task, abandon).await
            });
        }
    }
    if !running.is_empty() {
        tracing::info!("waiting for the {} running tasks to finish", running.len());
    }
    while let Some(end) = running.join_next().await {
        health.record(end.expect("a task's run does not panic"));
    }
    tracing::info!("{}", health.summary());
    match health.cannot_start {
        Some(reason) => bail!("stopped taking tasks: the command cannot be started: {reason}"),
        None => Ok(()),
    }
}

/// What the loop learnt from polls and finished tasks.
#[derive(Debug, Default)]
struct Health {
    completed: u64,
    failed: u64,
    /// Handed back at a second signal, or not reported (lease lost).
    other: u64,
    failures_in_a_row: u32,
    cannot_start: Option<String>,
    /// Polls in a row that could not reach the server.
    unreachable: u32,
    told_missing: bool,
}

impl Health {
    fn record(&mut self, end: TaskEnd) {
        match end {
            TaskEnd::Completed => {
                self.completed += 1;
                self.failures_in_a_row = 0;
            }
            TaskEnd::Failed => {
                self.failed += 1;
                self.failures_in_a_row += 1;
            }
            TaskEnd::CannotStart(reason) => {
                self.failed += 1;
                self.cannot_start = Some(reason);
            }
            TaskEnd::HandedBack | TaskEnd::Unreported => self.other += 1,
        }
    }

    fn summary(&self) -> String {
        format!(
            "stopped: {} tasks completed, {} failed, {} handed back or left to their leases",
            self.completed, self.failed, self.other
        )
    }

    /// How long to wait before the next poll after failures in a row.
    fn failure_wait(&self) -> Option<Duration> {
        let over = self.failures_in_a_row.checked_sub(FAILURES_BEFORE_BACKOFF)?;
        Some((Duration::from_secs(1) * 2u32.saturating_pow(over.min(10))).min(MAX_FAILURE_WAIT))
    }

    fn reached(&mut self, server: &str) {
        if self.unreachable > 0 {
            tracing::info!("reached {server} again; taking tasks");
        }
        self.unreachable = 0;
    }

    /// How long to wait after a failed poll, or the error that ends the worker.
    fn poll_failed(&mut self, error: &tonic::Status, queue: &str, server: &str) -> anyhow::Result<Option<Duration>> {
        match error.code() {
            // A worker may start before the queue is created: it waits for
            // it. A server with too many polls parked refuses more: wait too.
            Code::NotFound | Code::ResourceExhausted => {
                if !self.told_missing {
                    tracing::warn!("{}; polling {queue} again every {QUEUE_MISSING_RETRY:?}", error.message());
                    self.told_missing = true;
                }
                Ok(Some(QUEUE_MISSING_RETRY))
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
                Ok(Some(wait))
            }
            code => bail!("poll {queue}: {code:?}: {}", error.message()),
        }
    }
}

/// Errors after which the same call may succeed later: the server is
/// restarting, unreachable, or busy with the same lease.
fn transient(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Aborted | Code::Cancelled | Code::DeadlineExceeded
    )
}

/// The first and the second SIGINT or SIGTERM.
struct Signals {
    /// Stop taking tasks.
    stopping: CancellationToken,
    /// Kill the running commands and hand their tasks back.
    abandon: CancellationToken,
}

impl Signals {
    /// Catches the signals from now on (before any task is taken).
    fn watch() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = Signals { stopping: CancellationToken::new(), abandon: CancellationToken::new() };
        let (Ok(mut interrupt), Ok(mut terminate)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
        else {
            tracing::warn!("cannot catch SIGINT and SIGTERM: they will kill the worker and its commands");
            return signals;
        };
        let tokens = [signals.stopping.clone(), signals.abandon.clone()];
        tokio::spawn(async move {
            let said = [
                "no more tasks; the running commands finish first (signal again to kill them and hand their tasks back)",
                "killing the running commands and handing their tasks back",
            ];
            for (token, said) in tokens.into_iter().zip(said) {
                let name = tokio::select! {
                    _ = interrupt.recv() => "SIGINT",
                    _ = terminate.recv() => "SIGTERM",
                };
                tracing::info!("{name}: {said}");
                token.cancel();
            }
        });
        signals
    }
}

/// Refuses a command that cannot be run, before any task is taken for it.
fn check_program(program: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |path: &Path| path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let path = Path::new(program);
        if !path.exists() {
            bail!("cannot run {program}: no such file (nothing was taken from the queue)");
        }
        if !runnable(path) {
            bail!(
                "cannot run {program}: not an executable file (chmod +x {program}?); nothing was taken from the queue"
            );
        }
        return Ok(());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).map(|dir| dir.join(program)).any(|p: PathBuf| runnable(&p)) {
        return Ok(());
    }
    bail!("cannot run {program}: no such command in PATH (nothing was taken from the queue)")
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    match duration_serde::parse(text)? {
        zero if zero.is_zero() => Err("must be more than 0".into()),
        timeout => Ok(timeout),
    }
}
