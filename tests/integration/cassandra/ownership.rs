//! Ownership under store faults, one node in process beside a peer that
//! exists only as rows in the store: a node that cannot read the members
//! takes nothing from a live owner; a hand-over whose last write fails
//! is tried again until the partition is free for the rightful node; a
//! partition dropped at a heartbeat lapse is handed over by its last owner
//! once another node is its rightful owner, and taken back by its rightful
//! owner whether or not the queues can be listed; a heartbeat held up by
//! the store gives up in time for the next one; a hand-over names no owner
//! before its last write, settles a last write of unknown outcome with a
//! fence instead of writing it again, and, when its last write cannot be
//! made at all, is made again at a later rebalance.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fairway::clock::{Clock, SystemClock};
use fairway::cluster::{ClusterConfig, ClusterView, DispatchGate, Heartbeat, Membership};
use fairway::core::engine::Outcome;
use fairway::matcher::{Queues, Settings};
use fairway::model::{PartitionId, Priority, QueueName, TaskSpec, validate};
use fairway::store::{Member, QueueConfig, Store, StoreError};

use super::Keyspace;
use super::faulty::FaultyStore;

const MEMBER_TIMEOUT: Duration = Duration::from_secs(6);

fn queue(name: &str) -> QueueName {
    validate::queue_name("queue", name).unwrap()
}

/// A node `name` of a cluster on `store`, whose view holds only itself (as
/// at startup, before its first heartbeat round).
fn node(store: Arc<dyn Store>, name: &str) -> Queues {
    let settings = Settings { node: name.into(), ..Settings::default() };
    let view = Arc::new(ClusterView::shared(name.into(), MEMBER_TIMEOUT));
    Queues::in_cluster(store, Arc::new(SystemClock), settings, view, Arc::new(DispatchGate::always_open()))
}

/// A live peer `name`, as the store knows it: a fresh heartbeat.
async fn live_peer(store: &dyn Store, name: &str) {
    let now = SystemClock.now_ms();
    let member = Member {
        node: name.into(),
        address: String::new(),
        region: String::new(),
        started_unix_ms: now,
        heartbeat_unix_ms: now,
    };
    store.heartbeat(&member).await.expect("write the peer's heartbeat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_read_the_members_takes_nothing_from_a_live_owner() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let name = queue("owned-elsewhere");
    cassandra.create_queue(&name, QueueConfig::new(1, "")).await.unwrap();
    let partition = PartitionId { queue: name.clone(), partition: 0 };
    cassandra.take_ownership(&partition, 0, "127.0.0.1:1", "").await.expect("the peer owns it");
    live_peer(cassandra.as_ref(), "127.0.0.1:1").await;

    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    faulty.members_fail.store(true, Ordering::Release);
    let starting = node(faulty.clone(), "127.0.0.1:2");
    // Its view holds only itself: it is the rightful owner of everything.
    let matcher = starting.get(&name).await.expect("open the queue");
    assert!(!matcher.holds(0), "took the partition of a live peer while the members could not be read");
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!((stored.owner.as_str(), stored.range_id), ("127.0.0.1:1", 1), "the peer's ownership is untouched");
    starting.close().await;
    keyspace.drop_keyspace().await;
}

/// Without a bound, a beat waits on a stuck read until the driver's 12-s
/// timeout, and every beat after it waits its turn: the node lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_held_up_by_the_store_gives_up_and_the_next_one_gets_through() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = "127.0.0.1:2";
    let config = ClusterConfig { member_timeout: MEMBER_TIMEOUT, ..ClusterConfig::default() };
    let view = Arc::new(ClusterView::shared(name.into(), MEMBER_TIMEOUT));
    let gate = Arc::new(DispatchGate::closed());
    let membership = Membership::new(view, gate.clone(), faulty.clone(), Arc::new(SystemClock), config);
    assert_eq!(membership.beat().await.expect("a first beat"), Heartbeat::Fresh);

    faulty.members_hang.store(true, Ordering::Release);
    let held_up = tokio::time::timeout(Duration::from_secs(60), membership.beat())
        .await
        .expect("the beat waited on a read that never answers");
    assert!(matches!(held_up, Err(StoreError::Uncertain(_))), "{held_up:?}");

    faulty.members_hang.store(false, Ordering::Release);
    membership.beat().await.expect("the next beat gets through");
    let members = cassandra.members().await.unwrap();
    assert!(members.iter().any(|m| m.node == name), "its heartbeat is in the store: {members:?}");
    assert!(gate.is_open(SystemClock.now_ms()), "the gate is open after a beat that got through");
    keyspace.drop_keyspace().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_whose_last_write_fails_is_tried_again() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = queue("handed-over");
    let old = node(faulty.clone(), "127.0.0.1:2");
    let matcher = old.create(&name, 1, None).await.expect("open the queue");
    assert!(matcher.holds(0), "alone, it owns the partition");

    // A peer joins whom the assignment gives the partition.
    let peer = rightful_peer(&name, "127.0.0.1:2");
    old.view().set_live(vec![peer.clone(), "127.0.0.1:2".into()]);
    faulty.metadata_failures.store(3, Ordering::Release);
    old.rebalance().await.expect("a rebalance");
    assert!(!matcher.holds(0), "handed over");
    assert_eq!(faulty.metadata_failures.load(Ordering::Acquire), 0, "the failures were met");
    let partition = PartitionId { queue: name.clone(), partition: 0 };
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!(stored.owner, "", "the last write, tried again, left the partition free for {peer}");
    old.close().await;
    keyspace.drop_keyspace().await;
}

