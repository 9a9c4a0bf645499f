//! `fairway.v1.Matching` on this node ([`MatchingService`]): each RPC
//! passes the gate, is validated in full, then served by this node's
//! matcher or routed to the owner of the partition it needs.
//!
//! Invariant: a handler acts only on a request the gate let in and
//! [`super::access::authorize`] allowed, after every field was validated;
//! its errors become statuses only through [`super::status`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tonic::{Request, Response, Status};

use super::access::{Rpc, authorize, authorize_add, caller};
use super::connection_polls::{ConnectionPolls, connection_of};
use super::routing::{Origin, Router, Target};
use super::workers_seen::{Watching, WorkersSeen};
use super::{convert, status};
use crate::cluster::Peers;
use crate::core::engine::{Finished, Outcome};
use crate::matcher::{LeaseToken, PartitionView, QueueMatcher, Queues};
use crate::model::{Limits, QueueName, TaskSpec, ValidationError, validate};
use crate::proto::v1 as pb;
use crate::proto::v1::matching_server::Matching;
use crate::schedules::RUN_DEDUP_PREFIX;
use crate::security::{Caller, ClusterKeys, Permission};

/// The longest worker id, in bytes.
const MAX_WORKER_ID_BYTES: usize = 256;
/// The most keys DescribeQueue lists per priority level.
const MAX_TOP_KEYS: u32 = 100;

/// Sees what becomes of tasks at the node that holds their partition: the
/// visit scheduler records there the outcome a `visits.*` task carries, the
/// schedules the start and end of their runs.
#[tonic::async_trait]
pub trait TaskHook: Send + Sync + std::fmt::Debug {
    /// Whether the completion of a task of `queue` with dedup id `dedup_id`
    /// is anything to this hook: [`Self::completing`] is called only if it
    /// is, so that a completion no hook cares about costs no call (each is
    /// a boxed future). Called on every completion: it must not wait.
    fn sees_completion(&self, queue: &QueueName, dedup_id: Option<&str>) -> bool {
        let _ = (queue, dedup_id);
        true
    }

    /// Sees the completion of a task of `queue` whose dedup id is `dedup_id`
    /// and whose worker's result is `result`, after the lease was found held
    /// by the completing token and before the task is completed; an error
    /// goes back to the client, and the task is not completed.
    async fn completing(&self, queue: &QueueName, dedup_id: Option<&str>, result: &[u8]) -> Result<(), Status> {
        let _ = (queue, dedup_id, result);
        Ok(())
    }

    /// Sees a task of `queue` with dedup id `dedup_id` failed by its worker,
    /// after the failure was written (`will_retry`: it will be delivered
    /// again).
    async fn failed(&self, queue: &QueueName, dedup_id: &str, will_retry: bool) {
        let _ = (queue, dedup_id, will_retry);
    }

    /// Sees a heartbeat of a task of `queue` with dedup id `dedup_id` at the
    /// node that holds its lease; `Some(reason)` refuses it: the task is
    /// failed for good with `reason` (no retry), and the worker told to stop.
    async fn heartbeating(&self, queue: &QueueName, dedup_id: &str) -> Option<String> {
        let _ = (queue, dedup_id);
        None
    }

    /// Sees attempt `attempt` of task `task_id` of `queue`, with dedup id
    /// `dedup_id`, handed to a worker. Called on the poll's path: it must
    /// not wait (spawn what takes time).
    fn dispatched(&self, queue: &QueueName, dedup_id: &str, task_id: i64, attempt: u32) {
        let _ = (queue, dedup_id, task_id, attempt);
    }
}

/// `fairway.v1.Matching` on this node, routing to the others as needed.
#[derive(Clone, Debug)]
pub struct MatchingService {
    router: Arc<Router>,
    limits: Limits,
    polls: Arc<ConnectionPolls>,
    workers: Arc<WorkersSeen>,
}

