//! Routing requests between nodes: any node accepts any request; adds go to
//! a partition this node holds, or are forwarded to the owner of one; polls
//! ask the owner of the partition whose turn it is first (here, or another
//! node with a probe that does not wait), then this node's partitions, then
//! the other owners', then wait where the queue's partitions are.
//!
//! Invariant: a forwarded request is never forwarded again, so a stale view
//! of ownership costs one failed hop, never a loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::Channel;
use tonic::{Request, Status};

use super::access::Rpc;
use super::matching::TaskHook;
use super::{convert, status};
use crate::clock::{Clock, SystemClock};
use crate::cluster::{FORWARDED, FORWARDED_PARTITION, Peers};
use crate::core::engine::{Candidate, DeadLetterFilter};
use crate::matcher::{DispatchedTask, LeaseToken, QueueMatcher, Queues};
use crate::model::ValidationError;
use crate::model::{QueueName, TaskSpec};
use crate::partition::Redriven;
use crate::proto::v1 as pb;
use crate::proto::v1::matching_client::MatchingClient;
use crate::security::{Caller, ClusterKeys, NODE_PROOF};
use crate::store::QueueConfig;

/// Where a request came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// From a client: may be forwarded.
    Client,
    /// From another node, for the partition named (adds) or for this node's
    /// partitions only (polls).
    Forwarded(Option<u32>),
}

impl Origin {
    /// Where a request of `caller` came from: a node's forwarded requests
    /// passed [`super::access::Gate`] with their proof.
    pub fn of(caller: &Caller) -> Origin {
        match caller {
            Caller::Node(call) => Origin::Forwarded(call.partition),
            Caller::Anyone | Caller::Principal(_) => Origin::Client,
        }
    }
}

/// Everything a task adds to a PollTasks response besides its payload and
/// its fairness key, with room to spare: a lease token (with a queue name of
/// at most 128 bytes), numbers, timestamps and the framing.
const TASK_OVERHEAD_BYTES: usize = 1024;

/// The bytes `task` adds to a PollTasks response.
fn response_bytes(task: &pb::Task) -> usize {
    prost::encoding::message::encoded_len(1, task)
}

/// Adds ready tasks to `tasks`, up to `max` of them and `max_bytes` in all,
/// in one take, so that their leases ride one write. A task taken is leased
/// and cannot be put back, so each is taken only if its own size (known
/// before it is taken) still fits; the first is taken whatever its size.
async fn take_ready_within(
    router: &Router,
    matcher: &QueueMatcher,
    max: usize,
    max_bytes: usize,
    worker_id: &str,
    tasks: &mut Vec<pb::Task>,
) {
    let want = max.saturating_sub(tasks.len());
    if want == 0 {
        return;
    }
    // Counted when a task is offered: one offered and then lost to a race
    // is counted too, which only leaves room unused.
    let (mut used, mut offered) = (tasks.iter().map(response_bytes).sum::<usize>(), tasks.len());
    let mut fits = |candidate: &Candidate| {
        let bytes = candidate.bytes.saturating_add(TASK_OVERHEAD_BYTES);
        let fits = offered == 0 || used.saturating_add(bytes) <= max_bytes;
        if fits {
            used = used.saturating_add(bytes);
            offered += 1;
        }
        fits
    };
    for task in matcher.take_ready(want, &mut fits).await {
        let task = router.deliver(matcher, task, worker_id);
        debug_assert!(
            response_bytes(&task) <= task.payload.len() + task.fairness_key.len() + TASK_OVERHEAD_BYTES,
            "TASK_OVERHEAD_BYTES is too small"
        );
        tasks.push(task);
    }
}

/// The routing decisions of one node.
#[derive(Debug)]
pub struct Router {
    queues: Arc<Queues>,
    peers: Peers,
    turn: AtomicUsize,
    keys: ClusterKeys,
    hooks: Vec<Arc<dyn TaskHook>>,
}

impl Router {
    /// Routes to `queues` here and to their owners elsewhere through
    /// `peers`, signing lease tokens and proving forwarded requests with `keys`,
    /// showing the tasks it hands out here to `hooks`.
    pub fn new(queues: Arc<Queues>, keys: ClusterKeys, peers: Peers, hooks: Vec<Arc<dyn TaskHook>>) -> Router {
        Router { queues, peers, turn: AtomicUsize::new(0), keys, hooks }
    }