/// A node that writes one command at a time, with metadata in every write
/// that may carry it.
fn eager_node(store: Arc<dyn Store>, name: &str) -> Queues {
    let mut settings = Settings { node: name.into(), ..Settings::default() };
    settings.engine.piggyback_interval = Duration::ZERO;
    settings.writer.max_batch_tasks = 1;
    let view = Arc::new(ClusterView::shared(name.into(), MEMBER_TIMEOUT));
    Queues::in_cluster(store, Arc::new(SystemClock), settings, view, Arc::new(DispatchGate::always_open()))
}

/// The log of `faulty` from its first entry naming no owner on.
fn from_the_hand_over(faulty: &FaultyStore) -> Vec<(&'static str, String)> {
    let log = faulty.log.lock().unwrap();
    let first = log.iter().position(|(_, owner)| owner.is_empty()).expect("a write named no owner");
    log[first..].to_vec()
}

/// Writes queued when a hand-over starts still name the old owner: the one
/// naming none, which lets the next owner take the partition at once, is
/// the very last (a queued write naming none would let it take a partition
/// this node still writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_names_no_owner_before_its_last_write() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = queue("handed-over-last");
    let old = eager_node(faulty.clone(), "127.0.0.1:2");
    let matcher = old.create(&name, 1, None).await.expect("open the queue");
    for i in 0..64 {
        matcher.add(TaskSpec::new(format!("k{i}"), Priority::DEFAULT, vec![1]), None).await.expect("an add");
    }
    // Dispatches (each moves the ack level, which the next write carries)
    // and completions queue up behind a slow link while the partition is
    // handed over.
    faulty.write_delay_ms.store(20, Ordering::Release);
    let finishing: Vec<_> = (0..64)
        .map(|_| {
            let matcher = matcher.clone();
            tokio::spawn(async move {
                let task = matcher.try_take().await.ok_or("nothing to take")?;
                matcher.finish(&task.token, Outcome::Complete).await.map_err(|_| "not finished")
            })
        })
        .collect();
    let peer = rightful_peer(&name, "127.0.0.1:2");
    old.view().set_live(vec![peer, "127.0.0.1:2".into()]);
    old.rebalance().await.expect("a rebalance");
    let finished = futures::future::join_all(finishing).await.into_iter().filter(|f| matches!(f, Ok(Ok(_)))).count();
    faulty.write_delay_ms.store(0, Ordering::Release);
    assert!(!matcher.holds(0), "handed over");
    let after = from_the_hand_over(&faulty);
    assert_eq!(
        after,
        vec![("update_metadata", String::new())],
        "{finished} completions landed; the log from the first write naming no owner: {after:?}"
    );
    old.close().await;
    keyspace.drop_keyspace().await;
}

/// A last write that landed but whose answer was lost is not written again
/// as it was (in another region's Paxos, the partition may have been taken
/// since): a fence of the old owner's own settles it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_write_of_unknown_outcome_is_settled_by_a_fence() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = queue("handed-over-unknown");
    let old = node(faulty.clone(), "127.0.0.1:2");
    let matcher = old.create(&name, 1, None).await.expect("open the queue");
    let peer = rightful_peer(&name, "127.0.0.1:2");
    old.view().set_live(vec![peer, "127.0.0.1:2".into()]);
    faulty.metadata_landing_timeouts.store(1, Ordering::Release);
    old.rebalance().await.expect("a rebalance");
    assert!(!matcher.holds(0), "handed over");
    let after = from_the_hand_over(&faulty);
    assert_eq!(after.get(1).map(|(op, _)| *op), Some("take_ownership"), "the next step is a fence: {after:?}");
    let partition = PartitionId { queue: name.clone(), partition: 0 };
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!(stored.owner, "", "free for the next owner");
    old.close().await;
    keyspace.drop_keyspace().await;
}

