//! Quiet keys matched in their turn (docs/fairness.md §7a), over gRPC: a task
//! of a quiet key added beside a backlog, with no poll waiting, is leased at
//! once and held for the next poll, which gets it before the backlog; held
//! longer than `matcher.quiet_hold`, it goes back to the queue with its
//! attempt not counted; a key with a task waiting, or a lower priority than
//! the backlog's, goes through the backlog; nothing is held on a queue no
//! worker polls, or with no backlog.

use std::time::Duration;

use fairway::config::Config;
use fairway::proto::v1 as pb;

use crate::support::{Client, TestServer, add, add_all, create, describe, poll, spec};

const QUEUE: &str = "quiet";

async fn beside_a_backlog(config: Config) -> (TestServer, Client) {
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    create(&mut client, QUEUE, 1).await;
    let noisy: Vec<pb::TaskSpec> = (0..50).map(|i| spec("noisy", 1.0, 3, format!("noisy {i}").as_bytes())).collect();
    add_all(&mut client, QUEUE, noisy).await;
    // The first noisy task found the queue empty: held (or not), it goes
    // first. Done, the other 49 wait. The poll may wait for the backlog's
    // first read (a loaded machine), never for long.
    let first = poll(&mut client, QUEUE, Duration::from_secs(10)).await.expect("the first noisy task");
    assert_eq!(first.fairness_key, "noisy");
    let done = pb::CompleteTaskRequest { lease_token: first.lease_token, result: vec![] };
    client.complete_task(done).await.expect("complete");
    (server, client)
}

async fn leased(client: &mut Client) -> u64 {
    describe(client, QUEUE).await.partitions.iter().map(|p| p.leased).sum()
}

