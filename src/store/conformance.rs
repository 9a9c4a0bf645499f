//! The conformance suite: generic tests that every [`Store`] backend must
//! pass, whatever it is built on. A backend runs them all with
//! [`store_conformance_suite!`](crate::store_conformance_suite), given an
//! async function that returns a fresh, empty [`TestStore`].

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use futures::FutureExt;

use super::{
    ClusterSecrets, Member, ParkedKeyMeta, PartitionMeta, PartitionWrite, PreviousSecret, QueueConfig, Record,
    RecordKey, RecordRange, RecordTask, RecordValue, RowRef, Section, Store, StoreError, StoredRow, SubqueueMeta,
};
use crate::model::{FairLevel, PartitionId, Priority, StoredTask, validate};

/// A fresh store for one test, whatever must live as long as it (a
/// temporary directory), and what must be done after it (drop a keyspace).
pub struct TestStore<S: ?Sized + Send + Sync = dyn Store> {
    /// The store under test.
    pub store: Arc<S>,
    guard: Box<dyn Any + Send>,
    cleanup: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<S: ?Sized + Send + Sync> TestStore<S> {
    /// A test store: `store`, and `guard` dropped after it.
    pub fn of(store: Arc<S>, guard: impl Any + Send) -> Self {
        TestStore { store, guard: Box::new(guard), cleanup: None }
    }

    /// Runs `cleanup` after the test, whether it passed or not.
    pub fn with_cleanup(mut self, cleanup: impl Future<Output = ()> + Send + 'static) -> Self {
        self.cleanup = Some(Box::pin(cleanup));
        self
    }

    /// Runs `test` on the store, then the cleanup, then reports the test's outcome.
    pub async fn run<Fut: Future<Output = ()>>(self, test: impl FnOnce(Arc<S>) -> Fut) {
        let outcome = AssertUnwindSafe(test(self.store.clone())).catch_unwind().await;
        drop(self.store);
        if let Some(cleanup) = self.cleanup {
            cleanup.await;
        }
        drop(self.guard);
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Expands to one `#[tokio::test]` per conformance test, each with a fresh store
/// from `$factory` (an `async fn() -> TestStore`).
#[macro_export]
macro_rules! store_conformance_suite {
    ($factory:path) => {
        $crate::store_conformance_suite!(@tests $factory;
            absent_partition_loads_as_none,
            take_ownership_creates_then_fences,
            a_partition_is_taken_in_its_region_only,
            append_is_conditional_on_the_range_id,
            read_is_ordered_strictly_above_and_limited,
            subqueues_partitions_and_queues_are_separate,
            delete_through_is_inclusive_and_idempotent,
            metadata_round_trips_and_is_fenced,
            new_owner_sees_every_write_of_the_old_one,
            task_contents_round_trip,
            queues_are_created_once,
            a_queue_keeps_its_creator,
            members_heartbeat_and_leave,
            a_member_long_dead_is_forgotten_and_one_back_is_not,
            the_cluster_secret_is_the_first_one_written,
            a_rotation_replaces_the_current_secret_once,
            a_forced_failover_starts_the_next_generation_once,
            of_racing_forced_failovers_one_wins,
            queue_settings_change_by_compare_and_set_on_their_version,
            records_are_written_with_tasks_in_one_conditional_write,
            a_write_moves_a_task_to_another_level_whole_or_not_at_all,
            record_sections_are_ordered_separate_and_range_deleted,
            record_reads_stay_inside_their_range,
            bucket_reads_return_the_buckets_named_and_no_more,
            read_row_finds_one_task_or_record,
        );
    };
    (@tests $factory:path; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                $factory()
                    .await
                    .run(|store| async move { $crate::store::conformance::$name(store.as_ref()).await })
                    .await;
            }
        )+
    };
}

/// The node name the tests take partitions as.
const OWNER: &str = "127.0.0.1:7070";

fn partition(queue: &str, partition: u32) -> PartitionId {
    PartitionId { queue: validate::queue_name("queue", queue).expect("a valid test queue name"), partition }
}

fn task(priority: Priority, pass: i64, id: i64) -> StoredTask {
    StoredTask {
        level: FairLevel::new(pass, id),
        priority,
        fairness_key: format!("key-{}", id % 3),
        fairness_weight: None,
        payload: format!("payload {pass}/{id}").into_bytes(),
        created_at_unix_ms: 1_700_000_000_000 + id,
        attempt: 1,
        task_id: id,
        dedup_id: None,
        dedup_slot: 0,
        deadline_unix_ms: None,
        cost: 1,
        size: None,
    }
}

fn levels(tasks: &[StoredTask]) -> Vec<FairLevel> {
    tasks.iter().map(|t| t.level).collect()
}

async fn owned(store: &dyn Store, p: &PartitionId) -> i64 {
    store.take_ownership(p, 0, OWNER, "").await.expect("take a new partition").range_id
}

/// A partition never taken loads as `None`, and reads of it return nothing.
pub async fn absent_partition_loads_as_none(store: &dyn Store) {
    assert_eq!(store.load_partition(&partition("absent", 0)).await.unwrap(), None);
    let empty = store.read(&partition("absent", 0), Priority::DEFAULT, FairLevel::ZERO, 10).await.unwrap();
    assert!(empty.is_empty());
}

/// Taking a new partition creates it at range id 1 with its owner; taking it
/// with a stale range id is `Fenced`.
pub async fn take_ownership_creates_then_fences(store: &dyn Store) {
    let p = partition("own", 0);
    let first = store.take_ownership(&p, 0, OWNER, "").await.unwrap();
    assert_eq!(first.range_id, 1);
    assert_eq!(first.owner, OWNER);
    assert_eq!(store.load_partition(&p).await.unwrap().unwrap().range_id, 1);
    assert_eq!(store.take_ownership(&p, 0, OWNER, "").await.unwrap_err(), StoreError::Fenced { current_range_id: 1 });
    let second = store.take_ownership(&p, 1, "127.0.0.2:7070", "").await.unwrap();
    assert_eq!(second.range_id, 2);
    assert_eq!(second.owner, "127.0.0.2:7070");
    assert_eq!(store.load_partition(&p).await.unwrap().unwrap().owner, "127.0.0.2:7070");
    assert_eq!(store.take_ownership(&p, 1, OWNER, "").await.unwrap_err(), StoreError::Fenced { current_range_id: 2 });
}

/// A partition records its taker's region; a node of another region is
/// refused (`HomedElsewhere`, nothing changed). Handed over to another
/// region (its metadata names that region and the one it came from), a node
/// of that region takes it and sees every write made before, and the old
/// region's nodes are refused from then on.
pub async fn a_partition_is_taken_in_its_region_only(store: &dyn Store) {
    let p = partition("homed", 0);
    let first = store.take_ownership(&p, 0, OWNER, "a").await.unwrap();
    assert_eq!((first.region.as_str(), first.moved_from.as_str()), ("a", ""));
    let refused = store.take_ownership(&p, 1, "127.0.0.9:7070", "b").await.unwrap_err();
    assert_eq!(refused, StoreError::HomedElsewhere { region: "a".into() });
    assert_eq!(store.load_partition(&p).await.unwrap().unwrap(), first, "a refusal changes nothing");
    // Renewed in its own region: still a.
    let renewed = store.take_ownership(&p, 1, OWNER, "a").await.unwrap();
    assert_eq!((renewed.range_id, renewed.region.as_str()), (2, "a"));
    // Handed over to b, with a task written just before.
    store.append(&p, 2, &[task(Priority::DEFAULT, 1, 1)], None).await.unwrap();
    let handed = PartitionMeta { owner: String::new(), region: "b".into(), moved_from: "a".into(), ..renewed };
    store.update_metadata(&p, &handed).await.unwrap();
    let refused = store.take_ownership(&p, 2, OWNER, "a").await.unwrap_err();
    assert_eq!(refused, StoreError::HomedElsewhere { region: "b".into() }, "the old region may not take it back");
    let taken = store.take_ownership(&p, 2, "127.0.0.9:7070", "b").await.unwrap();
    assert_eq!((taken.range_id, taken.region.as_str(), taken.moved_from.as_str()), (3, "b", ""));
    let seen = store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 10).await.unwrap();
    assert_eq!(levels(&seen), vec![FairLevel::new(1, 1)], "the new region sees the old one's writes");
    // A partition of no region (as written before regions existed) goes to any.
    let legacy = partition("homed", 1);
    store.take_ownership(&legacy, 0, OWNER, "").await.unwrap();
    assert_eq!(store.take_ownership(&legacy, 1, OWNER, "b").await.unwrap().region, "b");
    // A taker of no region (a fence over every region's replicas) takes any,
    // after catching up, and the partition then names none.
    let global = store.take_ownership(&p, 3, OWNER, "").await.unwrap();
    assert_eq!((global.range_id, global.region.as_str()), (4, ""));
    assert_eq!(
        levels(&store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 10).await.unwrap()),
        vec![FairLevel::new(1, 1)]
    );
}

