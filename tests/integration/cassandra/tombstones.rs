//! The tombstone budget in practice: after 50,000 tasks went through one
//! partition (added, dispatched, completed; their prefixes range-deleted),
//! Cassandra's own tracing shows that a read from the ack level scans no
//! tombstone, while a read from the start of the subqueue does; and that the
//! lease records a new owner reads leave a handful of range tombstones, not
//! one per finished lease; and that dedup lookups, after thousands of
//! freed dedup ids, draw no warning from Cassandra at a low
//! `tombstone_warn_threshold` (`scripts/test.sh` starts the node at 100).

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::SystemClock;
use fairway::core::engine::{DeadLetterFilter, Outcome};
use fairway::matcher::{Queues, Settings};
use fairway::model::{FairLevel, PartitionId, Priority, TaskSpec, validate};
use fairway::store::{RecordRange, Section, Store};
use futures::future::join_all;
use scylla::client::session::Session;

use super::Keyspace;

const TASKS: usize = 50_000;
/// Workers polling and completing at once.
const WORKERS: usize = 64;

/// How many tombstones Cassandra says it scanned for a read of rows of
/// `kind` above `after`.
async fn traced_tombstones(session: &Session, keyspace: &str, queue: &str, kind: i32, after: FairLevel) -> u64 {
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
    // Cassandra writes a trace, event by event, after it answers; under
    // load, after the driver's few quick tries to read it: wait until it
    // holds the read's count.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let info = session.get_tracing_info(&tracing_id).await;
        let counts: Vec<u64> = info
            .iter()
            .flat_map(|info| info.events.iter())
            .filter_map(|event| event.activity.as_deref())
            .filter_map(|activity| {
                // "Read N live rows and M tombstone cells …"
                let rest = activity.split(" live rows and ").nth(1)?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .collect();
        if !counts.is_empty() {
            return counts.into_iter().sum();
        }
        assert!(tokio::time::Instant::now() < deadline, "the trace reports no read within 30 s: {info:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_the_ack_level_scan_no_tombstones() {
    let keyspace = Keyspace::create().await;
    let store: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let mut settings = Settings::default();
    settings.matcher.sync_match = false;
    // Finished leases are range-deleted by the keeper: let it run often.
    settings.writer.keeper_interval = Duration::from_millis(100);
    let queues = Queues::new(store.clone(), Arc::new(SystemClock), settings);
    let queue = validate::queue_name("queue", "tombstones").unwrap();
    let matcher = queues.create(&queue, 1, None).await.expect("open the queue");

    for chunk in 0..TASKS / 1000 {
        let adds = (0..1000).map(|i| {
            matcher.add(
                TaskSpec::new(format!("key-{}", i % 64), Priority::DEFAULT, format!("{chunk}/{i}").into_bytes()),
                None,
            )
        });
        for added in join_all(adds).await {
            added.expect("add a task");
        }
    }
    let workers = (0..WORKERS).map(|_| {
        let matcher = matcher.clone();
        async move {
            for _ in 0..TASKS / WORKERS {
                let task = matcher.poll(Duration::from_secs(30)).await.expect("a poll").expect("a task for every poll");
                matcher.finish(&task.token, Outcome::Complete).await.expect("complete");
            }
        }
    });
    join_all(workers).await;
    queues.close().await;

    let partition = PartitionId { queue: queue.clone(), partition: 0 };
    let meta = store.load_partition(&partition).await.unwrap().expect("the partition exists");
    let ack = meta.subqueues[Priority::DEFAULT.index()].ack_level;
    assert!(ack > FairLevel::ZERO, "the ack level was persisted");
    let (session, name) = (keyspace.session(), &keyspace.name);
    let kind = Priority::DEFAULT.get() as i32;
    let from_ack = traced_tombstones(session, name, queue.as_str(), kind, ack).await;
    let from_start = traced_tombstones(session, name, queue.as_str(), kind, FairLevel::ZERO).await;
    let leases = Section::Leases.code() as i32;
    let from_lease_start =
        traced_tombstones(session, name, queue.as_str(), leases, FairLevel::new(i64::MIN, i64::MIN)).await;
    println!(
        "tombstones scanned: {from_ack} reading from the ack level {ack}, {from_start} reading from the start, \
         {from_lease_start} reading every lease record"
    );
    assert_eq!(from_ack, 0, "a read from the ack level scanned tombstones");
    assert!(from_start > 0, "acknowledged tasks were range-deleted, so a read from the start crosses tombstones");
    assert!(
        from_lease_start < 100,
        "{from_lease_start} tombstones under the lease records of {TASKS} finished leases: one per lease?"
    );
    keyspace.drop_keyspace().await;
}

/// The most tombstones a read in normal operation may cross: the test node's
/// `tombstone_warn_threshold`, past which Cassandra warns.
pub(super) const TOMBSTONE_BUDGET: u64 = 100;

/// The node's `tombstone_warn_threshold`, which must be low enough for its
/// warnings to prove the budget.
pub(super) async fn check_warn_threshold(session: &Session) {
    let result = session
        .query_unpaged("SELECT value FROM system_views.settings WHERE name = 'tombstone_warn_threshold'", ())
        .await
        .expect("read the node's settings");
    let rows = result.into_rows_result().expect("rows");
    let (value,): (String,) = rows.first_row().expect("the setting");
    let threshold: u64 = value.parse().expect("a number");
    assert!(
        threshold <= TOMBSTONE_BUDGET,
        "the test node warns past {threshold} tombstones; start it with \
         CASSANDRA_DEV_TOMBSTONE_WARN={TOMBSTONE_BUDGET} (as scripts/test.sh does)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_lookups_cross_only_their_own_buckets_tombstones() {
    const FREED: usize = 3_000;
    const LOOKUPS: usize = 300;
    let keyspace = Keyspace::create().await;
    check_warn_threshold(keyspace.session()).await;
    let cassandra = Arc::new(keyspace.store().await);
    let store: Arc<dyn Store> = cassandra.clone();
    let mut settings = Settings::default();
    settings.matcher.sync_match = false;
    let queues = Queues::new(store.clone(), Arc::new(SystemClock), settings);
    let queue = validate::queue_name("queue", "dedup-tombstones").unwrap();
    let matcher = queues.create(&queue, 1, None).await.expect("open the queue");
    let with_id = |i: usize| TaskSpec {
        dedup_id: Some(format!("https://forge.example/origin/{i}")),
        ..TaskSpec::new(format!("lister-{}", i % 8), Priority::DEFAULT, format!("{i}").into_bytes())
    };

    // Thousands of ids taken and freed: each freed id leaves a tombstone in its bucket.
    for chunk in 0..FREED / 500 {
        let adds = (0..500).map(|i| matcher.add(with_id(chunk * 500 + i), None));
        for added in join_all(adds).await {
            assert!(!added.expect("add a task").duplicate);
        }
        let workers = (0..WORKERS).map(|_| {
            let matcher = matcher.clone();
            async move {
                while let Some(task) = matcher.try_take().await {
                    matcher.finish(&task.token, Outcome::Complete).await.expect("complete");
                }
            }
        });
        join_all(workers).await;
    }
    assert_eq!(cassandra.read_warnings(), 0, "reads warned while the ids were taken and freed");

    // New ids, and ids held again: each lookup reads its own bucket only.
    let adds = (0..LOOKUPS).map(|i| matcher.add(with_id(FREED + i), None));
    for added in join_all(adds).await {
        assert!(!added.expect("add a task").duplicate);
    }
    let again = (0..LOOKUPS).map(|i| matcher.add(with_id(FREED + i), None));
    for added in join_all(again).await {
        assert!(added.expect("add a task").duplicate, "the id is held");
    }
    queues.close().await;
    assert_eq!(
        cassandra.read_warnings(),
        0,
        "Cassandra warned that reads crossed more than {TOMBSTONE_BUDGET} tombstones after {FREED} freed dedup ids"
    );
    // The control: a read of the section from its start (as a lookup read
    // from its bucket to the section's end did) crosses the freed ids' tombstones.
    let partition = PartitionId { queue: queue.clone(), partition: 0 };
    store.read_records(&partition, RecordRange::all(Section::Dedup), 1024).await.expect("read the section");
    assert!(cassandra.read_warnings() > 0, "a read across {FREED} freed ids drew no warning: is the check blind?");
    keyspace.drop_keyspace().await;
}

/// Dead letters put back leave their deleted rows below the floor kept in
/// the metadata: after 1,000 were buried and re-driven, listing and
/// re-driving new ones draw no warning at a threshold of 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_put_back_are_not_crossed_again() {
    const BURIED: usize = 1_000;
    let keyspace = Keyspace::create().await;
    check_warn_threshold(keyspace.session()).await;
    let cassandra = Arc::new(keyspace.store().await);
    let store: Arc<dyn Store> = cassandra.clone();
    let mut settings = Settings::default();
    settings.matcher.sync_match = false;
    let queues = Queues::new(store.clone(), Arc::new(SystemClock), settings);
    let queue = validate::queue_name("queue", "dead-letter-tombstones").unwrap();
    let matcher = queues.create(&queue, 1, None).await.expect("open the queue");
    let bury = Outcome::Fail { retryable: false, message: "broken".into(), retry_after: None };
    let bury_all = |count: usize, round: usize| {
        let matcher = matcher.clone();
        let bury = bury.clone();
        async move {
            let adds = (0..count).map(|i| {
                matcher.add(
                    TaskSpec::new(format!("key-{}", i % 16), Priority::DEFAULT, format!("{round}/{i}").into_bytes()),
                    None,
                )
            });
            for added in join_all(adds).await {
                added.expect("add a task");
            }
            let mut buried = 0;
            while let Some(task) = matcher.try_take().await {
                matcher.finish(&task.token, bury.clone()).await.expect("fail");
                buried += 1;
            }
            assert_eq!(buried, count, "every task was taken and buried");
        }
    };

    let every = DeadLetterFilter::default();
    bury_all(BURIED, 0).await;
    let mut redriven = 0;
    while redriven < BURIED {
        let put_back = matcher.redrive(0, 10_000, &every, 10_000).await.expect("re-drive");
        assert!(put_back.redriven > 0, "dead letters are left, and none was put back");
        redriven += put_back.redriven;
    }
    while let Some(task) = matcher.try_take().await {
        matcher.finish(&task.token, Outcome::Complete).await.expect("complete");
    }
    assert_eq!(cassandra.read_warnings(), 0, "reads warned while dead letters were put back");

    // New dead letters are listed and put back above the floor.
    bury_all(5, 1).await;
    let (listed, _) = matcher.dead_letters(100, (1 << 20, 10_000), &every).await.expect("list dead letters");
    assert_eq!(listed.len(), 5, "the new dead letters, and none of those put back");
    assert_eq!(matcher.redrive(0, 100, &every, 10_000).await.expect("re-drive").redriven, 5);
    queues.close().await;
    assert_eq!(
        cassandra.read_warnings(),
        0,
        "Cassandra warned that reads crossed more than {TOMBSTONE_BUDGET} tombstones after {BURIED} dead letters were put back"
    );
    // The control: a read of the section from its start crosses them.
    let partition = PartitionId { queue: queue.clone(), partition: 0 };
    store.read_records(&partition, RecordRange::all(Section::DeadLetters), 100).await.expect("read the section");
    assert!(cassandra.read_warnings() > 0, "a read across {BURIED} deleted dead letters drew no warning");
    keyspace.drop_keyspace().await;
}

/// Delayed tasks, retries and leases: 1,000 tasks added with a delay, each
/// failed once (a retry record) and then completed (a finished lease), then
/// a new owner loads the partition and takes 200 more. No read warns at a
/// threshold of 100: promoted delayed records lie below the floor kept in
/// the metadata, finished leases below the range delete. (Unlike dedup ids
/// and dead letters there is no control here: the keeper's range delete
/// through the delayed floor makes even a read of the whole section cheap,
/// one range tombstone for 2,400 promotions, as a first try showed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_tasks_retries_and_leases_draw_no_warning() {
    const TASKS: usize = 1_000;
    let keyspace = Keyspace::create().await;
    check_warn_threshold(keyspace.session()).await;
    let cassandra = Arc::new(keyspace.store().await);
    let store: Arc<dyn Store> = cassandra.clone();
    let settings = || {
        let mut settings = Settings::default();
        settings.matcher.sync_match = false;
        settings.writer.keeper_interval = Duration::from_millis(100);
        settings.tasks.backoff_initial = Duration::from_millis(10);
        settings.tasks.backoff_max = Duration::from_millis(20);
        settings
    };
    let queue = validate::queue_name("queue", "delayed-tombstones").unwrap();
    let first = Queues::new(store.clone(), Arc::new(SystemClock), settings());
    delay_fail_and_complete(&first, &queue, 0, TASKS).await;
    first.close().await;
    // A new owner reads the leases, delayed records and retries the first left.
    let second = Queues::new(store.clone(), Arc::new(SystemClock), settings());
    delay_fail_and_complete(&second, &queue, TASKS, 200).await;
    second.close().await;
    assert_eq!(
        cassandra.read_warnings(),
        0,
        "Cassandra warned that reads crossed more than {TOMBSTONE_BUDGET} tombstones of delayed records, retries or leases"
    );
    keyspace.drop_keyspace().await;
}

/// Adds tasks `from..from + count` with a delay of 200 ms, fails each one
/// once (retryable), then completes it.
async fn delay_fail_and_complete(queues: &Queues, queue: &fairway::model::QueueName, from: usize, count: usize) {
    let matcher = queues.create(queue, 1, None).await.expect("open the queue");
    let delayed = |i: usize| TaskSpec {
        delay: Duration::from_millis(200),
        ..TaskSpec::new(format!("key-{}", i % 16), Priority::DEFAULT, format!("{i}").into_bytes())
    };
    for added in join_all((from..from + count).map(|i| matcher.add(delayed(i), None))).await {
        added.expect("add a task");
    }
    let retry = Outcome::Fail { retryable: true, message: "once more".into(), retry_after: None };
    let mut completed = 0;
    while completed < count {
        let task =
            matcher.poll(Duration::from_secs(10)).await.expect("a poll").expect("every task comes, after its delay");
        let outcome = if task.task.attempt == 1 { retry.clone() } else { Outcome::Complete };
        matcher.finish(&task.token, outcome.clone()).await.expect("report");
        completed += usize::from(outcome == Outcome::Complete);
    }
}