#[tokio::test]
async fn a_quiet_keys_task_is_held_for_the_next_poll_and_goes_before_the_backlog() {
    // Held long enough that a slow machine's poll still finds it held.
    let mut config = Config::default();
    config.matcher.quiet_hold = Duration::from_secs(10);
    let (server, mut client) = beside_a_backlog(config).await;
    let added = add(&mut client, QUEUE, spec("quiet", 1.0, 3, b"quiet")).await.expect("AddTask");
    assert!(added.sync_matched, "a quiet key's task beside a backlog is leased at once");
    let first = poll(&mut client, QUEUE, Duration::ZERO).await.expect("a task");
    assert_eq!(first.payload, b"quiet", "the held task goes before the 50 of the backlog");
    assert_eq!(first.attempt, 1);

    // A key with a task waiting goes through the backlog: the second of
    // two tasks of one key added together is not held.
    let again = [spec("twice", 1.0, 3, b"first"), spec("twice", 1.0, 3, b"second")];
    let outcomes: Vec<bool> = futures::future::join_all(again.into_iter().map(|s| {
        let mut client = client.clone();
        async move { add(&mut client, QUEUE, s).await.expect("AddTask").sync_matched }
    }))
    .await;
    assert!(outcomes.iter().filter(|held| **held).count() <= 1, "two tasks of one key were held: {outcomes:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_held_task_no_poll_takes_goes_back_to_the_queue_with_its_attempt_not_counted() {
    let mut config = Config::default();
    // Held only while a poll came within the hold: the poll of
    // `beside_a_backlog` must still count when the task is added.
    config.matcher.quiet_hold = Duration::from_secs(1);
    let (server, mut client) = beside_a_backlog(config).await;
    let added = add(&mut client, QUEUE, spec("quiet", 1.0, 3, b"quiet")).await.expect("AddTask");
    assert!(added.sync_matched);
    assert_eq!(leased(&mut client).await, 1, "held: its lease is written");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    while leased(&mut client).await > 0 {
        assert!(tokio::time::Instant::now() < deadline, "a held task was not handed back within 20 s");
        ticks.tick().await;
    }
    assert_eq!(describe(&mut client, QUEUE).await.held_for_polls, 0, "handed back, no longer held");
    let mut quiet = None;
    while let Some(task) = poll(&mut client, QUEUE, Duration::ZERO).await {
        if task.payload == b"quiet" {
            quiet = Some(task);
            break;
        }
    }
    let quiet = quiet.expect("the handed-back task is in the queue");
    assert_eq!(quiet.attempt, 1, "no worker had it: its attempt does not count");
    server.stop().await;
}

#[tokio::test]
async fn a_task_of_a_lower_priority_than_the_backlog_or_with_holding_off_is_not_held() {
    let (server, mut client) = beside_a_backlog(Config::default()).await;
    let lower = add(&mut client, QUEUE, spec("quiet", 1.0, 5, b"low")).await.expect("AddTask");
    assert!(!lower.sync_matched, "priority 5 beside a backlog of priority 3 waits");
    server.stop().await;

    let mut config = Config::default();
    config.matcher.quiet_hold = Duration::ZERO;
    let (server, mut client) = beside_a_backlog(config).await;
    let added = add(&mut client, QUEUE, spec("quiet", 1.0, 3, b"quiet")).await.expect("AddTask");
    assert!(!added.sync_matched, "matcher.quiet_hold = 0 holds nothing");
    server.stop().await;
}

#[tokio::test]
async fn nothing_is_held_on_a_queue_no_worker_polls_or_whose_workers_wait() {
    let mut config = Config::default();
    config.matcher.quiet_hold = Duration::from_secs(10);
    // A backlog, and no poll ever came: no worker would take a held task.
    let server = TestServer::start_with(config.clone()).await;
    let mut client = server.client.clone();
    create(&mut client, QUEUE, 1).await;
    let noisy: Vec<pb::TaskSpec> = (0..10).map(|i| spec("noisy", 1.0, 3, format!("noisy {i}").as_bytes())).collect();
    add_all(&mut client, QUEUE, noisy).await;
    let added = add(&mut client, QUEUE, spec("quiet", 1.0, 3, b"quiet")).await.expect("AddTask");
    assert!(!added.sync_matched, "held on a queue no worker polls");
    assert_eq!(leased(&mut client).await, 0);
    server.stop().await;

    // Polls came, and found nothing: the workers wait, no backlog. The
    // task goes to the queue, for the next poll to take as usual.
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    create(&mut client, QUEUE, 1).await;
    assert!(poll(&mut client, QUEUE, Duration::ZERO).await.is_none());
    let added = add(&mut client, QUEUE, spec("quiet", 1.0, 3, b"quiet")).await.expect("AddTask");
    assert!(!added.sync_matched, "held with no backlog");
    assert_eq!(leased(&mut client).await, 0);
    let task = poll(&mut client, QUEUE, Duration::ZERO).await.expect("the task, from the queue");
    assert_eq!(task.payload, b"quiet");
    server.stop().await;
}

#[tokio::test]
async fn held_tasks_are_bounded_by_max_held_tasks() {
    let mut config = Config::default();
    config.matcher.max_held_tasks = 3;
    config.matcher.quiet_hold = Duration::from_secs(10);
    let (server, mut client) = beside_a_backlog(config).await;
    let mut held = 0;
    for i in 0..10 {
        let added = add(&mut client, QUEUE, spec(&format!("quiet-{i}"), 1.0, 3, b"q")).await.expect("AddTask");
        held += usize::from(added.sync_matched);
    }
    assert_eq!(held, 3, "matcher.max_held_tasks = 3");
    assert_eq!(leased(&mut client).await, 3);
    assert_eq!(describe(&mut client, QUEUE).await.held_for_polls, 3, "DescribeQueue tells held tasks apart");
    let taken = poll(&mut client, QUEUE, Duration::ZERO).await.expect("a held task");
    assert!(taken.fairness_key.starts_with("quiet-"), "a held task goes first: {}", taken.fairness_key);
    assert_eq!(describe(&mut client, QUEUE).await.held_for_polls, 2, "the poll took one");
    server.stop().await;
}