/// An append under another range id is `Fenced` and writes nothing; one under
/// the current range id lands.
pub async fn append_is_conditional_on_the_range_id(store: &dyn Store) {
    let p = partition("cond", 0);
    let range = owned(store, &p).await;
    let stale = store.append(&p, range + 1, &[task(Priority::DEFAULT, 1, 1)], None).await;
    assert_eq!(stale.unwrap_err(), StoreError::Fenced { current_range_id: range });
    store.append(&p, range, &[task(Priority::DEFAULT, 1, 2)], None).await.unwrap();
    let read = store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 10).await.unwrap();
    assert_eq!(levels(&read), vec![FairLevel::new(1, 2)], "a fenced append wrote nothing");
}

/// A read returns tasks in level order, strictly above its bound and at most
/// its limit, whatever the order of writing.
pub async fn read_is_ordered_strictly_above_and_limited(store: &dyn Store) {
    let p = partition("order", 0);
    let range = owned(store, &p).await;
    // Written out of order, in two appends.
    let batch_one: Vec<StoredTask> =
        [(30, 1), (10, 2), (20, 3)].iter().map(|&(pass, id)| task(Priority::DEFAULT, pass, id)).collect();
    let batch_two: Vec<StoredTask> =
        [(10, 4), (5, 5), (30, 0)].iter().map(|&(pass, id)| task(Priority::DEFAULT, pass, id)).collect();
    store.append(&p, range, &batch_one, None).await.unwrap();
    store.append(&p, range, &batch_two, None).await.unwrap();
    let expected = vec![
        FairLevel::new(5, 5),
        FairLevel::new(10, 2),
        FairLevel::new(10, 4),
        FairLevel::new(20, 3),
        FairLevel::new(30, 0),
        FairLevel::new(30, 1),
    ];
    let all = store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 100).await.unwrap();
    assert_eq!(levels(&all), expected);
    let after = store.read(&p, Priority::DEFAULT, FairLevel::new(10, 2), 100).await.unwrap();
    assert_eq!(levels(&after), expected[2..], "strictly above the bound");
    let limited = store.read(&p, Priority::DEFAULT, FairLevel::new(5, 5), 2).await.unwrap();
    assert_eq!(levels(&limited), expected[1..3]);
    let none = store.read(&p, Priority::DEFAULT, FairLevel::new(30, 1), 100).await.unwrap();
    assert!(none.is_empty());
}

