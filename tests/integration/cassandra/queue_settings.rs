//! Settings stored with a queue on three `fairway serve` processes sharing
//! a keyspace, each holding one of the queue's three partitions: a change
//! made through one node reaches the other two at their next listing of the
//! queues, and then a paused key is not dispatched by any of them while the
//! others are, a new lease runs for the lease timeout stored, any node
//! answers GetTask for a task of any partition, and on resume
//! the key's tasks come back from every partition, in order. Any node then
//! lists the workers polling every node and the three nodes; node 2 killed
//! is listed dead, with its workers gone.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;

use super::Keyspace;
use crate::support::{Client, ServerProcess, wait};

const QUEUE: &str = "settings";

/// Fast membership, and a listing of the queues every 500 ms.
const ENV: &[(&str, &str)] = &[
    ("FAIRWAY_CLUSTER__HEARTBEAT_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__MEMBER_TIMEOUT", "3s"),
    ("FAIRWAY_CLUSTER__REBALANCE_INTERVAL", "500ms"),
    ("FAIRWAY_CLUSTER__FORWARD_TIMEOUT", "2s"),
];

fn now_ms() -> i64 {
    use fairway::clock::Clock;
    fairway::clock::SystemClock.now_ms()
}

async fn describe(client: &mut Client) -> pb::DescribeQueueResponse {
    let request = pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 1 };
    client.describe_queue(request).await.expect("describe").into_inner()
}

/// Waits until every node says the queue's stored settings are at
/// `version`; how long that took after `since`.
async fn applied_everywhere(clients: &mut [Client], version: u64, since: Instant) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut versions = Vec::new();
        for client in clients.iter_mut() {
            versions.push(describe(client).await.settings.map_or(0, |s| s.version));
        }
        if versions.iter().all(|v| *v == version) {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "settings at {versions:?} after 60 s, not all at {version}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Adds `n` tasks of each key through `client` (to the partition that node
/// holds); their partitions and ids.
async fn add(client: &mut Client, keys: &[&str], n: usize, tag: &str) -> Vec<(u32, i64)> {
    let mut added = Vec::new();
    for key in keys {
        for i in 0..n {
            let task = pb::TaskSpec {
                fairness_key: (*key).into(),
                payload: format!("{tag} {key} {i}").into_bytes(),
                ..Default::default()
            };
            let request = pb::AddTaskRequest { queue: QUEUE.into(), task: Some(task) };
            let response = client.add_task(request).await.expect("add").into_inner();
            added.push((response.partition, response.task_id));
        }
    }
    added
}

/// Polls through `client` until `n` tasks came or a poll of 2 s brings
/// none; completes each.
async fn take(client: &mut Client, n: usize) -> Vec<pb::Task> {
    let mut taken = Vec::new();
    while taken.len() < n {
        let request = pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "settings-test".into(),
            max_wait: wait(Duration::from_secs(2)),
            max_tasks: 16,
            completions: Vec::new(),
        };
        let tasks = client.poll_tasks(request).await.expect("poll").into_inner().tasks;
        if tasks.is_empty() {
            break;
        }
        for task in &tasks {
            let complete = pb::CompleteTaskRequest { lease_token: task.lease_token.clone(), result: Vec::new() };
            client.complete_task(complete).await.expect("complete");
        }
        taken.extend(tasks);
    }
    taken
}

