use std::sync::Arc;

use futures::future::join_all;
use tonic::{Request, Response, Status};

use super::routing::{Origin, Router};
use super::{convert, status};
use crate::matcher::{LeaseToken, Queues};
use crate::model::{Limits, PartitionId, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::proto::v1::matching_server::Matching;

/// The longest worker id, in bytes.
const MAX_WORKER_ID_BYTES: usize = 256;
/// The most keys DescribeQueue lists per priority level.
const MAX_TOP_KEYS: u32 = 100;
/// The most partitions a queue may have.
const MAX_PARTITIONS: u32 = 256;

/// `fairway.v1.Matching` on this node, routing to the others as needed.
#[derive(Clone, Debug)]
pub struct MatchingService {
    router: Arc<Router>,
    limits: Limits,
}

impl MatchingService {
    pub fn new(queues: Arc<Queues>, limits: Limits) -> Self {
        MatchingService { router: Arc::new(Router::new(queues)), limits }
    }

    fn queues(&self) -> &Arc<Queues> {
        self.router.queues()
    }
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
        let origin = Origin::of(&request)?;
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        let spec = convert::task_spec("task", request.task, &self.limits).map_err(status::invalid)?;
        Ok(Response::new(self.router.add(&queue, spec, origin).await?))
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
        let results = join_all(specs.into_iter().map(|spec| async {
            let spec = match spec {
                Ok(spec) => spec,
                Err(invalid) => return item_error(status::invalid(invalid)),
            };
            match self.router.add(&queue, spec, Origin::Client).await {
                Ok(added) => pb::AddTaskResult { outcome: Some(pb::add_task_result::Outcome::Added(added)) },
                Err(error) => item_error(error),
            }
        }))
        .await;
        Ok(Response::new(pb::AddTasksResponse { results }))
    }

    async fn poll_task(&self, request: Request<pb::PollTaskRequest>) -> Result<Response<pb::PollTaskResponse>, Status> {
        let origin = Origin::of(&request)?;
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        if request.worker_id.len() > MAX_WORKER_ID_BYTES {
            return Err(status::invalid(ValidationError::new(
                "worker_id",
                format!("is {} bytes long; the limit is {MAX_WORKER_ID_BYTES} bytes", request.worker_id.len()),
            )));
        }
        let wait = convert::duration("max_wait", request.max_wait).map_err(status::invalid)?;
        let default_wait = self.queues().settings().matcher.default_poll_wait;
        let wait = validate::poll_wait("max_wait", wait, default_wait, &self.limits).map_err(status::invalid)?;
        let task = self.router.poll(&queue, wait, &request.worker_id, origin).await?;
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

    async fn create_queue(
        &self,
        request: Request<pb::CreateQueueRequest>,
    ) -> Result<Response<pb::CreateQueueResponse>, Status> {
        let request = request.into_inner();
        let queue = validate::queue_name("queue", &request.queue).map_err(status::invalid)?;
        if !(1..=MAX_PARTITIONS).contains(&request.partitions) {
            return Err(status::invalid(ValidationError::new(
                "partitions",
                format!("is {}; it must be 1 to {MAX_PARTITIONS}", request.partitions),
            )));
        }
        let matcher = self.queues().get_with(&queue, request.partitions).await.map_err(status::from_match)?;
        Ok(Response::new(pb::CreateQueueResponse { partitions: matcher.config().partitions }))
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
        let matcher = self.queues().get(&queue).await.map_err(status::from_match)?;
        let held: std::collections::HashMap<u32, _> =
            matcher.describe(top_keys).into_iter().map(|report| (report.partition, report)).collect();
        let mut partitions = Vec::new();
        for partition in 0..matcher.config().partitions {
            let state = match held.get(&partition) {
                Some(report) => convert::held_partition(report, self.queues().view().node()),
                None => {
                    let id = PartitionId { queue: queue.clone(), partition };
                    let stored = self.queues().store().load_partition(&id).await.map_err(status::from_store)?;
                    convert::stored_partition(partition, stored)
                }
            };
            partitions.push(state);
        }
        Ok(Response::new(pb::DescribeQueueResponse {
            queue: queue.to_string(),
            partitions,
            waiting_pollers: matcher.waiting_pollers() as u32,
        }))
    }
}