/// Subqueues, partitions and queues (even with names that share a prefix) hold
/// their own tasks.
pub async fn subqueues_partitions_and_queues_are_separate(store: &dyn Store) {
    let a0 = partition("sep-a", 0);
    let a1 = partition("sep-a", 1);
    let b0 = partition("sep-a.b", 0);
    for p in [&a0, &a1, &b0] {
        owned(store, p).await;
    }
    store.append(&a0, 1, &[task(Priority::HIGHEST, 1, 1), task(Priority::LOWEST, 1, 2)], None).await.unwrap();
    store.append(&a1, 1, &[task(Priority::HIGHEST, 1, 3)], None).await.unwrap();
    store.append(&b0, 1, &[task(Priority::HIGHEST, 1, 4)], None).await.unwrap();
    let read =
        |p: PartitionId, priority| async move { levels(&store.read(&p, priority, FairLevel::ZERO, 10).await.unwrap()) };
    assert_eq!(read(a0.clone(), Priority::HIGHEST).await, vec![FairLevel::new(1, 1)]);
    assert_eq!(read(a0.clone(), Priority::LOWEST).await, vec![FairLevel::new(1, 2)]);
    assert!(read(a0.clone(), Priority::DEFAULT).await.is_empty());
    assert_eq!(read(a1, Priority::HIGHEST).await, vec![FairLevel::new(1, 3)]);
    assert_eq!(read(b0, Priority::HIGHEST).await, vec![FairLevel::new(1, 4)]);
}

/// `delete_through` removes the subqueue's tasks at or below its level, twice
/// without error, and nothing of other subqueues.
pub async fn delete_through_is_inclusive_and_idempotent(store: &dyn Store) {
    let p = partition("gc", 0);
    let range = owned(store, &p).await;
    let tasks: Vec<StoredTask> = (1..=6).map(|i| task(Priority::DEFAULT, i * 10, i)).collect();
    store.append(&p, range, &tasks, None).await.unwrap();
    store.append(&p, range, &[task(Priority::HIGHEST, 10, 7)], None).await.unwrap();
    store.delete_through(&p, Priority::DEFAULT, FairLevel::new(30, 3)).await.unwrap();
    store.delete_through(&p, Priority::DEFAULT, FairLevel::new(30, 3)).await.unwrap();
    let left = store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 100).await.unwrap();
    assert_eq!(levels(&left), vec![FairLevel::new(40, 4), FairLevel::new(50, 5), FairLevel::new(60, 6)]);
    let other = store.read(&p, Priority::HIGHEST, FairLevel::ZERO, 100).await.unwrap();
    assert_eq!(other.len(), 1, "another subqueue is untouched");
}

/// Metadata written alone or with an append loads back equal; a new owner gets
/// it; a write of the old owner is `Fenced`.
pub async fn metadata_round_trips_and_is_fenced(store: &dyn Store) {
    let p = partition("meta", 0);
    let range = owned(store, &p).await;
    let mut meta = PartitionMeta { range_id: range, ..Default::default() };
    meta.subqueues[0] = SubqueueMeta {
        ack_level: FairLevel::new(7, 8),
        max_level: FairLevel::new(70, 80),
        approx_backlog: 3,
        dispatched_above_ack: vec![FairLevel::new(9, 1), FairLevel::new(12, 4)],
        top_keys: vec![("tenant".into(), 99)],
        parked: vec![ParkedKeyMeta { fairness_key: "slow".into(), slot: 40, floor: 41 }],
    };
    store.update_metadata(&p, &meta).await.unwrap();
    assert_eq!(store.load_partition(&p).await.unwrap().unwrap(), meta);

    meta.subqueues[1].ack_level = FairLevel::new(1, 1);
    store.append(&p, range, &[task(Priority::DEFAULT, 1, 1)], Some(&meta)).await.unwrap();
    assert_eq!(store.load_partition(&p).await.unwrap().unwrap(), meta, "metadata written with an append");

    let taken = store.take_ownership(&p, range, OWNER, "").await.unwrap();
    assert_eq!(taken.subqueues, meta.subqueues, "a new owner gets the saved levels");
    assert_eq!(store.update_metadata(&p, &meta).await.unwrap_err(), StoreError::Fenced { current_range_id: range + 1 });
}

/// A new owner reads every task the old one appended, and the old one's later
/// append is `Fenced`.
pub async fn new_owner_sees_every_write_of_the_old_one(store: &dyn Store) {
    let p = partition("handover", 0);
    let old = owned(store, &p).await;
    for id in 1..=20 {
        store.append(&p, old, &[task(Priority::DEFAULT, id, id)], None).await.unwrap();
    }
    let new = store.take_ownership(&p, old, OWNER, "").await.unwrap().range_id;
    let late = store.append(&p, old, &[task(Priority::DEFAULT, 100, 100)], None).await;
    assert_eq!(late.unwrap_err(), StoreError::Fenced { current_range_id: new });
    let read = store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 100).await.unwrap();
    assert_eq!(read.len(), 20);
}

/// Every field of a task survives a write and a read: a largest payload, a
/// non-ASCII key, and empty ones.
pub async fn task_contents_round_trip(store: &dyn Store) {
    let p = partition("contents", 0);
    let range = owned(store, &p).await;
    let big = StoredTask {
        level: FairLevel::new(1, 1),
        priority: Priority::LOWEST,
        fairness_key: "ünïcödé/forge.example".into(),
        fairness_weight: Some(2.5),
        payload: vec![0xA5; validate::Limits::default().max_payload_bytes],
        created_at_unix_ms: 1_234,
        attempt: 3,
        task_id: 77,
        dedup_id: Some("origin https://example.org/x.git".into()),
        dedup_slot: 2,
        deadline_unix_ms: Some(1_700_000_000_123),
        cost: 1000,
        size: Some(crate::model::validate::MAX_TASK_SIZE),
    };
    let empty = StoredTask {
        level: FairLevel::new(1, 2),
        fairness_key: String::new(),
        fairness_weight: None,
        payload: Vec::new(),
        task_id: 2,
        dedup_id: None,
        dedup_slot: 0,
        deadline_unix_ms: None,
        cost: 1,
        size: None,
        ..big.clone()
    };
    store.append(&p, range, &[big.clone(), empty.clone()], None).await.unwrap();
    let read = store.read(&p, Priority::LOWEST, FairLevel::ZERO, 10).await.unwrap();
    assert_eq!(read, vec![big, empty]);
}

