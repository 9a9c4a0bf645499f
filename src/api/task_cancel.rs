//! `CancelTask`: one task by its partition and id, cancelled by the
//! partition's owner (this node, or the owner the request is forwarded to).
//!
//! Invariant: the answer comes once the cancel is durable (the dead
//! letter's row deleted, or the task's mark in the partition's metadata);
//! see `crate::core::engine::cancel` for what a mark does.

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::access::{Rpc, authorize, caller};
use super::routing::{Origin, Router, Target};
use super::status;
use super::task_lookup::{found, queue_name, state_of, task_target};
use crate::core::engine::lookup::TaskState;
use crate::matcher::QueueMatcher;
use crate::partition::LookupBounds;
use crate::proto::v1 as pb;

/// Serves a CancelTask request that passed the gate.
pub(super) async fn cancel(
    router: &Router,
    request: Request<pb::CancelTaskRequest>,
) -> Result<Response<pb::CancelTaskResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let queue = queue_name(&request.queue)?;
    authorize(&caller, Rpc::CancelTask, queue.as_str(), None)?;
    let origin = Origin::of(&caller);
    let (partition, task_id) = (request.partition, request.task_id);
    let response = match task_target(router, origin, &queue, partition).await? {
        Target::Here(matcher) => cancel_here(&matcher, partition, task_id).await?,
        Target::There(owner) => {
            router
                .forward(
                    &owner,
                    Rpc::CancelTask,
                    request,
                    Some(partition),
                    Duration::ZERO,
                    |mut peer, request| async move { peer.cancel_task(request).await },
                )
                .await?
        }
    };
    if origin == Origin::Client {
        tracing::info!(
            target: "fairway::audit", caller = caller.name(), %queue, partition, task_id,
            state = response.state().as_str_name(), "cancelled a task"
        );
    }
    Ok(Response::new(response))
}

async fn cancel_here(matcher: &QueueMatcher, partition: u32, task_id: i64) -> Result<pb::CancelTaskResponse, Status> {
    let lookup = matcher.cancel_task(partition, task_id, LookupBounds::default()).await.map_err(status::from_match)?;
    let task = found(lookup, matcher.name(), partition, task_id)?;
    let outcome = match &task.state {
        TaskState::Dead { .. } => "removed from the dead letters",
        TaskState::Leased { .. } => {
            "its lease ran out: its worker's heartbeats are refused, and its report, if it sends one, completes it"
        }
        TaskState::Pending(_) | TaskState::Delayed { .. } => "it ends, completed and never delivered, when it comes up",
    };
    Ok(pb::CancelTaskResponse {
        state: state_of(&task.state).into(),
        fairness_key: task.task.fairness_key,
        outcome: outcome.to_owned(),
    })
}
