//! One test per validation rule: the status code, a message that names the
//! field and the limit, and nothing stored.

use std::time::Duration;

use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Client, TestServer, add, create, describe, poll, spec, wait};

const QUEUE: &str = "checked";

/// Expects INVALID_ARGUMENT naming every one of `words`.
fn assert_invalid(result: Result<impl std::fmt::Debug, tonic::Status>, words: &[&str]) {
    let status = result.expect_err("the request must be rejected");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    for word in words {
        assert!(status.message().contains(word), "{:?} does not mention {word:?}", status.message());
    }
}

/// Nothing was stored in the test queue: it was not even created.
async fn assert_nothing_stored(client: &mut Client) {
    let described = client.describe_queue(pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 0 }).await;
    let status = described.expect_err("a rejected request created the queue");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
}

/// Nothing was stored in the test queue, which exists.
async fn assert_nothing_stored_in_queue(client: &mut Client) {
    let state = describe(client, QUEUE).await;
    let partition = &state.partitions[0];
    assert_eq!(partition.added, 0, "a rejected request stored a task");
    assert!(partition.subqueues.iter().all(|s| s.backlog == 0 && s.buffered == 0));
}

/// The add is rejected naming `words`, whether its queue exists or not,
/// and stores nothing (creates no queue).
async fn rejected_add(task: pb::TaskSpec, words: &[&str]) {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    assert_invalid(add(&mut client, QUEUE, task.clone()).await, words);
    assert_nothing_stored(&mut client).await;
    create(&mut client, QUEUE, 1).await;
    assert_invalid(add(&mut client, QUEUE, task).await, words);
    assert_nothing_stored_in_queue(&mut client).await;
    server.stop().await;
}

#[tokio::test]
async fn queue_name_pattern() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    for bad in ["", "has space", ".dot-first", &"q".repeat(129)] {
        assert_invalid(add(&mut client, bad, spec("k", 0.0, 0, b"")).await, &["queue", "128"]);
    }
    server.stop().await;
}

#[tokio::test]
async fn fairness_key_at_most_256_bytes() {
    rejected_add(spec(&"k".repeat(257), 0.0, 0, b""), &["task.fairness_key", "256"]).await;
}

#[tokio::test]
async fn weight_finite_within_bounds() {
    for bad in [f64::NAN, f64::INFINITY, -1.0, 0.0005, 1000.5] {
        rejected_add(spec("k", bad, 0, b""), &["task.fairness_weight", "0.001", "1000"]).await;
    }
}

#[tokio::test]
async fn cost_at_most_a_thousand() {
    for bad in [1001, u32::MAX] {
        rejected_add(pb::TaskSpec { cost: bad, ..spec("k", 0.0, 0, b"") }, &["task.cost", "1 to 1000"]).await;
    }
}

#[tokio::test]
async fn size_at_most_ten_to_the_fifteen_and_not_with_a_cost() {
    for bad in [1_000_000_000_000_001, u64::MAX] {
        rejected_add(pb::TaskSpec { size: bad, ..spec("k", 0.0, 0, b"") }, &["task.size", "1 to 1000000000000000"])
            .await;
    }
    rejected_add(
        pb::TaskSpec { size: 100, cost: 5, ..spec("k", 0.0, 0, b"") },
        &["task.size", "cost is 5", "one of them"],
    )
    .await;
}

#[tokio::test]
async fn priority_zero_to_five() {
    rejected_add(spec("k", 0.0, 6, b""), &["task.priority", "1 (highest) to 5"]).await;
}

#[tokio::test]
async fn payload_at_most_the_limit() {
    let payload = vec![0u8; 1024 * 1024 + 1];
    rejected_add(spec("k", 0.0, 0, &payload), &["task.payload", "1048576", "limits.max_payload_bytes"]).await;
}

#[tokio::test]
async fn task_must_be_present() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let result = client.add_task(pb::AddTaskRequest { queue: QUEUE.into(), task: None }).await;
    assert_invalid(result, &["task", "missing"]);
    assert_nothing_stored(&mut client).await;
    server.stop().await;
}

#[tokio::test]
async fn dedup_ids_and_delays_are_bounded() {
    let mut long_dedup = spec("k", 0.0, 0, b"");
    long_dedup.dedup_id = "d".repeat(513);
    rejected_add(long_dedup, &["task.dedup_id", "513", "512"]).await;
    let mut long_delay = spec("k", 0.0, 0, b"");
    long_delay.delay = wait(Duration::from_secs(31 * 24 * 3600));
    rejected_add(long_delay, &["task.delay", "limits.max_delay"]).await;
    let mut negative_delay = spec("k", 0.0, 0, b"");
    negative_delay.delay = Some(prost_types::Duration { seconds: -1, nanos: 0 });
    rejected_add(negative_delay, &["task.delay", "non-negative"]).await;
}