/// The first creation of a queue sets its config; a later one returns it
/// unchanged; `queue` finds it; `list_queues` names every queue; a move
/// changes its home alone, and a move of a queue never created creates
/// nothing.
pub async fn queues_are_created_once(store: &dyn Store) {
    let name = validate::queue_name("queue", "configured").unwrap();
    assert_eq!(store.queue(&name).await.unwrap(), None, "not created yet");
    let created = store.create_queue(&name, QueueConfig::new(8, "a")).await.unwrap();
    assert_eq!(created, QueueConfig::new(8, "a"));
    let again = store.create_queue(&name, QueueConfig::new(2, "b")).await.unwrap();
    assert_eq!(again, QueueConfig::new(8, "a"), "the first creation's config stays");
    assert_eq!(store.queue(&name).await.unwrap(), Some(QueueConfig::new(8, "a")));
    let other = validate::queue_name("queue", "other").unwrap();
    store.create_queue(&other, QueueConfig::new(1, "")).await.unwrap();
    let mut listed = store.list_queues().await.unwrap();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, vec![(name.clone(), QueueConfig::new(8, "a")), (other.clone(), QueueConfig::new(1, ""))]);
    assert_eq!(store.set_queue_home(&name, "a", "b").await.unwrap(), Some(QueueConfig::new(8, "b")));
    assert_eq!(store.queue(&name).await.unwrap(), Some(QueueConfig::new(8, "b")));
    let stale = store.set_queue_home(&name, "a", "c").await.unwrap();
    assert_eq!(stale, Some(QueueConfig::new(8, "b")), "a move from a home it no longer has changes nothing");
    assert_eq!(store.set_queue_home(&other, "", "a").await.unwrap(), Some(QueueConfig::new(1, "a")));
    assert_eq!(store.set_queue_home(&other, "a", "").await.unwrap(), Some(QueueConfig::new(1, "")));
    let never = validate::queue_name("queue", "never-created").unwrap();
    assert_eq!(store.set_queue_home(&never, "", "b").await.unwrap(), None);
    assert_eq!(store.queue(&never).await.unwrap(), None, "a move creates nothing");
    assert_eq!(store.list_queues().await.unwrap().len(), 2);
}

/// The principal that created a queue is stored with it: `queue` and
/// `list_queues` return it, a later creation by another keeps the first,
/// and moves (graceful or forced) keep it.
pub async fn a_queue_keeps_its_creator(store: &dyn Store) {
    let name = validate::queue_name("queue", "tenant.q").unwrap();
    let created = QueueConfig::new(1, "a").created_by("tenant-a");
    assert_eq!(store.create_queue(&name, created.clone()).await.unwrap(), created);
    let again = store.create_queue(&name, QueueConfig::new(1, "a").created_by("tenant-b")).await.unwrap();
    assert_eq!(again.created_by, "tenant-a", "the first creator stays");
    assert_eq!(store.queue(&name).await.unwrap(), Some(created.clone()));
    let anonymous = validate::queue_name("queue", "anonymous").unwrap();
    store.create_queue(&anonymous, QueueConfig::new(1, "")).await.unwrap();
    let mut listed = store.list_queues().await.unwrap();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let creators: Vec<&str> = listed.iter().map(|(_, c)| c.created_by.as_str()).collect();
    assert_eq!(creators, vec!["", "tenant-a"]);
    assert_eq!(store.set_queue_home(&name, "a", "b").await.unwrap().unwrap().created_by, "tenant-a");
    assert_eq!(store.force_queue_home(&name, 0, "c").await.unwrap().unwrap().created_by, "tenant-a");
    assert_eq!(store.queue(&name).await.unwrap().unwrap().created_by, "tenant-a", "moves keep the creator");
}

/// A forced failover moves the home and starts the next generation once;
/// one from a generation the queue has left writes nothing; a graceful move
/// keeps the generation.
pub async fn a_forced_failover_starts_the_next_generation_once(store: &dyn Store) {
    let name = validate::queue_name("queue", "forced").unwrap();
    store.create_queue(&name, QueueConfig::new(3, "a")).await.unwrap();
    let forced = store.force_queue_home(&name, 0, "b").await.unwrap().expect("the queue exists");
    let next = QueueConfig { generation: 1, previous_home: "a".into(), ..QueueConfig::new(3, "b") };
    assert_eq!(forced, next);
    assert_eq!(store.queue(&name).await.unwrap(), Some(next.clone()));
    assert_eq!(store.list_queues().await.unwrap(), vec![(name.clone(), next.clone())]);
    assert_eq!(next.partition_numbers(), 65536..65539, "a generation's partitions are its own");
    assert_eq!(next.previous_of(65538), Some(2));
    let stale = store.force_queue_home(&name, 0, "c").await.unwrap();
    assert_eq!(stale, Some(next.clone()), "a forced failover from a generation left behind changes nothing");
    let moved = store.set_queue_home(&name, "b", "c").await.unwrap();
    assert_eq!(moved, Some(QueueConfig { home: "c".into(), ..next }), "a graceful move keeps the generation");
    let recreated = store.create_queue(&name, QueueConfig::new(9, "z")).await.unwrap();
    assert_eq!(recreated.generation, 1, "creating it again returns the stored generation");
    let never = validate::queue_name("queue", "never-forced").unwrap();
    assert_eq!(store.force_queue_home(&never, 0, "b").await.unwrap(), None);
    assert_eq!(store.queue(&never).await.unwrap(), None, "a forced failover creates nothing");
}