impl MatchingService {
    /// `region` from the request's `field`, if it names a region with a live
    /// node (a queue homed where no node runs would have no owner).
    fn live_region(&self, field: &str, region: &str) -> Result<String, Status> {
        let region = validate::region(field, region).map_err(status::invalid)?;
        let view = self.queues().view();
        let live = view.live_regions();
        if live.contains(&region) {
            return Ok(region);
        }
        Err(status::no_live_region(field, &region, &live))
    }

    /// `MoveQueue` with `abandon_previous`: the previous generation declared
    /// lost, the home unchanged.
    async fn abandon_previous(
        &self,
        queue: &QueueName,
        request: &pb::MoveQueueRequest,
    ) -> Result<pb::MoveQueueResponse, Status> {
        let current = self.queues().get(queue).await.map_err(status::from_match)?.config();
        if request.force || !(request.home.is_empty() || request.home == current.home) {
            return Err(status::invalid(ValidationError::new(
                "abandon_previous",
                format!("keeps the home ({:?}): send it with no home and no force", current.home),
            )));
        }
        let live = self.queues().view().live_regions();
        let abandoned = self.queues().abandon_previous(queue, &live).await.map_err(status::from_match)?;
        tracing::warn!(target: "fairway::audit", %queue, previous_home = %current.previous_home, abandoned, "declared the previous generation lost");
        Ok(pb::MoveQueueResponse {
            queue: queue.to_string(),
            home: current.home,
            partitions: current.partitions,
            generation: current.generation,
            abandoned_partitions: abandoned,
        })
    }

    /// The service over this node's `queues`, checking requests against
    /// `limits` and lease tokens and forwarded requests with `keys`, calling
    /// other nodes through `peers`, with `hooks` seeing the dispatches,
    /// completions and failures of the tasks this node holds.
    pub fn new(
        queues: Arc<Queues>,
        limits: Limits,
        keys: ClusterKeys,
        peers: Peers,
        hooks: Vec<Arc<dyn TaskHook>>,
    ) -> Self {
        let polls = Arc::new(ConnectionPolls::new(limits.max_polls_per_connection));
        let workers = Arc::new(WorkersSeen::new(limits.max_workers_seen));
        MatchingService { router: Arc::new(Router::new(queues, keys, peers, hooks)), limits, polls, workers }
    }

    /// Asks the hooks whether a heartbeat of `token`'s task may extend its
    /// lease; when one refuses, fails the task for good with its reason (and
    /// tells the hooks), and returns the reason.
    async fn heartbeat_refused(&self, matcher: &QueueMatcher, token: &LeaseToken) -> Result<Option<String>, Status> {
        if self.router.hooks().is_empty() {
            return Ok(None);
        }
        let Some(dedup_id) = matcher.leased_dedup_id(token).map_err(status::from_match)? else { return Ok(None) };
        for hook in self.router.hooks() {
            let Some(reason) = hook.heartbeating(&token.queue, &dedup_id).await else { continue };
            let outcome = Outcome::Fail { retryable: false, message: reason.clone(), retry_after: None };
            let finished = matcher.finish(token, outcome).await.map_err(status::from_match)?;
            let will_retry = matches!(finished, Finished::Retrying { .. });
            for hook in self.router.hooks() {
                hook.failed(&token.queue, &dedup_id, will_retry).await;
            }
            return Ok(Some(reason));
        }
        Ok(None)
    }

