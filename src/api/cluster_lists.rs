//! `ListWorkers` and `ListNodes`: what every live node sees, gathered by the
//! node asked. Each live node is asked once, in parallel, within
//! `cluster.forward_timeout`; a node that does not answer is named, and the
//! answer is built from the others.
//!
//! Invariant: a caller sees only the workers of the queues it holds the
//! read permission on; a forwarded request is answered from the asked
//! node's own memory, never forwarded again. Both answers are bounded: a
//! node answers at most [`MAX_WORKERS_LISTED`] workers, and so does the
//! node asked (whatever `limits.max_workers_seen` lets each remember); the
//! members are those the store keeps (the live and the recently dead).

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tonic::{Request, Response, Status};

use super::access::{Rpc, allowed, authorize, caller};
use super::convert::timestamp;
use super::routing::{Origin, Router};
use super::status;
use super::workers_seen::WorkersSeen;
use crate::proto::v1 as pb;

/// The most workers one ListWorkers answer lists, at any node.
pub(super) const MAX_WORKERS_LISTED: usize = 1000;

/// `ListWorkers`.
pub(super) async fn list_workers(
    router: &Router,
    workers: &WorkersSeen,
    request: Request<pb::ListWorkersRequest>,
) -> Result<Response<pb::ListWorkersResponse>, Status> {
    let caller = caller(&request)?;
    let request = request.into_inner();
    let queue = if request.queue.is_empty() {
        None
    } else {
        Some(crate::model::validate::queue_name("queue", &request.queue).map_err(status::invalid)?)
    };
    match &queue {
        Some(queue) => {
            authorize(&caller, Rpc::ListWorkers, queue.as_str(), None)?;
            // A mistyped name is told apart from a queue no one polls.
            router.queues().get(queue).await.map_err(status::from_match)?;
        }
        None if !caller.holds_anywhere(Rpc::ListWorkers.permission()) => {
            authorize(&caller, Rpc::ListWorkers, "the queues", None)?
        }
        None => {}
    }
    let mut here = local_workers(router, workers, queue.as_ref());
    if Origin::of(&caller) != Origin::Client {
        let left_out = first_listed(&mut here);
        return Ok(Response::new(pb::ListWorkersResponse { workers: here, unanswered_nodes: Vec::new(), left_out }));
    }
    let asked = pb::ListWorkersRequest { queue: request.queue.clone() };
    let answers = ask_others(router, Rpc::ListWorkers, asked, |mut peer, r| async move { peer.list_workers(r).await });
    let (mut all, mut left_out) = (here, 0);
    let mut unanswered_nodes = Vec::new();
    for (node, answer) in answers.await {
        match answer {
            Ok(answer) => {
                all.extend(answer.workers);
                left_out += answer.left_out;
            }
            Err(error) => {
                tracing::debug!(%node, %error, "a node did not list its workers");
                unanswered_nodes.push(node);
            }
        }
    }
    all.retain(|seen| queue.is_some() || allowed(&caller, Rpc::ListWorkers, &seen.queue));
    left_out += first_listed(&mut all);
    Ok(Response::new(pb::ListWorkersResponse { workers: all, unanswered_nodes, left_out }))
}

/// Keeps the first [`MAX_WORKERS_LISTED`] of `workers` by queue, worker id
/// and node, in that order: how many it left out.
fn first_listed(workers: &mut Vec<pb::WorkerSeen>) -> u64 {
    workers.sort_by(|a, b| (&a.queue, &a.worker_id, &a.node).cmp(&(&b.queue, &b.worker_id, &b.node)));
    let left_out = workers.len().saturating_sub(MAX_WORKERS_LISTED);
    workers.truncate(MAX_WORKERS_LISTED);
    left_out as u64
}

fn local_workers(
    router: &Router,
    workers: &WorkersSeen,
    queue: Option<&crate::model::QueueName>,
) -> Vec<pb::WorkerSeen> {
    let node = router.queues().view().node();
    workers
        .list(router.queues().clock().now_ms())
        .into_iter()
        .filter(|seen| queue.is_none_or(|queue| &seen.queue == queue))
        .map(|seen| pb::WorkerSeen {
            worker_id: seen.worker_id,
            queue: seen.queue.to_string(),
            node: node.to_owned(),
            address: seen.address.map(|a| a.to_string()).unwrap_or_default(),
            first_poll: Some(timestamp(seen.first_poll_ms)),
            last_poll: Some(timestamp(seen.last_poll_ms)),
            polls_waiting: seen.polls_waiting,
            tasks_received: seen.tasks_received,
        })
        .collect()
}