/// Forced failovers racing from the same generation to different homes: one
/// is written, and every caller is told the home that won.
pub async fn of_racing_forced_failovers_one_wins(store: &dyn Store) {
    let name = validate::queue_name("queue", "forced-race").unwrap();
    store.create_queue(&name, QueueConfig::new(2, "a")).await.unwrap();
    let homes: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    let answers = futures::future::join_all(homes.iter().map(|home| store.force_queue_home(&name, 0, home))).await;
    let answers: Vec<QueueConfig> = answers.into_iter().map(|a| a.unwrap().expect("the queue exists")).collect();
    let stored = store.queue(&name).await.unwrap().expect("the queue");
    assert_eq!(stored.generation, 1, "{stored:?}");
    let winners: Vec<&String> =
        homes.iter().zip(&answers).filter(|(home, a)| a.home == **home).map(|(h, _)| h).collect();
    assert_eq!(winners, vec![&stored.home], "one home won, and only its caller was told it did: {answers:?}");
    assert!(answers.iter().all(|a| a.generation == 1 && a.home == stored.home), "{answers:?}");
}

/// A queue's settings are none at creation; each change is written only
/// from the version it names and moves the version on by one; of changes
/// racing from one version one is written; the other parts of the config
/// stay; a queue never created gets `None`.
pub async fn queue_settings_change_by_compare_and_set_on_their_version(store: &dyn Store) {
    use crate::store::QueueSettings;
    let name = validate::queue_name("queue", "settings-cas").unwrap();
    let created = store.create_queue(&name, QueueConfig::new(3, "a").created_by("ops")).await.unwrap();
    assert_eq!(created.settings, QueueSettings::default());
    let paused = QueueSettings {
        lease_timeout_ms: Some(5_000),
        weights: [("acme".to_owned(), 2.5)].into(),
        paused_keys: [String::new(), "k".to_owned()].into(),
        ..QueueSettings::default()
    };
    let stored = store.update_queue_settings(&name, 0, &paused).await.unwrap().expect("the queue exists");
    assert_eq!(stored.settings, QueueSettings { version: 1, ..paused.clone() });
    assert_eq!((stored.partitions, stored.home.as_str(), stored.created_by.as_str()), (3, "a", "ops"));
    assert_eq!(store.queue(&name).await.unwrap().unwrap().settings, stored.settings);
    let stale = QueueSettings { paused: true, ..QueueSettings::default() };
    let refused = store.update_queue_settings(&name, 0, &stale).await.unwrap().unwrap();
    assert_eq!(refused.settings, stored.settings, "a change from an old version writes nothing");
    let racers: Vec<QueueSettings> =
        (0..6).map(|i| QueueSettings { max_attempts: Some(i + 1), ..QueueSettings::default() }).collect();
    let answers =
        futures::future::join_all(racers.iter().map(|settings| store.update_queue_settings(&name, 1, settings))).await;
    let now = store.queue(&name).await.unwrap().unwrap().settings;
    assert_eq!(now.version, 2, "{now:?}");
    let won: Vec<_> = answers.into_iter().map(|a| a.unwrap().unwrap().settings).filter(|s| *s == now).collect();
    assert!(!won.is_empty() && racers.iter().filter(|r| r.max_attempts == now.max_attempts).count() == 1);
    let listed = store.list_queues().await.unwrap();
    assert_eq!(listed.iter().find(|(n, _)| *n == name).map(|(_, c)| &c.settings), Some(&now));
    assert_eq!(store.set_queue_home(&name, "a", "b").await.unwrap().unwrap().settings, now, "a move keeps them");
    let never = validate::queue_name("queue", "settings-never").unwrap();
    assert_eq!(store.update_queue_settings(&never, 0, &paused).await.unwrap(), None);
    assert_eq!(store.queue(&never).await.unwrap(), None, "nothing was created");
}

/// A heartbeat replaces the node's record; `members` lists the latest of each;
/// `leave` removes one.
pub async fn members_heartbeat_and_leave(store: &dyn Store) {
    let member = |node: &str, address: &str, region: &str, heartbeat| Member {
        node: node.into(),
        address: address.into(),
        region: region.into(),
        started_unix_ms: 1_000,
        heartbeat_unix_ms: heartbeat,
    };
    store.heartbeat(&member("fairway-0", "127.0.0.1:7001", "a", 2_000)).await.unwrap();
    store.heartbeat(&member("127.0.0.1:7002", "", "", 2_500)).await.unwrap();
    // Restarted under another address: the same name, its new address.
    store.heartbeat(&member("fairway-0", "127.0.0.1:7003", "b", 3_000)).await.unwrap();
    let mut members = store.members().await.unwrap();
    members.sort_by(|a, b| a.node.cmp(&b.node));
    assert_eq!(
        members,
        vec![member("127.0.0.1:7002", "", "", 2_500), member("fairway-0", "127.0.0.1:7003", "b", 3_000)]
    );
    store.leave("fairway-0").await.unwrap();
    assert_eq!(store.members().await.unwrap(), vec![member("127.0.0.1:7002", "", "", 2_500)]);
}

