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
use super::routing::{Origin, Router};
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
    let matcher = router.queues().get(&queue).await.map_err(status::from_match)?;
    let partition = request.partition;
    let numbers = matcher.config().partition_numbers();
    if partition >= numbers.end {
        let limit = format!("queue {queue} has partitions {} to {}", numbers.start, numbers.end - 1);
        return Err(status::invalid(ValidationError::new("partition", format!("is {partition}; {limit}"))));
    }
    let origin = Origin::of(&caller);
    let mut response = if matches!(origin, Origin::Forwarded(_)) || matcher.holds(partition) {
        look_up_here(&matcher, partition, request.task_id).await?
    } else {
        let owner = router.remote_owner(&matcher, partition)?;
        router
            .forward(
                &owner,
                Rpc::GetTask,
                request.clone(),
                Some(partition),
                Duration::ZERO,
                |mut peer, request| async move { peer.get_task(request).await },
            )
            .await?
    };
    if !request.include_payload {
        response.payload.clear();
    } else if matches!(origin, Origin::Client) {
        may_see_payload(&caller, &queue, Some(&response.fairness_key))?;
    }
    Ok(Response::new(response))
}

fn queue_name(name: &str) -> Result<QueueName, Status> {
    validate::queue_name("queue", name).map_err(status::invalid)
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
    let name = matcher.name();
    let found = matcher.find_task(partition, task_id, LookupBounds::default()).await.map_err(status::from_match)?;
    let task = format!("task {task_id} of queue {name}, partition {partition},");
    match found {
        Lookup::Found(found) => Ok(response(partition, *found)),
        Lookup::NeverAdded => {
            Err(Status::not_found(format!("{task} does not exist: no task of the partition has had that id")))
        }
        Lookup::Gone => Err(Status::not_found(format!(
            "{task} is not pending, delayed, leased or dead: it completed, or was redriven from the dead letters \
             (a redriven task gets a new id)"
        ))),
        Lookup::NotWithin { rows } => Err(Status::not_found(format!(
            "{task} is not among the {rows} rows read (the bound of one lookup): it may wait further back in the \
             backlog; try again when the backlog is shorter"
        ))),
    }
}

fn response(partition: u32, found: FoundTask) -> pb::GetTaskResponse {
    let FoundTask { task, state } = found;
    let mut response = pb::GetTaskResponse {
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
    use pb::get_task_response::State;
    match state {
        TaskState::Pending(waiting) => {
            response.set_state(State::Pending);
            response.waiting_for = waiting_for(waiting);
        }
        TaskState::Delayed { ready_at } => {
            response.set_state(State::Delayed);
            response.ready_at = Some(timestamp(ready_at));
        }
        TaskState::Leased { deadline, worker, delivered: _ } => {
            response.set_state(State::Leased);
            response.worker_id = worker.map(|w| w.to_string()).unwrap_or_default();
            response.lease_deadline = Some(timestamp(deadline));
        }
        TaskState::Dead { failed_at, message } => {
            response.set_state(State::Dead);
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
