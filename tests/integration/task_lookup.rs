//! GetTask on a real `fairway serve` on the embedded store, for each state a
//! task can be in: pending (in the buffer, and only in the store past it),
//! waiting on a paused key, delayed (in the delayed window, and past it),
//! leased (to the worker that polled it), dead, completed, never added;
//! and again after a restart, when the new owner's memory holds none of it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fairway::proto::v1 as pb;
use fairway::proto::v1::get_task_response::State;
use tonic::Code;

use crate::support::{Client, ServerProcess, add, create, spec, wait};

const QUEUE: &str = "lookup";

/// A buffer of 4 tasks per priority level (and a delayed window of 4), so
/// that most tasks here are found in the store, not in memory.
const SMALL_BUFFERS: [(&str, &str); 2] = [("FAIRWAY_ENGINE__BUFFER_TASKS", "4"), ("FAIRWAY_ENGINE__RELOAD_AT", "1")];

async fn get(client: &mut Client, task_id: i64, include_payload: bool) -> Result<pb::GetTaskResponse, tonic::Status> {
    let request = pb::GetTaskRequest { queue: QUEUE.into(), partition: 0, task_id, include_payload };
    client.get_task(request).await.map(|r| r.into_inner())
}

async fn found(client: &mut Client, task_id: i64) -> pb::GetTaskResponse {
    get(client, task_id, false).await.unwrap_or_else(|status| panic!("task {task_id}: {status:?}"))
}

async fn poll(client: &mut Client, worker: &str) -> pb::Task {
    let request =
        pb::PollTaskRequest { queue: QUEUE.into(), worker_id: worker.into(), max_wait: wait(Duration::from_secs(5)) };
    client.poll_task(request).await.expect("poll").into_inner().task.expect("a task")
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn ms(at: Option<prost_types::Timestamp>) -> i64 {
    let at = at.expect("a time");
    at.seconds * 1000 + i64::from(at.nanos / 1_000_000)
}

#[tokio::test]
async fn get_task_tells_each_state_from_memory_and_from_the_store_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let server = ServerProcess::start_on(&store, &SMALL_BUFFERS);
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;

    // Leased, to the worker that polled it.
    let leased = add(&mut client, QUEUE, spec("w", 0.0, 1, b"leased")).await.unwrap().task_id;
    let task = poll(&mut client, "worker-7").await;
    assert_eq!(task.task_id, leased);
    let got = found(&mut client, leased).await;
    assert_eq!((got.state(), got.worker_id.as_str(), got.attempt), (State::Leased, "worker-7", 1));
    assert_eq!(ms(got.lease_deadline), ms(task.lease_deadline), "the lease's deadline");

    // Dead, with the worker's message.
    let dead = add(&mut client, QUEUE, spec("d", 0.0, 1, b"dead")).await.unwrap().task_id;
    let task = poll(&mut client, "worker-7").await;
    let fail = pb::FailTaskRequest {
        lease_token: task.lease_token,
        retryable: false,
        message: "boom".into(),
        retry_after: None,
    };
    client.fail_task(fail).await.expect("fail");
    let got = found(&mut client, dead).await;
    assert_eq!((got.state(), got.failure_message.as_str(), got.attempt), (State::Dead, "boom", 1));
    assert!((ms(got.failed_at) - now_ms()).abs() < 60_000, "failed just now: {:?}", got.failed_at);

    // Completed: gone, and said so.
    let completed = add(&mut client, QUEUE, spec("c", 0.0, 1, b"done")).await.unwrap().task_id;
    let task = poll(&mut client, "worker-7").await;
    client.complete_task(pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() }).await.unwrap();
    let gone = get(&mut client, completed, false).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    assert!(gone.message().contains("it completed"), "{}", gone.message());

    // Pending: the first in the buffer, the last only in the store.
    let mut pending = Vec::new();
    for i in 0..12 {
        let payload = format!("p:{i}");
        pending.push(add(&mut client, QUEUE, spec("p", 0.0, 5, payload.as_bytes())).await.unwrap().task_id);
    }
    for (i, id) in [(0, pending[0]), (11, pending[11])] {
        let got = found(&mut client, id).await;
        assert_eq!(
            (got.state(), got.waiting_for.as_str(), got.fairness_key.as_str()),
            (State::Pending, "its turn", "p")
        );
        assert_eq!((got.payload.len(), got.payload_bytes, got.priority), (0, format!("p:{i}").len() as u64, 5));
        let with_payload = get(&mut client, id, true).await.unwrap();
        assert_eq!(with_payload.payload, format!("p:{i}").into_bytes());
    }

    // Delayed: the first in the delayed window, the last past it.
    let mut delayed = Vec::new();
    let added_at = now_ms();
    for i in 0..10u64 {
        let mut spec = spec("later", 0.0, 3, b"later");
        spec.delay = wait(Duration::from_secs(3600 + i));
        delayed.push(add(&mut client, QUEUE, spec).await.unwrap().task_id);
    }
    for (i, id) in [(0, delayed[0]), (9, delayed[9])] {
        let got = found(&mut client, id).await;
        assert_eq!(got.state(), State::Delayed);
        let ready_at = ms(got.ready_at) - added_at;
        assert!((3_600_000 + i * 1000 - 5_000..3_600_000 + i * 1000 + 60_000).contains(&ready_at), "{ready_at} ms");
    }

    // A paused key's task says so.
    let request = pb::PauseQueueRequest { queue: QUEUE.into(), fairness_key: Some("held".into()) };
    client.pause_queue(request).await.expect("pause");
    let held = add(&mut client, QUEUE, spec("held", 0.0, 1, b"held")).await.unwrap().task_id;
    let got = found(&mut client, held).await;
    assert_eq!((got.state(), got.waiting_for.as_str()), (State::Pending, "its key is paused"));

    // An id no task had.
    let unused = get(&mut client, held + 1000, false).await.unwrap_err();
    assert_eq!(unused.code(), Code::NotFound);
    assert!(unused.message().contains("does not exist"), "{}", unused.message());
    // A partition the queue does not have.
    let request = pb::GetTaskRequest { queue: QUEUE.into(), partition: 3, task_id: held, include_payload: false };
    let error = client.get_task(request).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert!(error.message().contains("partition: is 3; queue lookup has partitions 0 to 0"), "{error:?}");

    // After a restart the new owner's memory has none of it: the lease
    // comes from its record (its worker unknown), the rest from the store.
    drop(client);
    server.terminate();
    let server = ServerProcess::start_on(&store, &SMALL_BUFFERS);
    let mut client = server.client().await;
    let got = found(&mut client, leased).await;
    assert_eq!((got.state(), got.worker_id.as_str()), (State::Leased, ""), "a lease an earlier owner handed out");
    assert_eq!(found(&mut client, dead).await.state(), State::Dead);
    assert_eq!(found(&mut client, pending[11]).await.state(), State::Pending);
    assert_eq!(found(&mut client, delayed[9]).await.state(), State::Delayed);
    assert_eq!(found(&mut client, held).await.waiting_for, "its key is paused");
    assert_eq!(get(&mut client, completed, false).await.unwrap_err().code(), Code::NotFound);
}
