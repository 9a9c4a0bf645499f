//! What a task keeps across a forced failover, on one machine (the embedded
//! store standing in for the replicas the new home has, as in `failover`):
//! its attempt count, so `max_attempts` still bounds it; and dead letters,
//! which stay listed and can be put back from the new home.

use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;

use crate::support::{Client, ServerProcess, add, poll, spec};

const QUEUE: &str = "jobs";

/// Three attempts, retried at once (no backoff), in region `region`.
fn env(region: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("FAIRWAY_CLUSTER__REGION", region),
        ("FAIRWAY_TASKS__MAX_ATTEMPTS", "3"),
        ("FAIRWAY_TASKS__BACKOFF_INITIAL", "0s"),
        ("FAIRWAY_TASKS__BACKOFF_JITTER", "0"),
    ]
}

/// A queue of one partition homed in `b`, on a node of `b`.
async fn queue_in_b(store: &str) -> (ServerProcess, Client) {
    let in_b = ServerProcess::start_on(store, &env("b"));
    let mut client = in_b.client().await;
    let create = pb::CreateQueueRequest { queue: QUEUE.into(), partitions: 1, home: String::new() };
    client.create_queue(create).await.expect("create the queue in b");
    (in_b, client)
}

/// The node of `b` gone for good, a node of `c` on the same store, the queue forced there.
async fn forced_to_c(in_b: ServerProcess, store: &str) -> (ServerProcess, Client) {
    in_b.terminate();
    let in_c = ServerProcess::start_on(store, &env("c"));
    let mut client = in_c.client().await;
    let request = pb::MoveQueueRequest { queue: QUEUE.into(), home: "c".into(), force: true, abandon_previous: false };
    let moved = client.move_queue(request).await.expect("force to c").into_inner();
    assert_eq!((moved.home.as_str(), moved.generation), ("c", 1));
    (in_c, client)
}

/// The next task, within a deadline.
async fn next(client: &mut Client, what: &str) -> pb::Task {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(task) = poll(client, QUEUE, Duration::from_secs(2)).await {
            return task;
        }
        assert!(Instant::now() < deadline, "{what} did not come");
    }
}

async fn fail(client: &mut Client, task: pb::Task, retryable: bool) -> pb::FailTaskResponse {
    let request =
        pb::FailTaskRequest { lease_token: task.lease_token, retryable, message: "broken".into(), retry_after: None };
    client.fail_task(request).await.expect("fail").into_inner()
}

async fn dead_letters(client: &mut Client) -> Vec<pb::DeadLetter> {
    let request = pb::ListDeadLettersRequest { queue: QUEUE.into(), limit: 100, filter: None };
    client.list_dead_letters(request).await.expect("list dead letters").into_inner().dead_letters
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_keeps_its_attempts_across_a_forced_failover() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let (in_b, mut client) = queue_in_b(&store).await;
    add(&mut client, QUEUE, spec("k", 0.0, 0, b"flaky")).await.expect("an add");
    for attempt in 1..=2 {
        let task = next(&mut client, "the task in b").await;
        assert_eq!(task.attempt, attempt);
        assert!(fail(&mut client, task, true).await.will_retry, "attempt {attempt} of 3 is retried");
    }

    let (in_c, mut client) = forced_to_c(in_b, &store).await;
    let task = next(&mut client, "the drained task in c").await;
    assert_eq!(task.payload, b"flaky");
    assert_eq!(task.attempt, 3, "two attempts failed before the failover: this is the third");
    assert!(!fail(&mut client, task, true).await.will_retry, "the third attempt is the last");
    let letters = dead_letters(&mut client).await;
    assert_eq!(letters.iter().map(|d| (d.payload.as_slice(), d.attempts)).collect::<Vec<_>>(), [(&b"flaky"[..], 3)]);
    in_c.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_the_old_generation_are_listed_and_put_back_in_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("embedded:{}", dir.path().display());
    let (in_b, mut client) = queue_in_b(&store).await;
    for payload in [&b"first"[..], b"second"] {
        add(&mut client, QUEUE, spec("k", 0.0, 0, payload)).await.expect("an add");
        let task = next(&mut client, "a task in b").await;
        assert!(!fail(&mut client, task, false).await.will_retry, "not retryable: a dead letter");
    }
    add(&mut client, QUEUE, spec("k", 0.0, 0, b"live")).await.expect("an add");
    assert_eq!(dead_letters(&mut client).await.len(), 2);

    let (in_c, mut client) = forced_to_c(in_b, &store).await;
    let live = next(&mut client, "the live task in c").await;
    assert_eq!(live.payload, b"live");
    // The drain moves the dead letters in the same pass as the live task.
    let deadline = Instant::now() + Duration::from_secs(30);
    let letters = loop {
        let letters = dead_letters(&mut client).await;
        if letters.len() >= 2 {
            break letters;
        }
        assert!(Instant::now() < deadline, "the old generation's dead letters are not listed in c: {letters:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut payloads: Vec<&[u8]> = letters.iter().map(|d| d.payload.as_slice()).collect();
    payloads.sort();
    assert_eq!(payloads, [&b"first"[..], b"second"], "each once");
    assert!(letters.iter().all(|d| d.attempts == 1 && d.message == "broken"), "{letters:?}");

    let request = pb::RedriveDeadLettersRequest { queue: QUEUE.into(), limit: 100, filter: None };
    let redriven = client.redrive_dead_letters(request).await.expect("redrive").into_inner();
    assert_eq!(redriven.redriven, 2);
    assert!(dead_letters(&mut client).await.is_empty(), "none left once put back");
    let mut back = Vec::new();
    for _ in 0..2 {
        let task = next(&mut client, "a re-driven task").await;
        assert_eq!(task.attempt, 1, "put back as a new first attempt");
        back.push(task.payload.clone());
        let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
        client.complete_task(complete).await.expect("complete");
    }
    back.sort();
    assert_eq!(back, [b"first".to_vec(), b"second".to_vec()]);
    in_c.terminate();
}
