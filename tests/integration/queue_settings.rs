//! Settings stored with a queue, on a real `fairway serve` on the embedded
//! store: a paused key (the empty one here) is not dispatched while the
//! others are, not even to a poll already waiting; a paused queue hands
//! out nothing; pauses and settings outlive a restart; a resume brings the
//! key's tasks back in order; bad changes are refused with the field named
//! and write nothing.

use std::time::{Duration, Instant};

use fairway::proto::v1 as pb;
use tonic::Code;

use crate::support::{Client, ServerProcess, add, create, describe, spec, wait};

const QUEUE: &str = "jobs";

/// Polls until a poll of 1 s brings nothing; completes each task; the
/// payloads taken.
async fn drain(client: &mut Client) -> Vec<String> {
    let mut taken = Vec::new();
    loop {
        let request = pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "settings".into(),
            max_wait: wait(Duration::from_secs(1)),
            max_tasks: 16,
            completions: Vec::new(),
        };
        let tasks = client.poll_tasks(request).await.expect("poll").into_inner().tasks;
        if tasks.is_empty() {
            return taken;
        }
        for task in tasks {
            let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
            client.complete_task(complete).await.expect("complete");
            taken.push(String::from_utf8(task.payload).unwrap());
        }
    }
}

async fn add_tasks(client: &mut Client, key: &str, n: usize) {
    for i in 0..n {
        add(client, QUEUE, spec(key, 0.0, 3, format!("{key}:{i}").as_bytes())).await.expect("add");
    }
}

async fn pause(client: &mut Client, key: Option<&str>) -> pb::QueueSettings {
    let request = pb::PauseQueueRequest { queue: QUEUE.into(), fairness_key: key.map(str::to_owned) };
    client.pause_queue(request).await.expect("pause").into_inner().settings.unwrap()
}

async fn resume(client: &mut Client, key: Option<&str>) -> pb::QueueSettings {
    let request = pb::ResumeQueueRequest { queue: QUEUE.into(), fairness_key: key.map(str::to_owned) };
    client.resume_queue(request).await.expect("resume").into_inner().settings.unwrap()
}

fn update(settings: pb::QueueSettings, clear: &[&str]) -> pb::UpdateQueueRequest {
    pb::UpdateQueueRequest {
        queue: QUEUE.into(),
        settings: Some(settings),
        clear: clear.iter().map(|c| c.to_string()).collect(),
        expected_version: 0,
    }
}