/// `forget` removes a record written before the time it is given, and
/// nothing written after it: a node that came back under the name stays.
pub async fn a_member_long_dead_is_forgotten_and_one_back_is_not(store: &dyn Store) {
    use crate::clock::Clock as _;
    let clock = crate::clock::SystemClock;
    let before = clock.now_ms();
    let member = |node: &str| Member {
        node: node.into(),
        address: "127.0.0.1:7001".into(),
        region: "a".into(),
        started_unix_ms: before,
        heartbeat_unix_ms: before,
    };
    store.heartbeat(&member("back")).await.unwrap();
    store.heartbeat(&member("dead")).await.unwrap();
    // A time after both writes, and passed before any later one (on
    // Cassandra the write's own timestamp is what counts).
    let cut = clock.now_ms() + 1;
    while clock.now_ms() <= cut {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    store.forget("dead", cut).await.unwrap();
    store.forget("never-there", cut).await.unwrap();
    store.forget("back", before - 60_000).await.unwrap();
    assert_eq!(store.members().await.unwrap(), vec![member("back")], "the dead one forgotten, the other written after");
    store.heartbeat(&member("dead")).await.unwrap();
    assert_eq!(store.members().await.unwrap().len(), 2, "a forgotten node may come back");
}

/// The first candidate stored is the secret every later call returns,
/// however many race to store theirs; it has no previous secret.
pub async fn the_cluster_secret_is_the_first_one_written(store: &dyn Store) {
    let candidates: Vec<[u8; 32]> = (1..=8u8).map(|n| [n; 32]).collect();
    let racing = futures::future::join_all(candidates.iter().map(|c| store.cluster_secrets(c))).await;
    let secrets: Vec<ClusterSecrets> = racing.into_iter().map(Result::unwrap).collect();
    let first = secrets[0].clone();
    assert!((1..=8u8).any(|n| first.current == [n; 32]), "one of the candidates won");
    assert_eq!(first.previous, None, "never rotated");
    assert!(secrets.iter().all(|s| *s == first), "every racer got the winner's");
    assert_eq!(store.cluster_secrets(&[99; 32]).await.unwrap(), first, "a later candidate is not stored");
}

/// A rotation is a compare-and-set on the current secret: with none stored
/// it writes nothing; from a secret that is not current it writes nothing;
/// from the current one it makes `to` current and keeps `from` as the
/// previous with its times, forgetting the one before; of rotations racing
/// from one secret exactly one is written. Bad arguments are `Invalid`.
pub async fn a_rotation_replaces_the_current_secret_once(store: &dyn Store) {
    let (a, b, c) = ([1; 32], [2; 32], [3; 32]);
    assert_eq!(store.rotate_cluster_secret(&a, &b, 10, 20).await.unwrap(), None, "no secret yet");
    assert_eq!(store.cluster_secrets(&a).await.unwrap(), ClusterSecrets::first(a), "and nothing was written");
    assert!(matches!(store.rotate_cluster_secret(&a, &a, 10, 20).await, Err(StoreError::Invalid(_))));
    assert!(matches!(store.rotate_cluster_secret(&a, &b, 20, 10).await, Err(StoreError::Invalid(_))));
    let stale = store.rotate_cluster_secret(&c, &b, 10, 20).await.unwrap();
    assert_eq!(stale, Some(ClusterSecrets::first(a)), "from a secret that is not current: nothing written");
    let previous = |secret, signs, accepted| {
        Some(PreviousSecret { secret, signs_until_unix_ms: signs, accepted_until_unix_ms: accepted })
    };
    let rotated = ClusterSecrets { current: b, previous: previous(a, 10, 20) };
    assert_eq!(store.rotate_cluster_secret(&a, &b, 10, 20).await.unwrap(), Some(rotated.clone()));
    assert_eq!(store.cluster_secrets(&[99; 32]).await.unwrap(), rotated, "read back, the candidate ignored");
    assert_eq!(store.rotate_cluster_secret(&a, &c, 30, 40).await.unwrap(), Some(rotated), "from the old one: no");
    let again = ClusterSecrets { current: c, previous: previous(b, 30, 40) };
    assert_eq!(store.rotate_cluster_secret(&b, &c, 30, 40).await.unwrap(), Some(again.clone()));
    assert_eq!(store.cluster_secrets(&[99; 32]).await.unwrap(), again, "the first secret is forgotten");

    let targets: Vec<[u8; 32]> = (10..18u8).map(|n| [n; 32]).collect();
    let racing = futures::future::join_all(targets.iter().map(|to| store.rotate_cluster_secret(&c, to, 50, 60))).await;
    let answers: Vec<ClusterSecrets> = racing.into_iter().map(|a| a.unwrap().expect("a secret exists")).collect();
    let stored = store.cluster_secrets(&[99; 32]).await.unwrap();
    let winners: Vec<&[u8; 32]> =
        targets.iter().zip(&answers).filter(|(to, a)| a.current == **to).map(|(t, _)| t).collect();
    assert_eq!(winners, vec![&stored.current], "one rotation won, and only its caller was told it did");
    assert_eq!(stored.previous, previous(c, 50, 60), "the winner rotated from the secret all started from");
    assert!(answers.iter().all(|a| *a == stored), "every racer was told the stored secrets");
}

/// A record of the kind `section` keeps, told apart from others by `label`
/// (an empty label in the lease section: a finished lease).
fn record(section: Section, key: (i64, i64), label: &str) -> Record {
    let value = match section {
        Section::Leases if label.is_empty() => {
            RecordValue::FinishedLease { priority: Priority::DEFAULT, level: FairLevel::new(1, 1) }
        }
        Section::Leases | Section::Delayed | Section::DeadLetters | Section::Parked => {
            let task = task(Priority::DEFAULT, key.0, key.1);
            RecordValue::Task(RecordTask { task, at_unix_ms: key.0, message: label.to_owned() })
        }
        Section::Dedup => RecordValue::Dedup { dedup_id: label.to_owned(), task_id: key.1 },
        Section::WriteMark => RecordValue::WriteMark(label.parse().expect("a write mark's label is a number")),
        Section::Drained => {
            RecordValue::Drained { task_id: label.parse().expect("a drained mark's label is a number") }
        }
        Section::Waiting => {
            let pass = label.parse().expect("a waiting record's label is its pass");
            RecordValue::Waiting { priority: Priority::DEFAULT, level: FairLevel::new(pass, key.1) }
        }
    };
    Record { at: RecordKey { section, key }, value }
}

/// The label [`record`] gave.
fn label(value: RecordValue) -> String {
    match value {
        RecordValue::Task(record) => record.message,
        RecordValue::FinishedLease { .. } => String::new(),
        RecordValue::Dedup { dedup_id, .. } => dedup_id,
        RecordValue::WriteMark(mark) | RecordValue::Drained { task_id: mark } => mark.to_string(),
        RecordValue::Waiting { level, .. } => level.pass.to_string(),
    }
}

async fn section(store: &dyn Store, p: &PartitionId, section: Section) -> Vec<((i64, i64), String)> {
    let records = store.read_records(p, RecordRange::all(section), 100).await.unwrap();
    records.into_iter().map(|r| (r.at.key, label(r.value))).collect()
}

/// Tasks, records and metadata go in one write conditional on the range id; a
/// put replaces a record; deleting an absent one is no error.
pub async fn records_are_written_with_tasks_in_one_conditional_write(store: &dyn Store) {
    let p = partition("records", 0);
    let range = owned(store, &p).await;
    let write = PartitionWrite {
        tasks: vec![task(Priority::DEFAULT, 1, 1)],
        put: vec![record(Section::Leases, (0, 5), "lease"), record(Section::Dedup, (-3, 0), "dedup")],
        delete: vec![],
        delete_tasks: vec![],
        metadata: Some(PartitionMeta { range_id: range, delayed_through: (9, 9), ..Default::default() }),
    };
    let stale = PartitionWrite { metadata: None, ..write.clone() };
    let stale = store.write(&p, range + 1, &stale).await;
    assert_eq!(stale.unwrap_err(), StoreError::Fenced { current_range_id: range });
    assert!(section(store, &p, Section::Leases).await.is_empty(), "a fenced write put no record");
    assert!(store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 10).await.unwrap().is_empty());

    store.write(&p, range, &write).await.unwrap();
    assert_eq!(
        levels(&store.read(&p, Priority::DEFAULT, FairLevel::ZERO, 10).await.unwrap()),
        vec![FairLevel::new(1, 1)]
    );
    assert_eq!(section(store, &p, Section::Leases).await, vec![((0, 5), "lease".to_owned())]);
    assert_eq!(section(store, &p, Section::Dedup).await, vec![((-3, 0), "dedup".to_owned())]);
    assert_eq!(store.load_partition(&p).await.unwrap().unwrap().delayed_through, (9, 9));

    let replace = PartitionWrite {
        put: vec![record(Section::Leases, (0, 5), "")],
        delete: vec![
            RecordKey { section: Section::Dedup, key: (-3, 0) },
            RecordKey { section: Section::Dedup, key: (7, 7) },
        ],
        ..PartitionWrite::default()
    };
    store.write(&p, range, &replace).await.unwrap();
    assert_eq!(section(store, &p, Section::Leases).await, vec![((0, 5), String::new())], "a put replaces");
    assert!(section(store, &p, Section::Dedup).await.is_empty(), "deleting an absent record is no error");
}