    /// What sees the tasks of this node's partitions dispatched, completed
    /// and failed.
    pub fn hooks(&self) -> &[Arc<dyn TaskHook>] {
        &self.hooks
    }

    /// A task dispatched here as its worker gets it, shown to the hooks.
    /// Its lease records `worker_id`, for GetTask.
    fn deliver(&self, matcher: &QueueMatcher, task: DispatchedTask, worker_id: &str) -> pb::Task {
        if let Some(dedup_id) = &task.task.dedup_id {
            for hook in &self.hooks {
                hook.dispatched(matcher.name(), dedup_id, task.task.task_id, task.task.attempt);
            }
        }
        matcher.worker_took(&task.token, worker_id);
        convert::task(task, &self.keys, self.now_ms())
    }

    /// Sends `message` to `owner` as a request this node forwards (never
    /// forwarded again), for `partition` or for the receiver's partitions,
    /// with its proof, through `call`; waits for the answer at most `wait`
    /// plus `cluster.forward_timeout`, and tells the owner that deadline so
    /// that it gives up too. A paused or cut-off owner costs the caller
    /// that wait, never a hang.
    pub(super) async fn forward<M, R, Answer>(
        &self,
        owner: &str,
        rpc: Rpc,
        message: M,
        partition: Option<u32>,
        wait: Duration,
        call: impl FnOnce(MatchingClient<Channel>, Request<M>) -> Answer,
    ) -> Result<R, Status>
    where
        Answer: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let mut request = Request::new(message);
        let subject = partition.map(|p| p.to_string()).unwrap_or_default();
        let metadata = request.metadata_mut();
        match partition {
            Some(_) => metadata.insert(FORWARDED_PARTITION, subject.parse().expect("digits")),
            None => metadata.insert(FORWARDED, "1".parse().expect("ascii")),
        };
        let now_secs = SystemClock.now_ms().div_euclid(1000);
        metadata.insert(NODE_PROOF, self.keys.node_proof(rpc.name(), &subject, now_secs).parse().expect("ascii"));
        let deadline = self.peers.deadline(wait);
        request.set_timeout(deadline);
        let client = self.peers.client(&self.queues.view().address_of(owner)).map_err(status::from_peer)?;
        match tokio::time::timeout(deadline, call(client, request)).await {
            Ok(Ok(answer)) => Ok(answer.into_inner()),
            // The deadline the request carries, run out on either side.
            Ok(Err(error)) if error.code() == tonic::Code::Cancelled => Err(status::no_answer(owner, deadline)),
            Ok(Err(error)) => Err(status::from_forwarded(error, owner)),
            Err(_) => Err(status::no_answer(owner, deadline)),
        }
    }

    /// The lease token `text`, if this cluster signed it; its queue is
    /// recorded in the request's span.
    pub fn lease_token(&self, text: &str) -> Result<LeaseToken, Status> {
        let token = LeaseToken::verify(text, &self.keys, self.now_ms())
            .map_err(|message| status::invalid(ValidationError::new("lease_token", message)))?;
        tracing::Span::current().record("queue", token.queue.as_str());
        Ok(token)
    }

    pub fn queues(&self) -> &Arc<Queues> {
        &self.queues
    }

    /// The node's time, which dates lease tokens signed and checked here.
    fn now_ms(&self) -> i64 {
        self.queues.clock().now_ms()
    }

    fn next_turn(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds `spec` to `queue`, which the add creates if `matcher.create_on_add`
    /// allows, recording `creator` (the principal, if one calls) with it.
    pub async fn add(
        &self,
        queue: &QueueName,
        spec: TaskSpec,
        origin: Origin,
        creator: Option<&str>,
    ) -> Result<pb::AddTaskResponse, Status> {
        let matcher = self.queues.get_for_add(queue, creator).await.map_err(status::from_match)?;
        // A task with a dedup id must go to its id's partition.
        let required = matcher.partition_for(&spec);
        let local = match (origin, required) {
            (Origin::Forwarded(partition), _) => Some(partition),
            (Origin::Client, Some(partition)) => matcher.holds(partition).then_some(Some(partition)),
            (Origin::Client, None) if matcher.held().is_empty() => None,
            (Origin::Client, None) => Some(None),
        };
        if let Some(partition) = local {
            let outcome = matcher.add(spec, partition).await.map_err(status::from_match)?;
            return Ok(pb::AddTaskResponse {
                task_id: outcome.task_id,
                sync_matched: outcome.sync_matched,
                duplicate: outcome.duplicate,
                partition: outcome.partition,
            });
        }
        let partition = required.unwrap_or_else(|| {
            let config = matcher.config();
            config.partition_number((self.next_turn() % config.partitions as usize) as u32)
        });
        let owner = self.remote_owner(&matcher, partition)?;
        let message = pb::AddTaskRequest { queue: queue.to_string(), task: Some(to_pb(spec)) };
        // Boxed: a local add, the common case, need not carry a forward's room.
        Box::pin(self.forward(
            &owner,
            Rpc::AddTask,
            message,
            Some(partition),
            Duration::ZERO,
            |mut peer, request| async move { peer.add_task(request).await },
        ))
        .await
    }

    /// The owner of `partition` when it is another node.
    pub(super) fn remote_owner(&self, matcher: &QueueMatcher, partition: u32) -> Result<String, Status> {
        let view = self.queues.view();
        let config = matcher.config();
        let numbers = config.partition_numbers();
        if !numbers.contains(&partition) {
            return Err(status::not_current_generation(matcher.name(), partition));
        }
        let index = (partition - numbers.start) as usize;
        match view.owners(matcher.name(), &config).into_iter().nth(index).flatten() {
            Some(owner) if owner != view.node() => Ok(owner),
            Some(_) => Err(status::changing_owner(matcher.name(), partition)),
            None => Err(no_live_home(matcher.name(), &config)),
        }
    }

    pub async fn poll(
        &self,
        queue: &QueueName,
        wait: Duration,
        worker_id: &str,
        origin: Origin,
    ) -> Result<Option<pb::Task>, Status> {
        let matcher = self.queues.get(queue).await.map_err(status::from_match)?;
        if origin != Origin::Client {
            let task = matcher.poll(wait).await.map_err(status::from_match)?;
            return Ok(task.map(|task| self.deliver(&matcher, task, worker_id)));
        }
        // Partitions take turns at being asked first, here or at their owner:
        // were local partitions always first, a node with many workers would
        // leave the backlog of another node's partitions waiting.
        let first = self.owner_of_next_turn(&matcher);
        if let Some(owner) = &first
            && let Some(task) = self.forward_poll(owner, queue, Duration::ZERO, worker_id).await?
        {
            return Ok(Some(task));
        }
        if let Some(task) = matcher.try_take().await {
            return Ok(Some(self.deliver(&matcher, task, worker_id)));
        }
        let others = self.other_owners(&matcher);
        for owner in others.iter().filter(|owner| Some(*owner) != first.as_ref()) {
            if let Some(task) = self.forward_poll(owner, queue, Duration::ZERO, worker_id).await? {
                return Ok(Some(task));
            }
        }
        if matcher.held().is_empty() && others.is_empty() {
            // Nobody may own its partitions now: say so rather than park
            // the poll where no task can come.
            let config = matcher.config();
            if self.queues.view().owners(matcher.name(), &config).iter().all(Option::is_none) {
                return Err(no_live_home(matcher.name(), &config));
            }
        }
        if !matcher.held().is_empty() || others.is_empty() {
            let task = matcher.poll(wait).await.map_err(status::from_match)?;
            return Ok(task.map(|task| self.deliver(&matcher, task, worker_id)));
        }
        let owner = &others[self.next_turn() % others.len()];
        self.forward_poll(owner, queue, wait, worker_id).await
    }

    /// Up to `max` tasks within `max_bytes`: those ready now at the owner
    /// of the partition whose turn it is (another node), or else those ready
    /// here, or else the first that [`Router::poll`] finds (here or at
    /// another owner) followed by those ready here by then.
    pub async fn poll_many(
        &self,
        queue: &QueueName,
        wait: Duration,
        max: usize,
        max_bytes: usize,
        worker_id: &str,
        origin: Origin,
    ) -> Result<Vec<pb::Task>, Status> {
        let matcher = self.queues.get(queue).await.map_err(status::from_match)?;
        // The turn first, as for one task: a node whose own partitions
        // always had the ready tasks would leave another node's backlog
        // waiting for as long as its own lasted.
        if origin == Origin::Client
            && let Some(owner) = self.owner_of_next_turn(&matcher)
        {
            let tasks = self.forward_poll_many(&owner, queue, max, worker_id).await?;
            if !tasks.is_empty() {
                return Ok(tasks);
            }
        }
        let mut tasks = Vec::new();
        take_ready_within(self, &matcher, max, max_bytes, worker_id, &mut tasks).await;
        if !tasks.is_empty() {
            return Ok(tasks);
        }
        let Some(first) = self.poll(queue, wait, worker_id, origin).await? else {
            return Ok(Vec::new());
        };
        tasks.push(first);
        take_ready_within(self, &matcher, max, max_bytes, worker_id, &mut tasks).await;
        Ok(tasks)
    }

    /// The owner of the partition whose turn it is to be asked first, when
    /// that is another node: each owner is asked first in proportion to the
    /// partitions it owns.
    fn owner_of_next_turn(&self, matcher: &QueueMatcher) -> Option<String> {
        let view = self.queues.view();
        if !view.is_shared() {
            return None;
        }
        let config = matcher.config();
        let turn = self.next_turn() % config.partitions as usize;
        let owner = view.owners(matcher.name(), &config).into_iter().nth(turn).flatten()?;
        (owner != view.node()).then_some(owner)
    }

    /// The other live nodes that own partitions of the queue.
    fn other_owners(&self, matcher: &QueueMatcher) -> Vec<String> {
        let view = self.queues.view();
        let mut owners: Vec<String> = view
            .owners(matcher.name(), &matcher.config())
            .into_iter()
            .flatten()
            .filter(|owner| owner != view.node())
            .collect();
        owners.sort();
        owners.dedup();
        owners
    }

    async fn forward_poll(
        &self,
        owner: &str,
        queue: &QueueName,
        wait: Duration,
        worker_id: &str,
    ) -> Result<Option<pb::Task>, Status> {
        let message = pb::PollTaskRequest {
            queue: queue.to_string(),
            worker_id: worker_id.to_owned(),
            max_wait: Some(prost_types::Duration::try_from(wait).unwrap_or_default()),
        };
        let answer = self.forward(owner, Rpc::PollTask, message, None, wait, |mut peer, request| async move {
            peer.poll_task(request).await
        });
        Ok(nothing_if_unanswered(owner, answer.await)?.and_then(|response| response.task))
    }

    /// Up to `max` tasks ready now at `owner` (its own bound on response
    /// bytes applies there); none when it has none or cannot answer.
    async fn forward_poll_many(
        &self,
        owner: &str,
        queue: &QueueName,
        max: usize,
        worker_id: &str,
    ) -> Result<Vec<pb::Task>, Status> {
        let message = pb::PollTasksRequest {
            queue: queue.to_string(),
            worker_id: worker_id.to_owned(),
            max_wait: Some(prost_types::Duration::default()),
            max_tasks: u32::try_from(max).unwrap_or(u32::MAX),
            completions: Vec::new(),
        };
        let answer =
            self.forward(owner, Rpc::PollTasks, message, None, Duration::ZERO, |mut peer, request| async move {
                peer.poll_tasks(request).await
            });
        Ok(nothing_if_unanswered(owner, answer.await)?.map(|response| response.tasks).unwrap_or_default())
    }

    /// Where a request on the lease of `token` must be served: here when
    /// this node holds its partition (or the request was forwarded), else by
    /// the partition's owner.
    pub async fn lease_target(&self, token: &LeaseToken, origin: Origin) -> Result<Target, Status> {
        let matcher = self.queues.get(&token.queue).await.map_err(status::from_match)?;
        if origin != Origin::Client || matcher.holds(token.partition) {
            return Ok(Target::Here(matcher));
        }
        Ok(Target::There(self.remote_owner(&matcher, token.partition)?))
    }

    /// Puts up to `limit` dead letters of each partition that `filter`
    /// chooses back in the queue, reading at most `max_read` of each (only
    /// of the partition named, when forwarded); the filter comes as checked
    /// and as asked for, to forward.
    pub async fn redrive(
        &self,
        queue: &QueueName,
        (limit, max_read): (usize, usize),
        (filter, asked): (&DeadLetterFilter, Option<pb::DeadLetterFilter>),
        origin: Origin,
    ) -> Result<pb::RedriveDeadLettersResponse, Status> {
        let matcher = self.queues.get(queue).await.map_err(status::from_match)?;
        let here = |redriven: Redriven| pb::RedriveDeadLettersResponse {
            redriven: redriven.redriven as u64,
            duplicates: redriven.duplicates as u64,
            passed_over: redriven.passed_over as u64,
            more: redriven.more,
        };
        if let Origin::Forwarded(Some(partition)) = origin {
            return Ok(here(matcher.redrive(partition, limit, filter, max_read).await.map_err(status::from_match)?));
        }
        let mut total = pb::RedriveDeadLettersResponse::default();
        for partition in matcher.config().partition_numbers() {
            let done = if matcher.holds(partition) {
                here(matcher.redrive(partition, limit, filter, max_read).await.map_err(status::from_match)?)
            } else {
                let owner = self.remote_owner(&matcher, partition)?;
                let message = pb::RedriveDeadLettersRequest {
                    queue: queue.to_string(),
                    limit: limit as u32,
                    filter: asked.clone(),
                };
                self.forward(
                    &owner,
                    Rpc::RedriveDeadLetters,
                    message,
                    Some(partition),
                    Duration::ZERO,
                    |mut peer, request| async move { peer.redrive_dead_letters(request).await },
                )
                .await?
            };
            total.redriven += done.redriven;
            total.duplicates += done.duplicates;
            total.passed_over += done.passed_over;
            total.more |= done.more;
        }
        Ok(total)
    }
}