#[tokio::test]
async fn deadlines_are_well_formed_and_bounded() {
    let with_deadline = |seconds: i64, nanos: i32| pb::TaskSpec {
        deadline: Some(prost_types::Timestamp { seconds, nanos }),
        ..spec("k", 0.0, 0, b"")
    };
    rejected_add(with_deadline(1_900_000_000, -1), &["task.deadline", "nanos"]).await;
    rejected_add(with_deadline(1_900_000_000, 1_000_000_000), &["task.deadline", "nanos"]).await;
    rejected_add(with_deadline(-1, 0), &["task.deadline", "1970-01-01"]).await;
    rejected_add(with_deadline(253_402_300_800, 0), &["task.deadline", "9999-12-31"]).await;
}

#[tokio::test]
async fn batches_are_bounded_and_judged_per_item() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let empty = client.add_tasks(pb::AddTasksRequest { queue: QUEUE.into(), tasks: vec![] }).await;
    assert_invalid(empty, &["tasks", "at least one"]);
    let too_many =
        client.add_tasks(pb::AddTasksRequest { queue: QUEUE.into(), tasks: vec![spec("k", 0.0, 0, b""); 1001] }).await;
    assert_invalid(too_many, &["tasks", "1000", "limits.max_batch_tasks"]);
    assert_nothing_stored(&mut client).await;

    let mixed = client
        .add_tasks(pb::AddTasksRequest {
            queue: QUEUE.into(),
            tasks: vec![spec("k", 0.0, 0, b"ok"), spec("k", 0.0, 9, b"bad")],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(mixed.results[0].outcome, Some(pb::add_task_result::Outcome::Added(_))));
    match &mixed.results[1].outcome {
        Some(pb::add_task_result::Outcome::Error(error)) => {
            assert_eq!(error.code, Code::InvalidArgument as i32);
            assert!(error.message.contains("tasks[1].priority"), "{}", error.message);
        }
        other => panic!("expected an item error, got {other:?}"),
    }
    assert_eq!(describe(&mut client, QUEUE).await.partitions[0].added, 1, "only the valid item is stored");
    server.stop().await;
}

#[tokio::test]
async fn poll_wait_and_worker_id_are_bounded() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let too_long = client
        .poll_task(pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: "w".into(),
            max_wait: wait(Duration::from_secs(301)),
        })
        .await;
    assert_invalid(too_long, &["max_wait", "limits.max_poll_wait"]);
    let negative = client
        .poll_task(pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: "w".into(),
            max_wait: Some(prost_types::Duration { seconds: -1, nanos: 0 }),
        })
        .await;
    assert_invalid(negative, &["max_wait", "non-negative"]);
    let long_worker =
        client.poll_task(pb::PollTaskRequest { queue: QUEUE.into(), worker_id: "w".repeat(257), max_wait: None }).await;
    assert_invalid(long_worker, &["worker_id", "256"]);
    let too_many = client
        .poll_tasks(pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "w".into(),
            max_wait: None,
            max_tasks: 257,
            completions: Vec::new(),
        })
        .await;
    assert_invalid(too_many, &["max_tasks", "256"]);
    server.stop().await;
}

#[tokio::test]
async fn lease_tokens_and_describe_limits_are_checked() {
    let server = TestServer::start().await;
    let mut client = server.client.clone();
    let bad_token =
        client.complete_task(pb::CompleteTaskRequest { lease_token: "forged".into(), result: vec![] }).await;
    assert_invalid(bad_token, &["lease_token"]);
    add(&mut client, QUEUE, spec("k", 1.0, 3, b"x")).await.unwrap();
    let token = poll(&mut client, QUEUE, Duration::from_secs(5)).await.expect("the task added").lease_token;
    let bad_heartbeat = client.heartbeat_task(pb::HeartbeatTaskRequest { lease_token: "v1/x".into() }).await;
    assert_invalid(bad_heartbeat, &["lease_token"]);
    let long_message = client
        .fail_task(pb::FailTaskRequest {
            lease_token: token.clone(),
            retryable: true,
            message: "m".repeat(4097),
            retry_after: None,
        })
        .await;
    assert_invalid(long_message, &["message", "4096"]);
    let long_retry_after = client
        .fail_task(pb::FailTaskRequest {
            lease_token: token.clone(),
            retryable: true,
            message: String::new(),
            retry_after: wait(Duration::from_secs(31 * 24 * 3600)),
        })
        .await;
    assert_invalid(long_retry_after, &["retry_after", "limits.max_delay"]);
    let done = pb::CompleteTaskRequest { lease_token: token, result: vec![] };
    client.complete_task(done.clone()).await.expect("the lease is held");
    let ended_lease = client.complete_task(done).await;
    let status = ended_lease.expect_err("the lease has ended");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("lease_token"), "{status:?}");
    let listed =
        client.list_dead_letters(pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 1001, filter: None }).await;
    assert_invalid(listed, &["limit", "1000"]);
    let redriven = client
        .redrive_dead_letters(pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit: 10_001, filter: None })
        .await;
    assert_invalid(redriven, &["limit", "10000"]);
    let too_many_keys = client.describe_queue(pb::DescribeQueueRequest { queue: QUEUE.into(), top_keys: 101 }).await;
    assert_invalid(too_many_keys, &["top_keys", "100"]);
    server.stop().await;
}