    /// The router the service sends each call through, to this node's queues or
    /// to their owners.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    fn queues(&self) -> &Arc<Queues> {
        self.router.queues()
    }

    /// Completes the task of a lease, here or at the owner of its
    /// partition, as `caller` asks.
    async fn complete(&self, caller: &Caller, request: pb::CompleteTaskRequest) -> Result<(), Status> {
        let token = self.router.lease_token(&request.lease_token)?;
        authorize(caller, Rpc::CompleteTask, token.queue.as_str(), None)?;
        let origin = Origin::of(caller);
        validate::payload("result", request.result.len(), &self.limits).map_err(status::invalid)?;
        match self.router.lease_target(&token, origin).await? {
            Target::Here(matcher) => {
                // Seen once the lease is known to be this token's, and before
                // the completion, so that a completion never loses its outcome
                // and a stale token records nothing; a completion retried
                // records it again, which changes nothing (an outcome no newer
                // than the last one is ignored).
                if !self.router.hooks().is_empty() {
                    let dedup_id = matcher.leased_dedup_id(&token).map_err(status::from_match)?;
                    let dedup_id = dedup_id.as_deref();
                    for hook in self.router.hooks().iter().filter(|hook| hook.sees_completion(&token.queue, dedup_id)) {
                        hook.completing(&token.queue, dedup_id, &request.result).await?;
                    }
                }
                matcher.finish(&token, Outcome::Complete).await.map_err(status::from_match)?;
                Ok(())
            }
            Target::There(owner) => self
                .router
                .forward(&owner, Rpc::CompleteTask, request, None, Duration::ZERO, |mut peer, request| async move {
                    peer.complete_task(request).await
                })
                .await
                .map(drop),
        }
    }

    /// A client's poll of `queue` by `worker_id`, counted among the
    /// workers seen while it waits; a node's forwarded poll is not (its
    /// client's poll was counted where it arrived).
    fn watch(
        &self,
        caller: &Caller,
        queue: &QueueName,
        worker_id: &str,
        connection: Option<std::net::SocketAddr>,
    ) -> Option<Watching> {
        let now = self.queues().clock().now_ms();
        (Origin::of(caller) == Origin::Client).then(|| self.workers.poll(queue, worker_id, connection, now))
    }

    /// The queue and the wait of a poll, validated.
    fn poll_target(
        &self,
        queue: &str,
        worker_id: &str,
        max_wait: Option<prost_types::Duration>,
    ) -> Result<(QueueName, Duration), Status> {
        let queue = queue_name(queue)?;
        if worker_id.len() > MAX_WORKER_ID_BYTES {
            return Err(status::invalid(ValidationError::new(
                "worker_id",
                format!("is {} bytes long; the limit is {MAX_WORKER_ID_BYTES} bytes", worker_id.len()),
            )));
        }
        let wait = convert::duration("max_wait", max_wait).map_err(status::invalid)?;
        let default_wait = self.queues().settings().matcher.default_poll_wait;
        let wait = validate::poll_wait("max_wait", wait, default_wait, &self.limits).map_err(status::invalid)?;
        Ok((queue, wait))
    }
}

/// The most dead letters one ListDeadLetters returns.
const MAX_DEAD_LETTERS_LISTED: u32 = 1000;
/// The most dead letters one RedriveDeadLetters puts back per partition.
const MAX_REDRIVE: u32 = 10_000;

/// The queue a request names, recorded in the request's span.
fn queue_name(raw: &str) -> Result<QueueName, Status> {
    let queue = validate::queue_name("queue", raw).map_err(status::invalid)?;
    tracing::Span::current().record("queue", queue.as_str());
    Ok(queue)
}

/// `value`, or `default` when 0; at most `max`.
fn bounded(field: &str, value: u32, default: u32, max: u32) -> Result<usize, Status> {
    if value > max {
        return Err(status::invalid(ValidationError::new(field, format!("is {value}; the limit is {max}"))));
    }
    Ok(if value == 0 { default } else { value } as usize)
}

fn item_error(status: Status) -> pb::AddTaskResult {
    pb::AddTaskResult { outcome: Some(pb::add_task_result::Outcome::Error(item_error_of(status))) }
}

/// A batch item's failure, as the status a call of its own would have had.
fn item_error_of(status: Status) -> pb::ItemError {
    pb::ItemError { code: status.code() as i32, message: status.message().to_owned() }
}

