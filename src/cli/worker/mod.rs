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
//!   hands their tasks back; a third ends the worker. No command outlives
//!   the worker (`guard.rs`).
//!
//! Each task's run is `task.rs`, under `guard.rs`; its outcome line on
//! `visits.*` queues is `outcome.rs`; what the loop learns from polls and
//! ends (waits, the reason to stop) is `health.rs`; signals are
//! `signals.rs`.

mod guard;
mod health;
mod outcome;
mod signals;
mod task;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use fairway::clock::duration_serde;
use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;

pub(super) use guard::{GUARD_ARG, run as run_guard};
use health::{Health, transient};
use signals::Signals;

use super::client::ServerArg;

type Client = MatchingClient<fairway::security::AuthChannel>;

/// How long a poll waits for a task; its deadline is this and `RPC_TIMEOUT`.
const POLL_WAIT: Duration = Duration::from_secs(30);
/// The deadline of every other call (heartbeats, reports).
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

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
    let mut running = tokio::task::JoinSet::new();
    let mut health = Health::default();
    let mut started = 0u64;
    'taking: loop {
        while let Some(end) = running.try_join_next() {
            health.record(end);
        }
        if (args.max_tasks > 0 && started >= args.max_tasks) || health.fatal.is_some() {
            break;
        }
        if let Some(wait) = health.failure_wait() {
            let pause = tokio::time::sleep(wait);
            tokio::pin!(pause);
            // Tasks that end meanwhile are counted (one may say the command
            // cannot start).
            loop {
                tokio::select! {
                    _ = signals.stopping.cancelled() => break 'taking,
                    _ = &mut pause => break,
                    Some(end) = running.join_next() => health.record(end),
                }
            }
            continue;
        }
        // Take tasks only for free slots, so that no task waits leased. A
        // slot is free once its task's end is counted.
        let running_now = running.len() as u64;
        if running_now >= u64::from(args.concurrency) {
            tokio::select! {
                _ = signals.stopping.cancelled() => break,
                Some(end) = running.join_next() => health.record(end),
            }
            continue;
        }
        let free = u64::from(args.concurrency) - running_now;
        let want = if args.max_tasks > 0 { free.min(args.max_tasks - started) } else { free };
        let mut request = tonic::Request::new(pb::PollTasksRequest {
            queue: args.queue.clone(),
            worker_id: args.worker_id.clone(),
            max_wait: Some(prost_types::Duration { seconds: POLL_WAIT.as_secs() as i64, nanos: 0 }),
            max_tasks: want as u32,
            completions: Vec::new(),
        });
        request.set_timeout(POLL_WAIT + RPC_TIMEOUT);
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
                    health.record(end);
                    if health.fatal.is_some() {
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
                let Some(wait) = health.poll_failed(&error, &args.queue, args.server.address()) else { break };
                tokio::select! {
                    _ = signals.stopping.cancelled() => break,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        for task in tasks {
            started += 1;
            let (client, settings, abandon) = (client.clone(), settings.clone(), signals.abandon.clone());
            running.spawn(async move { task::run(client, &settings, task, abandon).await });
        }
    }
    if !running.is_empty() {
        tracing::info!("waiting for the {} running tasks to finish", running.len());
    }
    while let Some(end) = running.join_next().await {
        health.record(end);
    }
    tracing::info!("{}", health.summary());
    match health.fatal {
        Some(reason) => bail!("stopped taking tasks: {reason}"),
        None => Ok(()),
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
