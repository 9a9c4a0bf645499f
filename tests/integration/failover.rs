//! A forced failover on one machine, the embedded store standing in for the
//! replicas the new home has: a queue homed in region `b`, whose only node
//! comes back as a node of region `c`, is forced to `c`; the old
//! generation's tasks are served there; the old home never returns, so the
//! operator declares its generation lost, and the drains close it.

use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Client, ServerProcess, add, poll, spec};

const QUEUE: &str = "jobs";

fn move_queue(home: &str, force: bool, abandon_previous: bool) -> pb::MoveQueueRequest {
    pb::MoveQueueRequest { queue: QUEUE.into(), home: home.into(), force, abandon_previous }
}

/// Polls and completes tasks until `expected` came, within a deadline.
async fn take_all(client: &mut Client, expected: usize) {
    let mut taken = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while taken < expected {
        assert!(Instant::now() < deadline, "only {taken} of {expected} tasks came");
        if let Some(task) = poll(client, QUEUE, Duration::from_secs(5)).await {
            let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
            client.complete_task(complete).await.expect("complete");
            taken += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_homes_generation_is_declared_lost_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let in_b = ServerProcess::start_on(&store, &[("FAIRWAY_CLUSTER__REGION", "b")]);
    let mut client = in_b.client().await;
    let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 2, home: String::new() };
    client.create_queue(create).await.expect("create the queue in b");
    for i in 0..100 {
        add(&mut client, QUEUE, spec(&format!("k{i}"), 0.0, 0, b"x")).await.expect("an add");
    }
    let refused = client.move_queue(move_queue("", false, true)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "no forced failover yet: {refused:?}");
    in_b.terminate();

    let in_c = ServerProcess::start_on(&store, &[("FAIRWAY_CLUSTER__REGION", "c")]);
    let mut client = in_c.client().await;
    let moved = client.move_queue(move_queue("c", true, false)).await.expect("force to c").into_inner();
    assert_eq!((moved.home.as_str(), moved.generation), ("c", 1));
    take_all(&mut client, 100).await;

    let refused = client.move_queue(move_queue("b", false, true)).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "abandoning keeps the home: {refused:?}");
    assert!(refused.message().starts_with("abandon_previous"), "{refused:?}");
    let abandoned = client.move_queue(move_queue("", false, true)).await.expect("abandon").into_inner();
    assert_eq!((abandoned.abandoned_partitions, abandoned.generation), (2, 1));

    // The drains take each declared-lost partition, pass a last time and
    // close it; once closed there is nothing left to declare.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // A declaration that meets a drain taking the same partition is
        // fenced and says to retry ("nothing was written"): so it does.
        let again = match client.move_queue(move_queue("", false, true)).await {
            Ok(again) => again.into_inner(),
            Err(status) if status.code() == Code::Unavailable && status.message().contains("retry") => {
                assert!(Instant::now() < deadline, "abandon again: {status:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(status) => panic!("abandon again: {status:?}"),
        };
        if again.abandoned_partitions == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the drains did not close the old generation: {}", in_c.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = in_c.terminate();
    assert_eq!(log.matches("the previous generation is drained").count(), 2, "{log}");
    assert!(log.contains("declared lost"), "{log}");
}
