//! Deadline ordering end to end, over real gRPC on the embedded store.

use std::time::Duration;

use fairway::config::Config;
use fairway::core::engine::{DispatchOrder, TaskPolicy};
use fairway::proto::v1 as pb;

use crate::support::{TestServer, add, create, poll, spec};

const QUEUE: &str = "deadlines";
const WAIT: Duration = Duration::from_secs(5);

fn at(seconds: i64, millis: i32) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds, nanos: millis * 1_000_000 })
}

/// Tasks added one by one latest deadline first come back earliest deadline
/// first, whatever their keys; a task without a deadline goes by its add
/// time (now, before them all); a deadline already passed ranks as due
/// `tasks.late_slack` (15 min) from now, so after the task due now and
/// before the deadlines of 2030; a higher priority goes before everything.
/// Each comes back with the deadline it was given.
#[tokio::test]
async fn tasks_come_back_in_deadline_order() {
    let mut config = Config::default();
    config.queues.insert(QUEUE.into(), TaskPolicy { ordering: DispatchOrder::Deadline, ..TaskPolicy::default() });
    let server = TestServer::start_with(config).await;
    let mut client = server.client.clone();
    // One partition: the order is kept within a partition.
    create(&mut client, QUEUE, 1).await;
    // In 2030, a minute apart (plus a few milliseconds), latest first.
    let base = 1_900_000_000;
    for i in (0..12).rev() {
        let task = pb::TaskSpec { deadline: at(base + 60 * i, i as i32), ..spec(&format!("k{}", i % 5), 0.0, 0, b"") };
        add(&mut client, QUEUE, task).await.expect("added");
    }
    let no_deadline = spec("no-deadline", 0.0, 0, b"");
    add(&mut client, QUEUE, no_deadline).await.expect("added");
    // In 2001: long passed.
    let overdue = pb::TaskSpec { deadline: at(1_000_000_000, 0), ..spec("overdue", 0.0, 0, b"") };
    add(&mut client, QUEUE, overdue).await.expect("added");
    let urgent = pb::TaskSpec { deadline: at(base + 3600, 0), ..spec("urgent", 0.0, 1, b"") };
    add(&mut client, QUEUE, urgent).await.expect("added");

    let mut order = Vec::new();
    while let Some(task) = poll(&mut client, QUEUE, Duration::from_millis(200)).await {
        order.push((task.fairness_key, task.deadline.map(|d| (d.seconds, d.nanos / 1_000_000))));
        if order.len() > 20 {
            break;
        }
    }
    let mut expected = vec![
        ("urgent".to_owned(), Some((base + 3600, 0))),
        ("no-deadline".to_owned(), None),
        ("overdue".to_owned(), Some((1_000_000_000, 0))),
    ];
    expected.extend((0..12).map(|i| (format!("k{}", i % 5), Some((base + 60 * i, i as i32)))));
    assert_eq!(order, expected);
    assert!(poll(&mut client, QUEUE, WAIT.min(Duration::from_millis(100))).await.is_none());
    server.stop().await;
}