/// A hand-over whose last write fails for longer than the writer waits
/// leaves the store naming this live node; the node tries again at its next
/// rebalances, until the partition is free for its rightful node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_given_up_is_made_at_a_later_rebalance() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = queue("handed-over-later");
    let old = node(faulty.clone(), "127.0.0.1:2");
    let matcher = old.create(&name, 1, None).await.expect("open the queue");
    let peer = rightful_peer(&name, "127.0.0.1:2");
    old.view().set_live(vec![peer.clone(), "127.0.0.1:2".into()]);
    faulty.metadata_failures.store(u32::MAX, Ordering::Release);
    old.rebalance().await.expect("a rebalance");
    assert!(!matcher.holds(0), "let go");
    let partition = PartitionId { queue: name.clone(), partition: 0 };
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!(stored.owner, "127.0.0.1:2", "the last write never landed");

    faulty.metadata_failures.store(0, Ordering::Release);
    old.rebalance().await.expect("a rebalance");
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!(stored.owner, "", "handed over at the next rebalance, free for {peer}");
    old.close().await;
    keyspace.drop_keyspace().await;
}

/// The rightful owner of a partition among `live`, other than `node`.
fn rightful_peer(name: &QueueName, node: &str) -> String {
    (1..100)
        .map(|port| format!("127.0.0.1:{port}"))
        .filter(|peer| peer != node)
        .find(|peer| {
            let view = ClusterView::shared("x".into(), MEMBER_TIMEOUT);
            view.set_live(vec![peer.clone(), node.into()]);
            view.owners(name, &QueueConfig::new(1, ""))[0].as_deref() == Some(peer.as_str())
        })
        .expect("some peer is the rightful owner")
}

/// A node whose heartbeat lapsed drops its partitions without a write, so
/// the store still names it their owner; its rightful peer waits for it to
/// hand them over while it lives. Once back, it does hand over those that
/// are not its own (a 5-minute chaos run saw a partition wedged this way:
/// nobody served it again, and its tasks waited until the run ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_abandoned_at_a_heartbeat_lapse_is_handed_over_to_its_rightful_node() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let name = queue("abandoned");
    let lapsed = node(cassandra.clone(), "127.0.0.1:2");
    let matcher = lapsed.create(&name, 1, None).await.expect("open the queue");
    assert!(matcher.holds(0), "alone, it owns the partition");
    let partition = PartitionId { queue: name.clone(), partition: 0 };

    lapsed.abandon_all().await;
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!(stored.owner, "127.0.0.1:2", "abandoned without a write");

    // Back from the lapse, it sees a peer to whom the assignment gives the partition.
    let peer = rightful_peer(&name, "127.0.0.1:2");
    lapsed.view().set_live(vec![peer.clone(), "127.0.0.1:2".into()]);
    lapsed.rebalance().await.expect("a rebalance");
    let stored = cassandra.load_partition(&partition).await.unwrap().expect("stored");
    assert_eq!(stored.owner, "", "the partition is free for {peer}");
    assert_eq!(stored.range_id, 1, "under the range id it was held with");
    assert!(!matcher.holds(0));

    // Its own again: it takes it back.
    lapsed.view().set_live(vec!["127.0.0.1:2".into()]);
    lapsed.rebalance().await.expect("a rebalance");
    assert!(matcher.holds(0), "taken again");
    lapsed.close().await;
    keyspace.drop_keyspace().await;
}

/// The partitions a node dropped at a heartbeat lapse are its own again at
/// the next pass, also when the queues cannot be listed: a range read
/// waits out the client timeout (12 s) when a Cassandra replica has just
/// died, and a 5-minute chaos run saw every re-take wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_takes_back_what_it_dropped_at_a_lapse_while_the_queues_cannot_be_listed() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = queue("listing-down");
    let lapsed = node(faulty.clone(), "127.0.0.1:2");
    let matcher = lapsed.create(&name, 2, None).await.expect("open the queue");
    assert!(matcher.holds(0) && matcher.holds(1), "alone, it owns every partition");

    lapsed.abandon_all().await;
    assert!(!matcher.holds(0) && !matcher.holds(1));
    faulty.listing_fails.store(true, Ordering::Release);
    let listed = lapsed.rebalance().await;
    assert!(listed.is_err(), "the listing failed");
    assert!(matcher.holds(0) && matcher.holds(1), "taken back without the listing");
    lapsed.close().await;
    keyspace.drop_keyspace().await;
}