/// A write that deletes a task row and writes the task at another level,
/// with a record, moves it whole: a fenced one changes nothing, and the
/// rows beside it are untouched. Deleting an absent row is no error.
pub async fn a_write_moves_a_task_to_another_level_whole_or_not_at_all(store: &dyn Store) {
    let p = &partition("moves", 0);
    let range = owned(store, p).await;
    let [low, high, other] =
        [task(Priority::DEFAULT, 1, 1), task(Priority::DEFAULT, 900, 2), task(Priority::LOWEST, 900, 2)];
    let first = PartitionWrite { tasks: vec![low.clone(), high.clone(), other.clone()], ..PartitionWrite::default() };
    store.write(p, range, &first).await.unwrap();
    let moved = StoredTask { level: FairLevel::new(1, 3), ..high.clone() };
    let absent = (Priority::DEFAULT, FairLevel::new(5, 5));
    let move_it = PartitionWrite {
        tasks: vec![moved.clone()],
        put: vec![record(Section::Waiting, (1_767_225_600_000, 3), "1")],
        delete_tasks: vec![(Priority::DEFAULT, high.level), absent],
        metadata: None,
        ..PartitionWrite::default()
    };
    let fenced = store.write(p, range + 1, &move_it).await;
    assert_eq!(fenced.unwrap_err(), StoreError::Fenced { current_range_id: range });
    let read = |priority| async move { store.read(p, priority, FairLevel::ZERO, 10).await.unwrap() };
    assert_eq!(levels(&read(Priority::DEFAULT).await), vec![low.level, high.level], "a fenced write moved nothing");
    assert!(section(store, p, Section::Waiting).await.is_empty());

    store.write(p, range, &move_it).await.unwrap();
    assert_eq!(read(Priority::DEFAULT).await, vec![low.clone(), moved.clone()], "the row moved, with its task");
    assert_eq!(read(Priority::LOWEST).await, vec![other], "the same level of another subqueue stays");
    assert_eq!(store.read_row(p, RowRef::Task(Priority::DEFAULT, high.level)).await.unwrap(), None);
    assert_eq!(section(store, p, Section::Waiting).await, vec![((1_767_225_600_000, 3), "1".to_owned())]);
}

