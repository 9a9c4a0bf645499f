//! `fairway worker`: a reference worker that runs a command per task.
//!
//! The task's payload goes to the command's stdin; `FAIRWAY_*` variables say
//! which task it is. While the command runs, the worker heartbeats the lease
//! (every third of what is left of it). When it exits:
//! - status 0: the task is completed. For a `visits.*` queue the last line
//!   of stdout must be a JSON outcome, `{"status": "eventful" | "uneventful"
//!   | "failed" | "not_found", "snapshot": "<hex>"}`, sent as a
//!   `fairway.v1.VisitOutcome`; for other queues the last line, if any, is
//!   the result as it is.
//! - any other status: the task is failed (retried after the queue's
//!   backoff), with the last line of stderr as the message.
//!
//! Ctrl-C or SIGTERM stops taking tasks; commands running finish first.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::Args;
use prost::Message;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use fairway::proto::v1 as pb;
use fairway::proto::v1::matching_client::MatchingClient;

use super::client::ServerArg;

type Client = MatchingClient<fairway::security::AuthChannel>;

/// How often a worker asks again for a queue that does not exist yet.
const QUEUE_MISSING_RETRY: Duration = Duration::from_secs(5);

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
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub(super) async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let client = MatchingClient::new(args.server.channel().await?)
        .max_decoding_message_size(fairway::server::CLIENT_MAX_MESSAGE_BYTES);
    let args = Arc::new(args);
    let slots = Arc::new(Semaphore::new(args.concurrency as usize));
    let mut started = 0u64;
    let mut running = tokio::task::JoinSet::new();
    let stop = stop_signal();
    tokio::pin!(stop);
    let mut told_missing = false;
    loop {
        if args.max_tasks > 0 && started >= args.max_tasks {
            break;
        }
        // Wait for a free slot before taking a task, so that no task waits leased.
        let first = tokio::select! {
            _ = &mut stop => break,
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
        let polled = tokio::select! {
            _ = &mut stop => break,
            polled = poller.poll_tasks(request) => polled,
        };
        let tasks = match polled {
            Ok(polled) => polled.into_inner().tasks,
            // A worker may start before the queue is created: it waits for
            // it. A server with too many polls parked refuses more: wait too.
            Err(error) if matches!(error.code(), tonic::Code::NotFound | tonic::Code::ResourceExhausted) => {
                if !told_missing {
                    eprintln!("{}; polling again every {QUEUE_MISSING_RETRY:?}", error.message());
                    told_missing = true;
                }
                tokio::select! {
                    _ = &mut stop => break,
                    _ = tokio::time::sleep(QUEUE_MISSING_RETRY) => continue,
                }
            }
            Err(error) => bail!("poll: {:?}: {}", error.code(), error.message()),
        };
        let mut first = Some(first);
        for task in tasks {
            let permit = match first.take() {
                Some(permit) => permit,
                None => slots.clone().acquire_owned().await.expect("never closed"),
            };
            started += 1;
            let (client, args) = (client.clone(), args.clone());
            running.spawn(async move {
                let _permit = permit;
                let id = task.task_id;
                if let Err(error) = run_one(client, &args, task).await {
                    eprintln!("task {id}: {error:#}");
                }
            });
        }
        while running.try_join_next().is_some() {}
    }
    while running.join_next().await.is_some() {}
    Ok(())
}

/// Runs the command for one task and reports how it ended.
async fn run_one(mut client: Client, args: &WorkerArgs, task: pb::Task) -> anyhow::Result<()> {
    let mut child = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("FAIRWAY_QUEUE", &args.queue)
        .env("FAIRWAY_TASK_ID", task.task_id.to_string())
        .env("FAIRWAY_ATTEMPT", task.attempt.to_string())
        .env("FAIRWAY_FAIRNESS_KEY", &task.fairness_key)
        .env("FAIRWAY_PARTITION", task.partition.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", args.command[0]))?;
    let mut stdin = child.stdin.take().expect("piped");
    let payload = task.payload.clone();
    // A command that does not read its stdin must not block the worker.
    tokio::spawn(async move { stdin.write_all(&payload).await });
    let output = child.wait_with_output();
    tokio::pin!(output);
    let mut deadline = task.lease_deadline;
    let output = loop {
        tokio::select! {
            output = &mut output => break output?,
            _ = tokio::time::sleep(heartbeat_in(deadline.as_ref())) => {
                let beat = pb::HeartbeatTaskRequest { lease_token: task.lease_token.clone() };
                match client.heartbeat_task(beat).await {
                    Ok(response) => deadline = response.into_inner().lease_deadline,
                    Err(error) => bail!("heartbeat: {:?}: {} (the command is stopped)", error.code(), error.message()),
                }
            }
        }
    };
    let last_line = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes).lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_owned())
    };
    let stdout_line = last_line(&output.stdout);
    if !output.status.success() {
        let message = last_line(&output.stderr).unwrap_or_else(|| format!("the command ended with {}", output.status));
        return fail(&mut client, &task, message).await;
    }
    let result = if args.queue.starts_with("visits.") {
        match stdout_line.as_deref().map(|line| visit_outcome(line, &task.payload)) {
            Some(Ok(outcome)) => outcome.encode_to_vec(),
            Some(Err(error)) => return fail(&mut client, &task, format!("bad outcome line: {error}")).await,
            None => return fail(&mut client, &task, "the command printed no outcome line".to_owned()).await,
        }
    } else {
        stdout_line.unwrap_or_default().into_bytes()
    };
    let complete = pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result };
    client.complete_task(complete).await.map_err(|e| anyhow::anyhow!("complete: {:?}: {}", e.code(), e.message()))?;
    Ok(())
}

