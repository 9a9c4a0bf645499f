//! `GetTask`: one task by its partition and id, looked up by the
//! partition's owner (this node, or the owner the request is forwarded to).
//!
//! Invariants: the payload leaves this node only for a caller whose grants
//! let it work the task's key (the owner sends it to the node that asked,
//! which drops it or refuses); a lookup writes nothing.

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::access::{Rpc, authorize, caller};
use super::convert::timestamp;
use super::routing::{Origin, Router, Target};
use super::status;
use crate::core::engine::lookup::{FoundTask, TaskState, Waiting};
use crate::matcher::QueueMatcher;
use crate::model::{QueueName, ValidationError, validate};
use crate::partition::{Lookup, LookupBounds};
use crate::proto::v1 as pb;
use crate::security::{Caller, Permission};

/// Serves a GetTask request that passed the gate.
pub(super) async fn get(
    router: &Router,
    request: Request<pb::GetTaskRequest>,
) -> Result<Response<pb::GetTaskResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let queue = queue_name(&request.queue)?;
    authorize(&caller, Rpc::GetTask, queue.as_str(), None)?;
    if request.include_payload {
        may_see_payload(&caller, &queue, None)?;
    }
    let origin = Origin::of(&caller);
    let mut response = match task_target(router, origin, &queue, request.partition).await? {
        Target::Here(matcher) => look_up_here(&matcher, request.partition, request.task_id).await?,
        Target::There(owner) => {
            router
                .forward(
                    &owner,
                    Rpc::GetTask,
                    request.clone(),
                    Some(request.partition),
                    Duration::ZERO,
                    |mut peer, request| async move { peer.get_task(request).await },
                )
                .await?
        }
    };
    if !request.include_payload {
        response.payload.clear();
    } else if matches!(origin, Origin::Client) {
        may_see_payload(&caller, &queue, Some(&response.fairness_key))?;
    }
    Ok(Response::new(response))
}

pub(super) fn queue_name(name: &str) -> Result<QueueName, Status> {
    validate::queue_name("queue", name).map_err(status::invalid)
}

/// Where a request on one task of partition `partition` of `queue` is
/// served: here when this node owns the partition (or the request was
/// forwarded to it), else by the owner. A partition the queue does not
/// have is invalid.
pub(super) async fn task_target(
    router: &Router,
    origin: Origin,
    queue: &QueueName,
    partition: u32,
) -> Result<Target, Status> {
    let matcher = router.queues().get(queue).await.map_err(status::from_match)?;
    let numbers = matcher.config().partition_numbers();
    if partition >= numbers.end {
        let limit = format!("queue {queue} has partitions {} to {}", numbers.start, numbers.end - 1);
        return Err(status::invalid(ValidationError::new("partition", format!("is {partition}; {limit}"))));
    }
    if matches!(origin, Origin::Forwarded(_)) || matcher.holds(partition) {
        return Ok(Target::Here(matcher));
    }
    Ok(Target::There(router.remote_owner(&matcher, partition)?))
}

/// Payloads are shown to whom may work the task's key: a worker gets them
/// anyway, a reader does not.
fn may_see_payload(caller: &Caller, queue: &QueueName, fairness_key: Option<&str>) -> Result<(), Status> {
    caller.may(Permission::Work, queue.as_str(), fairness_key).map_err(|denied| {
        Status::permission_denied(format!(
            "include_payload: payloads are shown only to the admin or worker role of the queue (and the task's \
             key): {denied}"
        ))
    })
}

async fn look_up_here(matcher: &QueueMatcher, partition: u32, task_id: i64) -> Result<pb::GetTaskResponse, Status> {
    let lookup = matcher.find_task(partition, task_id, LookupBounds::default()).await.map_err(status::from_match)?;
    Ok(response(partition, found(lookup, matcher.name(), partition, task_id)?))
}

/// The task a lookup found; else `NOT_FOUND` saying which of three it is.
pub(super) fn found(lookup: Lookup, queue: &QueueName, partition: u32, task_id: i64) -> Result<FoundTask, Status> {
    let task = format!("task {task_id} of queue {queue}, partition {partition},");
    match lookup {
        Lookup::Found(found) => Ok(*found),
        Lookup::NeverAdded => {
            Err(Status::not_found(format!("{task} does not exist: no task of the partition has had that id")))
        }
        Lookup::Gone => Err(Status::not_found(format!(
            "{task} is not pending, delayed, leased or dead: it completed, or was cancelled (a redriven dead \
             letter keeps its id)"
        ))),
        Lookup::NotWithin { rows } => Err(Status::not_found(format!(
            "{task} is not among the {rows} rows read (the bound of one lookup): it may wait further back in the \
             backlog; try again when the backlog is shorter"
        ))),
    }
}

/// The state of a task as GetTask and CancelTask name it.
pub(super) fn state_of(state: &TaskState) -> pb::get_task_response::State {
    use pb::get_task_response::State;
    match state {
        TaskState::Pending(_) => State::Pending,
        TaskState::Delayed { .. } => State::Delayed,
        TaskState::Leased { .. } => State::Leased,
        TaskState::Dead { .. } => State::Dead,
    }
}

fn response(partition: u32, found: FoundTask) -> pb::GetTaskResponse {
    let FoundTask { task, state, cancelled } = found;
    let mut response = pb::GetTaskResponse {
        state: state_of(&state).into(),
        cancelled,
        task_id: task.task_id,
        partition,
        fairness_key: task.fairness_key,
        priority: task.priority.get(),
        dedup_id: task.dedup_id.unwrap_or_default(),
        attempt: task.attempt,
        created_at: Some(timestamp(task.created_at_unix_ms)),
        deadline: task.deadline_unix_ms.map(timestamp),
        cost: task.cost,
        size: task.size.unwrap_or(0),
        payload_bytes: task.payload.len() as u64,
        payload: task.payload,
        ..pb::GetTaskResponse::default()
    };
    match state {
        TaskState::Pending(waiting) => response.waiting_for = waiting_for(waiting),
        TaskState::Delayed { ready_at } => response.ready_at = Some(timestamp(ready_at)),
        TaskState::Leased { deadline, worker, delivered: _ } => {
            response.worker_id = worker.map(|w| w.to_string()).unwrap_or_default();
            response.lease_deadline = Some(timestamp(deadline));
        }
        TaskState::Dead { failed_at, message, .. } => {
            response.failed_at = Some(timestamp(failed_at));
            response.failure_message = message;
        }
    }
    response
}

fn waiting_for(waiting: Waiting) -> String {
    match waiting {
        Waiting::Turn => "its turn".to_owned(),
        Waiting::QueuePaused => "the queue is paused".to_owned(),
        Waiting::KeyPaused => "its key is paused".to_owned(),
        Waiting::KeyConcurrency { running, limit } => {
            format!("its key is at its concurrency limit ({running} running, key_concurrency {limit})")
        }
        Waiting::KeyRate => "its key is at its rate limit (key_rate_per_second)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_are_those_the_proto_states() {
        let bounds = LookupBounds::default();
        assert_eq!((bounds.rows, bounds.bytes), (10_000, 64 << 20));
        let proto = include_str!("../../proto/fairway/v1/matching.proto");
        assert!(proto.contains("reading at most 10,000 rows and 64 MiB of\n  // payloads"));
    }

    #[test]
    fn a_key_at_its_concurrency_limit_says_both_numbers() {
        assert_eq!(
            waiting_for(Waiting::KeyConcurrency { running: 3, limit: 3 }),
            "its key is at its concurrency limit (3 running, key_concurrency 3)"
        );
    }
}