/// `spec` as `caller` may add it to `queue` by `rpc`: refused unless
/// allowed, its dedup id scoped to the tenant when a tenant-bound grant
/// allows it.
fn admit_add(caller: &Caller, rpc: Rpc, queue: &QueueName, mut spec: TaskSpec) -> Result<TaskSpec, Status> {
    let field = if rpc == Rpc::AddTasks { "tasks[]" } else { "task" };
    // Run dedup ids are the schedules' own: a client's, as sent or as a
    // tenant grant scopes it, may not look like one.
    let not_a_run = |spec: &TaskSpec| match spec.dedup_id.as_deref().filter(|d| d.starts_with(RUN_DEDUP_PREFIX)) {
        Some(dedup_id) if !matches!(caller, Caller::Node(_)) => Err(status::invalid(ValidationError::new(
            format!("{field}.dedup_id"),
            format!("is {dedup_id:?}; dedup ids starting with {RUN_DEDUP_PREFIX:?} are for the runs of schedules"),
        ))),
        _ => Ok(()),
    };
    not_a_run(&spec)?;
    if let Some(grant) = authorize_add(caller, rpc, queue.as_str(), &spec)? {
        grant
            .scope_dedup_id(&mut spec)
            .map_err(|e| status::invalid(ValidationError::new(format!("{field}.dedup_id"), e)))?;
        not_a_run(&spec)?;
    }
    Ok(spec)
}

