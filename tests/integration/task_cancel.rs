//! CancelTask on a real `fairway serve` on the embedded store, for each
//! state a task can be in: leased (its lease ends at once, its heartbeat is
//! refused), dead (removed), pending in the buffer and only in the store,
//! and delayed (each marked, and never delivered, across a restart of the
//! server); and what is refused.

use std::time::Duration;

use fairway::proto::v1 as pb;
use fairway::proto::v1::get_task_response::State;
use tonic::Code;

use crate::support::{Client, ServerProcess, add, create, spec, wait};

const QUEUE: &str = "cancelled";

/// A buffer of 4 tasks per priority level, so that later tasks are in the
/// store only.
const SMALL_BUFFERS: [(&str, &str); 2] = [("FAIRWAY_ENGINE__BUFFER_TASKS", "4"), ("FAIRWAY_ENGINE__RELOAD_AT", "1")];

async fn cancel(client: &mut Client, task_id: i64) -> Result<pb::CancelTaskResponse, tonic::Status> {
    let request = pb::CancelTaskRequest { queue: QUEUE.into(), partition: 0, task_id };
    client.cancel_task(request).await.map(|r| r.into_inner())
}

async fn get(client: &mut Client, task_id: i64) -> Result<pb::GetTaskResponse, tonic::Status> {
    let request = pb::GetTaskRequest { queue: QUEUE.into(), partition: 0, task_id, include_payload: false };
    client.get_task(request).await.map(|r| r.into_inner())
}

async fn poll(client: &mut Client, max_wait: Duration) -> Option<pb::Task> {
    let request = pb::PollTaskRequest { queue: QUEUE.into(), worker_id: "w".into(), max_wait: wait(max_wait) };
    client.poll_task(request).await.expect("poll").into_inner().task
}

/// Waits (at most 30 s) until GetTask no longer finds `task_id`.
async fn until_gone(client: &mut Client, task_id: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match get(client, task_id).await {
            Err(status) if status.code() == Code::NotFound => return,
            other => assert!(tokio::time::Instant::now() < deadline, "task {task_id} after 30 s: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn each_state_is_cancelled_and_no_cancelled_task_reaches_a_worker_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let server = ServerProcess::start_on(&store, &SMALL_BUFFERS);
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;

    // Leased: the lease ends at once; the worker's heartbeat is refused.
    let leased = add(&mut client, QUEUE, spec("l", 0.0, 1, b"leased")).await.unwrap().task_id;
    let task = poll(&mut client, Duration::from_secs(5)).await.expect("the task");
    assert_eq!(task.task_id, leased);
    let done = cancel(&mut client, leased).await.expect("cancel");
    assert_eq!((done.state(), done.fairness_key.as_str()), (State::Leased, "l"));
    let beat = client.heartbeat_task(pb::HeartbeatTaskRequest { lease_token: task.lease_token.clone() }).await;
    let refused = beat.expect_err("a cancelled task's heartbeat is refused");
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(refused.message().contains("cancelled"), "{refused:?}");
    until_gone(&mut client, leased).await;

    // Dead: removed from the dead letters.
    let dead = add(&mut client, QUEUE, spec("d", 0.0, 1, b"dead")).await.unwrap().task_id;
    let task = poll(&mut client, Duration::from_secs(5)).await.expect("the task");
    let fail = pb::FailTaskRequest {
        lease_token: task.lease_token,
        retryable: false,
        message: "boom".into(),
        retry_after: None,
    };
    client.fail_task(fail).await.expect("fail");
    assert_eq!(cancel(&mut client, dead).await.expect("cancel").state(), State::Dead);
    assert_eq!(get(&mut client, dead).await.unwrap_err().code(), Code::NotFound);
    let listed = client
        .list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 10, filter: None })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.dead_letters.is_empty(), "{listed:?}");

    // Pending: ten tasks, the buffer holds four; one in the buffer and one
    // in the store only are cancelled, and a delayed one.
    let mut pending = Vec::new();
    for n in 0..10 {
        pending.push(add(&mut client, QUEUE, spec("p", 0.0, 1, format!("p{n}").as_bytes())).await.unwrap().task_id);
    }
    let delayed_spec =
        pb::TaskSpec { delay: Some(prost_types::Duration { seconds: 1, nanos: 0 }), ..spec("p", 0.0, 1, b"later") };
    let delayed = add(&mut client, QUEUE, delayed_spec).await.unwrap().task_id;
    let (in_buffer, in_store) = (pending[1], pending[8]);
    for (id, state) in [(in_buffer, State::Pending), (in_store, State::Pending), (delayed, State::Delayed)] {
        let done = cancel(&mut client, id).await.unwrap_or_else(|status| panic!("cancel {id}: {status:?}"));
        assert_eq!(done.state(), state, "task {id}");
        assert!(get(&mut client, id).await.expect("still there until reached").cancelled, "task {id}");
    }
    assert!(cancel(&mut client, in_store).await.is_ok(), "a second cancel of the same task is no error");

    // The marks are durable: a restarted server honours them.
    drop(client);
    server.terminate();
    let server = ServerProcess::start_on(&store, &SMALL_BUFFERS);
    let mut client = server.client().await;
    assert!(get(&mut client, in_store).await.expect("there").cancelled);
    let mut delivered = Vec::new();
    while delivered.len() < 8 {
        let task = poll(&mut client, Duration::from_secs(10)).await.expect("the tasks not cancelled come");
        client.complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: vec![] }).await.unwrap();
        delivered.push(task.task_id);
    }
    let expected: Vec<i64> = pending.iter().copied().filter(|id| ![in_buffer, in_store].contains(id)).collect();
    assert_eq!(delivered, expected, "the others, in order");
    assert!(poll(&mut client, Duration::from_millis(1500)).await.is_none(), "the delayed task came up and ended");
    for id in [in_buffer, in_store, delayed] {
        until_gone(&mut client, id).await;
    }
    server.terminate();
}

#[tokio::test]
async fn a_cancel_of_no_task_or_of_a_partition_the_queue_lacks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;
    let never = cancel(&mut client, 12_345).await.unwrap_err();
    assert_eq!(never.code(), Code::NotFound);
    assert!(never.message().contains("does not exist"), "{never:?}");
    let request = pb::CancelTaskRequest { queue: QUEUE.into(), partition: 2, task_id: 1 };
    let bad = client.cancel_task(request).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("partition: is 2"), "{bad:?}");
    let request = pb::CancelTaskRequest { queue: "no such queue!".into(), partition: 0, task_id: 1 };
    assert_eq!(client.cancel_task(request).await.unwrap_err().code(), Code::InvalidArgument);
    server.terminate();
}