/// Where a lease request is served.
pub enum Target {
    Here(Arc<QueueMatcher>),
    /// The partition's owner, another node, by its address.
    There(String),
}

fn to_pb(spec: TaskSpec) -> pb::TaskSpec {
    pb::TaskSpec {
        fairness_key: spec.fairness_key,
        fairness_weight: spec.fairness_weight.unwrap_or(0.0),
        priority: spec.priority.get(),
        payload: spec.payload,
        dedup_id: spec.dedup_id.unwrap_or_default(),
        delay: (!spec.delay.is_zero()).then(|| prost_types::Duration::try_from(spec.delay).unwrap_or_default()),
        deadline: spec.deadline.map(super::convert::timestamp),
        // A forwarded task carries its size or its cost, not both.
        cost: if spec.size.is_some() { 0 } else { spec.cost },
        size: spec.size.unwrap_or(0),
    }
}

/// A forwarded poll's answer; `None` when the peer could not be reached
/// (it has no task for us now) or gave no answer in time (a task it leased
/// to the poll meanwhile comes back when its lease runs out).
fn nothing_if_unanswered<R>(owner: &str, answer: Result<R, Status>) -> Result<Option<R>, Status> {
    match answer {
        Ok(response) => Ok(Some(response)),
        Err(error) if error.code() == tonic::Code::Unavailable => {
            tracing::debug!(%owner, %error, "peer unavailable for a poll");
            Ok(None)
        }
        Err(error) if error.metadata().get(status::MAYBE_APPLIED).is_some() => {
            tracing::warn!(%owner, %error, "peer gave no answer to a poll");
            Ok(None)
        }
        // The arguments passed this node's checks: a peer with lower limits
        // (`limits.max_poll_tasks`, during a rolling change of the config)
        // or at its bound of requests refuses them, and the poll goes on
        // with this node's partitions rather than fail for a turn.
        Err(error) if matches!(error.code(), tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted) => {
            tracing::warn!(%owner, %error, "peer refused a forwarded poll");
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// UNAVAILABLE for a queue none of whose partitions may be owned now: its
/// home region has no live node.
fn no_live_home(queue: &QueueName, config: &QueueConfig) -> Status {
    status::no_live_home(queue, &config.home)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_goes_on_without_a_peer_that_is_away_or_refuses_it_and_fails_on_anything_else() {
        let unanswered = [
            Status::unavailable("connection refused"),
            Status::invalid_argument("max_tasks: must be 1 to 16"),
            Status::resource_exhausted("too many requests"),
        ];
        let mut no_answer = Status::unknown("got no answer within 2s");
        no_answer.metadata_mut().insert(status::MAYBE_APPLIED, "true".parse().expect("ascii"));
        let unanswered = unanswered.into_iter().chain([no_answer]);
        for error in unanswered {
            let code = error.code();
            assert!(matches!(nothing_if_unanswered::<()>("peer", Err(error)), Ok(None)), "{code:?}");
        }
        assert!(matches!(nothing_if_unanswered("peer", Ok(7)), Ok(Some(7))));
        let denied = nothing_if_unanswered::<()>("peer", Err(Status::permission_denied("no proof")));
        assert_eq!(
            denied.expect_err("a refusal of the node's proof is an error").code(),
            tonic::Code::PermissionDenied
        );
    }
}