/// Records come back ascending by key, strictly above `after`, at most the
/// limit; a range delete is inclusive, idempotent, and keeps to its section.
pub async fn record_sections_are_ordered_separate_and_range_deleted(store: &dyn Store) {
    let p = partition("sections", 0);
    let range = owned(store, &p).await;
    let put = vec![
        record(Section::Delayed, (300, 1), "c"),
        record(Section::Delayed, (100, 2), "a"),
        record(Section::Delayed, (200, 3), "b"),
        record(Section::DeadLetters, (100, 4), "dead"),
    ];
    store.write(&p, range, &PartitionWrite { put, ..PartitionWrite::default() }).await.unwrap();
    let delayed = section(store, &p, Section::Delayed).await;
    assert_eq!(delayed.iter().map(|(_, v)| v.as_str()).collect::<Vec<_>>(), ["a", "b", "c"], "ascending by key");
    let after = store.read_records(&p, RecordRange::above(Section::Delayed, (100, 2)), 1).await.unwrap();
    assert_eq!(after.len(), 1, "at most the limit");
    assert_eq!(after[0].at.key, (200, 3), "strictly above `after`");
    assert!(store.read(&p, Priority::LOWEST, FairLevel::ZERO, 10).await.unwrap().is_empty(), "records are not tasks");

    store.delete_records_through(&p, Section::Delayed, (200, 3)).await.unwrap();
    store.delete_records_through(&p, Section::Delayed, (200, 3)).await.unwrap();
    assert_eq!(section(store, &p, Section::Delayed).await, vec![((300, 1), "c".to_owned())], "inclusive, idempotent");
    assert_eq!(section(store, &p, Section::DeadLetters).await.len(), 1, "other sections are untouched");
}

/// A bucket's read returns its keys, its upper bound included, and nothing of
/// the neighbouring buckets.
pub async fn record_reads_stay_inside_their_range(store: &dyn Store) {
    let p = partition("ranges", 0);
    let range = owned(store, &p).await;
    let put = vec![
        record(Section::Dedup, (4, 9), "below"),
        record(Section::Dedup, (5, 0), "a"),
        record(Section::Dedup, (5, 1), "b"),
        record(Section::Dedup, (5, i64::MAX), "last"),
        record(Section::Dedup, (6, i64::MIN), "above"),
    ];
    store.write(&p, range, &PartitionWrite { put, ..PartitionWrite::default() }).await.unwrap();
    let values = |records: Vec<Record>| records.into_iter().map(|r| label(r.value)).collect::<Vec<_>>();
    let bucket = store.read_records(&p, RecordRange::bucket(Section::Dedup, 5, i64::MIN), 100).await.unwrap();
    assert_eq!(values(bucket), vec!["a", "b", "last"], "one bucket, its upper bound included");
    let rest = store.read_records(&p, RecordRange::bucket(Section::Dedup, 5, 0), 1).await.unwrap();
    assert_eq!(values(rest), vec!["b"], "above `after` in the bucket, at most the limit");
    let empty = store.read_records(&p, RecordRange::bucket(Section::Dedup, 7, i64::MIN), 100).await.unwrap();
    assert!(empty.is_empty(), "an empty bucket reads nothing of its neighbours");
}

/// `read_buckets` returns each bucket named once, at most `per_bucket` records
/// of each, of the section asked only.
pub async fn bucket_reads_return_the_buckets_named_and_no_more(store: &dyn Store) {
    let p = partition("buckets", 0);
    let range = owned(store, &p).await;
    let mut put: Vec<Record> = [1, 2, 3, 5]
        .into_iter()
        .flat_map(|bucket| (0..3).map(move |slot| record(Section::Dedup, (bucket, slot), &format!("{bucket}/{slot}"))))
        .collect();
    put.push(record(Section::Leases, (4, 0), "another section"));
    store.write(&p, range, &PartitionWrite { put, ..PartitionWrite::default() }).await.unwrap();
    let freed = vec![RecordKey { section: Section::Dedup, key: (5, 0) }];
    store.write(&p, range, &PartitionWrite { delete: freed, ..PartitionWrite::default() }).await.unwrap();
    let read = store.read_buckets(&p, Section::Dedup, &[5, 4, 1, 3, 1], 2).await.unwrap();
    let values: Vec<String> = read.iter().map(|r| label(r.value.clone())).collect();
    assert_eq!(values, vec!["1/0", "1/1", "3/0", "3/1", "5/1", "5/2"], "each bucket named once, at most 2 of each");
    assert!(read.iter().all(|r| r.at.section == Section::Dedup), "one section");
    assert_eq!(read[4].at.key, (5, 1), "keys as written");
    assert!(store.read_buckets(&p, Section::Dedup, &[], 2).await.unwrap().is_empty(), "no bucket, no record");
}

/// `read_row` finds a task row or a record after a take-over, as written,
/// and `None` for a row of another level, subqueue or section.
pub async fn read_row_finds_one_task_or_record(store: &dyn Store) {
    let p = partition("rows", 0);
    let range = owned(store, &p).await;
    let written = task(Priority::HIGHEST, 4, 2);
    let records = vec![
        record(Section::Leases, (0, 9), "lease"),
        record(Section::Leases, (0, 10), ""),
        record(Section::DeadLetters, (7, 9), "failed"),
        record(Section::Dedup, (3, 1), "dedup id"),
        record(Section::WriteMark, (0, 0), "-42"),
        record(Section::Drained, (7, 0), "65537"),
        record(Section::Waiting, (1_767_225_600_000, 2), "4"),
    ];
    let write = PartitionWrite { tasks: vec![written.clone()], put: records.clone(), ..PartitionWrite::default() };
    store.write(&p, range, &write).await.unwrap();
    // After a take-over of the range, as a writer that lost track of its write does.
    store.take_ownership(&p, range, OWNER, "").await.unwrap();
    let found = store.read_row(&p, RowRef::Task(Priority::HIGHEST, FairLevel::new(4, 2))).await.unwrap();
    assert_eq!(found, Some(StoredRow::Task(written)));
    for record in records {
        let found = store.read_row(&p, RowRef::Record(record.at)).await.unwrap();
        assert_eq!(found, Some(StoredRow::Record(record.value)), "{:?}", record.at);
    }
    let absent = [
        RowRef::Task(Priority::HIGHEST, FairLevel::new(4, 3)),
        RowRef::Task(Priority::DEFAULT, FairLevel::new(4, 2)),
        RowRef::Record(RecordKey { section: Section::Delayed, key: (0, 9) }),
    ];
    for row in absent {
        assert_eq!(store.read_row(&p, row).await.unwrap(), None, "{row:?}");
    }
}