#[tokio::test]
async fn settings_changed_through_one_node_apply_on_all_three() {
    let keyspace = Keyspace::create().await;
    let mut nodes: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::start_on(&keyspace.store_url(), ENV)).collect();
    let mut clients = Vec::new();
    for node in &nodes {
        clients.push(node.client().await);
    }
    let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 3, home: String::new() };
    clients[0].create_queue(create).await.expect("create the queue");

    // Each node holds one partition (at most ⌈3/3⌉ each, once all three are live).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let owners: BTreeSet<String> = describe(&mut clients[0])
            .await
            .partitions
            .into_iter()
            .filter(|p| !p.owner.is_empty())
            .map(|p| p.owner)
            .collect();
        if owners.len() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "the three partitions are not held by three nodes: {owners:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let partitions = describe(&mut clients[0]).await.partitions;
    for (i, node) in nodes.iter().enumerate() {
        let held = partitions.iter().filter(|p| p.owner == node.addr.to_string()).count();
        assert_eq!(held, 1, "node {i} holds one partition: {partitions:?}");
    }

    // Through node 0, pause a key; through node 1, a 7 s lease timeout.
    let since = Instant::now();
    let paused = pb::PauseQueueRequest { queue: QUEUE.into(), fairness_key: Some("held".into()) };
    let settings = clients[0].pause_queue(paused).await.expect("pause").into_inner().settings.unwrap();
    assert_eq!((settings.version, settings.paused_keys.clone()), (1, vec!["held".to_owned()]));
    let update = pb::UpdateQueueRequest {
        queue: QUEUE.into(),
        settings: Some(pb::QueueSettings {
            lease_timeout: Some(prost_types::Duration { seconds: 7, nanos: 0 }),
            ..Default::default()
        }),
        clear: Vec::new(),
        expected_version: 1,
    };
    let settings = clients[1].update_queue(update.clone()).await.expect("update").into_inner().settings.unwrap();
    assert_eq!(settings.version, 2);
    assert_eq!(settings.paused_keys, vec!["held".to_owned()], "the pause stays");
    let stale = clients[2].update_queue(update).await.expect_err("a change for version 1 is stale now");
    assert_eq!(stale.code(), tonic::Code::Aborted, "{stale:?}");
    let took = applied_everywhere(&mut clients, 2, since).await;
    println!("paused and updated through nodes 0 and 1: applied on all three within {took:?}");

    // On every node: the other key's tasks are dispatched, the paused key's
    // are not, and each lease runs for 7 s.
    let mut held = Vec::new();
    for (i, client) in clients.iter_mut().enumerate() {
        held.push(add(client, &["held", "free"], 3, &format!("node{i}")).await[0]);
        let before = now_ms();
        let taken = take(client, 6).await;
        let keys: Vec<&str> = taken.iter().map(|t| t.fairness_key.as_str()).collect();
        assert_eq!(keys, vec!["free"; 3], "node {i} dispatched only the key not paused");
        for task in &taken {
            let deadline = task.lease_deadline.as_ref().unwrap();
            let lease = deadline.seconds * 1000 + i64::from(deadline.nanos / 1_000_000) - before;
            assert!((6_000..=7_000 + 5_000).contains(&lease), "node {i}: a lease of {lease} ms, not the 7 s stored");
        }
    }

    // Any node answers GetTask for a task of any partition (its owner
    // looks it up), and says what the task waits for.
    for (i, client) in clients.iter_mut().enumerate() {
        for (partition, task_id) in &held {
            let request = pb::GetTaskRequest {
                queue: QUEUE.into(),
                partition: *partition,
                task_id: *task_id,
                include_payload: true,
            };
            let got =
                client.get_task(request).await.unwrap_or_else(|e| panic!("node {i}, {partition}/{task_id}: {e:?}"));
            let got = got.into_inner();
            assert_eq!(got.state(), pb::get_task_response::State::Pending, "node {i}, {partition}/{task_id}");
            assert_eq!(got.waiting_for, "its key is paused", "node {i}, {partition}/{task_id}");
            assert!(got.payload.ends_with(b"held 0"), "node {i}: {:?}", String::from_utf8_lossy(&got.payload));
        }
    }

    // Resumed through node 2: every node hands out the key's tasks, in order.
    let since = Instant::now();
    let resume = pb::ResumeQueueRequest { queue: QUEUE.into(), fairness_key: Some("held".into()) };
    let settings = clients[2].resume_queue(resume).await.expect("resume").into_inner().settings.unwrap();
    assert!(settings.paused_keys.is_empty() && settings.version == 3);
    let took = applied_everywhere(&mut clients, 3, since).await;
    println!("resumed through node 2: applied on all three within {took:?}");
    // Polls reach the partitions of other nodes too: the nine tasks come
    // through whichever node, each once, and each partition's in order.
    let mut payloads = Vec::new();
    for client in clients.iter_mut() {
        payloads
            .extend(take(client, 9 - payloads.len()).await.into_iter().map(|t| String::from_utf8(t.payload).unwrap()));
    }
    assert_eq!(payloads.len(), 9, "every task of the resumed key: {payloads:?}");
    for i in 0..3 {
        let of_node: Vec<&String> = payloads.iter().filter(|p| p.starts_with(&format!("node{i} "))).collect();
        let expected: Vec<String> = (0..3).map(|n| format!("node{i} held {n}")).collect();
        assert_eq!(of_node, expected.iter().collect::<Vec<_>>(), "node {i}'s partition hands them out in order");
    }

    // Any node lists the workers polling every node, and the nodes.
    let waiting_poll = {
        let mut client = clients[2].clone();
        tokio::spawn(async move {
            let request = pb::PollTaskRequest {
                queue: QUEUE.into(),
                worker_id: "waiting-worker".into(),
                max_wait: wait(Duration::from_secs(20)),
            };
            client.poll_task(request).await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let workers = loop {
        let request = pb::ListWorkersRequest { queue: QUEUE.into() };
        let listed = clients[0].list_workers(request).await.expect("list workers").into_inner();
        if listed.workers.iter().any(|w| w.worker_id == "waiting-worker" && w.polls_waiting == 1) {
            break listed;
        }
        assert!(Instant::now() < deadline, "the waiting worker at node 2 is not listed through node 0: {listed:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(workers.unanswered_nodes.is_empty(), "{workers:?}");
    let tested: Vec<&pb::WorkerSeen> = workers.workers.iter().filter(|w| w.worker_id == "settings-test").collect();
    let at: BTreeSet<&str> = tested.iter().map(|w| w.node.as_str()).collect();
    assert_eq!(at.len(), 3, "the test's worker polled all three nodes, each reports it: {tested:?}");
    let received: u64 = tested.iter().map(|w| w.tasks_received).sum();
    assert_eq!(received, 18, "the 9 free tasks and the 9 resumed ones, counted where the polls arrived: {tested:?}");
    let listed_nodes = clients[1].list_nodes(pb::ListNodesRequest {}).await.expect("list nodes").into_inner();
    assert_eq!(listed_nodes.nodes.len(), 3, "{listed_nodes:?}");
    for node in &listed_nodes.nodes {
        assert!(node.live && node.answered, "{node:?}");
        assert_eq!(node.partitions_held, 1, "{node:?}");
    }
    for (i, node) in nodes.iter().enumerate() {
        let name = node.addr.to_string();
        let state = listed_nodes.nodes.iter().find(|n| n.node == name).expect("every node is listed");
        assert_eq!(state.workers, if i == 2 { 2 } else { 1 }, "node {i}: {state:?}");
    }

    // Node 2 killed: it is listed dead (or live and not answering until
    // its heartbeat is old), never missing, and its workers go with it.
    let node2 = nodes.pop().expect("three nodes");
    let killed = node2.addr.to_string();
    node2.kill();
    let _ = waiting_poll.await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = clients[0].list_nodes(pb::ListNodesRequest {}).await.expect("list nodes").into_inner();
        let state = listed.nodes.iter().find(|n| n.node == killed).expect("the killed node is listed");
        assert!(!state.answered, "{state:?}");
        if !state.live {
            break;
        }
        assert!(Instant::now() < deadline, "node 2 is still counted live 30 s after it was killed: {state:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let request = pb::ListWorkersRequest { queue: QUEUE.into() };
    let listed = clients[0].list_workers(request).await.expect("list workers").into_inner();
    assert!(listed.workers.iter().all(|w| w.node != killed), "{listed:?}");
}
