//! PurgeQueue on a real `fairway serve` on the embedded store: a first call
//! purges nothing and gives a token; a token of another queue is refused;
//! with its token the queue's waiting, delayed and running tasks are
//! cancelled, without a worker polling, over two partitions whose buffers
//! hold few of them; tasks added after it and dead letters put back after
//! it are delivered, and nothing purged comes back after a restart.

use std::time::Duration;

use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Client, ServerProcess, add, add_all, create, spec, wait};

const QUEUE: &str = "purged";

const SMALL_BUFFERS: [(&str, &str); 2] = [("FAIRWAY_ENGINE__BUFFER_TASKS", "16"), ("FAIRWAY_ENGINE__RELOAD_AT", "4")];

async fn purge(client: &mut Client, queue: &str, confirmation: &str) -> Result<pb::PurgeQueueResponse, tonic::Status> {
    let request = pb::PurgeQueueRequest { queue: queue.into(), confirmation: confirmation.into() };
    client.purge_queue(request).await.map(|r| r.into_inner())
}

async fn poll(client: &mut Client, max_wait: Duration) -> Option<pb::Task> {
    let request = pb::PollTaskRequest { queue: QUEUE.into(), worker_id: "w".into(), max_wait: wait(max_wait) };
    client.poll_task(request).await.expect("poll").into_inner().task
}

/// The queue's backlog and running tasks, as ListQueues counts them.
async fn counts(client: &mut Client) -> (u64, u64) {
    let request = pb::ListQueuesRequest { page_size: 10, prefix: QUEUE.into(), ..Default::default() };
    let listed = client.list_queues(request).await.expect("list").into_inner();
    let queue = listed.queues.iter().find(|q| q.queue == QUEUE).expect("the queue is listed");
    (queue.backlog, queue.leased)
}

#[tokio::test]
async fn a_confirmed_purge_cancels_every_task_but_dead_letters_and_keeps_what_comes_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let server = ServerProcess::start_on(&store, &SMALL_BUFFERS);
    let mut client = server.client().await;
    create(&mut client, QUEUE, 2).await;
    create(&mut client, "other", 1).await;

    // A dead letter, a running task, 300 waiting and a delayed one.
    add(&mut client, QUEUE, spec("dead", 0.0, 1, b"dead")).await.unwrap();
    let task = poll(&mut client, Duration::from_secs(5)).await.expect("the task");
    let fail = pb::FailTaskRequest {
        lease_token: task.lease_token,
        retryable: false,
        message: "boom".into(),
        retry_after: None,
    };
    client.fail_task(fail).await.expect("fail");
    add(&mut client, QUEUE, spec("run", 0.0, 1, b"run")).await.unwrap();
    let running = poll(&mut client, Duration::from_secs(5)).await.expect("the task");
    let waiting: Vec<pb::TaskSpec> = (0..300).map(|n| spec(&format!("k{}", n % 7), 0.0, 3, b"old")).collect();
    add_all(&mut client, QUEUE, waiting).await;
    let later =
        pb::TaskSpec { delay: Some(prost_types::Duration { seconds: 2, nanos: 0 }), ..spec("k", 0.0, 3, b"old") };
    add(&mut client, QUEUE, later).await.unwrap();
    assert_eq!(counts(&mut client).await, (300, 1));

    // Asked without a token: nothing is purged, a token comes back.
    let asked = purge(&mut client, QUEUE, "").await.expect("ask");
    assert!(!asked.purged && !asked.confirmation.is_empty(), "{asked:?}");
    assert!(asked.confirmation_expires.is_some());
    assert_eq!(counts(&mut client).await, (300, 1), "nothing purged by asking");
    let other = purge(&mut client, "other", "").await.expect("ask").confirmation;
    let refused = purge(&mut client, QUEUE, &other).await.expect_err("another queue's token");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("confirmation") && refused.message().contains(QUEUE), "{refused:?}");

    let purged = purge(&mut client, QUEUE, &asked.confirmation).await.expect("purge");
    assert!(purged.purged, "{purged:?}");
    assert_eq!((purged.partitions, purged.waiting, purged.running), (2, 300, 1), "{purged:?}");
    assert_eq!(purged.delayed, 1, "{purged:?}");
    let beat = client.heartbeat_task(pb::HeartbeatTaskRequest { lease_token: running.lease_token }).await;
    assert_eq!(beat.expect_err("a purged task's heartbeat is refused").code(), Code::FailedPrecondition);

    // No worker polls, yet the backlog goes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = counts(&mut client).await;
        if now == (0, 0) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "after 30 s the queue holds {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // What comes after stays: a new task, and the dead letter put back.
    let new = add(&mut client, QUEUE, spec("new", 0.0, 3, b"new")).await.unwrap();
    let redrive = pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: None };
    assert_eq!(client.redrive_dead_letters(redrive).await.expect("redrive").into_inner().redriven, 1);
    let mut payloads = Vec::new();
    while let Some(task) = poll(&mut client, Duration::from_millis(2_500)).await {
        client.complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] }).await.unwrap();
        payloads.push(String::from_utf8(task.payload).unwrap());
    }
    payloads.sort();
    assert_eq!(payloads, ["dead", "new"], "only what came after; the delayed task came due and ended");
    assert!(new.task_id > 0);

    // Durable: after a restart nothing purged comes back.
    drop(client);
    server.terminate();
    let server = ServerProcess::start_on(&store, &SMALL_BUFFERS);
    let mut client = server.client().await;
    assert!(poll(&mut client, Duration::from_millis(1_500)).await.is_none(), "a purged task came back");
    assert_eq!(counts(&mut client).await, (0, 0));
    server.terminate();
}

#[tokio::test]
async fn a_purge_token_that_is_garbled_is_refused_saying_how_to_get_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;
    let refused = purge(&mut client, QUEUE, "yes").await.expect_err("not a token");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("ask without one"), "{refused:?}");
    let missing = purge(&mut client, "no-such-queue", "").await.expect_err("no such queue");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    server.terminate();
}