#[tokio::test]
async fn a_paused_key_waits_while_the_others_go_and_pauses_outlive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;

    // The empty key paused: the other key's tasks go, its own wait.
    let settings = pause(&mut client, Some("")).await;
    assert_eq!((settings.version, settings.paused_keys.clone()), (1, vec![String::new()]));
    add_tasks(&mut client, "", 3).await;
    add_tasks(&mut client, "b", 3).await;
    assert_eq!(drain(&mut client).await, ["b:0", "b:1", "b:2"], "only the key not paused");

    // A poll already waiting is not handed a task of the paused key.
    let mut waiting = server.client().await;
    let poll = tokio::spawn(async move {
        let request = pb::PollTaskRequest {
            queue: QUEUE.into(),
            worker_id: "waiting".into(),
            max_wait: wait(Duration::from_secs(2)),
        };
        waiting.poll_task(request).await.expect("poll").into_inner().task
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while describe(&mut client, QUEUE).await.waiting_pollers == 0 {
        assert!(Instant::now() < deadline, "the poll never waited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    add(&mut client, QUEUE, spec("", 0.0, 3, b":3")).await.expect("add");
    assert_eq!(poll.await.unwrap(), None, "the waiting poll got nothing of the paused key");

    // The whole queue paused: nothing goes, whatever the key.
    assert!(pause(&mut client, None).await.paused);
    add_tasks(&mut client, "c", 1).await;
    assert!(drain(&mut client).await.is_empty(), "a paused queue hands out nothing");
    let settings = client
        .update_queue(update(
            pb::QueueSettings {
                lease_timeout: Some(prost_types::Duration { seconds: 9, nanos: 0 }),
                ..Default::default()
            },
            &[],
        ))
        .await
        .expect("update")
        .into_inner()
        .settings
        .unwrap();
    assert_eq!(settings.version, 3);

    // A restart: the settings are the queue's, not the process's.
    drop(client);
    server.terminate();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    let stored = describe(&mut client, QUEUE).await.settings.expect("the stored settings");
    assert!(stored.paused && stored.paused_keys == vec![String::new()] && stored.version == 3, "{stored:?}");
    assert!(drain(&mut client).await.is_empty(), "still paused after the restart");

    // Resumed: the queue's other keys first, then the empty key's tasks,
    // in the order they were added, each leased for the 9 s stored.
    assert!(!resume(&mut client, None).await.paused);
    assert_eq!(drain(&mut client).await, ["c:0"]);
    assert!(resume(&mut client, Some("")).await.paused_keys.is_empty());
    let request =
        pb::PollTaskRequest { queue: QUEUE.into(), worker_id: "w".into(), max_wait: wait(Duration::from_secs(5)) };
    let task = client.poll_task(request).await.expect("poll").into_inner().task.expect("a task of the resumed key");
    let lease_ms = (task.lease_deadline.unwrap().seconds
        - prost_types::Timestamp::from(std::time::SystemTime::now()).seconds)
        * 1000;
    assert!((7_000..=10_000).contains(&lease_ms), "a lease of about {lease_ms} ms, not the 9 s stored");
    let complete = pb::CompleteTaskRequest { lease_token: task.lease_token, result: Vec::new() };
    client.complete_task(complete).await.expect("complete");
    let mut resumed = vec![String::from_utf8(task.payload).unwrap()];
    resumed.extend(drain(&mut client).await);
    assert_eq!(resumed, [":0", ":1", ":2", ":3"], "the resumed key's tasks, once each, in order");
    server.terminate();
}

#[tokio::test]
async fn bad_changes_are_refused_with_the_field_named_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;
    let short = pb::QueueSettings {
        lease_timeout: Some(prost_types::Duration { seconds: 0, nanos: 500_000_000 }),
        ..Default::default()
    };
    let refused = client.update_queue(update(short, &[])).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().starts_with("settings.lease_timeout: "), "{}", refused.message());
    let refused = client.update_queue(update(pb::QueueSettings::default(), &["lease"])).await.unwrap_err();
    assert!(
        refused.message().contains("clear") && refused.message().contains("lease_timeout"),
        "{}",
        refused.message()
    );

    // Keys paused up to the bound; one more is refused.
    for i in 0..100 {
        pause(&mut client, Some(&format!("k{i}"))).await;
    }
    let request = pb::PauseQueueRequest { queue: QUEUE.into(), fairness_key: Some("k100".into()) };
    let refused = client.pause_queue(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains("the limit is 100"), "{}", refused.message());
    let long = pb::PauseQueueRequest { queue: QUEUE.into(), fairness_key: Some("x".repeat(257)) };
    assert!(client.pause_queue(long).await.unwrap_err().message().starts_with("fairness_key: "));
    let stored = describe(&mut client, QUEUE).await.settings.unwrap();
    assert_eq!((stored.version, stored.paused_keys.len()), (100, 100), "nothing written by the refusals");

    // A stale expected version, and a queue that does not exist.
    let stale = pb::UpdateQueueRequest { expected_version: 7, ..update(pb::QueueSettings::default(), &["weights"]) };
    assert_eq!(client.update_queue(stale).await.unwrap_err().code(), Code::Aborted);
    let missing = pb::PauseQueueRequest { queue: "jbos".into(), fairness_key: None };
    assert_eq!(client.pause_queue(missing).await.unwrap_err().code(), Code::NotFound);
    let listed = client.describe_queue(pb::DescribeQueueRequest { queue: "jbos".into(), top_keys: 0 }).await;
    assert_eq!(listed.unwrap_err().code(), Code::NotFound, "the mistyped queue was not created");
    server.terminate();
}

/// Weights stored with the queue are what DescribeQueue sets each key's
/// share of dispatch beside: 100 tasks handed out of a backlog of two keys
/// weighted 3 and 1 go 75 and 25, and the answer says so with the weights.
#[tokio::test]
async fn describe_queue_shows_each_keys_recent_share_of_dispatch_with_its_weight() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(dir.path());
    let mut client = server.client().await;
    create(&mut client, QUEUE, 1).await;
    let weights = [("heavy".to_owned(), 3.0), ("light".to_owned(), 1.0)].into_iter().collect();
    client.update_queue(update(pb::QueueSettings { weights, ..Default::default() }, &[])).await.expect("weights");
    add_tasks(&mut client, "heavy", 100).await;
    add_tasks(&mut client, "light", 100).await;
    let mut taken = 0;
    while taken < 100 {
        let request = pb::PollTasksRequest {
            queue: QUEUE.into(),
            worker_id: "shares".into(),
            max_wait: wait(Duration::from_secs(5)),
            max_tasks: (100 - taken).min(10) as u32,
            completions: Vec::new(),
        };
        let tasks = client.poll_tasks(request).await.expect("poll").into_inner().tasks;
        assert!(!tasks.is_empty(), "a backlog of 200 has tasks to hand out");
        taken += tasks.len();
    }

    let described = describe(&mut client, QUEUE).await;
    let recent = &described.partitions[0].recent_dispatch;
    let of = |key: &str| recent.iter().find(|k| k.fairness_key == key).unwrap_or_else(|| panic!("{key}: {recent:?}"));
    let (heavy, light) = (of("heavy"), of("light"));
    assert_eq!(heavy.tasks + light.tasks, 100, "{recent:?}");
    assert!((73..=77).contains(&heavy.tasks), "weights 3:1 hand out 75 of 100: {recent:?}");
    assert_eq!((heavy.weight, light.weight), (3.0, 1.0));
    assert_eq!((heavy.cost, light.cost), (heavy.tasks, light.tasks), "tasks of cost 1");
    let span = described.partitions[0].recent_span.expect("a span");
    assert!(span.seconds < 60, "the last seconds only: {span:?}");
}