#[tonic::async_trait]
impl Matching for MatchingService {
    async fn add_task(&self, request: Request<pb::AddTaskRequest>) -> Result<Response<pb::AddTaskResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        let spec = convert::task_spec(|| "task".into(), request.task, &self.limits).map_err(status::invalid)?;
        let spec = admit_add(&caller, Rpc::AddTask, &queue, spec)?;
        let origin = Origin::of(&caller);
        Ok(Response::new(self.router.add(&queue, spec, origin, caller.principal_name()).await?))
    }

    async fn add_tasks(&self, request: Request<pb::AddTasksRequest>) -> Result<Response<pb::AddTasksResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        authorize(&caller, Rpc::AddTasks, queue.as_str(), None)?;
        validate::batch_len("tasks", request.tasks.len(), &self.limits).map_err(status::invalid)?;
        let specs: Vec<Result<_, ValidationError>> = request
            .tasks
            .into_iter()
            .enumerate()
            .map(|(i, spec)| convert::task_spec(|| format!("tasks[{i}]"), Some(spec), &self.limits))
            .collect();
        let results = join_all(specs.into_iter().map(|spec| async {
            let spec =
                match spec.map_err(status::invalid).and_then(|spec| admit_add(&caller, Rpc::AddTasks, &queue, spec)) {
                    Ok(spec) => spec,
                    Err(refused) => return item_error(refused),
                };
            match self.router.add(&queue, spec, Origin::Client, caller.principal_name()).await {
                Ok(added) => pb::AddTaskResult { outcome: Some(pb::add_task_result::Outcome::Added(added)) },
                Err(error) => item_error(error),
            }
        }))
        .await;
        Ok(Response::new(pb::AddTasksResponse { results }))
    }

    async fn poll_task(&self, request: Request<pb::PollTaskRequest>) -> Result<Response<pb::PollTaskResponse>, Status> {
        let (caller, connection) = (caller(&request)?, connection_of(&request));
        let request = request.into_inner();
        let (queue, wait) = self.poll_target(&request.queue, &request.worker_id, request.max_wait)?;
        authorize(&caller, Rpc::PollTask, queue.as_str(), None)?;
        let _slot = self.polls.take(connection, &caller)?;
        let mut watching = self.watch(&caller, &queue, &request.worker_id, connection);
        let origin = Origin::of(&caller);
        let task = self.router.poll(&queue, wait, &request.worker_id, origin).await?;
        if let (Some(watching), Some(_)) = (&mut watching, &task) {
            watching.received(1);
        }
        Ok(Response::new(pb::PollTaskResponse { task }))
    }

    async fn poll_tasks(
        &self,
        request: Request<pb::PollTasksRequest>,
    ) -> Result<Response<pb::PollTasksResponse>, Status> {
        let (caller, connection) = (caller(&request)?, connection_of(&request));
        let request = request.into_inner();
        let (queue, wait) = self.poll_target(&request.queue, &request.worker_id, request.max_wait)?;
        authorize(&caller, Rpc::PollTasks, queue.as_str(), None)?;
        let _slot = self.polls.take(connection, &caller)?;
        let origin = Origin::of(&caller);
        let max = bounded("max_tasks", request.max_tasks, 1, self.limits.max_poll_tasks)?;
        let (completions, most) = (request.completions.len(), self.limits.max_poll_tasks);
        if completions > most as usize {
            let why = format!("has {completions} completions; the limit is {most} (limits.max_poll_tasks)");
            return Err(status::invalid(ValidationError::new("completions", why)));
        }
        let mut watching = self.watch(&caller, &queue, &request.worker_id, connection);
        let max_bytes = self.limits.max_poll_response_bytes;
        // The completions reach their partitions' writers before the poll
        // takes a task (`join!` starts them first), so that under load they
        // and the new leases ride the same write.
        let completing = join_all(request.completions.into_iter().map(|completion| async {
            let error = self.complete(&caller, completion).await.err().map(item_error_of);
            pb::CompletionResult { error }
        }));
        let polling = self.router.poll_many(&queue, wait, max, max_bytes, &request.worker_id, origin);
        let (completions, tasks) = futures::join!(completing, polling);
        let tasks = tasks?;
        if let Some(watching) = &mut watching {
            watching.received(tasks.len());
        }
        Ok(Response::new(pb::PollTasksResponse { tasks, completions }))
    }

    async fn complete_task(
        &self,
        request: Request<pb::CompleteTaskRequest>,
    ) -> Result<Response<pb::CompleteTaskResponse>, Status> {
        let caller = caller(&request)?;
        self.complete(&caller, request.into_inner()).await?;
        Ok(Response::new(pb::CompleteTaskResponse {}))
    }

    async fn fail_task(&self, request: Request<pb::FailTaskRequest>) -> Result<Response<pb::FailTaskResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let token = self.router.lease_token(&request.lease_token)?;
        authorize(&caller, Rpc::FailTask, token.queue.as_str(), None)?;
        let origin = Origin::of(&caller);
        validate::failure_message("message", &request.message).map_err(status::invalid)?;
        let retry_after = convert::duration("retry_after", request.retry_after).map_err(status::invalid)?;
        let retry_after = validate::delay("retry_after", retry_after, &self.limits).map_err(status::invalid)?;
        match self.router.lease_target(&token, origin).await? {
            Target::Here(matcher) => {
                let outcome = Outcome::Fail {
                    retryable: request.retryable,
                    message: request.message,
                    retry_after: (!retry_after.is_zero()).then_some(retry_after),
                };
                let dedup_id = match self.router.hooks().is_empty() {
                    true => None,
                    false => matcher.leased_dedup_id(&token).map_err(status::from_match)?,
                };
                let finished = matcher.finish(&token, outcome).await.map_err(status::from_match)?;
                if let Some(dedup_id) = &dedup_id {
                    let will_retry = matches!(finished, Finished::Retrying { .. });
                    for hook in self.router.hooks() {
                        hook.failed(&token.queue, dedup_id, will_retry).await;
                    }
                }
                Ok(Response::new(match finished {
                    Finished::Retrying { not_before } => {
                        pb::FailTaskResponse { will_retry: true, next_attempt_at: Some(convert::timestamp(not_before)) }
                    }
                    Finished::Buried | Finished::Completed => pb::FailTaskResponse::default(),
                }))
            }
            Target::There(owner) => self
                .router
                .forward(&owner, Rpc::FailTask, request, None, Duration::ZERO, |mut peer, request| async move {
                    peer.fail_task(request).await
                })
                .await
                .map(Response::new),
        }
    }

    async fn heartbeat_task(
        &self,
        request: Request<pb::HeartbeatTaskRequest>,
    ) -> Result<Response<pb::HeartbeatTaskResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let token = self.router.lease_token(&request.lease_token)?;
        authorize(&caller, Rpc::HeartbeatTask, token.queue.as_str(), None)?;
        let origin = Origin::of(&caller);
        match self.router.lease_target(&token, origin).await? {
            Target::Here(matcher) => {
                if let Some(reason) = self.heartbeat_refused(&matcher, &token).await? {
                    return Err(Status::failed_precondition(format!("lease_token: the task was failed: {reason}")));
                }
                let deadline = matcher.heartbeat(&token).map_err(status::from_match)?;
                Ok(Response::new(pb::HeartbeatTaskResponse { lease_deadline: Some(convert::timestamp(deadline)) }))
            }
            Target::There(owner) => self
                .router
                .forward(&owner, Rpc::HeartbeatTask, request, None, Duration::ZERO, |mut peer, request| async move {
                    peer.heartbeat_task(request).await
                })
                .await
                .map(Response::new),
        }
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        authorize(&caller, Rpc::ListDeadLetters, queue.as_str(), None)?;
        let limit = bounded("limit", request.limit, 100, MAX_DEAD_LETTERS_LISTED)?;
        let filter = convert::dead_letter_filter(request.filter).map_err(status::invalid)?;
        let matcher = self.queues().get(&queue).await.map_err(status::from_match)?;
        let bounds = (self.limits.max_poll_response_bytes, self.limits.max_dead_letters_read);
        let (dead, more) = matcher.dead_letters(limit, bounds, &filter).await.map_err(status::from_match)?;
        // Payloads go to whom may work the letter's key, as GetTask's do.
        let may_see = |key: &str| caller.may(Permission::Work, queue.as_str(), Some(key)).is_ok();
        let dead_letters = dead
            .into_iter()
            .map(|(partition, d)| {
                let with_payload = may_see(&d.task.fairness_key);
                convert::dead_letter(partition, d, with_payload)
            })
            .collect();
        Ok(Response::new(pb::ListDeadLettersResponse { dead_letters, more }))
    }

    async fn redrive_dead_letters(
        &self,
        request: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        authorize(&caller, Rpc::RedriveDeadLetters, queue.as_str(), None)?;
        let origin = Origin::of(&caller);
        let limit = bounded("limit", request.limit, 1000, MAX_REDRIVE)?;
        let filter = convert::dead_letter_filter(request.filter.clone()).map_err(status::invalid)?;
        let limits = (limit, self.limits.max_dead_letters_read);
        let done = self.router.redrive(&queue, limits, (&filter, request.filter), origin).await?;
        if origin == Origin::Client {
            tracing::info!(
                target: "fairway::audit", caller = caller.name(), %queue, filter = ?filter, redriven = done.redriven,
                duplicates = done.duplicates, passed_over = done.passed_over, more = done.more,
                "redrove dead letters"
            );
        }
        Ok(Response::new(done))
    }

    async fn create_queue(
        &self,
        request: Request<pb::CreateQueueRequest>,
    ) -> Result<Response<pb::CreateQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        authorize(&caller, Rpc::CreateQueue, queue.as_str(), None)?;
        let partitions = validate::partitions("partitions", request.partitions).map_err(status::invalid)?;
        let home = if request.home.is_empty() { None } else { Some(self.live_region("home", &request.home)?) };
        let matcher = self.queues().create(&queue, partitions, home.as_deref()).await.map_err(status::from_match)?;
        let config = matcher.config();
        Ok(Response::new(pb::CreateQueueResponse { partitions: config.partitions, home: config.home }))
    }

    async fn move_queue(
        &self,
        request: Request<pb::MoveQueueRequest>,
    ) -> Result<Response<pb::MoveQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        authorize(&caller, Rpc::MoveQueue, queue.as_str(), None)?;
        if request.abandon_previous {
            return self.abandon_previous(&queue, &request).await.map(Response::new);
        }
        let home = self.live_region("home", &request.home)?;
        let moved = if request.force {
            let live = self.queues().view().live_regions();
            self.queues().force_home(&queue, &home, &live).await
        } else {
            self.queues().move_home(&queue, &home).await
        };
        let moved = moved.map_err(status::from_match)?;
        tracing::info!(target: "fairway::audit", %queue, home = %moved.home, force = request.force, generation = moved.generation, "moved the queue's home");
        Ok(Response::new(pb::MoveQueueResponse {
            queue: queue.to_string(),
            home: moved.home,
            partitions: moved.partitions,
            generation: moved.generation,
            abandoned_partitions: 0,
        }))
    }

    async fn describe_queue(
        &self,
        request: Request<pb::DescribeQueueRequest>,
    ) -> Result<Response<pb::DescribeQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let queue = queue_name(&request.queue)?;
        authorize(&caller, Rpc::DescribeQueue, queue.as_str(), None)?;
        if request.top_keys > MAX_TOP_KEYS {
            return Err(status::invalid(ValidationError::new(
                "top_keys",
                format!("is {}; the limit is {MAX_TOP_KEYS}", request.top_keys),
            )));
        }
        let top_keys = if request.top_keys == 0 { 10 } else { request.top_keys as usize };
        let matcher = self.queues().get(&queue).await.map_err(status::from_match)?;
        let node = self.queues().view().node();
        let views = matcher.partition_views(top_keys).await.map_err(status::from_store)?;
        let partitions = views
            .into_iter()
            .map(|view| match view {
                PartitionView::Held(report) => convert::held_partition(&report, node),
                PartitionView::Stored(partition, stored) => convert::stored_partition(partition, stored.map(|m| *m)),
            })
            .collect();
        Ok(Response::new(pb::DescribeQueueResponse {
            queue: queue.to_string(),
            partitions,
            waiting_pollers: matcher.waiting_pollers() as u32,
            held_for_polls: matcher.held_for_polls() as u32,
            home: matcher.config().home,
            settings: Some(super::queue_settings::to_proto(&matcher.config().settings)),
        }))
    }

    async fn list_queues(
        &self,
        request: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        super::queue_list::list(self.queues(), request).await
    }

    async fn update_queue(
        &self,
        request: Request<pb::UpdateQueueRequest>,
    ) -> Result<Response<pb::UpdateQueueResponse>, Status> {
        super::queue_settings::update(self.queues(), request).await
    }

    async fn pause_queue(
        &self,
        request: Request<pb::PauseQueueRequest>,
    ) -> Result<Response<pb::PauseQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let stored =
            super::queue_settings::pause(self.queues(), caller, &request.queue, request.fairness_key, true).await?;
        Ok(Response::new(pb::PauseQueueResponse { settings: Some(super::queue_settings::to_proto(&stored)) }))
    }

    async fn get_task(&self, request: Request<pb::GetTaskRequest>) -> Result<Response<pb::GetTaskResponse>, Status> {
        super::task_lookup::get(&self.router, request).await
    }

    async fn cancel_task(
        &self,
        request: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::CancelTaskResponse>, Status> {
        super::task_cancel::cancel(&self.router, request).await
    }

    async fn purge_queue(
        &self,
        request: Request<pb::PurgeQueueRequest>,
    ) -> Result<Response<pb::PurgeQueueResponse>, Status> {
        super::queue_purge::purge(&self.router, request).await
    }

    async fn list_workers(
        &self,
        request: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        super::cluster_lists::list_workers(&self.router, &self.workers, request).await
    }

    async fn list_nodes(
        &self,
        request: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesResponse>, Status> {
        super::cluster_lists::list_nodes(&self.router, &self.workers, request).await
    }

    async fn resume_queue(
        &self,
        request: Request<pb::ResumeQueueRequest>,
    ) -> Result<Response<pb::ResumeQueueResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let stored =
            super::queue_settings::pause(self.queues(), caller, &request.queue, request.fairness_key, false).await?;
        Ok(Response::new(pb::ResumeQueueResponse { settings: Some(super::queue_settings::to_proto(&stored)) }))
    }
}
