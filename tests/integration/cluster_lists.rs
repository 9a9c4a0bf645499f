//! ListWorkers and ListNodes on one node of the embedded store: a worker
//! is listed while its poll waits, with the tasks it was handed after;
//! another queue's listing leaves it out; the node lists itself with the
//! partitions it holds; the table of workers holds its bound however many
//! ids poll, and an answer lists the first 1,000. (Three nodes on
//! Cassandra: `cassandra::queue_settings`.)

use std::time::{Duration, Instant};

use fairway::config::Config;
use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Client, TestServer, add, create, spec, wait};

async fn workers(client: &mut Client, queue: &str) -> pb::ListWorkersResponse {
    client.list_workers(pb::ListWorkersRequest { queue: queue.into() }).await.expect("ListWorkers").into_inner()
}

fn poll(client: &Client, queue: &str, worker: &str, max_wait: Duration) -> tokio::task::JoinHandle<Option<pb::Task>> {
    let mut client = client.clone();
    let request = pb::PollTaskRequest { queue: queue.into(), worker_id: worker.into(), max_wait: wait(max_wait) };
    tokio::spawn(async move { client.poll_task(request).await.expect("PollTask").into_inner().task })
}

#[tokio::test]
async fn a_polling_worker_is_listed_with_the_tasks_it_was_handed() {
    let mut server = TestServer::start().await;
    let client = &mut server.client;
    create(client, "jobs", 2).await;
    create(client, "other", 1).await;
    assert!(workers(client, "").await.workers.is_empty(), "no worker polled yet");

    let waiting = poll(client, "jobs", "w1", Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let listed = workers(client, "jobs").await;
        if listed.workers.iter().any(|w| w.polls_waiting == 1) {
            break listed;
        }
        assert!(Instant::now() < deadline, "the waiting poll is not listed: {listed:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let w1 = &listed.workers[0];
    assert_eq!((w1.worker_id.as_str(), w1.queue.as_str(), w1.tasks_received), ("w1", "jobs", 0), "{w1:?}");
    assert!(w1.address.starts_with("127.0.0.1:"), "the client's address: {w1:?}");
    assert!(w1.last_poll.is_some() && w1.first_poll.is_some(), "{w1:?}");

    add(client, "jobs", spec("k", 0.0, 3, b"x")).await.expect("add");
    let task = waiting.await.unwrap().expect("the waiting worker gets the task");
    assert_eq!(task.payload, b"x");
    let listed = workers(client, "jobs").await;
    assert_eq!(listed.workers.len(), 1, "{listed:?}");
    assert_eq!((listed.workers[0].polls_waiting, listed.workers[0].tasks_received), (0, 1), "{listed:?}");
    assert!(workers(client, "other").await.workers.is_empty(), "another queue's listing leaves w1 out");
    assert_eq!(workers(client, "").await.workers.len(), 1, "every queue's listing has it");

    let nodes = client.list_nodes(pb::ListNodesRequest {}).await.expect("ListNodes").into_inner();
    assert_eq!(nodes.nodes.len(), 1, "{nodes:?}");
    let me = &nodes.nodes[0];
    assert_eq!(me.node, nodes.answering_node);
    assert!(me.live && me.answered, "{me:?}");
    assert_eq!((me.partitions_held, me.workers, me.leased), (3, 1, 1), "two partitions of jobs, one of other: {me:?}");

    let typo = client.list_workers(pb::ListWorkersRequest { queue: "jbos".into() }).await.unwrap_err();
    assert_eq!(typo.code(), Code::NotFound, "a mistyped queue is not one no worker polls: {typo:?}");
    let bad = client.list_workers(pb::ListWorkersRequest { queue: "no such/queue".into() }).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("queue"), "{bad:?}");
}

#[tokio::test]
async fn the_workers_listed_stay_within_limits_max_workers_seen() {
    let mut config = Config::default();
    config.limits.max_workers_seen = 4;
    let mut server = TestServer::start_with(config).await;
    let client = &mut server.client;
    create(client, "jobs", 1).await;
    for n in 0..20 {
        let request =
            pb::PollTaskRequest { queue: "jobs".into(), worker_id: format!("w{n}"), max_wait: wait(Duration::ZERO) };
        client.poll_task(request).await.expect("poll");
    }
    let listed = workers(client, "jobs").await;
    let ids: Vec<&str> = listed.workers.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(ids, ["w16", "w17", "w18", "w19"], "the four seen last");
}

#[tokio::test]
async fn a_listing_shows_the_first_thousand_workers_and_counts_the_others() {
    let mut server = TestServer::start().await;
    let client = &mut server.client;
    create(client, "crowd", 1).await;
    for n in 0..1500 {
        let request = pb::PollTaskRequest {
            queue: "crowd".into(),
            worker_id: format!("w{n:04}"),
            max_wait: wait(Duration::ZERO),
        };
        client.poll_task(request).await.expect("poll");
    }
    let listed = workers(client, "crowd").await;
    assert_eq!((listed.workers.len(), listed.left_out), (1000, 500));
    assert_eq!((listed.workers[0].worker_id.as_str(), listed.workers[999].worker_id.as_str()), ("w0000", "w0999"));
}
