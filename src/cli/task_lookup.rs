//! `fairway task get`: one task by its partition and id, as `task add`
//! printed them, with its state and what it waits for, times as dates.

use clap::Args;
use fairway::proto::v1 as pb;
use fairway::proto::v1::get_task_response::State;

use super::client::{ServerArg, connect, status};
use super::times::{now_ms, when};

/// Which task.
#[derive(Args, Debug)]
pub(super) struct GetArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// The partition `task add` printed (ids are numbered per partition).
    #[arg(long, default_value_t = 0)]
    partition: u32,
    /// The task's id.
    task_id: i64,
    /// Print the payload too (admin or worker role), as text.
    #[arg(long)]
    payload: bool,
    /// Print the answer as JSON (proto3's mapping of the response).
    #[arg(long)]
    json: bool,
}

pub(super) async fn get(args: GetArgs) -> anyhow::Result<()> {
    let GetArgs { server, queue, partition, task_id, payload, json } = args;
    let mut client = connect(&server).await?;
    let request = pb::GetTaskRequest { queue, partition, task_id, include_payload: payload };
    let task = client.get_task(request).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&task, "fairway.v1.GetTaskResponse");
    }
    let now = now_ms();
    println!("task {} of partition {}: {}", task.task_id, task.partition, state_line(&task, now));
    if task.cancelled {
        println!("  cancelled:    it ends, completed and never delivered, when it comes up");
    }
    println!("  fairness key: {:?}   priority: {}   attempt: {}", task.fairness_key, task.priority, task.attempt);
    println!("  added:        {}", when(task.created_at.as_ref(), now));
    if task.deadline.is_some() {
        println!("  deadline:     {}", when(task.deadline.as_ref(), now));
    }
    if !task.dedup_id.is_empty() {
        println!("  dedup id:     {:?}", task.dedup_id);
    }
    let size = if task.size > 0 { format!("   size: {}", task.size) } else { String::new() };
    println!("  cost:         {}{size}", task.cost);
    if payload {
        println!("  payload:      {}", String::from_utf8_lossy(&task.payload));
    } else {
        println!("  payload:      {} bytes (--payload shows it)", task.payload_bytes);
    }
    Ok(())
}

fn state_line(task: &pb::GetTaskResponse, now: i64) -> String {
    match task.state() {
        State::Pending => format!("pending, waiting for {}", task.waiting_for),
        State::Delayed => format!("delayed, ready {}", when(task.ready_at.as_ref(), now)),
        State::Leased => {
            let worker = if task.worker_id.is_empty() {
                "a worker of an earlier owner of the partition".to_owned()
            } else {
                format!("worker {:?}", task.worker_id)
            };
            format!("leased to {worker} until {}", when(task.lease_deadline.as_ref(), now))
        }
        State::Dead => {
            format!("dead since {}: {:?}", when(task.failed_at.as_ref(), now), task.failure_message)
        }
        State::Unspecified => "in a state this client does not know (a newer server?)".to_owned(),
    }
}