async fn fail(client: &mut Client, task: &pb::Task, message: String) -> anyhow::Result<()> {
    let request = pb::FailTaskRequest {
        lease_token: task.lease_token.clone(),
        retryable: true,
        message: message.chars().take(1000).collect(),
        retry_after: None,
    };
    client.fail_task(request).await.map_err(|e| anyhow::anyhow!("fail: {:?}: {}", e.code(), e.message()))?;
    Ok(())
}

/// A third of what is left of the lease (at least 100 ms).
fn heartbeat_in(deadline: Option<&prost_types::Timestamp>) -> Duration {
    let Some(deadline) = deadline.and_then(|d| SystemTime::try_from(*d).ok()) else {
        return Duration::from_secs(10);
    };
    let left = deadline.duration_since(SystemTime::now()).unwrap_or_default();
    (left / 3).max(Duration::from_millis(100))
}

/// The outcome a visit command printed as its last line, for the origin
/// named by the line's `url`, else by the task payload's `url`.
fn visit_outcome(line: &str, payload: &[u8]) -> anyhow::Result<pb::VisitOutcome> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line {
        status: String,
        #[serde(default)]
        snapshot: String,
        #[serde(default)]
        url: String,
    }
    #[derive(serde::Deserialize)]
    struct Payload {
        url: String,
    }
    let parsed: Line = serde_json::from_str(line).context("not a JSON object with \"status\"")?;
    let origin_url = match parsed.url {
        url if !url.is_empty() => url,
        _ => {
            serde_json::from_slice::<Payload>(payload)
                .context("no \"url\" in the outcome line, and the payload is not a JSON object with one")?
                .url
        }
    };
    let status = match parsed.status.as_str() {
        "eventful" => pb::VisitStatus::Eventful,
        "uneventful" => pb::VisitStatus::Uneventful,
        "failed" => pb::VisitStatus::Failed,
        "not_found" => pb::VisitStatus::NotFound,
        other => bail!("status {other:?}: expected eventful, uneventful, failed or not_found"),
    };
    let snapshot = hex(&parsed.snapshot).context("snapshot: expected hexadecimal digits")?;
    Ok(pb::VisitOutcome {
        status: status as i32,
        snapshot,
        // Unset: the server's time of the completion, so that the dates of
        // one origin's visits come from one clock whatever worker made them.
        visit_date: None,
        origin_url,
    })
}

fn hex(text: &str) -> anyhow::Result<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        bail!("an odd number of digits");
    }
    (0..text.len()).step_by(2).map(|i| Ok(u8::from_str_radix(&text[i..i + 2], 16)?)).collect()
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_lines_are_parsed_or_named_wrong() {
        let payload = br#"{"url": "https://forge.example/a", "visit_type": "git"}"#;
        let outcome = visit_outcome(r#"{"status": "eventful", "snapshot": "0aff"}"#, payload).unwrap();
        assert_eq!(outcome.status, pb::VisitStatus::Eventful as i32);
        assert_eq!(outcome.snapshot, vec![0x0a, 0xff]);
        assert_eq!(outcome.origin_url, "https://forge.example/a", "from the payload");
        let named = visit_outcome(r#"{"status": "failed", "url": "https://other.example/b"}"#, payload).unwrap();
        assert_eq!(named.origin_url, "https://other.example/b", "the line's own url first");
        assert!(visit_outcome(r#"{"status": "not_found"}"#, payload).unwrap().snapshot.is_empty());
        let bad = visit_outcome(r#"{"status": "great"}"#, payload).unwrap_err().to_string();
        assert!(bad.contains("great") && bad.contains("not_found"), "{bad}");
        assert!(visit_outcome(r#"{"status": "eventful", "snapshot": "abc"}"#, payload).is_err());
        assert!(visit_outcome("done", payload).is_err());
        let no_url = visit_outcome(r#"{"status": "failed"}"#, b"opaque").unwrap_err().to_string();
        assert!(no_url.contains("url"), "{no_url}");
    }
}
