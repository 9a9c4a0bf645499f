use std::sync::Arc;

use futures::future::join_all;
use tonic::{Request, Response, Status};

use super::{convert, status};
use crate::matcher::{LeaseToken, Queues};
use crate::model::{Limits, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::proto::v1::matching_server::Matching;

/// The longest worker id, in bytes.
const MAX_WORKER_ID_BYTES: usize = 256;
/// The most keys DescribeQueue lists per priority level.
const MAX_TOP_KEYS: u32 = 100;

/// `fairway.v1.Matching` over the queues of this node.
#[derive(Clone, Debug)]
pub struct MatchingService {
    queues: Arc<Queues>,
    limits: Limits,
}

impl MatchingService {
    pub fn new(queues: Arc<Queues>, limits: Limits) -> Self {
        MatchingService { queues, limits }
    }
}

fn added(outcome: crate::matcher::AddOutcome) -> pb::AddTaskResponse {
    pb::AddTaskResponse { task_id: outcome.task_id, sync_matched: outcome.sync_matched }
}

fn item_error(status: Status) -> pb::AddTaskResult {
    pb::AddTaskResult {
        outcome: Some(pb::add_task_result::Outcome::Error(pb::ItemError {
            code: status.code() as i32,
            message: status.message().to_owned(),
        })),
    }
}

#[tonic::async_trait]
impl Matching for MatchingService {
    async fn add_task(&self, request: Request<pb::AddTaskRequest>) -> Result<Response<pb::AddTaskResponse>, Status> {
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        let spec = convert::task_spec("task", request.task, &self.limits).map_err(status::invalid)?;
        let matcher = self.queues.get(&queue).await.map_err(status::from_match)?;
        let outcome = matcher.add(spec).await.map_err(status::from_match)?;
        Ok(Response::new(added(outcome)))
    }

    async fn add_tasks(&self, request: Request<pb::AddTasksRequest>) -> Result<Response<pb::AddTasksResponse>, Status> {
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        validate::batch_len("tasks", request.tasks.len(), &self.limits).map_err(status::invalid)?;
        let specs: Vec<Result<_, ValidationError>> = request
            .tasks
            .into_iter()
            .enumerate()
            .map(|(i, spec)| convert::task_spec(&format!("tasks[{i}]"), Some(spec), &self.limits))
            .collect();
        let matcher = self.queues.get(&queue).await.map_err(status::from_match)?;
        let results = join_all(specs.into_iter().map(|spec| {
            let matcher = matcher.clone();
            async move {
                let spec = match spec {
                    Ok(spec) => spec,
                    Err(invalid) => return item_error(status::invalid(invalid)),
                };
                match matcher.add(spec).await {
                    Ok(outcome) => {
                        pb::AddTaskResult { outcome: Some(pb::add_task_result::Outcome::Added(added(outcome))) }
                    }
                    Err(error) => item_error(status::from_match(error)),
                }
            }
        }))
        .await;
        Ok(Response::new(pb::AddTasksResponse { results }))
    }

    async fn poll_task(&self, request: Request<pb::PollTaskRequest>) -> Result<Response<pb::PollTaskResponse>, Status> {
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        if request.worker_id.len() > MAX_WORKER_ID_BYTES {
            return Err(status::invalid(ValidationError::new(
                "worker_id",
                format!("is {} bytes long; the limit is {MAX_WORKER_ID_BYTES} bytes", request.worker_id.len()),
            )));
        }
        let wait = convert::duration("max_wait", request.max_wait).map_err(status::invalid)?;
        let default_wait = self.queues.settings().matcher.default_poll_wait;
        let wait = validate::poll_wait("max_wait", wait, default_wait, &self.limits).map_err(status::invalid)?;
        let matcher = self.queues.get(&queue).await.map_err(status::from_match)?;
        let task = matcher.poll(wait).await.map(convert::task);
        Ok(Response::new(pb::PollTaskResponse { task }))
    }

    async fn complete_task(
        &self,
        request: Request<pb::CompleteTaskRequest>,
    ) -> Result<Response<pb::CompleteTaskResponse>, Status> {
        let request = request.into_inner();
        request
            .lease_token
            .parse::<LeaseToken>()
            .map_err(|message| status::invalid(ValidationError::new("lease_token", message)))?;
        validate::payload("result", request.result.len(), &self.limits).map_err(status::invalid)?;
        // Until worker leases exist, a dispatched task is already acknowledged.
        Ok(Response::new(pb::CompleteTaskResponse {}))
    }

    async fn describe_queue(
        &self,
        request: Request<pb::DescribeQueueRequest>,
    ) -> Result<Response<pb::DescribeQueueResponse>, Status> {
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        if request.top_keys > MAX_TOP_KEYS {
            return Err(status::invalid(ValidationError::new(
                "top_keys",
                format!("is {}; the limit is {MAX_TOP_KEYS}", request.top_keys),
            )));
        }
        let top_keys = if request.top_keys == 0 { 10 } else { request.top_keys as usize };
        let matcher = self.queues.get(&queue).await.map_err(status::from_match)?;
        let partitions = matcher
            .describe(top_keys)
            .into_iter()
            .map(|report| {
                let (range_id, added, dispatched, subqueues) = match report.snapshot {
                    Some(s) => (s.range_id, s.added, s.dispatched, convert::subqueues(s)),
                    None => (0, 0, 0, Vec::new()),
                };
                pb::PartitionState {
                    partition: report.partition,
                    range_id,
                    owner: self.queues.settings().node.clone(),
                    state: format!("{:?}", report.state).to_lowercase(),
                    subqueues,
                    dispatched,
                    added,
                }
            })
            .collect();
        Ok(Response::new(pb::DescribeQueueResponse {
            queue: queue.to_string(),
            partitions,
            waiting_pollers: matcher.waiting_pollers() as u32,
        }))
    }
}