/// An add whose write times out, and whose fence then fails too, lands
/// later (Cassandra completes the accepted proposal at the next round on
/// the partition). Nothing may be read before a fence: the partition is
/// dropped and taken again, and the task that landed late is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_of_unknown_outcome_that_lands_later_loses_nothing() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    live_peer(cassandra.as_ref(), "127.0.0.1:2").await;
    let node = node(faulty.clone(), "127.0.0.1:2");
    let name = queue("lands-later");
    let matcher = node.create(&name, 1, None).await.expect("open the queue");
    let spec = |payload: &str| TaskSpec::new("key", Priority::DEFAULT, payload.as_bytes().to_vec());
    for payload in ["first", "second"] {
        matcher.add(spec(payload), None).await.expect("an add");
    }

    faulty.late_writes.store(1, Ordering::Release);
    faulty.fence_failures.store(1, Ordering::Release);
    let late = matcher.add(spec("late"), None).await;
    assert!(late.is_err(), "the write timed out: {late:?}");

    // Whatever the node does now, and however the partition changes hands,
    // every task that reached the store comes out.
    let mut delivered = Vec::new();
    for round in 0..50 {
        while let Some(task) = matcher.try_take().await {
            delivered.push(String::from_utf8(task.task.payload.clone()).unwrap());
            matcher.finish(&task.token, Outcome::Complete).await.expect("complete");
        }
        if round == 10 {
            // A later add: its write is the next round on the partition.
            matcher.add(spec("after"), None).await.expect("an add");
        }
        node.rebalance().await.expect("a rebalance");
        if ["first", "second", "late", "after"].iter().all(|p| delivered.iter().any(|d| d == p)) {
            break;
        }
    }
    delivered.sort();
    assert_eq!(delivered, vec!["after", "first", "late", "second"], "the late write's task is delivered, once");
    node.close().await;
    keyspace.drop_keyspace().await;
}

/// The node that created a partition knows its dedup section whole (it was
/// empty, and only the owner writes it): its dedup adds read no bucket but
/// those of a write that failed, and still find every duplicate. A node that
/// takes the partition over reads the buckets of the ids it is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_creator_of_a_partition_checks_dedup_ids_without_reading_and_a_new_owner_reads() {
    let keyspace = Keyspace::create().await;
    let cassandra: Arc<dyn Store> = Arc::new(keyspace.store().await);
    let faulty = Arc::new(FaultyStore::new(cassandra.clone()));
    let name = queue("dedup-creator");
    let creator = node(faulty.clone(), "127.0.0.1:2");
    let matcher = creator.create(&name, 1, None).await.expect("open the queue");
    let spec = |id: &str| TaskSpec { dedup_id: Some(id.to_owned()), ..TaskSpec::new("key", Priority::DEFAULT, vec![]) };
    let mut first = Vec::new();
    for i in 0..50 {
        first.push(matcher.add(spec(&format!("d{i}")), None).await.expect("an add").task_id);
    }
    let again = matcher.add(spec("d7"), None).await.expect("a duplicate add");
    assert!(again.duplicate && again.task_id == first[7], "{again:?}");
    let done = matcher.try_take().await.expect("a task");
    matcher.finish(&done.token, Outcome::Complete).await.expect("complete");
    let freed = matcher.add(spec("d0"), None).await.expect("the id of a finished task is free");
    assert!(!freed.duplicate && freed.task_id != first[0], "{freed:?}");
    assert_eq!(faulty.dedup_buckets_read.load(Ordering::Acquire), 0, "the creator read no bucket");

    // A write of unknown outcome (settled by the writer, which fences the
    // partition again): the id it wrote is still found, and the buckets of
    // other ids are not read.
    faulty.late_writes.store(1, Ordering::Release);
    let late = matcher.add(spec("late"), None).await.expect("an add, settled");
    assert_eq!(faulty.late_writes.load(Ordering::Acquire), 0, "a write timed out");
    let again = matcher.add(spec("late"), None).await.expect("a duplicate add");
    assert!(again.duplicate && again.task_id == late.task_id, "{again:?} after {late:?}");
    let read = faulty.dedup_buckets_read.load(Ordering::Acquire);
    assert!(read <= 1, "at most the failed write's bucket read again: {read}");
    matcher.add(spec("fresh"), None).await.expect("an add");
    assert_eq!(faulty.dedup_buckets_read.load(Ordering::Acquire), read, "the others stay known");
    creator.close().await;

    // Another node takes the partition: it knows nothing of the section.
    let before = faulty.dedup_buckets_read.load(Ordering::Acquire);
    let successor = node(faulty.clone(), "127.0.0.1:3");
    let matcher = successor.get(&name).await.expect("open the queue");
    assert!(matcher.holds(0), "the creator handed it over at its close");
    let duplicate = matcher.add(spec("d9"), None).await.expect("a duplicate add");
    assert!(duplicate.duplicate && duplicate.task_id == first[9], "{duplicate:?}");
    assert_eq!(faulty.dedup_buckets_read.load(Ordering::Acquire), before + 1, "the new owner read the bucket");
    successor.close().await;
    keyspace.drop_keyspace().await;
}
