//! The partition shell's keeper, on a manual clock and paused tokio time:
//! ack levels are persisted only once `ack_sync_interval` has passed, and
//! acknowledged tasks are deleted once `gc_interval` has passed.

use std::sync::Arc;
use std::time::Duration;

use fairway::clock::{Clock, ManualClock};
use fairway::core::engine::EngineConfig;
use fairway::model::{FairLevel, PartitionId, Priority, TaskSpec, validate};
use fairway::partition::{Partition, PartitionSetup, WriterConfig};
use fairway::store::Store;
use fairway::store::embedded::EmbeddedStore;

/// Lets the partition's tasks run, in virtual time, until `done` holds
/// (at most 60 virtual seconds). A paused runtime does not move its time
/// while a store call runs on the blocking pool, so a slow disk cannot make
/// the virtual deadline pass before the work it waits for is done.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    for _ in 0..600 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(start_paused = true)]
async fn ack_levels_are_persisted_and_acknowledged_tasks_deleted_on_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let config = EngineConfig {
        ack_sync_interval: Duration::from_secs(10),
        piggyback_interval: Duration::from_secs(3600),
        gc_min_acks: 1_000_000,
        gc_interval: Duration::from_secs(15),
        ..EngineConfig::default()
    };
    let id = PartitionId { queue: validate::queue_name("queue", "kept").unwrap(), partition: 0 };
    let setup = PartitionSetup {
        node: "test".into(),
        region: String::new(),
        store: store.clone(),
        clock: clock.clone(),
        engine: config,
        pauses: Default::default(),
        writer: WriterConfig::default(),
        on_ready: Arc::new(|| {}),
    };
    let partition = Partition::open(id.clone(), 0, setup).await.unwrap();
    let spec = |n: usize| TaskSpec::new(format!("k{}", n % 3), Priority::DEFAULT, vec![]);
    partition.append((0..10).map(spec).collect()).await.unwrap();
    // Dispatched as a poll dispatches them, each delivered once its lease
    // is durable.
    let (mut waiting, mut delivered) = (Vec::new(), 0);
    until("all ten tasks are delivered", || {
        let now = clock.now_ms();
        while let Some(candidate) = partition.peek(now) {
            let (deliver, delivery) = tokio::sync::oneshot::channel();
            if partition.dispatch(candidate, now, deliver).is_ok() {
                waiting.push(delivery);
            }
        }
        waiting.retain_mut(|delivery| match delivery.try_recv() {
            Ok(_) => {
                delivered += 1;
                false
            }
            Err(_) => true,
        });
        let all = delivered == 10;
        async move { all }
    })
    .await;
    let ack = |store: Arc<dyn Store>, id: PartitionId| async move {
        store.load_partition(&id).await.unwrap().unwrap().subqueues[Priority::DEFAULT.index()].ack_level
    };
    let in_memory = partition.snapshot(0).unwrap().subqueues[Priority::DEFAULT.index()].ack_level;
    assert!(in_memory > FairLevel::ZERO);

    // Before the interval: nothing written, whatever the keeper's ticks.
    tokio::time::advance(Duration::from_secs(5)).await;
    tokio::task::yield_now().await;
    assert_eq!(ack(store.clone(), id.clone()).await, FairLevel::ZERO, "persisted before ack_sync_interval");

    clock.advance(Duration::from_secs(10));
    until("the ack level is persisted", || {
        let (store, id) = (store.clone(), id.clone());
        async move { ack(store, id).await == in_memory }
    })
    .await;
    let stored = store.read(&id, Priority::DEFAULT, FairLevel::ZERO, 100).await.unwrap();
    assert_eq!(stored.len(), 10, "no delete before gc_interval");

    clock.advance(Duration::from_secs(6));
    until("the acknowledged tasks are deleted", || {
        let (store, id) = (store.clone(), id.clone());
        async move { store.read(&id, Priority::DEFAULT, FairLevel::ZERO, 100).await.unwrap().is_empty() }
    })
    .await;
    partition.release("").await;
}
