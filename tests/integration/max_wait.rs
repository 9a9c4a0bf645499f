//! A queue's `max_wait` against a real server: a task of a weight-0.01 key
//! behind a backlog of 100,000 tasks of heavy keys goes once it has waited
//! that long, before the backlog, and FIFO within each key still holds; and
//! its `age_boost`, which takes older tasks ahead by at most the boost.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::ManualClock;
use fairway::config::Config;
use fairway::core::engine::TaskPolicy;
use fairway::proto::v1 as pb;

use crate::support::{Backend, TestServer, add_all, describe, poll, spec};

/// Short: the server's clock is moved by hand, and a move of more than its
/// member timeout would let its own heartbeat lapse.
const MAX_WAIT: Duration = Duration::from_secs(3);
const LIGHT_TASKS: usize = 20;

/// Twenty tasks of a key of weight 0.01, then `heavy` tasks of four keys of
/// weight 1 (added after them, on the server's clock). In fair order alone
/// the light key's k-th task would wait for about 400 × (k − 1) heavy ones;
/// once the light tasks have waited `max_wait` they are moved to the front
/// and go first, oldest first. A heavy key may have one task at the front's
/// pass, which stays before them.
pub(crate) async fn tasks_past_max_wait_pass_a_deep_backlog_on(backend: Backend, heavy: usize) {
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let mut config = Config::default();
    config.matcher.sync_match = false;
    config.writer.keeper_interval = Duration::from_millis(50);
    config.queues.insert("aged".into(), TaskPolicy { max_wait: MAX_WAIT, ..TaskPolicy::default() });
    let server = TestServer::start_timed(backend, config, clock.clone()).await;
    let mut client = server.client.clone();
    let light = (0..LIGHT_TASKS).map(|i| spec("light", 0.01, 0, format!("light {i}").as_bytes())).collect();
    add_all(&mut client, "aged", light).await;
    clock.advance(Duration::from_secs(1));
    let backlog = (0..heavy).map(|i| spec(&format!("heavy-{}", i % 4), 1.0, 0, format!("heavy {i}").as_bytes()));
    add_all(&mut client, "aged", backlog.collect()).await;

    let first = poll(&mut client, "aged", Duration::from_secs(5)).await.expect("a backlogged queue has a task");
    assert_eq!(first.payload, b"light 0", "the light key's first task is at the front's pass");
    let over = |info: pb::DescribeQueueResponse| info.partitions.iter().map(|p| p.tasks_over_max_wait).sum::<u64>();
    assert_eq!(over(describe(&mut client, "aged").await), 0, "nothing has waited 3 s yet");

    // The light tasks have waited max_wait; the heavy ones, added a second
    // later, have not.
    clock.advance(MAX_WAIT - Duration::from_secs(1));
    let past = over(describe(&mut client, "aged").await);
    assert!(past >= (LIGHT_TASKS - 1) as u64, "the light tasks have waited past max_wait: {past}");
    let mut order = Vec::new();
    let mut lights = 1;
    while lights < LIGHT_TASKS {
        let task = poll(&mut client, "aged", Duration::from_secs(5)).await.expect("a backlogged queue has a task");
        lights += usize::from(task.fairness_key == "light");
        order.push(String::from_utf8(task.payload).unwrap());
        assert!(order.len() <= 2 * LIGHT_TASKS, "the light tasks past max_wait wait behind heavy ones: {order:?}");
    }
    let light_order: Vec<&String> = order.iter().filter(|p| p.starts_with("light")).collect();
    let expected: Vec<String> = (1..LIGHT_TASKS).map(|i| format!("light {i}")).collect();
    assert_eq!(light_order, expected.iter().collect::<Vec<_>>(), "oldest first");
    let heavy_before = order.len() - (LIGHT_TASKS - 1);
    assert!(heavy_before <= 4, "at most one task per heavy key at the front's pass: {order:?}");

    // The heavy keys' tasks come next, each key's in the order the server
    // took them (their ids, given in that order).
    let mut last = std::collections::HashMap::new();
    for _ in 0..400 {
        let task = poll(&mut client, "aged", Duration::from_secs(5)).await.expect("the backlog goes on");
        let before = last.insert(task.fairness_key.clone(), task.task_id);
        assert!(
            before.is_none_or(|id| id < task.task_id),
            "FIFO within {}: {} after {before:?}",
            task.fairness_key,
            task.task_id
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn tasks_past_max_wait_pass_a_deep_backlog() {
    tasks_past_max_wait_pass_a_deep_backlog_on(Backend::Embedded, 100_000).await;
}

/// An `age_boost` under a `max_wait` of 4 s on a real server: 40 tasks of
/// key `old` added, the clock moved on 3.9 s, 40 of key `new` added, and
/// 0.05 s later the old tasks compete almost four strides ahead of their
/// passes and the new ones barely ahead: four old tasks go first, then the
/// keys alternate four apart. Each key's tasks stay in order. Without a
/// boost the keys alternate from the start.
#[tokio::test]
async fn an_age_boost_takes_older_tasks_ahead_by_at_most_the_boost() {
    let clock = Arc::new(ManualClock::new(1_800_000_000_000));
    let mut config = Config::default();
    config.matcher.sync_match = false;
    let aged = TaskPolicy { max_wait: Duration::from_secs(4), ..TaskPolicy::default() };
    config.queues.insert("boosted".into(), TaskPolicy { age_boost: 4, ..aged.clone() });
    config.queues.insert("plain".into(), aged);
    let server = TestServer::start_timed(Backend::Embedded, config, clock.clone()).await;
    let mut client = server.client.clone();
    let tasks = |key: &str| (0..40).map(|i| spec(key, 1.0, 0, format!("{key} {i}").as_bytes())).collect::<Vec<_>>();
    for queue in ["boosted", "plain"] {
        add_all(&mut client, queue, tasks("old")).await;
    }
    clock.advance(Duration::from_millis(3_900));
    for queue in ["boosted", "plain"] {
        add_all(&mut client, queue, tasks("new")).await;
    }
    clock.advance(Duration::from_millis(50));
    for (queue, lead) in [("boosted", 4), ("plain", 1)] {
        let mut order = Vec::new();
        while order.len() < 80 {
            let task = poll(&mut client, queue, Duration::from_secs(5)).await.expect("a backlog");
            order.push(String::from_utf8(task.payload).unwrap());
        }
        let mut ahead = 0i32;
        let mut most = 0;
        for payload in &order {
            ahead += if payload.starts_with("old") { 1 } else { -1 };
            most = most.max(ahead);
        }
        assert_eq!(most, lead, "{queue}: the old key at most {lead} ahead: {order:?}");
        for key in ["old", "new"] {
            let own: Vec<&String> = order.iter().filter(|p| p.starts_with(key)).collect();
            let expected: Vec<String> = (0..40).map(|i| format!("{key} {i}")).collect();
            assert_eq!(own, expected.iter().collect::<Vec<_>>(), "{queue}: {key}'s tasks in order");
        }
    }
    server.stop().await;
}
