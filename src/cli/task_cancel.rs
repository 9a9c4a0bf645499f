//! `fairway task cancel`: one task by its partition and id, as `task add`
//! printed them; says where it stood and what happens to it now.

use clap::Args;
use fairway::proto::v1 as pb;

use super::client::{ServerArg, connect, status};

/// Which task.
#[derive(Args, Debug)]
pub(super) struct CancelArgs {
    #[command(flatten)]
    server: ServerArg,
    #[arg(long)]
    queue: String,
    /// The partition `task add` printed (ids are numbered per partition).
    #[arg(long, default_value_t = 0)]
    partition: u32,
    /// The task's id.
    task_id: i64,
    /// Print the answer as JSON (proto3's mapping of the response).
    #[arg(long)]
    json: bool,
}

pub(super) async fn cancel(args: CancelArgs) -> anyhow::Result<()> {
    let CancelArgs { server, queue, partition, task_id, json } = args;
    let mut client = connect(&server).await?;
    let request = pb::CancelTaskRequest { queue, partition, task_id };
    let cancelled = client.cancel_task(request).await.map_err(status)?.into_inner();
    if json {
        return super::json::print(&cancelled, "fairway.v1.CancelTaskResponse");
    }
    let state = cancelled.state().as_str_name().to_lowercase();
    println!(
        "task {task_id} of partition {partition} (key {:?}) was {state}: cancelled; {}",
        cancelled.fairness_key, cancelled.outcome
    );
    Ok(())
}
