//! The tombstone budget in practice: after 200,000 tasks went through one
//! partition (added, dispatched, their prefixes range-deleted), Cassandra's
//! own tracing shows that a read from the ack level scans no tombstone, while
//! a read from the start of the subqueue does.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::SystemClock;
use fairway::matcher::{Queues, Settings};
use fairway::model::{FairLevel, PartitionId, Priority, TaskSpec, validate};
use fairway::store::Store;
use futures::future::join_all;
use scylla::client::session::Session;

use super::Keyspace;

const TASKS: usize = 200_000;

/// How many tombstones Cassandra says it scanned for a read above `after`.
async fn traced_tombstones(session: &Session, keyspace: &str, queue: &str, after: FairLevel) -> u64 {
    let kind = Priority::DEFAULT.get() as i32;
    let mut statement = session
        .prepare(format!(
            "SELECT pass, id FROM {keyspace}.tasks WHERE queue = ? AND partition = 0 \
             AND (kind, pass, id) > (?, ?, ?) AND (kind, pass, id) <= (?, ?, ?) LIMIT 1000"
        ))
        .await
        .expect("prepare the traced read");
    statement.set_tracing(true);
    let result = session
        .execute_unpaged(&statement, (queue, kind, after.pass, after.id, kind, i64::MAX, i64::MAX))
        .await
        .expect("the traced read");
    let tracing_id = result.tracing_id().expect("a tracing id");
    let info = session.get_tracing_info(&tracing_id).await.expect("the trace");
    let counts: Vec<u64> = info
        .events
        .iter()
        .filter_map(|event| event.activity.as_deref())
        .filter_map(|activity| {
            // "Read N live rows and M tombstone cells …"
            let rest = activity.split(" live rows and ").nth(1)?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect();
    assert!(!counts.is_empty(), "the trace reports no read: {:?}", info.events);
    counts.into_iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_the_ack_level_scan_no_tombstones() {
    let keyspace = Keyspace::create().await;
    let store: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let mut settings = Settings::default();
    settings.matcher.sync_match = false;
    let queues = Queues::new(store.clone(), Arc::new(SystemClock), settings);
    let queue = validate::queue_name("queue", "tombstones").unwrap();
    let matcher = queues.get(&queue).await.expect("open the queue");

    for chunk in 0..TASKS / 1000 {
        let adds = (0..1000).map(|i| {
            matcher.add(
                TaskSpec {
                    fairness_key: format!("key-{}", i % 64),
                    fairness_weight: None,
                    priority: Priority::DEFAULT,
                    payload: format!("{chunk}/{i}").into_bytes(),
                },
                None,
            )
        });
        for added in join_all(adds).await {
            added.expect("add a task");
        }
    }
    for n in 0..TASKS {
        matcher
            .poll(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("only {n} of {TASKS} tasks were dispatched"));
    }
    queues.close().await;

    let partition = PartitionId { queue: queue.clone(), partition: 0 };
    let meta = store.load_partition(&partition).await.unwrap().expect("the partition exists");
    let ack = meta.subqueues[Priority::DEFAULT.index()].ack_level;
    assert!(ack > FairLevel::ZERO, "the ack level was persisted");
    let from_ack = traced_tombstones(keyspace.session(), &keyspace.name, queue.as_str(), ack).await;
    let from_start = traced_tombstones(keyspace.session(), &keyspace.name, queue.as_str(), FairLevel::ZERO).await;
    println!("tombstones scanned: {from_ack} reading from the ack level {ack}, {from_start} reading from the start");
    assert_eq!(from_ack, 0, "a read from the ack level scanned tombstones");
    assert!(from_start > 0, "acknowledged tasks were range-deleted, so a read from the start crosses tombstones");
    keyspace.drop_keyspace().await;
}