/// `ListNodes`.
pub(super) async fn list_nodes(
    router: &Router,
    workers: &WorkersSeen,
    request: Request<pb::ListNodesRequest>,
) -> Result<Response<pb::ListNodesResponse>, Status> {
    let caller = caller(&request)?;
    if !caller.holds_anywhere(Rpc::ListNodes.permission()) {
        // A node's proof is checked here too.
        authorize(&caller, Rpc::ListNodes, "the nodes", None)?;
    }
    let queues = router.queues();
    let view = queues.view();
    let now = queues.clock().now_ms();
    let me = own_state(router, workers, now);
    if Origin::of(&caller) != Origin::Client {
        return Ok(Response::new(pb::ListNodesResponse { nodes: vec![me], answering_node: view.node().to_owned() }));
    }
    let asking =
        ask_others(
            router,
            Rpc::ListNodes,
            pb::ListNodesRequest {},
            |mut peer, r| async move { peer.list_nodes(r).await },
        );
    let (members, answers) = futures::join!(queues.store().members(), asking);
    let members = members.map_err(status::from_store)?;
    let mut nodes: Vec<pb::NodeState> = members
        .into_iter()
        .map(|member| pb::NodeState {
            address: member.reached_at().to_owned(),
            live: view.is_live(&member.node),
            started: Some(timestamp(member.started_unix_ms)),
            last_heartbeat: Some(timestamp(member.heartbeat_unix_ms)),
            node: member.node,
            region: member.region,
            ..pb::NodeState::default()
        })
        .collect();
    let mut merge = |answered: pb::NodeState| match nodes.iter_mut().find(|n| n.node == answered.node) {
        Some(known) => {
            known.answered = true;
            known.partitions_held = answered.partitions_held;
            known.leased = answered.leased;
            known.workers = answered.workers;
        }
        None => nodes.push(answered),
    };
    merge(me);
    for (node, answer) in answers {
        match answer.map(|a| a.nodes.into_iter().find(|n| n.node == node)) {
            Ok(Some(answered)) => merge(answered),
            Ok(None) => tracing::debug!(%node, "a node answered ListNodes without itself"),
            Err(error) => tracing::debug!(%node, %error, "a node did not answer ListNodes"),
        }
    }
    nodes.sort_by(|a, b| (&a.region, &a.node).cmp(&(&b.region, &b.node)));
    Ok(Response::new(pb::ListNodesResponse { nodes, answering_node: view.node().to_owned() }))
}

/// This node as it sees itself.
fn own_state(router: &Router, workers: &WorkersSeen, now: i64) -> pb::NodeState {
    let queues = router.queues();
    let view = queues.view();
    let stats = queues.stats();
    pb::NodeState {
        node: view.node().to_owned(),
        address: view.address().to_owned(),
        region: view.region().to_owned(),
        live: true,
        answered: true,
        partitions_held: stats.iter().map(|(_, s)| s.owned_partitions).sum::<u64>().min(u32::MAX.into()) as u32,
        leased: stats.iter().map(|(_, s)| s.leased).sum(),
        workers: workers.count(now).min(u32::MAX as usize) as u32,
        ..pb::NodeState::default()
    }
}

/// Asks every other live node `message` by `rpc`, at once, each within
/// the forward timeout: each node's name and answer.
async fn ask_others<M, R, Answer>(
    router: &Router,
    rpc: Rpc,
    message: M,
    call: impl Fn(crate::proto::v1::matching_client::MatchingClient<tonic::transport::Channel>, Request<M>) -> Answer,
) -> Vec<(String, Result<R, Status>)>
where
    M: Clone,
    Answer: Future<Output = Result<Response<R>, Status>>,
{
    let view: Arc<_> = router.queues().view().clone();
    let others: Vec<String> = view.live().into_iter().filter(|node| node != view.node()).collect();
    let asks = others.into_iter().map(|node| {
        let message = message.clone();
        let call = &call;
        async move {
            let answer = router.forward(&node, rpc, message, None, Duration::ZERO, call).await;
            (node, answer)
        }
    });
    join_all(asks).await
}
